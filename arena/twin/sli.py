"""The twin's named-SLI source: what Prometheus plus the load generator's metrics would show an operator.

`arena.twin.engine.TwinEnvironment.sli` delegates here; the guard's convergence verifier is the main caller. It
reads the `Ledger` (client-side counts and latency histograms) and the world's gauges (ready replicas, restarts,
backlog), never component internals. Query names are `verifiers.protocols.SLI_NAMES`.

The guard asks again and again over windows that mostly cover the same finished segments (each convergence
attempt, each watchdog step), so the tallies of a span that lies wholly before the ledger's end are kept: a
record is never changed once written and a later one never starts before the ledger's end, so such a span's
tally is final. Gauge lookups binary-search the gauge times. Answers are the same, float for float.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Mapping

from arena.twin.ledger import Tally
from arena.twin.world import World
from verifiers.protocols import SLI_NAMES, Sample

__all__ = ["TwinSLISource"]

_LAT = {"latency_p95_ms": 95.0, "latency_p99_ms": 99.0, "latency_p90_ms": 90.0}
_GAUGES = ("backlog", "ready_replicas", "restarts")


class TwinSLISource:
    """Answers the named SLI queries over the twin's ledger and gauges."""

    def __init__(self, world: World):
        self.world = world
        self._tallies: dict[tuple, tuple[Tally, Tally]] = {}
        self._gauge_ts: list[float] = []

    def sli(self, query: str, window: float, *, labels: Mapping[str, str] | None = None,
            step: float | None = None) -> list[Sample]:
        if query not in SLI_NAMES:
            raise ValueError(f"unknown SLI {query!r}; known: {', '.join(SLI_NAMES)}")
        labels = dict(labels or {})
        now = self.world.clock.now()
        t0 = now - max(float(window), 0.0)
        spans = self._spans(t0, now, step, labels.get("phase"))
        out = []
        for a, b, lab in spans:
            if query in _GAUGES:
                out.append(self._gauge(query, a, b, labels, lab))
            else:
                out.append(self._load(query, a, b, labels, lab))
        return out

    def _spans(self, t0: float, t1: float, step: float | None, phase: str | None):
        if step is not None:
            spans = []
            a = t0
            while a < t1 - 1e-9:
                b = min(t1, a + step)
                spans.append((a, b, {}))
                a = b
            return spans
        if t1 <= t0:
            return self._record_spans(t0, t1, phase)
        # One span per load-phase segment: the ledger's runs of records sharing (cycle, phase). The records of
        # a run are contiguous, so its clipped extent is the extent of its clipped records.
        segs: dict[tuple[int, str], list[float]] = {}
        order: list[tuple[int, str]] = []
        for cycle, ph, rt0, rt1 in self.world.ledger.runs_overlapping(t0, t1):
            k = (cycle, ph)
            if phase is not None and ph != phase:
                continue
            if k not in segs:
                segs[k] = [max(rt0, t0), min(rt1, t1)]
                order.append(k)
            else:
                segs[k][0] = min(segs[k][0], max(rt0, t0))
                segs[k][1] = max(segs[k][1], min(rt1, t1))
        return [(segs[k][0], segs[k][1], {"phase": k[1], "cycle": str(k[0])}) for k in order]

    def _record_spans(self, t0: float, t1: float, phase: str | None):
        """The same spans from the records themselves (an empty window: only records strictly around t0)."""
        segs: dict[tuple[int, str], list[float]] = {}
        order: list[tuple[int, str]] = []
        for r in self.world.ledger.overlapping(t0, t1):
            k = (r.cycle, r.phase)
            if phase is not None and r.phase != phase:
                continue
            if k not in segs:
                segs[k] = [max(r.t0, t0), min(r.t1, t1)]
                order.append(k)
            else:
                segs[k][0] = min(segs[k][0], max(r.t0, t0))
                segs[k][1] = max(segs[k][1], min(r.t1, t1))
        return [(segs[k][0], segs[k][1], {"phase": k[1], "cycle": str(k[0])}) for k in order]

    def _select(self, a: float, b: float, driver: str | None, phase: str | None) -> tuple[Tally, Tally]:
        ledger = self.world.ledger
        key = (a, b, driver, phase)
        got = self._tallies.get(key)
        if got is None:
            got = ledger.select(a, b, driver=driver, phase=phase)
            if b <= ledger.end:
                self._tallies[key] = got
        return got

    def _load(self, query: str, a: float, b: float, labels: Mapping[str, str], lab: dict) -> Sample:
        counts, lat = self._select(a, b, labels.get("driver"), lab.get("phase") or labels.get("phase"))
        value: float | None
        if query == "error_ratio":
            value = counts.error_rate()
        elif query == "goodput":
            value = counts.goodput()
        elif query == "offered_rps":
            value = counts.offered / (b - a) if b > a else None
        elif query == "conn_errors":
            value = float(round(counts.conn_errors, 6))
        else:
            value = lat.hist.percentile(_LAT[query])
        if isinstance(value, float):
            value = round(value, 6)
        return Sample(a, b, value, {**labels, **lab}, int(round(counts.base)))

    def _gauge(self, query: str, a: float, b: float, labels: Mapping[str, str], lab: dict) -> Sample:
        gauges = self.world.gauges
        ts = self._gauge_ts
        if len(ts) < len(gauges):  # gauges are appended in time order and never change
            ts.extend(g.t for g in gauges[len(ts):])
        lo, hi = bisect_right(ts, a), bisect_right(ts, b + 1e-9)
        if hi > lo:
            g, n = gauges[hi - 1], hi - lo
        elif lo > 0:
            g, n = gauges[lo - 1], 1
        else:
            return Sample(a, b, None, {**labels, **lab}, 0)
        comp = labels.get("component")
        if query == "backlog":
            value: float | None = g.backlog
        else:
            series = g.ready if query == "ready_replicas" else g.restarts
            value = float(series.get(comp, 0)) if comp else float(sum(series.values()))
        return Sample(a, b, value, {**labels, **lab}, n)


