"""Environments the guard can run agent commands in, resolved by name without importing arena.

Called by the adapters (`guardrail mcp --env ...`). A spec is `name` or `name:argument` (`local`,
`twin:ia-006`); the name is looked up in the `guardrail.environments` entry-point group, whose factories take
`(argument, context=IncidentContext, **options)` and return a `verifiers.protocols.Environment`. guardrail ships
`local` and `kubernetes`;
arena plugs in `twin` (and later `live`), so the guard works where no arena is installed.
"""

from __future__ import annotations

import inspect
from importlib.metadata import entry_points
from typing import Any, Callable, Mapping

from guardrail.context import IncidentContext
from guardrail.errors import InputError
from verifiers.protocols import Environment

__all__ = ["ENTRY_POINT_GROUP", "available_environments", "resolve_environment", "split_spec"]

ENTRY_POINT_GROUP = "guardrail.environments"


def split_spec(spec: str) -> tuple[str, str]:
    name, _, arg = spec.partition(":")
    return name.strip(), arg.strip()


def available_environments() -> list[str]:
    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def _factory(name: str) -> Callable[..., Any]:
    eps = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not eps:
        known = ", ".join(available_environments()) or "none"
        raise InputError(f"unknown environment {name!r} (installed: {known})", path="--env")
    ep = eps[0]
    try:
        return ep.load()
    except (ImportError, AttributeError) as e:
        # The entry point exists but its package (e.g. arena's twin) is absent or not built yet.
        raise InputError(f"environment {name!r} is registered as {ep.value} but cannot be loaded: {e}",
                         path="--env") from e


def resolve_environment(spec: str, context: IncidentContext | None = None,
                        options: Mapping[str, Any] | None = None, criteria: Any = None) -> Environment:
    """Build the environment a spec names. Bad or missing environments are InputErrors (CLI exit 2).

    `options` are an environment's own settings from the command line (`kubeconfig`, `context_name` ...): each one
    given (not None) goes to the factory's keyword of that name; one the environment does not take is bad input.
    `criteria` (the session's verifier criteria) go to a factory that takes them, e.g. so that an environment that
    waits on a restart itself waits as long as the restart probe's `restart.ready_timeout_s` says."""
    name, arg = split_spec(spec)
    if not name:
        raise InputError("empty environment spec (try `local` or `twin:<scenario>`)", path="--env")
    factory = _factory(name)
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    given = {k: v for k, v in (options or {}).items() if v is not None}
    for k in given:
        if k not in params:
            raise InputError(f"does not apply to --env {name}", path="--" + k.replace("_", "-"))
    if criteria is not None and "criteria" in params:
        given["criteria"] = criteria
    if "context" in params:
        return factory(arg, context=context, **given)
    return factory(arg, **given) if arg or params else factory()
