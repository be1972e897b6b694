"""The knobs of every verifier, with their defaults, in Argo Rollouts' analysis vocabulary.

The Guard passes one `criteria` value to every verifier's `check()`; each verifier picks its own part with
`Criteria.coerce(criteria).<part>`. `None` means the defaults, a mapping overrides fields by name
(`{"convergence": {"consecutive_cycles": 3}}`), and a part's own dataclass is accepted as is.
"""

from __future__ import annotations

import collections.abc
import functools
import math
import numbers
import typing
import weakref
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, Mapping

__all__ = ["ConvergenceCriteria", "RestartCriteria", "WatchdogCriteria", "Criteria", "RANGES", "check_ranges"]


@dataclass(frozen=True)
class ConvergenceCriteria:
    """When SLIs count as converged, and how long to wait for it (Argo: interval, count, limits)."""

    consecutive_cycles: int = 2  # full load cycles (peak and trough) in band, in a row, after the last change
    interval_s: float | None = None  # between measurements; None: a quarter of a load cycle
    count: int | None = None  # most measurements; None: as many as fit in max_wait_cycles
    max_wait_cycles: float = 8.0  # the bounded wait, in load cycles
    drain_wait_cycles: float = 24.0  # the wait may run on to this while SLIs visibly recover (a backlog drains)
    failure_limit: int = 5  # failed cycles (not explained by a draining backlog) before giving up early
    # Converging: the last consecutive_cycles cycles failed only goodput (or the backlog's own band) while a backlog
    # drained in each, every other SLI held, and the drain's ETA is known and at most this many cycles: accepted
    # work that will complete, accepted with that evidence (as the Frappe harness verifies accepted work to
    # completion after a declaration). 0 turns it off: then only converged SLIs are accepted.
    accept_draining_eta_cycles: float = 90.0
    inconclusive_limit: int = 4  # cycles with no data for a public SLO before answering INCONCLUSIVE
    error_limit: int = 2  # consecutive measurements the source failed to answer
    min_count: int = 5  # requests a ratio or latency sample needs before it counts as data
    # Ratio SLIs rest on few requests at a light trough. A segment outside the band whose Wilson interval (noise_z)
    # still reaches the band does not break a run; acceptance needs the upper bound (confidence_z, one-sided
    # ~95%) of the bad share pooled over the run, per phase, inside the band. 0 turns either off.
    noise_z: float = 1.0
    confidence_z: float = 1.64
    # The pooled check is a sequential test: it looks again at every finished segment, and every look is another
    # chance for a residual fault to look healthy by luck. The first look since the last change (no earlier full cycle closed a
    # run of consecutive_cycles) spends more of the error budget (one-sided ~90%); every later look uses
    # confidence_z. 0: confidence_z at every look.
    first_look_z: float = 1.28
    default_cycle_s: float = 60.0  # when neither the environment nor the samples say
    # The length of a judging window when the system has no load cycles (EnvironmentDescription.cycle_s None): an
    # SLO file's window_s. consecutive_cycles then counts windows. None: default_cycle_s.
    window_s: float | None = None
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
    targets: Literal["touched_or_all", "touched", "all"] = "touched_or_all"
    recheck_convergence: bool = True


@dataclass(frozen=True)
class WatchdogCriteria:
    """When a run of steps is a diagnostic loop, and when a repair is symptom-only."""

    window_steps: int = 12  # steps the loop detector looks back over
    repeat_limit: int = 4  # the same read-only command this often in the window, with no change: a loop
    idle_steps: int = 15  # this many steps with no mutating action while SLIs stay out of band: a loop
    max_distinct_ratio: float = 0.34  # in a full window, at most this share of distinct commands: a loop
    check_slis: bool = True


