"""Read an SLO file: Sloth specs as teams keep them, plus the native `guardrail/v1` form for what Sloth cannot say.

Called by the CLI (`guardrail mcp|shell --prometheus URL --slo FILE`, guardrail/cli/observe.py). Returns a
verifiers.slo.SLOSet; the measuring (SLOSource) and judging (verifiers.convergence) happen elsewhere.

A file holds one or more YAML documents (`---` between them), each one of:

- a Sloth spec, read as Sloth reads it: `version: "prometheus/v1"`, `service`, `labels`, `slos[]` with `name`,
  `objective` (a percentage), `sli.events.error_query` / `total_query` or `sli.raw.error_ratio_query`, with
  Sloth's `{{.window}}` where a range goes. Sloth's Kubernetes form (`apiVersion: sloth.slok.dev/v1`,
  `kind: PrometheusServiceLevel`, the same fields under `spec`) too. Each SLO becomes `error_ratio <= 1 -
  objective/100`, named `<service>-<name>` as Sloth names its SLO ids. Fields the guard does not use (alerting,
  plugins, labels) are Sloth's business and left alone; an `sli.plugin` (Go code the guard cannot run) is refused.
- the native form, `version: "guardrail/v1"`: `convergence` (window_s, consecutive, baseline_s,
  max_wait_windows) and `slos[]` of `name` plus one of `latency` (a quantile in ms with its `ceiling_ms`),
  `throughput` (a floor in requests per second), `backlog` (a gauge that must drain to its `ceiling`),
  `ready_replicas` (a floor), `error_ratio` / `goodput` (ratios with their own PromQL), or `loadgen` (a named SLI
  of the loadgen preset, verifiers/promql.py).

Bad input is an InputError naming the file and line (exit 2), before anything starts.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from guardrail.errors import InputError
from verifiers import datafile
from verifiers.datafile import line_of
from verifiers.promql import NAMED_SLIS, PromMetrics, named_sli_promql
from verifiers.slo import WINDOW_TEMPLATE, SLObjective, SLOSet

__all__ = ["load_slo_file", "SLOTH_VERSION", "NATIVE_VERSION"]

SLOTH_VERSION = "prometheus/v1"
SLOTH_API_VERSION = "sloth.slok.dev/v1"
NATIVE_VERSION = "guardrail/v1"
MAX_BYTES = 4 * 1024 * 1024  # an SLO file is a page or two; anything this large is not one

Text = Annotated[str, Field(min_length=1, max_length=20_000)]
Finite = Annotated[float, Field(allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _SlothPart(BaseModel):
    # Sloth's own fields the guard does not use (alerting, plugins, info labels) are Sloth's to check.
    model_config = ConfigDict(extra="ignore")


def _exactly_one(model: BaseModel, names: tuple[str, ...], what: str) -> None:
    given = [n for n in names if getattr(model, n) is not None]
    if len(given) != 1:
        raise ValueError(f"{what} needs exactly one of {', '.join(names)}"
                         + (f" (got {', '.join(given)})" if given else ""))


class SlothEvents(_Strict):
    error_query: Text
    total_query: Text


class SlothRaw(_Strict):
    error_ratio_query: Text


class SlothSLI(_Strict):
    events: SlothEvents | None = None
    raw: SlothRaw | None = None
    plugin: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one(self) -> "SlothSLI":
        _exactly_one(self, ("events", "raw", "plugin"), "sli")
        if self.plugin is not None:
            raise ValueError("Sloth SLI plugins are not supported by the guard (it cannot run the plugin's code): "
                             "write this SLI as `events` or `raw` PromQL")
        return self


class SlothSLO(_SlothPart):
    name: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")]
    objective: Annotated[float, Field(gt=0, lt=100, allow_inf_nan=False)]
    description: str = ""
    sli: SlothSLI


class SlothSpec(_SlothPart):
    version: Literal["prometheus/v1"]
    service: Annotated[str, Field(min_length=1, max_length=128)]
    labels: dict[str, str] = {}
    slos: Annotated[list[SlothSLO], Field(min_length=1, max_length=500)]


class SlothCRD(_SlothPart):
    apiVersion: Literal["sloth.slok.dev/v1"]
    kind: Literal["PrometheusServiceLevel"]
    spec: "SlothCRDSpec"


class SlothCRDSpec(_SlothPart):
    service: Annotated[str, Field(min_length=1, max_length=128)]
    labels: dict[str, str] = {}
    slos: Annotated[list[SlothSLO], Field(min_length=1, max_length=500)]


SlothCRD.model_rebuild()


class Convergence(_Strict):
    """How convergence windows the SLOs when the system has no load cycles."""

    window_s: Annotated[float, Field(gt=0, le=86_400, allow_inf_nan=False)] = 60.0
    consecutive: Annotated[int, Field(ge=1, le=1000)] | None = None
    baseline_s: Annotated[float, Field(ge=0, le=7 * 86_400, allow_inf_nan=False)] = 3600.0
    max_wait_windows: Annotated[float, Field(gt=0, le=10_000, allow_inf_nan=False)] | None = None


class Latency(_Strict):
    """A latency quantile in milliseconds under its ceiling: from a histogram, or your own PromQL (in ms)."""

    histogram: Annotated[str, Field(pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*_bucket$")] | None = None
    selector: Annotated[str, Field(max_length=2000, pattern=r"^(\{.*\})?$")] = ""
    quantile: Annotated[float, Field(gt=0, lt=1)] | None = None
    query: Text | None = None
    count_query: Text | None = None
    ceiling_ms: Annotated[float, Field(gt=0, allow_inf_nan=False)]

    @model_validator(mode="after")
    def _one(self) -> "Latency":
        _exactly_one(self, ("histogram", "query"), "latency")
        if self.histogram is not None and self.quantile is None:
            raise ValueError("latency from a histogram needs its quantile (0.99 for p99)")
        return self


class Throughput(_Strict):
    """Requests (or good requests) per second that must stay above a floor."""

    query: Text
    floor_rps: Annotated[float, Field(ge=0, allow_inf_nan=False)]


class Backlog(_Strict):
    """A gauge of queued work that must drain down to its ceiling (no ceiling: until it has stopped moving)."""

    query: Text
    ceiling: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None


class Ready(_Strict):
    query: Text
    min: Annotated[float, Field(ge=0, allow_inf_nan=False)]


class ErrorRatio(_Strict):
    query: Text
    total_query: Text | None = None
    max: Annotated[float, Field(ge=0, le=1)]


class Goodput(_Strict):
    query: Text
    total_query: Text | None = None
    min: Annotated[float, Field(ge=0, le=1)]


class Loadgen(_Strict):
    """A named SLI of the loadgen preset (verifiers/promql.py), narrowed by driver, queue or component."""

    sli: Literal[NAMED_SLIS]  # type: ignore[valid-type]
    driver: str | None = None
    queue: str | None = None
    component: str | None = None
    max: Finite | None = None
    min: Finite | None = None

    @model_validator(mode="after")
    def _one(self) -> "Loadgen":
        _exactly_one(self, ("max", "min"), "loadgen")
        return self


KINDS = ("latency", "throughput", "backlog", "ready_replicas", "error_ratio", "goodput", "loadgen")


class NativeSLO(_Strict):
    name: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")]
    description: str = ""
    latency: Latency | None = None
    throughput: Throughput | None = None
    backlog: Backlog | None = None
    ready_replicas: Ready | None = None
    error_ratio: ErrorRatio | None = None
    goodput: Goodput | None = None
    loadgen: Loadgen | None = None

    @model_validator(mode="after")
    def _one(self) -> "NativeSLO":
        _exactly_one(self, KINDS, f"SLO {self.name!r}")
        return self


class NativeSpec(_Strict):
    version: Literal["guardrail/v1"]
    service: str = ""
    convergence: Convergence | None = None
    loadgen_metrics: dict[str, str] | None = None  # PromMetrics overrides, e.g. {requests: http_requests_total}
    slos: Annotated[list[NativeSLO], Field(max_length=500)] = []


def _per_second(query: str) -> bool:
    """Whether a Sloth total_query counts events per second (rate()), so a window's count is it times the window."""
    q = query.replace(" ", "")
    return ("rate(" in q) and "increase(" not in q


