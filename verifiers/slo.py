"""A team's SLOs as PromQL, measured window by window: the objectives and the source that samples them.

`SLObjective` is one SLO the guard judges convergence by: an SLI (a PromQL expression with Sloth's `{{.window}}`
placeholder where a range goes), a comparison and a limit. guardrail/slofile.py reads them from an SLO file
(Sloth specs as they are, plus the native `guardrail/v1` form); `SLOSource` measures them; the convergence
verifier (verifiers/convergence.py) judges the samples with its pure `assess()`, exactly as it judges the twin's.

Measuring: `SLOSource.sli()` asks Prometheus for a range query (query_range) with a step of one window, so each
sample is the SLI over one whole window `(t - window_s, t]`, evaluated at `t`. Windows are aligned to multiples of
`window_s` in epoch time, so two measurements a few seconds apart see the same windows, and each sample carries a
`cycle` label (its window's number): convergence counts whole windows after the agent's last change the way it
counts load cycles when the system has none (EnvironmentDescription.cycle_s None).

Each objective is one series of the convergence verifier: its kind's SLI name (`error_ratio`, `latency_p99_ms`,
`throughput_rps`, `backlog`, `ready_replicas`, ...) with the label `slo=<name>`, so ratios keep their request
counts (min_count, pooled confidence) and a backlog its drain trend.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

from verifiers.protocols import Clock, Sample

__all__ = ["SLObjective", "SLOSet", "SLOSource", "PromRange", "WINDOW_TEMPLATE", "render", "DESCRIBE_KEY",
           "SLO_LABEL", "objectives_of"]

WINDOW_TEMPLATE = re.compile(r"\{\{\s*\.window\s*\}\}")
# Where an environment's description lists the SLOs its SLI source answers (EnvironmentDescription.extra).
DESCRIBE_KEY = "slo_objectives"
SLO_LABEL = "slo"
# Prometheus refuses a range query of more than 11,000 points; the baseline hour at a 1 s window is 3,600.
MAX_POINTS = 10_000


def render(query: str, window_s: float) -> str:
    """The PromQL of `query` with Sloth's `{{.window}}` replaced by one window, in whole seconds or ms."""
    rng = f"{int(window_s)}s" if float(window_s).is_integer() else f"{max(1, int(round(window_s * 1000)))}ms"
    return WINDOW_TEMPLATE.sub(rng, query)


@dataclass(frozen=True)
class SLObjective:
    """One SLO: `sli op limit` measured by `query` (None limit: the pre-session baseline decides)."""

    name: str
    sli: str  # the kind's SLI name: error_ratio, goodput, latency_p99_ms, throughput_rps, backlog, ready_replicas
    op: str  # "<=" or ">="
    limit: float | None
    query: str
    # How many events a window's value rests on (a ratio's total, a latency histogram's count), and what it is
    # multiplied by to be a count: the window's length for a per-second rate(), 1 for an increase().
    count_query: str | None = None
    count_per_s: bool = False
    unit: str = ""
    origin: str = ""  # file:line it was read from
    description: str = ""

    @property
    def labels(self) -> tuple[tuple[str, str], ...]:
        return ((SLO_LABEL, self.name),)

    def describe(self) -> str:
        limit = "the pre-session baseline" if self.limit is None else f"{self.limit:g}{self.unit and ' ' + self.unit}"
        return f"{self.name}: {self.sli} {self.op} {limit}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "sli": self.sli, "op": self.op, "limit": self.limit, "query": self.query,
                "count_query": self.count_query, "unit": self.unit, "origin": self.origin}


