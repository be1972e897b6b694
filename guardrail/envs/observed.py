"""ObservedEnvironment: any environment, with its SLIs read from the team's Prometheus (`--prometheus`, `--slo`).

Built by the CLI (`guardrail mcp|shell --prometheus URL [--slo FILE]`, guardrail/cli/observe.py) around whatever
`--env` names (local, kubernetes, twin, ...): `run`, `restart`, `clock` and the components of `describe()` are the
inner environment's; `sli()` is answered by Prometheus. The SLOs of the SLO file are sampled window by window
(verifiers.slo.SLOSource) and listed in the description, where the convergence verifier finds them; every other
named SLI (error_ratio, backlog, ... of the context's public SLOs) is answered with the loadgen preset
(verifiers.clients.prometheus.PrometheusSLISource). The baseline is the telemetry before the session started:
the moment this wrapper was built, unless the inner environment knows when the incident began.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from verifiers.protocols import CommandResult, Environment, EnvironmentDescription, RestartResult, Sample
from verifiers.slo import DESCRIBE_KEY, SLOSet, SLOSource

__all__ = ["ObservedEnvironment"]


class ObservedEnvironment:
    """Wraps an environment; its SLIs come from `named` (named SLIs) and `slos` (an SLO file's objectives)."""

    def __init__(self, inner: Environment, named: Any, *, slos: SLOSet | None = None, url: str = ""):
        self.inner = inner
        self.named = named  # an SLISource answering the named SLIs (PrometheusSLISource)
        self.slos = slos
        self.url = url
        self.session_start = inner.clock.now()
        self.slo_source = (SLOSource(slos.objectives, named, inner.clock, slos.window_s)
                           if slos is not None else None)

    @property
    def clock(self) -> Any:
        return self.inner.clock

    def run(self, command: str) -> CommandResult:
        return self.inner.run(command)

    def restart(self, target: str) -> RestartResult:
        return self.inner.restart(target)

    def sli(self, query: str, window: float, *, labels: Mapping[str, str] | None = None,
            step: float | None = None) -> list[Sample]:
        if self.slo_source is not None and self.slo_source.answers(query, labels):
            return self.slo_source.sli(query, window, labels=labels, step=step)
        return self.named.sli(query, window, labels=labels, step=step)

    def describe(self) -> EnvironmentDescription:
        d = self.inner.describe()
        extra = dict(d.extra)
        extra.setdefault("incident_start_s", self.session_start)
        extra["sli_source"] = self.url
        if self.slos is not None:
            extra[DESCRIBE_KEY] = [o.to_dict() for o in self.slos.objectives]
        return replace(d, extra=extra, observes_slis=True)

    def __getattr__(self, name: str) -> Any:
        # What else the inner environment offers (declared-layer reads, ...) stays reachable through the wrapper.
        # (Never for dunders or `inner` itself: a copy or unpickle asks for those before __init__ has run.)
        if name == "inner" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.inner, name)
