"""The guarded arm's guard, wired as verifiers/README.md says, and built cheaply once per worker process.

Called by the bench runner (arena.bench.runner). The guard is `Guard.standard`, the same one `guardrail run --arm
guarded` builds: the whole verifier suite (declaration checks, per-step checks, before-run snapshots). The compiled
policy engine and the verifier catalogue are pure functions of the shipped files, so a process builds them once;
each episode still gets its own suite, journal and context. `guard_cost` reads what the bench's cost section
needs from the guard after the episode.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from guardrail.context import IncidentContext
from guardrail.guard import Guard
from verifiers.protocols import VerdictStatus

__all__ = ["bench_guard_factory", "guard_cost"]


@lru_cache(maxsize=1)
def _engine() -> Any:
    from guardrail.adapters.session import load_engine

    return load_engine()


@lru_cache(maxsize=1)
def _catalogue() -> Any:
    from verifiers.catalogue import load_catalogue

    return load_catalogue()


def guard_cost(guard: Guard) -> dict[str, Any]:
    """What the bench's cost section reads from a guard after its episode: each declaration (virtual time asked,
    how long it was held, accepted or not, codes) and how many restart probes restarted something (a restart
    probe's INCONCLUSIVE verdict means nothing could be restarted, so it does not count)."""
    probes = sum(1 for r in guard.journal.records("verdict")
                 if "restart" in str(r.get("verifier", "")).lower()
                 and r.get("status") != VerdictStatus.INCONCLUSIVE.value)
    return {"declarations": list(guard.declarations), "restart_probes": probes}


def bench_guard_factory(env: Any, context: IncidentContext) -> Guard:
    """The guarded arm's guard: `Guard.standard` (the shipped policies in the embedded OPA engine, the full
    verifier suite), with the engine and the catalogue this process already built."""
    view = getattr(env, "operator_view", None)
    if callable(view):
        # The verifiers read with an operator's read-only credential; the agent's commands run on its own surface.
        return Guard.standard(_engine(), context, env=view(), agent_env=env, catalogue=_catalogue())
    return Guard.standard(_engine(), context, env=env, catalogue=_catalogue())