def _sloth(service: str, slos: list[SlothSLO], where: list[str]) -> list[SLObjective]:
    out = []
    for slo, origin in zip(slos, where):
        budget = round(1.0 - slo.objective / 100.0, 12)
        if slo.sli.events is not None:
            ev = slo.sli.events
            # A service that never failed often has no error series at all: no errors is 0, not "no data".
            query = f"(({ev.error_query}) or vector(0)) / ({ev.total_query})"
            out.append(SLObjective(f"{service}-{slo.name}", "error_ratio", "<=", budget, query, ev.total_query,
                                   _per_second(ev.total_query), "", origin, slo.description))
        else:
            out.append(SLObjective(f"{service}-{slo.name}", "error_ratio", "<=", budget,
                                   slo.sli.raw.error_ratio_query, None, False, "", origin, slo.description))
    return out


def _native(spec: NativeSpec, where: list[str], path: str, node: Any) -> list[SLObjective]:
    metrics = PromMetrics()
    if spec.loadgen_metrics:
        known = set(PromMetrics.__dataclass_fields__)
        bad = sorted(set(spec.loadgen_metrics) - known)
        if bad:
            raise InputError(f"loadgen_metrics: unknown name(s) {', '.join(bad)} (one of {', '.join(sorted(known))})",
                             path=path, line=line_of(node, ("loadgen_metrics", bad[0])))
        metrics = PromMetrics(**spec.loadgen_metrics)
    out = []
    for slo, origin in zip(spec.slos, where):
        n, d = slo.name, slo.description
        if (lat := slo.latency) is not None:
            if lat.histogram is not None:
                q = lat.quantile
                query = (f"histogram_quantile({q:g}, sum by (le) (rate({lat.histogram}{lat.selector}"
                         f"[{{{{.window}}}}]))) * 1000")
                count = f"sum(increase({lat.histogram[:-len('_bucket')]}_count{lat.selector}[{{{{.window}}}}]))"
            else:
                q, query, count = lat.quantile, lat.query, lat.count_query
            sli = f"latency_p{q * 100:g}_ms" if q is not None else "latency_ms"
            out.append(SLObjective(n, sli, "<=", lat.ceiling_ms, query, count, bool(count and _per_second(count)),
                                   "ms", origin, d))
        elif (tp := slo.throughput) is not None:
            out.append(SLObjective(n, "throughput_rps", ">=", tp.floor_rps, tp.query, None, False, "rps", origin, d))
        elif (bl := slo.backlog) is not None:
            out.append(SLObjective(n, "backlog", "<=", bl.ceiling, bl.query, None, False, "", origin, d))
        elif (rr := slo.ready_replicas) is not None:
            out.append(SLObjective(n, "ready_replicas", ">=", rr.min, rr.query, None, False, "", origin, d))
        elif (er := slo.error_ratio) is not None:
            out.append(SLObjective(n, "error_ratio", "<=", er.max, er.query, er.total_query,
                                   bool(er.total_query and _per_second(er.total_query)), "", origin, d))
        elif (gp := slo.goodput) is not None:
            out.append(SLObjective(n, "goodput", ">=", gp.min, gp.query, gp.total_query,
                                   bool(gp.total_query and _per_second(gp.total_query)), "", origin, d))
        else:
            lg = slo.loadgen
            labels = {k: v for k, v in (("driver", lg.driver), ("queue", lg.queue), ("component", lg.component))
                      if v}
            query, count = named_sli_promql(metrics, lg.sli, "{{.window}}", labels)
            op, limit = ("<=", lg.max) if lg.max is not None else (">=", lg.min)
            out.append(SLObjective(n, lg.sli, op, limit, query, count, False, "", origin, d))
    return out


