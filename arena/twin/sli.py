"""The twin's named-SLI source: what Prometheus plus the load generator's metrics would show an operator.

`arena.twin.engine.TwinEnvironment.sli` delegates here; the guard's convergence verifier is the main caller. It
reads the `Ledger` (client-side counts and latency histograms) and the world's gauges (ready replicas, restarts,
backlog), never component internals. Query names are `verifiers.protocols.SLI_NAMES`.
"""

from __future__ import annotations

from typing import Mapping

from arena.twin.world import World
from verifiers.protocols import SLI_NAMES, Sample

__all__ = ["TwinSLISource"]

_LAT = {"latency_p95_ms": 95.0, "latency_p99_ms": 99.0, "latency_p90_ms": 90.0}
_GAUGES = ("backlog", "ready_replicas", "restarts")


class TwinSLISource:
    """Answers the named SLI queries over the twin's ledger and gauges."""

    def __init__(self, world: World):
        self.world = world

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
        # One span per load-phase segment: consecutive records sharing (cycle, phase).
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

    def _load(self, query: str, a: float, b: float, labels: Mapping[str, str], lab: dict) -> Sample:
        counts, lat = self.world.ledger.select(a, b, driver=labels.get("driver"),
                                               phase=lab.get("phase") or labels.get("phase"))
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
        pts = [g for g in self.world.gauges if a < g.t <= b + 1e-9]
        if not pts:
            before = [g for g in self.world.gauges if g.t <= a]
            pts = before[-1:]
        if not pts:
            return Sample(a, b, None, {**labels, **lab}, 0)
        g = pts[-1]
        comp = labels.get("component")
        if query == "backlog":
            value: float | None = g.backlog
        else:
            series = g.ready if query == "ready_replicas" else g.restarts
            value = float(series.get(comp, 0)) if comp else float(sum(series.values()))
        return Sample(a, b, value, {**labels, **lab}, len(pts))


