"""The knobs of every verifier, with their defaults, in Argo Rollouts' analysis vocabulary.

The Guard passes one `criteria` value to every verifier's `check()`; each verifier picks its own part with
`Criteria.coerce(criteria).<part>`. `None` means the defaults, a mapping overrides fields by name
(`{"convergence": {"consecutive_cycles": 3}}`), and a part's own dataclass is accepted as is.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

__all__ = ["ConvergenceCriteria", "RestartCriteria", "WatchdogCriteria", "Criteria"]


@dataclass(frozen=True)
class ConvergenceCriteria:
    """When SLIs count as converged, and how long to wait for it (Argo: interval, count, limits)."""

    consecutive_cycles: int = 2  # full load cycles (peak and trough) in band, in a row, after the last change
    interval_s: float | None = None  # between measurements; None: a quarter of a load cycle
    count: int | None = None  # most measurements; None: as many as fit in max_wait_cycles
    max_wait_cycles: float = 8.0  # the bounded wait, in load cycles
    drain_wait_cycles: float = 24.0  # the wait may run on to this while SLIs visibly recover (a backlog drains)
    failure_limit: int = 5  # failed cycles (not explained by a draining backlog) before giving up early
    inconclusive_limit: int = 4  # cycles with no data for a public SLO before answering INCONCLUSIVE
    error_limit: int = 2  # consecutive measurements the source failed to answer
    min_count: int = 5  # requests a ratio or latency sample needs before it counts as data
    # Ratio SLIs rest on few requests at a light trough. A segment outside the band whose Wilson interval (noise_z)
    # still reaches the band does not break a run; acceptance needs the upper bound (confidence_z, one-sided
    # ~95%) of the bad share pooled over the run, per phase, inside the band. 0 turns either off.
    noise_z: float = 1.0
    confidence_z: float = 1.64
    default_cycle_s: float = 60.0  # when neither the environment nor the samples say
    baseline_window_s: float = 600.0  # pre-incident telemetry the baseline bands are measured on
    baseline_min_segments: int = 3  # fewer pre-incident samples than this: no baseline band for that SLI
    baseline_sigmas: float = 3.0
    baseline_rel: float = 1.0  # a ceiling is at least mean * (1 + rel): the spec's mean + max(1.0*mean, ...)
    # Absolute headroom a baseline band always gets, so a perfectly flat baseline does not make noise a failure.
    baseline_abs: Mapping[str, float] = field(default_factory=lambda: {
        "error_ratio": 0.05, "goodput": 0.10, "latency_p95_ms": 100.0, "latency_p99_ms": 100.0,
        "latency_p90_ms": 100.0, "conn_errors": 5.0, "backlog": 10.0})
    backlog_settled_abs: float = 10.0  # with no baseline or SLO, a backlog has settled when it moves less per cycle
    check_ready_replicas: bool = True
    check_restarts: bool = True


@dataclass(frozen=True)
class RestartCriteria:
    """How the restart probe restarts and waits."""

    ready_timeout_s: float = 300.0
    poll_s: float = 5.0
    post_ready_wait_s: float = 15.0  # the spec's challenges wait after readiness before probing
    targets: str = "touched_or_all"  # touched_or_all | touched | all
    recheck_convergence: bool = True


@dataclass(frozen=True)
class WatchdogCriteria:
    """When a run of steps is a diagnostic loop, and when a repair is symptom-only."""

    window_steps: int = 12  # steps the loop detector looks back over
    repeat_limit: int = 4  # the same read-only command this often in the window, with no change: a loop
    idle_steps: int = 15  # this many steps with no mutating action while SLIs stay out of band: a loop
    max_distinct_ratio: float = 0.34  # in a full window, at most this share of distinct commands: a loop
    check_slis: bool = True


@dataclass(frozen=True)
class Criteria:
    """All verifiers' criteria in one value, the `criteria` argument of every `check()`."""

    convergence: ConvergenceCriteria = field(default_factory=ConvergenceCriteria)
    restart: RestartCriteria = field(default_factory=RestartCriteria)
    watchdog: WatchdogCriteria = field(default_factory=WatchdogCriteria)

    @classmethod
    def coerce(cls, value: Any) -> "Criteria":
        if value is None:
            return cls()
        if isinstance(value, Criteria):
            return value
        if isinstance(value, ConvergenceCriteria):
            return cls(convergence=value)
        if isinstance(value, RestartCriteria):
            return cls(restart=value)
        if isinstance(value, WatchdogCriteria):
            return cls(watchdog=value)
        if isinstance(value, Mapping):
            out = cls()
            for part in fields(cls):
                if part.name in value and value[part.name] is not None:
                    current = getattr(out, part.name)
                    known = {f.name for f in fields(current)}
                    unknown = set(value[part.name]) - known
                    if unknown:
                        raise ValueError(f"unknown {part.name} criteria: {sorted(unknown)}")
                    out = replace(out, **{part.name: replace(current, **dict(value[part.name]))})
            return out
        raise TypeError(f"criteria must be None, a mapping or a Criteria, not {type(value).__name__}")
