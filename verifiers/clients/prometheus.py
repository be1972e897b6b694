"""PrometheusSLISource: the named SLIs of verifiers.protocols answered by PromQL on a real Prometheus.

A thin client module (the only kind that may import prometheus_api_client). Used by a live or Kubernetes
environment's `sli()`, and by tests/verifiers/test_prometheus_integration.py against a real Prometheus.

Metric names it expects (override any with `PromMetrics`):

    loadgen_requests_total{driver, outcome}          counter; outcome = ok | incorrect | error | timeout | dropped
    loadgen_request_duration_seconds_bucket{driver, le}   histogram of request latency
    loadgen_conn_errors_total{driver}                counter: connection refused / reset / pool timeouts
    loadgen_phase{phase}                             gauge, 1 for the current load phase (peak, trough, warmup)
    loadgen_cycle                                    gauge, the current load cycle number
    backlog{queue}                                   gauge: queued work not yet done
    kube_deployment_status_replicas_ready{deployment}     gauge (kube-state-metrics)
    kube_pod_container_status_restarts_total{pod}    counter (kube-state-metrics), matched by pod prefix

error_ratio = (error + timeout) / non-dropped and goodput = ok / non-dropped, as the Outcome Gate computes them
(dropped arrivals leave the base). Latency percentiles use histogram_quantile over the summed buckets.
`step=None` cuts the window into load-phase segments from `loadgen_phase` and `loadgen_cycle` and evaluates
each SLI over exactly each segment (increase over the segment's length, at its end).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from prometheus_api_client import PrometheusConnect

from verifiers.clock import RealClock
from verifiers.protocols import Clock, Sample

__all__ = ["PromMetrics", "PrometheusSLISource", "SLIQueryError"]


class SLIQueryError(RuntimeError):
    """Prometheus could not answer (unreachable, bad query, unknown SLI)."""


@dataclass(frozen=True)
class PromMetrics:
    """Metric and label names; the defaults are documented in the module docstring."""

    requests: str = "loadgen_requests_total"
    duration_bucket: str = "loadgen_request_duration_seconds_bucket"
    conn_errors: str = "loadgen_conn_errors_total"
    phase: str = "loadgen_phase"
    cycle: str = "loadgen_cycle"
    backlog: str = "backlog"
    ready: str = "kube_deployment_status_replicas_ready"
    ready_label: str = "deployment"
    restarts: str = "kube_pod_container_status_restarts_total"
    restarts_label: str = "pod"
    driver_label: str = "driver"
    outcome_label: str = "outcome"


def _dur(seconds: float) -> str:
    return f"{max(1, int(round(seconds * 1000)))}ms"


class PrometheusSLISource:
    """An SLISource over the Prometheus HTTP API."""

    def __init__(self, url: str, *, metrics: PromMetrics | None = None, clock: Clock | None = None,
                 timeout_s: float = 10.0, client: Any = None):
        self.url = url.rstrip("/")
        self.m = metrics or PromMetrics()
        self.clock = clock or RealClock()
        self.timeout_s = timeout_s
        self.client = client or PrometheusConnect(url=self.url, disable_ssl=True, timeout=timeout_s)

    # -- raw PromQL --------------------------------------------------------------------------------------------
    def instant(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"time": f"{at:.3f}"} if at is not None else None
        try:
            return self.client.custom_query(promql, params=params)
        except Exception as e:  # noqa: BLE001 - one error type for the verifiers to turn into ERROR
            raise SLIQueryError(f"{promql}: {type(e).__name__}: {e}") from e

    def range(self, promql: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        from datetime import datetime, timezone

        try:
            return self.client.custom_query_range(
                promql, datetime.fromtimestamp(start, timezone.utc), datetime.fromtimestamp(end, timezone.utc),
                step=f"{step:g}", params={"start": f"{start:.3f}", "end": f"{end:.3f}"})
        except Exception as e:  # noqa: BLE001
            raise SLIQueryError(f"{promql}: {type(e).__name__}: {e}") from e

    def scalar(self, promql: str, at: float | None = None) -> float | None:
        res = self.instant(promql, at)
        if not res:
            return None
        v = float(res[0]["value"][1])
        return None if math.isnan(v) or math.isinf(v) else v

    # -- PromQL per named SLI ----------------------------------------------------------------------------------
    def _sel(self, labels: Mapping[str, str], extra: str = "") -> str:
        parts = [f'{self.m.driver_label}="{labels["driver"]}"'] if labels.get("driver") else []
        if extra:
            parts.append(extra)
        return "{" + ",".join(parts) + "}"

    def promql(self, query: str, rng: str, labels: Mapping[str, str]) -> tuple[str, str | None]:
        """The PromQL for one SLI over a range, and the PromQL for how many requests it rests on."""
        m, o = self.m, self.m.outcome_label
        not_dropped = self._sel(labels, o + '!="dropped"')
        base = f"sum(increase({m.requests}{not_dropped}[{rng}]))"
        if query == "error_ratio":
            bad_sel = self._sel(labels, o + '=~"error|timeout"')
            bad = f"sum(increase({m.requests}{bad_sel}[{rng}]))"
            return f"({bad} or vector(0)) / {base}", base
        if query == "goodput":
            good_sel = self._sel(labels, o + '="ok"')
            good = f"sum(increase({m.requests}{good_sel}[{rng}]))"
            return f"({good} or vector(0)) / {base}", base
        if query.startswith("latency_p") and query.endswith("_ms"):
            q = float(query[len("latency_p"):-len("_ms")]) / 100.0
            return (f"histogram_quantile({q}, sum by (le) (increase({m.duration_bucket}{self._sel(labels)}"
                    f"[{rng}]))) * 1000", base)
        if query == "offered_rps":
            return f"sum(rate({m.requests}{self._sel(labels)}[{rng}]))", None
        if query == "conn_errors":
            return f"sum(increase({m.conn_errors}{self._sel(labels)}[{rng}])) or vector(0)", None
        if query == "backlog":
            sel = "{" + (f'queue="{labels["queue"]}"' if labels.get("queue") else "") + "}"
            return f"sum({m.backlog}{sel})", None
        if query == "ready_replicas":
            sel = "{" + (f'{m.ready_label}="{labels["component"]}"' if labels.get("component") else "") + "}"
            return f"sum({m.ready}{sel})", None
        if query == "restarts":
            sel = "{" + (f'{m.restarts_label}=~"{labels["component"]}-.*"' if labels.get("component") else "") + "}"
            return f"sum({m.restarts}{sel})", None
        raise SLIQueryError(f"unknown SLI {query!r}")

    # -- the SLISource protocol --------------------------------------------------------------------------------
    def segments(self, start: float, end: float) -> list[tuple[str, str, float, float]]:
        """(cycle, phase, first, last) runs of scrapes that saw the same load phase and cycle.

        Raw scrapes, not a stepped timeline: the counters scraped at `first` and `last` bracket requests made
        wholly inside the phase, so a segment's SLI never mixes in the neighbouring phase's traffic.
        """
        rng = _dur(end - start)
        at: dict[float, list[str]] = {}
        for series in self.instant(f"{self.m.phase}[{rng}]", at=end):
            ph = series["metric"].get("phase", "")
            for t, v in series.get("values", ()):
                if float(v) == 1.0:
                    at.setdefault(round(float(t), 3), ["", ""])[0] = ph
        for series in self.instant(f"{self.m.cycle}[{rng}]", at=end):
            for t, v in series.get("values", ()):
                at.setdefault(round(float(t), 3), ["", ""])[1] = str(int(float(v)))
        out: list[tuple[str, str, float, float]] = []
        for t in sorted(at):
            ph, cyc = at[t]
            if not ph or not cyc:
                continue
            if out and out[-1][0] == cyc and out[-1][1] == ph:
                out[-1] = (cyc, ph, out[-1][2], t)
            else:
                out.append((cyc, ph, t, t))
        return out

    def sli(self, query: str, window: float, *, labels: Mapping[str, str] | None = None,
            step: float | None = None) -> list[Sample]:
        labels = dict(labels or {})
        now = self.clock.now()
        start = now - window
        out: list[Sample] = []
        if step is None:
            for cyc, phase, a, b in self.segments(start, now):
                if labels.get("phase") and labels["phase"] != phase:
                    continue
                if b - a <= 0:
                    out.append(Sample(a, b, None, {**labels, "phase": phase, "cycle": cyc}, 0))
                    continue
                # +1 ms so the scrape at `a` is inside the range whichever end of it the server treats as open.
                expr, count_expr = self.promql(query, _dur(b - a + 0.001), labels)
                value = self.scalar(expr, at=b)
                count = self.scalar(count_expr, at=b) if count_expr else None
                out.append(Sample(a, b, value, {**labels, "phase": phase, "cycle": cyc},
                                  int(round(count or 0))))
            return out
        expr, count_expr = self.promql(query, _dur(step), labels)
        values = self.range(expr, start + step, now, step)
        counts = {round(float(t), 3): float(v) for s in (self.range(count_expr, start + step, now, step)
                                                          if count_expr else []) for t, v in s["values"]}
        for series in values[:1]:
            for t, v in series["values"]:
                t = float(t)
                fv = float(v)
                out.append(Sample(t - step, t, None if math.isnan(fv) or math.isinf(fv) else fv, dict(labels),
                                  int(round(counts.get(round(t, 3), 0)))))
        return out
