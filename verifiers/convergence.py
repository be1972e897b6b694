"""Convergence: are the SLIs back in band for N consecutive full load cycles since the agent's last change?

Measuring is apart from judging. `ConvergenceCheck` (called by the Guard on a declaration, and again by the
restart probe) measures: it asks the environment's SLI source for per-phase samples (`sli(step=None)`, each
labelled `phase` and `cycle`) and waits in the environment's clock through tenacity. `assess()` and
`evaluate()` judge: pure functions of samples, bands and criteria, unit-tested on synthetic samples.

Bands come from `verifiers.bands` (public SLOs, then a pre-incident baseline); never from a grader. The window
starts at the agent's last mutating action and restarts whenever the journal shows a newer one. A cycle counts
only when both its peak and its trough lie wholly inside the window.

Which peak goes with which trough: a load cycle is one peak and one trough, in either order. With a source that
labels load phases, the finished phase segments inside the window are paired counting back from the latest one
(`load_cycles`), so "the last N cycles" are the last 2N finished segments: N peaks and N troughs, as much load
as N generator cycles, but not made to wait for the generator's cycle boundary. A change made during a peak
thereby counts the trough that follows it; the peak it was made in never counts (it is not wholly inside).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_attempt
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from verifiers.bands import (
    BASELINE_SLIS,
    Band,
    baseline_bands,
    merge_bands,
    sample_has_data,
    slo_bands,
)
from verifiers.base import VerifierBase, last_mutation_t
from verifiers.context import PublicContext
from verifiers.criteria import ConvergenceCriteria, Criteria
from verifiers.progress import report
from verifiers.protocols import Clock, Environment, FeedbackCode, Sample, Verdict, VerdictStatus
from verifiers.slo import DESCRIBE_KEY, objectives_of, render

__all__ = [
    "SeriesKey",
    "CycleJudgement",
    "Assessment",
    "assess",
    "evaluate",
    "backlog_trend",
    "ConvergenceCheck",
    "stop_after_clock_delay",
    "wait_for_segment_end",
    "segment_end_due",
    "incident_start",
    "no_sli_source",
    "CONFIGURE_SLIS",
]

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]
CYCLE_PHASES = ("peak", "trough")


@dataclass(frozen=True)
class BandResult:
    """One band in one cycle: ok, fail or nodata, with the worst value seen."""

    band: Band
    state: str
    value: float | None = None


@dataclass(frozen=True)
class CycleJudgement:
    """One full load cycle inside the window, judged against every band."""

    cycle: str
    t_start: float
    t_end: float
    state: str  # ok | fail | nodata
    results: tuple[BandResult, ...]
    draining: bool = False  # failed while a backlog was visibly draining

    @property
    def failures(self) -> list[BandResult]:
        return [r for r in self.results if r.state == "fail"]

    def to_dict(self) -> dict[str, Any]:
        return {"cycle": self.cycle, "t_start": self.t_start, "t_end": self.t_end, "state": self.state,
                "draining": self.draining,
                "failed": [{"sli": r.band.label(), "value": r.value, "band": r.band.describe()}
                           for r in self.failures]}


@dataclass(frozen=True)
class Assessment:
    """What one measurement shows: the judged cycles and what they add up to."""

    state: str  # converged | converging | failing | pending | no_data
    cycles: tuple[CycleJudgement, ...]
    consecutive_ok: int
    failed_cycles: int  # failures not explained by a draining backlog
    nodata_cycles: int
    window_start: float
    now: float
    backlog: Mapping[str, Mapping[str, float | None]] = field(default_factory=dict)
    not_ready: tuple[str, ...] = ()
    pooled: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # ratio SLIs pooled over the run
    # Finished segments inside the window before the first full cycle (the rest of the cycle the last change landed
    # in), judged for failures only: what the system did while it settled. Evidence; never counted for a run.
    settling: tuple[CycleJudgement, ...] = ()
    # State "converging": what explains the remaining failures (see `_converging`); empty otherwise.
    converging: Mapping[str, Any] = field(default_factory=dict)

    @property
    def latest_failure(self) -> CycleJudgement | None:
        return next((c for c in reversed(self.cycles) if c.state == "fail"), None)


def _cycle_of(sample: Sample, window_start: float, cycle_s: float) -> str:
    c = sample.labels.get("cycle")
    if c is not None:
        return str(c)
    # A source without load-phase labels: fixed-length cycles counted from the window start.
    return f"t{math.floor((sample.t_start - window_start) / cycle_s)}"


def _cycle_sort_key(c: str) -> tuple[int, float, str]:
    try:
        return (0, float(c.lstrip("ctw")), c)
    except ValueError:
        return (1, 0.0, c)


def _segment_extents(samples: Sequence[Sample]) -> tuple[list[tuple[str, str]], dict[tuple[str, str], list[float]]]:
    """A phase-labelled source's segments, (cycle, phase) in time order, with each one's extent."""
    extent: dict[tuple[str, str], list[float]] = {}
    for s in samples:
        c, ph = s.labels.get("cycle"), s.labels.get("phase")
        if c is None or ph is None:
            continue
        e = extent.setdefault((str(c), str(ph)), [s.t_start, s.t_end])
        e[0], e[1] = min(e[0], s.t_start), max(e[1], s.t_end)
    return sorted(extent, key=lambda k: (extent[k][0], extent[k][1])), extent


def segment_end_due(samples: Sequence[Sample], now: float, cycle_s: float | None = None) -> float | None:
    """When the segment under way should end: a cycle after the start of the segment before it (the cycle's
    length is fixed, its phases' may vary), else its start plus the length of the phase's last segment.
    None when it cannot be told (no phase labels, no earlier segment) or that moment has passed."""
    segs, extent = _segment_extents(samples)
    if len(segs) < 2:
        return None
    last = segs[-1]
    before = segs[-2]
    due: float | None = None
    if cycle_s is not None and before[1] != last[1] and before[1] in CYCLE_PHASES and last[1] == CYCLE_PHASES[1]:
        due = extent[before][0] + cycle_s  # a trough ends where the cycle its peak began ends
    else:
        prev = next((extent[k] for k in reversed(segs[:-1]) if k[1] == last[1]), None)
        if prev is not None:
            due = extent[last][0] + (prev[1] - prev[0])
    return due if due is not None and due > now else None


def load_cycles(samples: Sequence[Sample], window_start: float, now: float, cycle_s: float | None = None,
                eps: float = 1e-6) -> dict[tuple[str, str], str]:
    """Group a phase-labelled source's segments into load cycles: (cycle label, phase) -> group label.

    The finished peak and trough segments wholly inside the window, while they alternate, are paired counting
    back from the latest finished one; every other segment is a group of its own. Groups are labelled `w<n>`,
    numbered in time order. Empty when the samples carry no cycle and phase labels (cycles are then counted
    from the window start).
    """
    segs, extent = _segment_extents(samples)
    if not segs:
        return {}
    # A segment is finished when a later one has begun, or when it and the segment before it fill a whole load
    # cycle. Phase lengths may vary from cycle to cycle (bursty profiles), the cycle's length does not, so nothing
    # shorter is taken for finished. (A scraped source's segment under way ends at its last scrape, before now:
    # that says nothing about whether its phase is over.)
    def finished_at(i: int) -> bool:
        k = segs[i]
        if i + 1 < len(segs):
            return True
        return i >= 1 and cycle_s is not None and extent[k][1] - extent[segs[i - 1]][0] >= cycle_s - eps

    finished = [finished_at(i) for i in range(len(segs))]
    paired: dict[int, int] = {}  # segment index -> index of the first segment of its pair
    i = max((j for j, f in enumerate(finished) if f), default=-1)
    while i >= 1:
        a, b = segs[i - 1], segs[i]
        inside = extent[a][0] >= window_start - eps
        if not (inside and {a[1], b[1]} == set(CYCLE_PHASES)):
            break
        paired[i - 1] = paired[i] = i - 1
        i -= 2
    out: dict[tuple[str, str], str] = {}
    n = 0
    for j, k in enumerate(segs):
        if j in paired and paired[j] != j:
            out[k] = out[segs[paired[j]]]
            continue
        out[k] = f"w{n}"
        n += 1
    return out


def _prepared(series: Mapping[SeriesKey, Sequence[Sample]]) -> dict[SeriesKey, list[Sample]]:
    """Every series in time order, a restarts counter as its increases."""
    out: dict[SeriesKey, list[Sample]] = {}
    for key, samples in series.items():
        ss = sorted(samples, key=lambda s: s.t_start)
        out[key] = _restart_increases(ss) if key[0] == "restarts" else ss
    return out


def _restart_increases(samples: Sequence[Sample]) -> list[Sample]:
    """A restarts counter as per-sample increases, resets counted as Prometheus' increase() counts them."""
    out: list[Sample] = []
    prev: float | None = None
    for s in sorted(samples, key=lambda s: s.t_start):
        if s.value is None:
            out.append(s)
            continue
        v = float(s.value)
        inc = 0.0 if prev is None else (v - prev if v >= prev else v)
        prev = v
        out.append(Sample(s.t_start, s.t_end, inc, s.labels, s.count))
    return out


def backlog_trend(samples: Sequence[Sample], limit: float | None = None, last_n: int = 6) -> dict[str, float | None]:
    """Least-squares drain rate (per second, positive = draining) over recent samples, and an ETA to `limit`."""
    pts = [(0.5 * (s.t_start + s.t_end), float(s.value)) for s in samples if s.value is not None][-last_n:]
    if not pts:
        return {"value": None, "drain_per_s": None, "eta_s": None}
    value = pts[-1][1]
    if len(pts) < 2:
        return {"value": value, "drain_per_s": None, "eta_s": None}
    mt = sum(t for t, _ in pts) / len(pts)
    mv = sum(v for _, v in pts) / len(pts)
    den = sum((t - mt) ** 2 for t, _ in pts)
    slope = sum((t - mt) * (v - mv) for t, v in pts) / den if den else 0.0
    drain = -slope
    eta = None
    target = limit if limit is not None else 0.0
    if drain > 0 and value > target:
        eta = (value - target) / drain
    return {"value": value, "drain_per_s": drain, "eta_s": eta}


def assess(
    series: Mapping[SeriesKey, Sequence[Sample]],
    bands: Sequence[Band],
    criteria: ConvergenceCriteria,
    *,
    window_start: float,
    now: float,
    cycle_s: float,
    not_ready: Sequence[str] = (),
) -> Assessment:
    """Judge every full load cycle inside [window_start, now] against the bands. Pure."""
    prepared = _prepared(series)

    # Pair the phase segments into load cycles (see load_cycles), then group every sample by cycle; note each
    # cycle's extent and which phases it has.
    groups = load_cycles([s for samples in prepared.values() for s in samples], window_start, now, cycle_s)

    def cycle_of(s: Sample) -> str:
        g = groups.get((str(s.labels.get("cycle")), str(s.labels.get("phase")))) if groups else None
        return g if g is not None else _cycle_of(s, window_start, cycle_s)

    extent: dict[str, list[float]] = {}
    phases: dict[str, set[str]] = {}
    by_cycle: dict[SeriesKey, dict[str, list[Sample]]] = {}  # each series' samples per cycle, in time order
    for key, samples in prepared.items():
        per = by_cycle[key] = {}
        for s in samples:
            c = cycle_of(s)
            per.setdefault(c, []).append(s)
            e = extent.setdefault(c, [s.t_start, s.t_end])
            e[0], e[1] = min(e[0], s.t_start), max(e[1], s.t_end)
            phases.setdefault(c, set()).add(s.labels.get("phase", ""))
    order = sorted(extent, key=_cycle_sort_key)
    labelled = any(p & set(CYCLE_PHASES) for p in phases.values())
    eps = 1e-6
    full: list[str] = []
    for i, c in enumerate(order):
        t0, t1 = extent[c]
        if t0 < window_start - eps or t1 > now + eps:
            continue
        has_phases = set(CYCLE_PHASES) <= phases[c] if labelled else True
        later = i + 1 < len(order)
        long_enough = (t1 - t0) >= 0.9 * cycle_s
        if has_phases and (later or long_enough):
            full.append(c)

    backlog: dict[str, dict[str, float | None]] = {}
    for key, samples in prepared.items():
        if key[0] == "backlog":
            lim = next((b.limit for b in bands if b.series_key == key and b.op == "<="), None)
            if lim is None:
                lim = next((b.limit for b in bands if b.series_key == key and b.op == "stable"), None)
            inside = [s for s in samples if s.t_start >= window_start - eps and s.t_end <= now + eps]
            backlog[_key_label(key)] = backlog_trend(inside or samples, lim)

    def backlog_falling(c: str) -> bool:
        """Did any backlog end this cycle lower than it ended the one before? Then a failure may be the drain."""
        for key, samples in prepared.items():
            if key[0] != "backlog":
                continue
            ends = [float(s.value) for s in samples if s.value is not None and s.t_end <= extent[c][1] + eps]
            before = [float(s.value) for s in samples if s.value is not None and s.t_end <= extent[c][0] + eps]
            inside = [float(s.value) for s in samples if s.value is not None
                      and s.t_start >= extent[c][0] - eps and s.t_end <= extent[c][1] + eps]
            ref = before[-1] if before else (inside[0] if inside else None)
            if ends and ref is not None and ends[-1] < ref:
                return True
        return False

    judged: list[CycleJudgement] = []
    z = criteria.confidence_z
    # A ratio band's samples with a value and at least one request: a cycle is judged only on samples of at least
    # min_count requests, but the pooled confidence below adds up all of them (a low-traffic trough's few requests
    # a cycle are exactly what pooling is for).
    in_cycle: dict[tuple[str, Band], list[Sample]] = {}
    for c in full:
        results: list[BandResult] = []
        for band in bands:
            mine = [s for s in by_cycle.get(band.series_key, {}).get(c, ())
                    if band.phase is None or s.labels.get("phase") == band.phase]
            if band.sli in RATIO_SLIS:
                in_cycle[(c, band)] = [s for s in mine if sample_has_data(s, band.sli, 1)
                                       and math.isfinite(float(s.value))]
            picked = [s for s in mine if sample_has_data(s, band.sli, criteria.min_count)]
            vals = [float(s.value) for s in picked]
            if not vals:
                results.append(BandResult(band, "nodata"))
                continue
            if band.op == "stable":
                results.append(_stability(band, prepared.get(band.series_key, ()), extent[c][0], vals[-1]))
                continue
            w = vals[0]
            for v in vals[1:]:
                w = band.worse(w, v)
            # A ratio just outside its band, from too few requests to tell (the limit lies inside its confidence
            # interval), does not break a run; acceptance then needs the pooled evidence below.
            zn = criteria.noise_z
            bad = [s for s in picked if not band.holds(float(s.value))
                   and not (band.sli in RATIO_SLIS and zn > 0 and _plausibly_in_band(band, s, zn))]
            results.append(BandResult(band, "fail" if bad else "ok", w))
        if any(r.state == "fail" for r in results):
            state = "fail"
        elif any(r.state == "nodata" and r.band.required for r in results) or not any(
                r.state == "ok" for r in results):
            state = "nodata"
        else:
            state = "ok"
        t0, t1 = extent[c]
        judged.append(CycleJudgement(c, t0, t1, state, tuple(results),
                                     draining=state == "fail" and backlog_falling(c)))

    def segment_failures(c: str) -> list[BandResult]:
        """The bands a partial cycle's finished segments break (failures only: a partial cycle proves nothing)."""
        return _band_failures(bands, lambda band: by_cycle.get(band.series_key, {}).get(c, ()), criteria, now)

    # Finished segments of the cycle still under way count against a run: a bad peak is bad before its trough
    # ends. (Only failures: a partial cycle never adds to a run.)
    trailing_fail: list[BandResult] = []
    later = [c for c in order if c not in full and extent[c][0] >= window_start - eps
             and (not full or _cycle_sort_key(c) > _cycle_sort_key(full[-1]))]
    for c in later:
        trailing_fail.extend(segment_failures(c))
    settling: list[CycleJudgement] = []
    if full:
        for c in order:
            t0, t1 = extent[c]
            if c not in full and t0 >= window_start - eps and t1 <= extent[full[0]][0] + eps:
                fails = segment_failures(c)
                settling.append(CycleJudgement(c, t0, t1, "fail" if fails else "ok", tuple(fails)))

    consecutive = 0
    for j in reversed(judged):
        if j.state == "ok":
            consecutive += 1
        elif j.state == "fail":
            break
        # a nodata cycle neither counts nor breaks the run
    if trailing_fail:
        consecutive = 0
        c = later[0]
        judged.append(CycleJudgement(c, extent[c][0], extent[c][1], "fail", tuple(trailing_fail),
                                     draining=backlog_falling(c)))
    failed = sum(1 for j in judged if j.state == "fail" and not j.draining)
    nodata = sum(1 for j in judged if j.state == "nodata")
    pooled: dict[str, dict[str, Any]] = {}
    need = criteria.consecutive_cycles
    if consecutive >= need and z > 0:
        looks = _earlier_looks(judged, need)
        if looks == 0 and criteria.first_look_z > 0 and labelled and full:
            # The cycles are paired back from the latest finished segment, so the pairing shifts by a segment each
            # time one finishes: the looks made a segment ago, under the other pairing, are not in `judged`.
            looks = _looks_a_segment_ago(series, bands, criteria, by_cycle, full[-1], window_start, cycle_s)
        if looks == 0 and criteria.first_look_z > 0:
            z = criteria.first_look_z
        run = [j.cycle for j in judged[len(judged) - consecutive:] if j.state == "ok"]
        for band in bands:
            if band.sli not in RATIO_SLIS or band.op == "stable":
                continue
            ss = [smp for cyc in run for smp in in_cycle.get((cyc, band), ())]
            # Pooled per load phase, so a fault that shows at peak only is not diluted by healthy troughs.
            for ph in sorted({str(smp.labels.get("phase", "")) for smp in ss}):
                part = [smp for smp in ss if str(smp.labels.get("phase", "")) == ph]
                name = band.label() if band.phase or not ph else f"{band.label()}[{ph}]"
                pooled[name] = {**_pooled_check(band, part, z), "z": z, "earlier_looks": looks}
    weak = [k for k, v in pooled.items() if not v["holds"]]
    full_judged = [j for j in judged if j.cycle in full]
    converging: dict[str, Any] = {}
    if not (consecutive >= need and not not_ready and not weak) and not not_ready:
        converging = _converging(full_judged[-need:] if len(full_judged) >= need else [], trailing_fail, backlog,
                                 {c: backlog_falling(c) for c in full}, criteria, cycle_s, in_cycle, z)
    if consecutive >= need and not not_ready and not weak:
        state = "converged"
    elif converging:
        state = "converging"
    elif judged and judged[-1].state == "fail":
        state = "failing"
    elif judged and all(j.state == "nodata" for j in judged):
        state = "no_data"
    else:
        state = "pending"
    return Assessment(state, tuple(judged), consecutive, failed, nodata, window_start, now, backlog,
                      tuple(not_ready), pooled, tuple(settling), converging)


# The SLIs a backlog of accepted work explains while it drains: goodput counts work completed within its budget,
# so work queued behind the backlog misses it however well the system serves (and the backlog's own band fails
# while it moves). Errors and latency of the serving path are not explained by a drain and must hold.
DRAIN_EXPLAINED_SLIS = frozenset({"goodput", "backlog"})


def _converging(run: Sequence[CycleJudgement], trailing_fail: Sequence[BandResult],
                backlog: Mapping[str, Mapping[str, float | None]], falling: Mapping[str, bool],
                criteria: ConvergenceCriteria, cycle_s: float,
                in_cycle: Mapping[tuple[str, Band], Sequence[Sample]], z: float) -> dict[str, Any]:
    """Are the last consecutive_cycles full cycles a recovered system finishing a backlog of accepted work? Each
    cycle's backlog fell, every failure in them (and in the segments since) is a goodput or backlog band, every
    other band held (required ones with data, ratio bands pooled with confidence as for convergence), and a
    backlog drains with a known ETA within accept_draining_eta_cycles. Returns the evidence, or {} when not. Pure."""
    max_eta = criteria.accept_draining_eta_cycles * cycle_s
    if max_eta <= 0 or not run or len(run) < criteria.consecutive_cycles:
        return {}
    if any(b.sli not in DRAIN_EXPLAINED_SLIS for b in (r.band for r in trailing_fail)):
        return {}
    explained: set[str] = set()
    for c in run:
        if not falling.get(c.cycle) or c.state not in ("ok", "fail"):
            return {}
        for r in c.results:
            if r.band.sli in DRAIN_EXPLAINED_SLIS:
                if r.state == "fail":
                    explained.add(r.band.label())
            elif r.state == "fail" or (r.state == "nodata" and r.band.required):
                return {}
    if not explained:
        return {}
    # A drain that completes the work lifts goodput as it goes; one that fails the work (jobs taken off the queue
    # and failed) drains the backlog with goodput flat. Every failing goodput band must improve across the run.
    for label in explained:
        vals = [r.value for c in run for r in c.results if r.band.label() == label and r.band.sli == "goodput"]
        if vals and (None in vals or not (vals[-1] > vals[0] + 1e-9)):
            return {}
    for band in {b for (_, b) in in_cycle}:
        if band.sli in DRAIN_EXPLAINED_SLIS or band.sli not in RATIO_SLIS or band.op == "stable":
            continue
        ss = [s for c in run for s in in_cycle.get((c.cycle, band), ())]
        if ss and z > 0 and not _pooled_check(band, ss, z)["holds"]:
            return {}
    drains = {k: dict(v) for k, v in backlog.items()
              if v.get("eta_s") is not None and (v.get("drain_per_s") or 0) > 0 and float(v["eta_s"]) <= max_eta}
    if not drains:
        return {}
    return {"explained": sorted(explained), "draining": drains, "cycles": [c.cycle for c in run],
            "max_eta_s": max_eta}


RATIO_SLIS = frozenset({"error_ratio", "goodput"})


def _band_failures(bands: Sequence[Band], samples_of: Any, criteria: ConvergenceCriteria, before: float,
                   eps: float = 1e-6) -> list[BandResult]:
    """The bands that finished samples (ended before `before`) break: failures only, for partial segments."""
    out: list[BandResult] = []
    for band in bands:
        if band.op == "stable":
            continue
        for smp in samples_of(band):
            if (smp.t_end < before - eps
                    and (band.phase is None or smp.labels.get("phase") == band.phase)
                    and sample_has_data(smp, band.sli, criteria.min_count)
                    and not band.holds(float(smp.value))
                    and not (band.sli in RATIO_SLIS and criteria.noise_z > 0
                             and _plausibly_in_band(band, smp, criteria.noise_z))):
                out.append(BandResult(band, "fail", float(smp.value)))
    return out


def since_change(series: Mapping[SeriesKey, Sequence[Sample]], bands: Sequence[Band],
                 criteria: ConvergenceCriteria, *, window_start: float, until: float,
                 eps: float = 1e-6) -> CycleJudgement | None:
    """The part after the last change of the segment that straddles it, judged for failures only. Pure.

    `series` must be measured from `window_start` exactly (the source clips its spans there), so that nothing
    from before the change is in it; `until` is where the assessment's first settling segment or cycle begins.
    Evidence of what the system did right after the change (a reload at a peak, a queue still draining), never
    counted for a run: a segment cut short proves nothing in band.
    """
    picked = {key: [s for s in ss if s.t_start >= window_start - eps and s.t_end <= until + eps
                    and s.t_start < until - eps] for key, ss in _prepared(series).items()}
    found = [s for ss in picked.values() for s in ss]
    if not found:
        return None
    fails = _band_failures(bands, lambda band: picked.get(band.series_key, ()), criteria, until + 2 * eps)
    return CycleJudgement("since-change", window_start, max(s.t_end for s in found), "fail" if fails else "ok",
                          tuple(fails))


def _looks_a_segment_ago(series: Mapping[SeriesKey, Sequence[Sample]], bands: Sequence[Band],
                         criteria: ConvergenceCriteria, by_cycle: Mapping[SeriesKey, Mapping[str, list[Sample]]],
                         last_cycle: str, window_start: float, cycle_s: float, eps: float = 1e-6) -> int:
    """The pooled check's looks up to the moment the segment before the latest one finished, judged under the
    pairing that held then: each of its full cycles that closed a run of consecutive_cycles, its last included."""
    starts: dict[str, float] = {}
    for per in by_cycle.values():
        for smp in per.get(last_cycle, ()):
            ph = str(smp.labels.get("phase", ""))
            starts[ph] = min(starts.get(ph, smp.t_start), smp.t_start)
    if len(starts) < 2:
        return 0
    cut = max(starts.values())  # where the latest finished segment began
    earlier = {key: [smp for smp in ss if smp.t_end <= cut + eps] for key, ss in series.items()}
    then = assess(earlier, bands, replace(criteria, first_look_z=0.0), window_start=window_start,
                  now=cut, cycle_s=cycle_s)
    need = criteria.consecutive_cycles
    return _earlier_looks(then.cycles, need) + (1 if then.consecutive_ok >= need else 0)


def _earlier_looks(judged: Sequence[CycleJudgement], need: int) -> int:
    """How many full cycles before the latest closed a run of `need` in band: the pooled check's earlier looks
    since the last change (the latest cycle's look is the one being made). A failed cycle ends a run; a cycle with
    no data neither adds to it nor ends it."""
    looks = run = 0
    for j in judged[:-1]:
        if j.state == "ok":
            run += 1
        elif j.state == "fail":
            run = 0
        if run >= need:
            looks += 1
    return looks


def _wilson(bad: float, n: float, z: float) -> tuple[float, float]:
    """The Wilson score interval of a proportion: `bad` of `n`."""
    if n <= 0:
        return 0.0, 1.0
    p = bad / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def _bad_share(band: Band, value: float) -> tuple[float, float]:
    """(share of bad requests, the band's limit on it): error ratio as is, goodput as 1 - goodput."""
    return (value, band.limit) if band.op == "<=" else (1.0 - value, 1.0 - band.limit)


def _plausibly_in_band(band: Band, s: Sample, z: float) -> bool:
    share, limit = _bad_share(band, float(s.value))
    lo, _ = _wilson(share * s.count, s.count, z)
    return lo <= limit


def _pooled_check(band: Band, samples: Sequence[Sample], z: float) -> dict[str, Any]:
    """Is the band held with confidence over the whole run? The upper bound of the pooled bad share."""
    n = sum(s.count for s in samples)
    bad = sum(_bad_share(band, float(s.value))[0] * s.count for s in samples)
    limit = _bad_share(band, 0.0)[1]
    _, hi = _wilson(bad, n, z)
    return {"requests": n, "bad_share": round(bad / n, 6) if n else None, "upper_bound": round(hi, 6),
            "limit": limit, "holds": hi <= limit}


def _stability(band: Band, samples: Sequence[Sample], cycle_t0: float, value: float) -> BandResult:
    """A gauge with no known healthy level (a backlog) counts as settled when it stopped moving: within
    +/- max(limit, 10%) of where it stood a cycle earlier, or empty (within the limit of zero: an empty queue
    cannot drain further, so the cycle that emptied it counts). Still draining is not converged."""
    prev = [float(s.value) for s in samples if s.value is not None and s.t_end <= cycle_t0 + 1e-6
            and (band.phase is None or s.labels.get("phase") == band.phase)]
    if not prev:
        return BandResult(band, "nodata")
    delta = value - prev[-1]
    if abs(delta) <= band.limit or abs(value) <= band.limit:
        return BandResult(band, "ok", value)
    # A move within 10% counts as noise only if the cycle before did not move the same way: two steps in one
    # direction is a drain (or a build-up), however slow.
    before_delta = prev[-1] - prev[-2] if len(prev) >= 2 else 0.0
    same_way = before_delta * delta > 0 and abs(before_delta) > band.limit
    ok = abs(delta) <= 0.1 * abs(prev[-1]) and not same_way
    return BandResult(band, "ok" if ok else "fail", value)


def _key_label(key: SeriesKey) -> str:
    sli, labels = key
    return f"{sli}{{{','.join(f'{k}={v}' for k, v in labels)}}}" if labels else sli


def _trend(a: Assessment, band: Band) -> str:
    vals = [r.value for c in a.cycles for r in c.results if r.band == band and r.value is not None][-4:]
    if len(vals) < 2:
        return "unknown"
    delta = vals[-1] - vals[0]
    if abs(delta) <= 1e-9 * max(1.0, abs(vals[0])):
        return "flat"
    better = delta > 0 if band.op == ">=" else delta < 0
    return f"{'improving' if better else 'worsening'} ({delta / (len(vals) - 1):+.4g}/cycle)"


CYCLES = "full load cycles (peak and trough)"


def describe_failure(a: Assessment, criteria: ConvergenceCriteria,
                     unit: str = CYCLES) -> tuple[str, dict[str, Any]]:
    """The message an agent gets: which SLI, its value, the band, the trend, and an ETA for a draining backlog."""
    need = criteria.consecutive_cycles
    evidence: dict[str, Any] = {
        "window_start": a.window_start, "now": a.now, "consecutive_ok": a.consecutive_ok, "needed": need,
        "cycles": [c.to_dict() for c in a.cycles[-6:]], "backlog": {k: dict(v) for k, v in a.backlog.items()},
        "not_ready": list(a.not_ready), "settling": [c.to_dict() for c in a.settling],
    }
    parts: list[str] = []
    last = a.latest_failure
    if last is not None:
        worst = sorted(last.failures, key=lambda r: -(r.band.gap(r.value or 0.0) / max(abs(r.band.limit), 1e-9)))
        for r in worst[:3]:
            parts.append(f"{r.band.label()} = {r.value:.4g} (band {r.band.describe()}, trend {_trend(a, r.band)})")
        evidence["failing"] = [{"sli": r.band.label(), "value": r.value, "band": r.band.to_dict(),
                                "trend": _trend(a, r.band)} for r in worst]
    for name, b in a.backlog.items():
        if b.get("eta_s"):
            parts.append(f"{name} = {b['value']:.4g} draining at {b['drain_per_s']:.3g}/s, ETA {b['eta_s']:.0f} s")
    if a.not_ready:
        parts.append(f"not ready: {', '.join(a.not_ready)}")
    for name, pc in a.pooled.items():
        if not pc["holds"]:
            parts.append(f"{name} is in band but not yet with confidence over {pc['requests']} requests (bad "
                         f"share {pc['bad_share']:.4g}, upper bound {pc['upper_bound']:.4g} > {pc['limit']:.4g} "
                         f"at z {pc['z']:.3g}, {pc['earlier_looks']} earlier look(s))")
    evidence["pooled"] = {k: dict(v) for k, v in a.pooled.items()}
    if not parts:
        parts.append(f"{a.consecutive_ok} full load cycle(s) in band since the last change, too few yet "
                     f"({len(a.cycles)} judged)"
                     if a.consecutive_ok else
                     f"no full load cycle in band since the last change yet ({len(a.cycles)} judged)")
    msg = (f"SLIs not converged: {'; '.join(parts)}. The guard accepts after {need} consecutive {unit} "
           f"in band since your last change; {a.consecutive_ok}/{need} so far.")
    return msg, evidence


def evaluate(
    series: Mapping[SeriesKey, Sequence[Sample]],
    bands: Sequence[Band],
    criteria: ConvergenceCriteria | None = None,
    *,
    window_start: float,
    now: float,
    cycle_s: float,
) -> Verdict:
    """Judge samples once, with no waiting: PASS, FAIL NOT_CONVERGED, or INCONCLUSIVE (too few cycles yet)."""
    criteria = criteria or ConvergenceCriteria()
    a = assess(series, bands, criteria, window_start=window_start, now=now, cycle_s=cycle_s)
    return _verdict(a, criteria)


def _verdict(a: Assessment, criteria: ConvergenceCriteria, *, extra: Mapping[str, Any] = (),
             unit: str = CYCLES) -> Verdict:
    ev_base = dict(extra)
    if a.state == "converged":
        return Verdict(VerdictStatus.PASS, "convergence",
                       message=f"SLIs in band for {a.consecutive_ok} consecutive {unit.split(' (')[0]} since the "
                               f"last change", evidence={**ev_base, "cycles": [c.to_dict() for c in a.cycles[-6:]],
                                                    "consecutive_ok": a.consecutive_ok,
                                                    "pooled": {k: dict(v) for k, v in a.pooled.items()},
                                                    "settling": [c.to_dict() for c in a.settling],
                                                    "window_start": a.window_start, "now": a.now})
    if a.state == "converging":
        cv = a.converging
        drains = "; ".join(f"{k} = {v['value']:.4g} draining at {v['drain_per_s']:.3g}/s, ETA {v['eta_s']:.0f} s"
                           for k, v in cv["draining"].items())
        return Verdict(VerdictStatus.PASS, "convergence",
                       message=f"SLIs converging: every other SLI in band for {len(cv['cycles'])} consecutive "
                               f"{unit.split(' (')[0]} since the last change; {', '.join(cv['explained'])} still "
                               f"out of band while a backlog of accepted work drains ({drains}). Accepted: that "
                               f"work will complete.",
                       evidence={**ev_base, "converging": dict(cv), "cycles": [c.to_dict() for c in a.cycles[-6:]],
                                 "backlog": {k: dict(v) for k, v in a.backlog.items()},
                                 "settling": [c.to_dict() for c in a.settling],
                                 "window_start": a.window_start, "now": a.now})
    if a.state == "no_data":
        # Not a pass: what has no data cannot be shown to hold (see ConvergenceCheck._check), so not accepted.
        return Verdict(VerdictStatus.INCONCLUSIVE, "convergence", FeedbackCode.NOT_CONVERGED,
                       message="no SLI data for the public SLOs in the window; cannot judge convergence",
                       evidence={**ev_base, "window_start": a.window_start, "now": a.now})
    msg, ev = describe_failure(a, criteria, unit)
    # Too few full cycles yet is not a pass: the guard cannot accept what it has not seen hold.
    return Verdict(VerdictStatus.FAIL, "convergence", FeedbackCode.NOT_CONVERGED, msg, {**ev_base, **ev})


# -- measuring and waiting ---------------------------------------------------------------------------------------

class stop_after_clock_delay(stop_base):
    """tenacity's stop_after_delay, but on the environment's clock (virtual in the twin)."""

    def __init__(self, clock: Clock, max_delay: float):
        self.clock = clock
        self.max_delay = max_delay
        self.start = clock.now()

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.clock.now() - self.start >= self.max_delay


class wait_for_segment_end(wait_base):
    """Waits the interval, or less: until just after the load-phase segment under way ends, the next moment the
    judgement can change (a segment is judged only once finished), so acceptance does not lag the evidence."""

    def __init__(self, clock: Clock, interval: float, due: Any, settle: float, deadlines: Sequence[float] = ()):
        self.clock = clock
        self.interval = interval
        self.due = due  # () -> when the segment under way should end, or None
        self.settle = settle
        self.deadlines = sorted(deadlines)  # never wait past one of these (the bounded waits end exactly there)

    def __call__(self, retry_state: RetryCallState) -> float:
        now = self.clock.now()
        due = self.due()
        wait = self.interval if due is None else min(self.interval, max(0.0, due - now) + self.settle)
        ahead = [d - now for d in self.deadlines if d - now > 1e-9]
        return min([wait] + ahead[:1])


class _stop_unless(stop_base):
    """Stops unless the condition holds (e.g. a backlog is still draining)."""

    def __init__(self, condition: Any):
        self.condition = condition

    def __call__(self, retry_state: RetryCallState) -> bool:
        return not self.condition()


def incident_start(env: Environment, context: PublicContext) -> float | None:
    """When the incident began, as an operator knows it (the page's time): environment first, then the context."""
    for source in (env.describe().extra, context.extra):
        v = source.get("incident_start_s") if source else None
        if v is not None:
            return float(v)
    return None


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


# What an operator configures so that the guard can judge convergence (docs/production.md).
CONFIGURE_SLIS = "--prometheus URL --slo FILE"


def no_sli_source(env_name: str) -> Verdict:
    """The answer when the environment has no SLI source: at once, with what to configure. Never a wait."""
    return Verdict(
        VerdictStatus.INCONCLUSIVE, "convergence", FeedbackCode.NO_SLI_SOURCE,
        f"convergence cannot be judged: the {env_name!r} environment has no SLI source. The operator must start "
        f"the guard with `{CONFIGURE_SLIS}` (the team's SLOs as PromQL, see docs/production.md). Nothing you change "
        f"can satisfy this; report it to your operator.",
        {"environment": env_name, "configure": CONFIGURE_SLIS})


class ConvergenceCheck(VerifierBase):
    """Waits, in the environment's clock, until SLIs hold their bands for N consecutive full load cycles."""

    name = "convergence"

    def __init__(self, context: Any = None, *, window_start: float | None = None):
        self.context = PublicContext.of(context)
        # A fixed window start (the restart probe's: after the restart); otherwise the journal decides.
        self.fixed_window_start = window_start

    # Which series to ask for, and the bands to hold them to.
    def drivers(self, env: Environment) -> list[str]:
        found = {s.driver for s in self.context.slos if s.driver}
        for src in (env.describe().extra, self.context.extra):
            found.update((src or {}).get("drivers") or ())
        return sorted(found)

    def bands(self, env: Environment, criteria: ConvergenceCriteria) -> tuple[list[Band], dict[str, Any]]:
        notes: dict[str, Any] = {}
        slo = slo_bands(self.context)
        # SLOs the environment's SLI source answers (an SLO file): the contract, as the context's public SLOs are.
        # One without a limit is held to the baseline, or else must have settled (a backlog with no ceiling).
        objectives = objectives_of(env.describe().extra.get(DESCRIBE_KEY))
        unlimited: list[Band] = []
        for o in objectives:
            if o.limit is not None:
                slo.append(Band(o.sli, o.op, float(o.limit), o.labels, None, "slo", True))
            elif o.sli == "backlog":
                unlimited.append(Band(o.sli, "stable", criteria.backlog_settled_abs, o.labels, None, "default", True))
        start = incident_start(env, self.context)
        base: list[Band] = []
        if start is None:
            notes["baseline"] = "no incident start known; public SLOs alone"
        else:
            now = env.clock.now()
            window = max(0.0, now - start) + criteria.baseline_window_s
            series: dict[SeriesKey, list[Sample]] = {}
            skipped: list[str] = []
            keys = [(sli, labels) for sli in BASELINE_SLIS
                    for labels in [()] + [(("driver", d),) for d in self.drivers(env)]]
            keys += [(o.sli, o.labels) for o in objectives]
            lacking: set[str] = set()
            failed_in_a_row = 0
            for sli, labels in keys:
                if sli in lacking:
                    continue
                if failed_in_a_row >= 2:
                    # A source that fails twice running is down, not lacking an SLI: the measurements will say so
                    # (ERROR), and asking it for every other baseline series first would only delay that.
                    skipped.append(f"{sli}{dict(labels) or ''}: not asked, the source is failing")
                    continue
                try:
                    got = env.sli(sli, window, labels=dict(labels) or None, step=None)
                except Exception as e:  # noqa: BLE001 - a source that lacks an SLI just has no baseline for it
                    skipped.append(f"{sli}{dict(labels) or ''}: {type(e).__name__}")
                    failed_in_a_row += 1
                    if not labels:
                        lacking.add(sli)
                    continue
                failed_in_a_row = 0
                pre = [s for s in got if s.t_end <= start]
                if pre:
                    series[(sli, labels)] = pre
            base = baseline_bands(series, criteria)
            notes["baseline"] = {"incident_start_s": start, "bands": len(base), "skipped": skipped}
            if objectives:
                # Where each SLO stood before the session: evidence of what "recovered" means here.
                notes["baseline"]["slos"] = {
                    o.name: _mean([s.value for s in series.get((o.sli, o.labels), ()) if s.value is not None])
                    for o in objectives}
        # With no baseline or SLO for it, a backlog must have settled: not still draining, not growing.
        defaults = [Band("backlog", "stable", criteria.backlog_settled_abs, (), "trough", "default", False)]
        if criteria.check_restarts:
            for comp in self.context.components:
                defaults.append(Band("restarts", "<=", 0.0, (("component", comp),), None, "default", False))
        defaults = unlimited + defaults
        if not slo and not base:
            notes["warning"] = "no public SLOs and no baseline: only restarts and backlog are judged"
        # A runtime window the incident mandates to stay on (keep_active) keeps latency above the pre-incident
        # baseline by design: there the public latency SLOs are the contract, not the baseline's latency.
        mandated = [c.get("id") for c in self.context.raw.get("constraints") or ()
                    if isinstance(c, Mapping) and c.get("kind") == "keep_active"]
        if mandated:
            notes["latency_contract"] = f"public latency SLOs, not the baseline (mandated: {', '.join(map(str, mandated))})"
        return merge_bands(slo, base, defaults, latency_slo_is_contract=bool(mandated)), notes

    def window_start(self, env: Environment, journal: Any, checked_at: float) -> float:
        if self.fixed_window_start is not None:
            last = last_mutation_t(journal)
            return max(self.fixed_window_start, last) if last is not None else self.fixed_window_start
        last = last_mutation_t(journal)
        if last is not None:
            return last
        records = journal.records() if journal is not None else []
        ts = [float(r["t"]) for r in records if r.get("t") is not None]
        return min(ts) if ts else checked_at

    def cycle_s(self, env: Environment, criteria: ConvergenceCriteria) -> float:
        return float(env.describe().cycle_s or criteria.window_s or criteria.default_cycle_s)

    def measure(self, env: Environment, bands: Sequence[Band], window_start: float,
                cycle_s: float) -> dict[SeriesKey, list[Sample]]:
        """Every band's series from one load cycle before `window_start` (so that the segment straddling it shows
        whole and is not taken for a cycle of its own); with cycle_s 0, clipped at `window_start`."""
        now = env.clock.now()
        window = max(0.0, now - window_start) + cycle_s
        series: dict[SeriesKey, list[Sample]] = {}
        for key in dict.fromkeys(b.series_key for b in bands):
            sli, labels = key
            try:
                series[key] = list(env.sli(sli, window, labels=dict(labels) or None, step=None))
            except Exception:
                if any(b.required for b in bands if b.series_key == key):
                    raise  # an SLO the source cannot answer is a backend failure
                series[key] = []  # an optional band the source lacks is simply not judged
        return series

    def not_ready(self, env: Environment) -> list[str]:
        desc = env.describe()
        names = set(self.context.components) or {c.name for c in desc.components}
        return sorted(c.name for c in desc.components
                      if c.name in names and c.kind not in ("ConfigMap", "Secret") and c.ready_replicas < c.replicas)

    def _check(self, env: Environment, journal: Any, criteria: Any) -> Verdict:
        crit = Criteria.coerce(criteria).convergence
        desc = env.describe()
        if not desc.observes_slis:
            return no_sli_source(desc.name)
        bands, notes = self.bands(env, crit)
        cycle_s = self.cycle_s(env, crit)
        unit = CYCLES if desc.cycle_s else f"windows of {cycle_s:g} s"
        interval = crit.interval_s or cycle_s / 4
        max_wait = crit.max_wait_cycles * cycle_s
        longest = max(max_wait, crit.drain_wait_cycles * cycle_s)
        # By default the wait is bounded in time; the attempt count only has to allow for the extra, shorter waits
        # that end at a segment's end (at most two a cycle) and at the bounds themselves.
        count = crit.count or max(1, int(longest // interval) + 1 + 2 * math.ceil(longest / cycle_s) + 2)
        restarts: list[float] = []
        errors = [0]
        checked_at = env.clock.now()

        def attempt() -> tuple[bool, Assessment | None, Exception | None]:
            start = self.window_start(env, journal, checked_at)
            if restarts and restarts[-1] != start:
                restarts.append(start)
            elif not restarts:
                restarts.append(start)
            try:
                series = self.measure(env, bands, start, cycle_s)
                nr = self.not_ready(env) if crit.check_ready_replicas else []
            except Exception as e:  # noqa: BLE001 - counted against error_limit below
                errors[0] += 1
                report(self.name, f"convergence: the SLI source failed ({type(e).__name__}: {e}); "
                                  f"{errors[0]}/{crit.error_limit + 1} before ERROR")
                return errors[0] > crit.error_limit, None, e
            errors[0] = 0
            a = assess(series, bands, crit, window_start=start, now=env.clock.now(), cycle_s=cycle_s,
                       not_ready=nr)
            latest.append(a)
            last_series[:] = [series]
            waited = env.clock.now() - checked_at
            report(self.name, f"convergence: {a.consecutive_ok}/{crit.consecutive_cycles} consecutive {unit} in "
                              f"band since the last change ({a.state}); held {waited:.0f} s of at most "
                              f"{max_wait:.0f} s", done=a.consecutive_ok, total=crit.consecutive_cycles,
                   waited_s=waited, max_wait_s=max_wait)
            due[0] = segment_end_due([smp for ss in series.values() for smp in ss], env.clock.now(), cycle_s)
            terminal = (a.state in ("converged", "converging") or a.failed_cycles > crit.failure_limit
                        or a.nodata_cycles > crit.inconclusive_limit)
            return terminal, a, None

        latest: list[Assessment] = []
        last_series: list[Mapping[SeriesKey, Sequence[Sample]]] = []
        due: list[float | None] = [None]

        def recovering() -> bool:
            """A backlog visibly draining, or a run of in-band cycles under way: worth waiting a little longer."""
            a = latest[-1] if latest else None
            return bool(a and ((a.cycles and (a.cycles[-1].draining or a.cycles[-1].state == "ok"))
                               or any(b.get("eta_s") for b in a.backlog.values())))

        retrying = Retrying(
            sleep=env.clock.sleep,
            # A little past the segment's end, so that the next one has begun and the finished one reads whole.
            wait=wait_for_segment_end(env.clock, interval, lambda: due[0], settle=0.01 * cycle_s,
                                      deadlines=(checked_at + max_wait, checked_at + crit.drain_wait_cycles * cycle_s)),
            # The bounded wait; while the SLIs are visibly recovering it may run on, up to the drain cap.
            stop=(stop_after_attempt(count) | stop_after_clock_delay(env.clock, max_wait)) & (
                _stop_unless(recovering) | stop_after_clock_delay(env.clock, crit.drain_wait_cycles * cycle_s)),
            retry=retry_if_result(lambda r: not r[0]),
            retry_error_callback=lambda rs: rs.outcome.result(),
            reraise=True,
        )
        started = env.clock.now()
        _, a, err = retrying(attempt)
        extra = {"bands": [b.to_dict() for b in bands], "cycle_s": cycle_s, "interval_s": interval,
                 "waited_s": env.clock.now() - started, "window_restarts": len(restarts) - 1, **notes}
        objectives = objectives_of(desc.extra.get(DESCRIBE_KEY))
        if objectives:
            # The SLOs' PromQL as measured (one window per sample), and each one's latest samples.
            extra["slos"] = [{**o.to_dict(), "promql": render(o.query, cycle_s)} for o in objectives]
        if last_series:
            extra["samples"] = {_key_label(k): [[round(x.t_start, 3), round(x.t_end, 3), x.value, x.count]
                                                for x in v[-6:]] for k, v in last_series[0].items() if v}
        if a is None:
            return Verdict(VerdictStatus.ERROR, self.name,
                           message=f"the SLI source failed {errors[0]} times in a row: {type(err).__name__}: {err}",
                           evidence={**extra, "error": f"{type(err).__name__}: {err}"})
        if a.state != "converged" and a.nodata_cycles > crit.inconclusive_limit:
            # An SLO with no data cannot be shown to hold (a service nobody reaches has no error ratio at all):
            # not a pass, so it carries NOT_CONVERGED and the guard does not accept it.
            missing = sorted({r.band.label() for c in a.cycles for r in c.results
                              if r.state == "nodata" and r.band.required})
            return Verdict(VerdictStatus.INCONCLUSIVE, self.name, FeedbackCode.NOT_CONVERGED,
                           message=f"{a.nodata_cycles} {unit.split(' (')[0]} without data for "
                                   f"{', '.join(missing) or 'a public SLO'}: the guard cannot tell it has "
                                   f"recovered. Check that the service gets traffic and that the SLO's query "
                                   f"returns data, then declare again.",
                           evidence={**extra, "cycles": [c.to_dict() for c in a.cycles[-6:]], "no_data": missing})
        return _verdict(self._with_since_change(env, bands, crit, a), crit, extra=extra, unit=unit)

    def _with_since_change(self, env: Environment, bands: Sequence[Band], crit: ConvergenceCriteria,
                           a: Assessment) -> Assessment:
        """The final assessment with the post-change part of the segment straddling the change first among its
        settling segments (evidence only; see `since_change`). A source that cannot answer leaves it out."""
        firsts = [c.t_start for c in (*a.settling, *a.cycles)]
        if not firsts or min(firsts) <= a.window_start + 1e-6:
            return a
        try:
            clipped = self.measure(env, bands, a.window_start, 0.0)
        except Exception:  # noqa: BLE001 - evidence only
            return a
        j = since_change(clipped, bands, crit, window_start=a.window_start, until=min(firsts))
        return a if j is None else replace(a, settling=(j, *a.settling))