def _read_documents(p: Path) -> list[tuple[Any, yaml.Node | None]]:
    try:
        if p.is_file() and p.stat().st_size > MAX_BYTES:
            raise InputError(f"larger than {MAX_BYTES // (1024 * 1024)} MB: not an SLO file", path=str(p))
        if not p.is_file():
            raise InputError("not a regular file", path=str(p))
        raw = p.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", path=str(p)) from e
    text = datafile.decode_text(raw, path=p, error=InputError)
    docs: list[tuple[Any, yaml.Node | None]] = []
    loader = yaml.SafeLoader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            dup = datafile._duplicate_key(node)
            if dup is not None:
                raise InputError(f"duplicate key {dup[0]!r} (first given at line {dup[2]})", path=str(p), line=dup[1])
            _no_aliases(node, p)
            docs.append((loader.construct_document(node), node))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"bad YAML: {problem}", path=str(p), line=(mark.line + 1) if mark else None) from e
    except RecursionError as e:
        raise InputError("nested too deeply to read", path=str(p)) from e
    finally:
        loader.dispose()
    return docs


def _no_aliases(root: yaml.Node | None, p: Path) -> None:
    """Refuse a node reached twice (a YAML alias): a few aliased lines can stand for billions of entries, and an
    SLO file has no use for them. One pass over the distinct nodes, so this is linear in the file."""
    seen: set[int] = set()
    stack = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            raise InputError("YAML anchors and aliases are not supported in an SLO file: write each SLO out",
                             path=str(p), line=node.start_mark.line + 1)
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                stack.extend((k, v))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


