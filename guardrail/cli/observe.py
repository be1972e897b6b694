"""`--prometheus URL` and `--slo FILE`: the options that give any `--env` the team's SLIs, shared by `guardrail
mcp` and `guardrail shell`.

`slo_options` adds the two options to a command; `observed()` checks them at start (a bad SLO file is exit 2
with its file and line) and returns the session environment factory, wrapped in
guardrail.envs.observed.ObservedEnvironment, with the criteria the SLO file sets merged under the `--criteria`
file's (which wins).
"""

from __future__ import annotations

from typing import Any, Callable
from urllib.parse import urlsplit

import click

from guardrail.errors import InputError

__all__ = ["slo_options", "observed", "merge_criteria"]


def slo_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--slo", "slo_path", type=click.Path(dir_okay=False), default=None,
                     help="The team's SLOs (a Sloth prometheus/v1 spec, or guardrail/v1; docs/production.md): "
                          "convergence is judged on them, window by window. Needs --prometheus.")(f)
    f = click.option("--prometheus", "prometheus_url", default=None, metavar="URL",
                     help="The Prometheus the SLIs are read from (query_range), for every --env. Without --slo it "
                          "answers the context's named SLIs with the loadgen metric names.")(f)
    return f


def merge_criteria(base: dict[str, Any] | None, override: dict[str, Any] | None) -> dict[str, Any] | None:
    """Section by section, `override`'s fields over `base`'s."""
    if not base:
        return override
    out = {k: dict(v) for k, v in base.items()}
    for k, v in (override or {}).items():
        out[k] = {**out.get(k, {}), **(v or {})}
    return out


def check_queries(source: Any, slos: Any) -> None:
    """Ask Prometheus to evaluate every SLO's PromQL once, at start: one it refuses (a typo, a type error) is bad
    input naming its file and line (exit 2), not an ERROR at the agent's first declaration. A Prometheus that cannot
    be reached now is said on stderr and is not fatal: it may be back by then, and if not the verdict says ERROR."""
    from verifiers.clients.prometheus import SLIQueryError
    from verifiers.slo import render

    for o in slos.objectives:
        for what, query in (("query", o.query), ("count query", o.count_query)):
            if not query:
                continue
            try:
                why = source.query_error(render(query, slos.window_s))
            except SLIQueryError as e:
                click.echo(f"guardrail: warning: cannot check the SLO queries now, Prometheus did not answer: {e}",
                           err=True)
                return
            if why is not None:
                path, _, line = o.origin.rpartition(":")
                raise InputError(f"SLO {o.name}: Prometheus refuses its {what}: {why}", path=path,
                                 line=int(line) if line.isdigit() else None)


def observed(env_factory: Callable[[Any], Any], prometheus_url: str | None, slo_path: str | None,
             criteria: dict[str, Any] | None) -> tuple[Callable[[Any], Any], dict[str, Any] | None]:
    """The env factory wrapped with the SLI source the options name, and the criteria to use."""
    if slo_path is not None and prometheus_url is None:
        raise InputError("needs --prometheus URL: the SLOs are PromQL, read from that Prometheus", path="--slo")
    if prometheus_url is None:
        return env_factory, criteria
    parts = urlsplit(prometheus_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InputError(f"{prometheus_url!r} is not an http(s) URL (e.g. http://prometheus:9090)",
                         path="--prometheus")
    from guardrail.envs.observed import ObservedEnvironment
    from guardrail.slofile import load_slo_file
    from verifiers.clients.prometheus import PrometheusSLISource

    slos = load_slo_file(slo_path) if slo_path is not None else None
    if slos is not None:
        criteria = merge_criteria(slos.criteria(), criteria)
        check_queries(PrometheusSLISource(prometheus_url, timeout_s=5), slos)

    def factory(ctx: Any) -> Any:
        inner = env_factory(ctx)
        source = PrometheusSLISource(prometheus_url, clock=inner.clock)
        return ObservedEnvironment(inner, source, slos=slos, url=prometheus_url)

    return factory, criteria
