"""The load ledger: what the load generator recorded per segment, driver and phase, with latency histograms.

Written by `arena.twin.world.World` as it simulates; read by the SLI source (`arena.twin.sli`) for the guard and
by the Outcome Gate (`arena.gates`) for grading. Like Incident-Arena's `loadgen.jsonl`, but aggregated: one
record per (segment, driver) instead of one row per arrival. Latency lives in fixed log buckets (like a
Prometheus histogram), so a percentile over any window is a merge of histograms and a nearest-rank read.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Sequence

__all__ = ["BUCKETS_MS", "Histogram", "LedgerRecord", "Ledger", "Tally", "spread_kernel"]

# Upper bounds in ms: 2^(k/8) from ~1 ms to ~66 s (a +9% step), then +Inf. Fixed, so histograms merge by adding.
BUCKETS_MS: tuple[float, ...] = tuple(2 ** (k / 8) for k in range(0, 129)) + (math.inf,)
_LOG_STEP = math.log(2) / 8
# A request's latency spreads around its mode's central value with this fixed shape (about +-25%).
_KERNEL = ((-3, 0.03), (-2, 0.08), (-1, 0.22), (0, 0.34), (1, 0.22), (2, 0.08), (3, 0.03))


def bucket_of(ms: float) -> int:
    if ms <= 1.0:
        return 0
    k = math.ceil(math.log(ms) / _LOG_STEP - 1e-9)
    return min(k, len(BUCKETS_MS) - 1)


def spread_kernel(ms: float) -> list[tuple[int, float]]:
    c = bucket_of(ms)
    last = len(BUCKETS_MS) - 1
    return [(min(max(c + d, 0), last), w) for d, w in _KERNEL]


_KERNEL_W = [w for _, w in _KERNEL]


@lru_cache(maxsize=None)
def _kernel_buckets(c: int) -> tuple[int, ...]:
    last = len(BUCKETS_MS) - 1
    return tuple(min(max(c + d, 0), last) for d, _ in _KERNEL)


@lru_cache(maxsize=8192)
def _kernel_counts(n: int) -> tuple[int, ...]:
    return tuple(apportion(n, _KERNEL_W))


def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Split an integer count by weights with the largest-remainder rule (deterministic, sums exactly)."""
    s = sum(weights)
    if total <= 0 or s <= 0:
        return [0] * len(weights)
    raw = [total * w / s for w in weights]
    base = [int(x) for x in raw]
    rest = total - sum(base)
    order = sorted(range(len(raw)), key=lambda i: (-(raw[i] - base[i]), i))
    for i in order[:rest]:
        base[i] += 1
    return base


class Histogram:
    """Counts per fixed log bucket, kept sparse."""

    __slots__ = ("counts",)

    def __init__(self, counts: dict[int, int] | None = None):
        self.counts: dict[int, int] = dict(counts or {})

    def add(self, bucket: int, n: int) -> None:
        if n:
            self.counts[bucket] = self.counts.get(bucket, 0) + n

    def add_spread(self, ms: float, n: int) -> None:
        if n <= 0:
            return
        counts = self.counts
        for b, k in zip(_kernel_buckets(bucket_of(ms)), _kernel_counts(n)):
            if k:
                counts[b] = counts.get(b, 0) + k

    def merge(self, other: "Histogram", scale: float = 1.0) -> None:
        for b, n in other.counts.items():
            self.counts[b] = self.counts.get(b, 0) + (n if scale == 1.0 else n * scale)

    @property
    def total(self) -> float:
        return sum(self.counts.values())

    def percentile(self, q: float) -> float | None:
        """Nearest-rank percentile (q in 0..100): the upper bound of the bucket holding rank ceil(q/100*N)."""
        n = self.total
        if n <= 0:
            return None
        # Windows that cut records pro rata hold fractional counts: ceil(q*N) can exceed N, so cap it at N.
        rank = min(max(1, math.ceil(q / 100.0 * n - 1e-9)), n)
        seen = 0.0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen + 1e-9 >= rank:
                return BUCKETS_MS[b] if b < len(BUCKETS_MS) - 1 else BUCKETS_MS[-2]
        return BUCKETS_MS[-2]

    def to_json(self) -> dict[str, float]:
        return {str(b): v for b, v in sorted(self.counts.items())}


