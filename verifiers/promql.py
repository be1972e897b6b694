"""PromQL text for the named SLIs of verifiers.protocols, as pure functions (no client, no network).

The `loadgen` vocabulary (metric names the Incident-Arena load generator exports, and kube-state-metrics) is one
preset: `PrometheusSLISource` (verifiers/clients/prometheus.py) answers the named SLIs with it, and an SLO file's
`loadgen:` entries (verifiers/slo.py) turn into PromQL through it. Teams with their own metric names write PromQL
in their SLO file instead, or override names with `PromMetrics`.

Metric names of the preset (override any with `PromMetrics`):

    loadgen_requests_total{driver, outcome}          counter; outcome = ok | incorrect | error | timeout | dropped
    loadgen_request_duration_seconds_bucket{driver, le}   histogram of request latency
    loadgen_conn_errors_total{driver}                counter: connection refused / reset / pool timeouts
    loadgen_phase{phase}                             gauge, 1 for the current load phase (peak, trough, warmup)
    loadgen_cycle                                    gauge, the current load cycle number
    backlog{queue}                                   gauge: queued work not yet done
    kube_deployment_status_replicas_ready{deployment}     gauge (kube-state-metrics)
    kube_pod_container_status_restarts_total{pod}    counter (kube-state-metrics), matched by pod prefix
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

__all__ = ["PromMetrics", "duration", "named_sli_promql", "NAMED_SLIS"]

NAMED_SLIS = ("error_ratio", "goodput", "latency_p90_ms", "latency_p95_ms", "latency_p99_ms", "offered_rps",
              "conn_errors", "backlog", "ready_replicas", "restarts")


@dataclass(frozen=True)
class PromMetrics:
    """Metric and label names; the defaults are the loadgen preset (module docstring)."""

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


def duration(seconds: float) -> str:
    """A PromQL range duration in whole milliseconds (at least 1 ms)."""
    return f"{max(1, int(round(seconds * 1000)))}ms"


def _sel(m: PromMetrics, labels: Mapping[str, str], extra: str = "") -> str:
    parts = [f'{m.driver_label}="{labels["driver"]}"'] if labels.get("driver") else []
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}"


def named_sli_promql(m: PromMetrics, query: str, rng: str, labels: Mapping[str, str]) -> tuple[str, str | None]:
    """The PromQL for one named SLI over the range `rng` (a duration, or a template such as `{{.window}}`), and
    the PromQL for how many requests it rests on (None for a gauge). KeyError for a name it does not know.

    error_ratio = (error + timeout) / non-dropped and goodput = ok / non-dropped, as the Outcome Gate computes them
    (dropped arrivals leave the base). Latency percentiles use histogram_quantile over the summed buckets."""
    o = m.outcome_label
    not_dropped = _sel(m, labels, o + '!="dropped"')
    base = f"sum(increase({m.requests}{not_dropped}[{rng}]))"
    if query == "error_ratio":
        bad_sel = _sel(m, labels, o + '=~"error|timeout"')
        bad = f"sum(increase({m.requests}{bad_sel}[{rng}]))"
        return f"({bad} or vector(0)) / {base}", base
    if query == "goodput":
        good_sel = _sel(m, labels, o + '="ok"')
        good = f"sum(increase({m.requests}{good_sel}[{rng}]))"
        return f"({good} or vector(0)) / {base}", base
    if query.startswith("latency_p") and query.endswith("_ms"):
        try:
            q = float(query[len("latency_p"):-len("_ms")]) / 100.0
        except ValueError:
            raise KeyError(query) from None
        return (f"histogram_quantile({q}, sum by (le) (increase({m.duration_bucket}{_sel(m, labels)}"
                f"[{rng}]))) * 1000", base)
    if query == "offered_rps":
        return f"sum(rate({m.requests}{_sel(m, labels)}[{rng}]))", None
    if query == "conn_errors":
        return f"sum(increase({m.conn_errors}{_sel(m, labels)}[{rng}])) or vector(0)", None
    if query == "backlog":
        sel = "{" + (f'queue="{labels["queue"]}"' if labels.get("queue") else "") + "}"
        return f"sum({m.backlog}{sel})", None
    if query == "ready_replicas":
        sel = "{" + (f'{m.ready_label}="{labels["component"]}"' if labels.get("component") else "") + "}"
        return f"sum({m.ready}{sel})", None
    if query == "restarts":
        sel = "{" + (f'{m.restarts_label}=~"{labels["component"]}-.*"' if labels.get("component") else "") + "}"
        return f"sum({m.restarts}{sel})", None
    raise KeyError(query)