@dataclass(frozen=True)
class SLOSet:
    """The SLOs of one SLO file, and how convergence windows them."""

    objectives: tuple[SLObjective, ...]
    window_s: float = 60.0
    consecutive: int | None = None  # windows in a row; None: the criteria's consecutive_cycles
    baseline_s: float = 3600.0
    max_wait_windows: float | None = None
    sources: tuple[str, ...] = ()  # the files, for messages

    def criteria(self) -> dict[str, Any]:
        """The convergence criteria this file sets (a --criteria file overrides them)."""
        out: dict[str, Any] = {"window_s": self.window_s, "baseline_window_s": self.baseline_s}
        if self.consecutive is not None:
            out["consecutive_cycles"] = self.consecutive
        if self.max_wait_windows is not None:
            out["max_wait_cycles"] = self.max_wait_windows
        return {"convergence": out}


class PromRange(Protocol):
    """A range query: Prometheus' /api/v1/query_range result, one dict per series with `values` [(t, "v"), ...]."""

    def range(self, promql: str, start: float, end: float, step: float) -> list[dict[str, Any]]: ...


@dataclass
class SLOSource:
    """An SLISource for the SLOs of an SLO file: one sample per window, by query_range. It never judges."""

    objectives: Sequence[SLObjective]
    prom: PromRange
    clock: Clock
    window_s: float = 60.0
    _by_key: dict[tuple[str, str], SLObjective] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._by_key = {(o.sli, o.name): o for o in self.objectives}

    def objective(self, query: str, labels: Mapping[str, str] | None) -> SLObjective | None:
        name = (labels or {}).get(SLO_LABEL)
        return self._by_key.get((query, name)) if name is not None else None

    def answers(self, query: str, labels: Mapping[str, str] | None) -> bool:
        return self.objective(query, labels) is not None

    def sli(self, query: str, window: float, *, labels: Mapping[str, str] | None = None,
            step: float | None = None) -> list[Sample]:
        obj = self.objective(query, labels)
        if obj is None:
            raise KeyError(f"no SLO answers {query} {dict(labels or {})}")
        w = float(self.window_s)
        now = self.clock.now()
        last = math.floor(now / w) * w  # the latest window that has ended
        first = math.ceil((now - window) / w) * w + w  # the earliest whose whole span lies inside `window`
        first = max(first, last - (MAX_POINTS - 1) * w)
        if first > last:
            return []
        values = _one_series(self.prom.range(render(obj.query, w), first, last, w), obj)
        counts: dict[float, float] = {}
        if obj.count_query:
            per = w if obj.count_per_s else 1.0
            counts = {t: v * per for t, v in _one_series(self.prom.range(render(obj.count_query, w), first, last, w),
                                                         obj, what="count_query").items()}
        out: list[Sample] = []
        for t, v in sorted(values.items()):
            cycle = str(int(round(t / w)))
            count = counts.get(t)
            out.append(Sample(t - w, t, v if math.isfinite(v) else None, {SLO_LABEL: obj.name, "cycle": cycle},
                              int(round(count)) if count is not None and math.isfinite(count) else 0))
        return out


def _one_series(result: list[dict[str, Any]], obj: SLObjective, what: str = "query") -> dict[float, float]:
    """A range result's one series as {t: value}. More than one series is an SLO that does not say which one
    counts: an error for the operator to fix (aggregate it with sum(), max() ...), never a guess."""
    if len(result) > 1:
        raise ValueError(f"SLO {obj.name} ({obj.origin or 'SLO file'}): its {what} returns {len(result)} series; "
                         f"aggregate it to one (sum by (), max ...)")
    out: dict[float, float] = {}
    for series in result[:1]:
        for t, v in series.get("values", ()):
            out[round(float(t), 3)] = float(v)
    return out


def objectives_of(described: Any) -> list[SLObjective]:
    """The objectives an environment's description lists (DESCRIBE_KEY), back as SLObjective values."""
    out = []
    for d in described or ():
        if isinstance(d, SLObjective):
            out.append(d)
        elif isinstance(d, Mapping):
            out.append(SLObjective(**{k: d[k] for k in ("name", "sli", "op", "limit", "query", "count_query",
                                                         "unit", "origin") if k in d}))
    return out