# The sane range of every numeric field that has one (the rest are checked for their type only): no negative wait,
# no zero-length cycle, no count below one. `Criteria.coerce` enforces them on every override, and a criteria
# file (guardrail.adapters.session.load_criteria) is checked against the same table, with its line.
POSITIVE, NON_NEGATIVE, COUNT, SHARE = {"gt": 0}, {"ge": 0}, {"ge": 1}, {"ge": 0, "le": 1}
# Upper bounds too: `default_cycle_s: 1e308` is finite and positive, and a wait computed from it never ends (or
# overflows a timer). Generous: a week of seconds, ten thousand cycles, a million of a count.
_WEEK_S = 7 * 86400.0
SECONDS, WAIT_S = {"gt": 0, "le": _WEEK_S}, {"ge": 0, "le": _WEEK_S}
CYCLES, SOME_CYCLES = {"gt": 0, "le": 10_000}, {"ge": 0, "le": 10_000}
MANY, SOME = {"ge": 1, "le": 1_000_000}, {"ge": 0, "le": 1_000_000}
SIGMAS = {"ge": 0, "le": 1_000}
RANGES: dict[str, dict[str, dict[str, float]]] = {
    "convergence": {"consecutive_cycles": MANY, "interval_s": SECONDS, "count": MANY, "max_wait_cycles": CYCLES,
                    "drain_wait_cycles": SOME_CYCLES, "accept_draining_eta_cycles": SOME_CYCLES, "failure_limit": SOME,
                    "inconclusive_limit": SOME, "error_limit": SOME, "min_count": SOME,
                    "noise_z": SIGMAS, "confidence_z": SIGMAS, "first_look_z": SIGMAS,
                    "default_cycle_s": SECONDS, "window_s": SECONDS,
                    "baseline_window_s": WAIT_S, "baseline_min_segments": MANY,
                    "baseline_sigmas": SIGMAS, "baseline_rel": SIGMAS, "backlog_settled_abs": {"ge": 0, "le": 1e12}},
    "restart": {"ready_timeout_s": SECONDS, "poll_s": SECONDS, "post_ready_wait_s": WAIT_S},
    "watchdog": {"window_steps": MANY, "repeat_limit": MANY, "idle_steps": MANY, "max_distinct_ratio": SHARE},
}
_OPS = {"gt": (lambda v, b: v > b, "greater than"), "ge": (lambda v, b: v >= b, "at least"),
        "le": (lambda v, b: v <= b, "at most")}


def check_ranges(part: str, value: Any) -> None:
    """Raise ValueError naming the first field of `value` (one part's criteria) whose value is not of its type (a
    whole number for an int, a finite number for a float, one of a Literal's choices, finite non-negative numbers
    in a mapping) or lies outside its range in RANGES."""
    if _checked.get(id(value)) is value:
        return
    hints = _hints(type(value))
    for f in fields(value):
        v, ann = getattr(value, f.name), hints[f.name]
        name = f"{part}.{f.name}"
        args = typing.get_args(ann)
        if type(None) in args:
            if v is None:
                continue
            ann = next(a for a in args if a is not type(None))
        origin = typing.get_origin(ann)
        if origin is Literal:
            if v not in typing.get_args(ann):
                raise ValueError(f"{name} must be one of {', '.join(map(str, typing.get_args(ann)))}, not {v!r}")
        elif ann is bool:
            if not isinstance(v, bool):
                raise ValueError(f"{name} must be true or false, not {v!r}")
        elif ann is int:
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise ValueError(f"{name} must be a whole number, not {v!r}")
        elif ann is float:
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, not {v!r}")
        elif origin in (Mapping, dict, collections.abc.Mapping):
            if not isinstance(v, Mapping) or not all(
                    isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) and x >= 0
                    for x in v.values()):
                raise ValueError(f"{name} must map names to finite numbers of at least 0, not {v!r}")
        for op, limit in RANGES.get(part, {}).get(f.name, {}).items():
            ok, words = _OPS[op]
            if not ok(v, limit):
                raise ValueError(f"{name} must be {words} {limit:g}, not {v!r}")
    _checked[id(value)] = value


# Criteria are frozen: one checked stays good, so each object is checked once (coerce runs on every check()).
# (baseline_abs is a dict, so mutating it after its check goes unchecked: pass new criteria instead.)
_checked: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@dataclass(frozen=True)
class Criteria:
    """All verifiers' criteria in one value, the `criteria` argument of every `check()`."""

    convergence: ConvergenceCriteria = field(default_factory=ConvergenceCriteria)
    restart: RestartCriteria = field(default_factory=RestartCriteria)
    watchdog: WatchdogCriteria = field(default_factory=WatchdogCriteria)

    @classmethod
    def coerce(cls, value: Any) -> "Criteria":
        """`value` as Criteria: None (the defaults), a Criteria, one part's dataclass, or a mapping of parts to
        field overrides. Every field is checked (check_ranges): a bad one raises ValueError naming it."""
        out = cls._coerce(value)
        for part in fields(cls):
            check_ranges(part.name, getattr(out, part.name))
        return out

    @classmethod
    def _coerce(cls, value: Any) -> "Criteria":
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