@dataclass
class Tally:
    """Counts of one window: arrivals by outcome plus the latency histogram of completed requests."""

    offered: float = 0
    ok: float = 0
    correct: float = 0
    error: float = 0
    timeout: float = 0
    dropped: float = 0
    conn_errors: float = 0
    hist: Histogram = field(default_factory=Histogram)

    def add(self, r: "LedgerRecord", scale: float = 1.0) -> None:
        self.offered += r.offered * scale
        self.ok += r.ok * scale
        self.correct += r.correct * scale
        self.error += r.error * scale
        self.timeout += r.timeout * scale
        self.dropped += r.dropped * scale
        self.conn_errors += r.conn_errors * scale
        self.hist.merge(r.hist, scale)

    @property
    def base(self) -> float:
        return self.offered - self.dropped

    def error_rate(self) -> float | None:
        return None if self.base <= 0 else (self.timeout + self.error) / self.base

    def goodput(self) -> float | None:
        return None if self.base <= 0 else self.correct / self.base


@dataclass
class LedgerRecord:
    """One driver's arrivals over [t0, t1) inside one load phase. `correct` counts requests both ok and correct."""

    t0: float
    t1: float
    driver: str
    phase: str  # prehistory, warmup, peak, trough
    cycle: int
    offered: int = 0
    ok: int = 0
    correct: int = 0
    error: int = 0
    timeout: int = 0
    dropped: int = 0
    conn_errors: int = 0
    hist: Histogram = field(default_factory=Histogram)

    def to_json(self) -> dict:
        return {"t0": round(self.t0, 6), "t1": round(self.t1, 6), "driver": self.driver, "phase": self.phase,
                "cycle": self.cycle, "offered": self.offered, "ok": self.ok, "correct": self.correct,
                "error": self.error, "timeout": self.timeout, "dropped": self.dropped,
                "conn_errors": self.conn_errors, "hist": self.hist.to_json()}


class Ledger:
    """All load records of one episode, in time order."""

    def __init__(self) -> None:
        self.records: list[LedgerRecord] = []
        # Start and end times beside the records, for binary search. The world appends segments in time
        # order (each starts where the last ended), so both lists are sorted.
        self._t0s: list[float] = []
        self._t1s: list[float] = []
        # Runs of consecutive records in one load-phase segment: [cycle, phase, t0, t1], the last one growing.
        self.runs: list[list] = []

    def append(self, r: LedgerRecord) -> None:
        if self.records and (r.t0 < self._t0s[-1] or r.t1 < self._t1s[-1]):
            raise ValueError(f"ledger records must come in time order: [{r.t0}, {r.t1}) after "
                             f"[{self._t0s[-1]}, {self._t1s[-1]})")
        self.records.append(r)
        self._t0s.append(r.t0)
        self._t1s.append(r.t1)
        last = self.runs[-1] if self.runs else None
        if last is not None and last[0] == r.cycle and last[1] == r.phase:
            last[2] = min(last[2], r.t0)
            last[3] = max(last[3], r.t1)
        else:
            self.runs.append([r.cycle, r.phase, r.t0, r.t1])

    @property
    def end(self) -> float:
        """Where the records stop: no record appended later can overlap a window that ends here or before."""
        return self._t1s[-1] if self._t1s else -math.inf

    def select(self, t0: float, t1: float, *, driver: str | None = None, phase: str | None = None,
               latency_from: float | None = None) -> tuple[Tally, Tally]:
        """Tally arrivals with send time in [t0, t1). Records that straddle an edge count pro rata.

        Returns (counts, latency): the latency tally leaves out records before `latency_from` (the settle).
        """
        counts, lat = Tally(), Tally()
        lf = t0 if latency_from is None else latency_from
        for r in self.overlapping(t0, t1):
            if driver is not None and r.driver != driver:
                continue
            if phase is not None and r.phase != phase:
                continue
            f = _overlap(r, t0, t1)
            if f > 0:
                counts.add(r, f)
            g = _overlap(r, max(t0, lf), t1)
            if g > 0:
                lat.add(r, g)
        return counts, lat

    def overlapping(self, t0: float, t1: float) -> list[LedgerRecord]:
        """Records with end after t0 and start before t1, in time order."""
        lo = bisect_right(self._t1s, t0)
        hi = bisect_left(self._t0s, t1, lo)
        return self.records[lo:hi]

    def runs_overlapping(self, t0: float, t1: float) -> list[list]:
        """The load-phase runs ([cycle, phase, t0, t1]) that overlap (t0, t1), in time order."""
        out = []
        for run in reversed(self.runs):
            if run[3] <= t0:
                break
            if run[2] < t1:
                out.append(run)
        out.reverse()
        return out

    def drivers(self) -> list[str]:
        return sorted({r.driver for r in self.records})


def _overlap(r: LedgerRecord, t0: float, t1: float) -> float:
    span = r.t1 - r.t0
    if span <= 0:
        return 1.0 if t0 <= r.t0 < t1 else 0.0
    lo, hi = max(r.t0, t0), min(r.t1, t1)
    return 0.0 if hi <= lo else (hi - lo) / span