def _validate(model: type[BaseModel], data: Any, path: str, node: Any) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(err["loc"])
        field = ".".join(str(x) for x in loc) or "<document>"
        msg = err["msg"].removeprefix("Value error, ")
        raise InputError(f"{field}: {msg}", path=path, line=line_of(node, loc)) from e


def load_slo_file(path: str | Path) -> SLOSet:
    """The SLOs of an SLO file, checked; InputError (file:line) on anything the guard could not measure."""
    p = Path(path)
    docs = [(d, n) for d, n in _read_documents(p) if d is not None]
    if not docs:
        raise InputError("no SLO document in the file (a Sloth `version: prometheus/v1` spec, or `version: "
                         "guardrail/v1`)", path=str(p), line=1)
    objectives: list[SLObjective] = []
    conv = Convergence()
    seen: dict[str, str] = {}
    for data, node in docs:
        line0 = line_of(node, ())
        if not isinstance(data, dict):
            raise InputError("an SLO document is a mapping", path=str(p), line=line0)
        if data.get("apiVersion") == SLOTH_API_VERSION:
            crd = _validate(SlothCRD, data, str(p), node)
            where = [f"{p}:{line_of(node, ('spec', 'slos', i))}" for i in range(len(crd.spec.slos))]
            objs = _sloth(crd.spec.service, crd.spec.slos, where)
            prefix: tuple[Any, ...] = ("spec", "slos")
        elif data.get("version") == SLOTH_VERSION:
            spec = _validate(SlothSpec, data, str(p), node)
            where = [f"{p}:{line_of(node, ('slos', i))}" for i in range(len(spec.slos))]
            objs = _sloth(spec.service, spec.slos, where)
            prefix = ("slos",)
        elif data.get("version") == NATIVE_VERSION:
            nat = _validate(NativeSpec, data, str(p), node)
            where = [f"{p}:{line_of(node, ('slos', i))}" for i in range(len(nat.slos))]
            objs = _native(nat, where, str(p), node)
            prefix = ("slos",)
            if nat.convergence is not None:
                conv = nat.convergence
        else:
            raise InputError(f"version: must be {SLOTH_VERSION!r} (a Sloth spec), {NATIVE_VERSION!r}, or a Sloth "
                             f"{SLOTH_API_VERSION} PrometheusServiceLevel; got {data.get('version')!r}",
                             path=str(p), line=line_of(node, ("version",)))
        for i, o in enumerate(objs):
            if o.name in seen:
                raise InputError(f"SLO {o.name!r} is given twice (first at {seen[o.name]})", path=str(p),
                                 line=line_of(node, prefix + (i,)))
            seen[o.name] = o.origin
        objectives.extend(objs)
    if not objectives:
        raise InputError("no SLOs in the file: nothing to judge convergence by", path=str(p), line=1)
    for o in objectives:
        if o.limit is not None and not math.isfinite(o.limit):
            raise InputError(f"SLO {o.name}: its limit must be a finite number", path=str(p))
        if o.query.count("{{") != len(WINDOW_TEMPLATE.findall(o.query)):
            raise InputError(f"SLO {o.name}: the only template PromQL may hold is {{{{.window}}}}",
                             path=o.origin.rsplit(":", 1)[0], line=int(o.origin.rsplit(":", 1)[1]))
    return SLOSet(tuple(objectives), window_s=conv.window_s, consecutive=conv.consecutive,
                  baseline_s=conv.baseline_s, max_wait_windows=conv.max_wait_windows, sources=(str(p),))
