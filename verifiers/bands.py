"""Bands: the limits an SLI must hold, from the public SLOs and from a pre-incident baseline.

Called by the convergence verifier and the watchdog. A band never comes from a scenario's grader: only from
the context's public SLOs and from telemetry the environment kept before the incident (as Prometheus would).
Where both cover the same SLI, driver and phase, the SLO is the contract and wins; the baseline fills the gaps
(trough latency, backlog, connection errors) that SLOs leave open.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from verifiers.context import PublicContext
from verifiers.criteria import ConvergenceCriteria
from verifiers.protocols import Sample

__all__ = [
    "Band",
    "LOWER_IS_BETTER",
    "RATIO_OR_LATENCY",
    "slo_bands",
    "baseline_bands",
    "merge_bands",
    "sample_has_data",
]

LOWER_IS_BETTER = frozenset(
    {"error_ratio", "latency_p90_ms", "latency_p95_ms", "latency_p99_ms", "conn_errors", "backlog", "restarts"})
# A sample of these is an estimate from `count` requests; too few requests and it is not data.
RATIO_OR_LATENCY = frozenset({"error_ratio", "goodput", "latency_p90_ms", "latency_p95_ms", "latency_p99_ms"})
BASELINE_SLIS = ("error_ratio", "goodput", "latency_p95_ms", "latency_p99_ms", "conn_errors", "backlog")


@dataclass(frozen=True)
class Band:
    """`sli op limit` over the samples with these labels in this load phase (None: every phase)."""

    sli: str
    op: str  # "<=", ">=", or "stable" (a gauge that must have stopped moving: +/- limit or 10% per cycle)
    limit: float
    labels: tuple[tuple[str, str], ...] = ()
    phase: str | None = None
    source: str = "slo"  # slo | baseline | default | describe
    required: bool = True  # a cycle with no data for a required band cannot count as converged

    def holds(self, value: float) -> bool:
        if self.op == "stable":  # judged across cycles by convergence._stability
            return True
        return value <= self.limit if self.op == "<=" else value >= self.limit

    def worse(self, a: float, b: float) -> float:
        return max(a, b) if self.op == "<=" else min(a, b)

    def gap(self, value: float) -> float:
        """How far outside the band a value is (0 inside), in the SLI's units."""
        if self.op == "stable":
            return abs(value)
        return max(0.0, value - self.limit) if self.op == "<=" else max(0.0, self.limit - value)

    @property
    def series_key(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        return (self.sli, self.labels)

    def label(self) -> str:
        parts = [f"{k}={v}" for k, v in self.labels]
        if self.phase:
            parts.append(f"phase={self.phase}")
        return f"{self.sli}{{{','.join(parts)}}}" if parts else self.sli

    def describe(self) -> str:
        if self.op == "stable":
            return f"settled within +/-max({self.limit:g}, 10%) per cycle (from {self.source})"
        return f"{self.op} {self.limit:g} (from {self.source})"

    def to_dict(self) -> dict[str, Any]:
        return {"sli": self.sli, "op": self.op, "limit": self.limit, "labels": dict(self.labels),
                "phase": self.phase, "source": self.source}


def sample_has_data(sample: Sample, sli: str, min_count: int) -> bool:
    if sample.value is None:
        return False
    return not (sli in RATIO_OR_LATENCY and sample.count < min_count)


def slo_bands(context: PublicContext) -> list[Band]:
    return [
        Band(s.sli, s.op, float(s.value), (("driver", s.driver),) if s.driver else (), s.phase, "slo", True)
        for s in context.slos
    ]


def _phase_groups(samples: Iterable[Sample]) -> dict[str | None, list[Sample]]:
    groups: dict[str | None, list[Sample]] = {}
    for s in samples:
        phase = s.labels.get("phase")
        if phase in ("peak", "trough"):
            groups.setdefault(phase, []).append(s)
        elif phase is None:
            groups.setdefault(None, []).append(s)
    return groups


def baseline_bands(
    baseline: Mapping[tuple[str, tuple[tuple[str, str], ...]], Sequence[Sample]],
    criteria: ConvergenceCriteria,
) -> list[Band]:
    """Bands measured on healthy pre-incident samples: the spec's envelope mean + max(rel*mean, k*sigma, abs)."""
    out: list[Band] = []
    for (sli, labels), samples in sorted(baseline.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        for phase, group in sorted(_phase_groups(samples).items(), key=lambda kv: str(kv[0])):
            values = [float(s.value) for s in group if sample_has_data(s, sli, criteria.min_count)]
            if len(values) < criteria.baseline_min_segments:
                continue
            mean = statistics.fmean(values)
            sd = statistics.pstdev(values)
            absolute = float(criteria.baseline_abs.get(sli, 0.0))
            if sli == "goodput":
                limit = max(0.0, mean - max(criteria.baseline_sigmas * sd, absolute))
                out.append(Band(sli, ">=", round(limit, 6), labels, phase, "baseline", False))
            elif sli in LOWER_IS_BETTER:
                limit = mean + max(criteria.baseline_rel * mean, criteria.baseline_sigmas * sd, absolute)
                if sli == "error_ratio":
                    limit = min(limit, 1.0)
                out.append(Band(sli, "<=", round(limit, 6), labels, phase, "baseline", False))
    return out


LATENCY = frozenset({"latency_p90_ms", "latency_p95_ms", "latency_p99_ms"})


def merge_bands(slo: Sequence[Band], baseline: Sequence[Band], defaults: Sequence[Band] = (), *,
                latency_slo_is_contract: bool = False) -> list[Band]:
    """SLO bands always; a baseline or default band only where no SLO covers that SLI, labels and phase.

    With `latency_slo_is_contract` (the incident mandates a runtime slowdown that stays on, so the pre-incident
    latency is not the state to return to), a latency SLO on any percentile covers every latency percentile of its
    driver, and the unlabelled (all-driver) latency once the SLOs give a latency contract for every driver the
    baseline measured. Otherwise the baseline's latency bands stay: they are what holds a partial repair back."""

    def family(sli: str) -> str:
        return "latency" if sli in LATENCY else sli

    slo_latency_labels = {b.labels for b in slo if b.sli in LATENCY}
    measured = {b.labels for b in list(baseline) + list(defaults) if b.sli in LATENCY and b.labels}
    every_driver = bool(measured) and measured <= slo_latency_labels

    def covers(b: Band, other: Band) -> bool:
        if b.phase is not None and b.phase != other.phase:
            return False
        if b.sli == other.sli and b.labels == other.labels:
            return True
        if not latency_slo_is_contract or b.source != "slo" or family(b.sli) != "latency" \
                or family(other.sli) != "latency":
            return False
        return b.labels == other.labels or (not other.labels and every_driver)

    out = list(slo)
    for extra in list(baseline) + list(defaults):
        if not any(covers(b, extra) for b in out):
            out.append(extra)
    return out
