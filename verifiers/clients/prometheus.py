"""PrometheusSLISource: the named SLIs of verifiers.protocols answered by PromQL on a real Prometheus.

A thin client module (the only kind that may import prometheus_api_client). Used by a live or Kubernetes
environment's `sli()`, and by tests/verifiers/test_prometheus_integration.py against a real Prometheus.

Metric names it expects: the loadgen preset of verifiers/promql.py (override any with `PromMetrics`), which also
builds each named SLI's PromQL.

error_ratio = (error + timeout) / non-dropped and goodput = ok / non-dropped, as the Outcome Gate computes them
(dropped arrivals leave the base). Latency percentiles use histogram_quantile over the summed buckets.
`step=None` cuts the window into load-phase segments from `loadgen_phase` and `loadgen_cycle` and evaluates
each SLI over exactly each segment (increase over the segment's length, at its end).
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any, Mapping

from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from verifiers.clock import RealClock
from verifiers.promql import PromMetrics, duration as _dur, named_sli_promql
from verifiers.protocols import Clock, Sample

__all__ = ["PromMetrics", "PrometheusSLISource", "SLIQueryError"]


class SLIQueryError(RuntimeError):
    """Prometheus could not answer (unreachable, bad query, unknown SLI)."""


def _api_error(text: str) -> str:
    """The `error` of a Prometheus API error body, from prometheus_api_client's "HTTP Status Code N (b'...')"."""
    match = re.search(r"\((b(['\"]).*\2)\)\s*$", text, re.S)
    try:
        return str(json.loads(ast.literal_eval(match.group(1)))["error"]) if match else text
    except (ValueError, SyntaxError, KeyError, TypeError):
        return text


class PrometheusSLISource:
    """An SLISource over the Prometheus HTTP API."""

    def __init__(self, url: str, *, metrics: PromMetrics | None = None, clock: Clock | None = None,
                 timeout_s: float = 10.0, client: Any = None):
        self.url = url.rstrip("/")
        self.m = metrics or PromMetrics()
        self.clock = clock or RealClock()
        self.timeout_s = timeout_s
        # One quick retry at most: the convergence verifier retries on its own schedule (error_limit), so the
        # client's default three retries with backoff would only make an unreachable Prometheus slow to report.
        self.client = client or PrometheusConnect(url=self.url, disable_ssl=True, timeout=timeout_s,
                                                  retry=Retry(total=1, backoff_factor=0.1,
                                                              status_forcelist=[429, 502, 503, 504]))

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

    def query_error(self, promql: str) -> str | None:
        """Why Prometheus refuses this PromQL (a parse or type error: HTTP 400 `bad_data`), or None when it
        evaluates it. SLIQueryError when Prometheus cannot be asked at all (unreachable, 5xx)."""
        try:
            self.client.custom_query(promql)
        except PrometheusApiClientException as e:
            text = str(e)
            if "HTTP Status Code 400" in text or "HTTP Status Code 422" in text:
                return _api_error(text)
            raise SLIQueryError(f"{promql}: {text}") from e
        except Exception as e:  # noqa: BLE001 - unreachable, timed out: one error type for the caller
            raise SLIQueryError(f"{type(e).__name__}: {e}") from e
        return None

    def scalar(self, promql: str, at: float | None = None) -> float | None:
        res = self.instant(promql, at)
        if not res:
            return None
        v = float(res[0]["value"][1])
        return None if math.isnan(v) or math.isinf(v) else v

    # -- PromQL per named SLI ----------------------------------------------------------------------------------
    def promql(self, query: str, rng: str, labels: Mapping[str, str]) -> tuple[str, str | None]:
        """The PromQL for one SLI over a range, and the PromQL for how many requests it rests on."""
        try:
            return named_sli_promql(self.m, query, rng, labels)
        except KeyError as e:
            raise SLIQueryError(f"unknown SLI {query!r}") from e

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
