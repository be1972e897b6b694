"""The guarded arm's guard, wired as verifiers/README.md says, and built cheaply once per worker process.

Called by the bench runner (arena.bench.runner) and by `guardrail run --arm guarded` (arena/cli.py), so a single
episode and a bench episode meet the same guard. The guard gets the whole verifier suite: the declaration checks,
the per-step checks (the scope audit's first-step snapshot, the loop watchdog) and `before_run` (the snapshot of
each key's value before an admitted change). The compiled policy engine and the verifier catalogue are pure
functions of the shipped files, so a process builds them once; each episode still gets its own suite, journal
and context. The guard also records what the bench's cost section needs: when each declaration was made and
answered (virtual time), and how many restart probes actually restarted something.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from guardrail.context import IncidentContext
from guardrail.guard import Admission, DeclareOutcome, Guard
from verifiers.protocols import VerdictStatus

__all__ = ["SuiteGuard", "bench_guard_factory"]


@lru_cache(maxsize=1)
def _engine() -> Any:
    from guardrail.adapters.session import load_engine

    return load_engine()


@lru_cache(maxsize=1)
def _catalogue() -> Any:
    from verifiers.catalogue import load_catalogue

    return load_catalogue()


class SuiteGuard(Guard):
    """A Guard that also runs the suite's before-run snapshots and keeps the bench's cost figures."""

    def __init__(self, engine: Any, context: IncidentContext, *, env: Any, suite: Any):
        super().__init__(engine, context, env=env, declaration_checks=suite.declare, step_checks=suite.step,
                         criteria=suite.criteria)
        self.suite = suite
        self.declarations: list[dict[str, Any]] = []

    def before(self, command: str) -> Admission:
        adm = super().before(command)
        if adm.runs and self.env is not None:
            for snap in self.suite.before_run(self.env, self.journal, [a.to_input() for a in adm.actions]):
                self.journal.append("snapshot", **snap)
        return adm

    def on_declare(self) -> DeclareOutcome:
        t0 = self.env.clock.now() if self.env is not None else 0.0
        out = super().on_declare()
        t1 = self.env.clock.now() if self.env is not None else 0.0
        self.declarations.append({"t": round(t0, 6), "held_s": round(t1 - t0, 6), "accepted": out.accepted,
                                  "codes": [str(getattr(f, "code", "")) for f in out.feedback]})
        return out

    def restart_probes(self) -> int:
        """Restart-probe verdicts that got past "nothing may be restarted" (INCONCLUSIVE restarts nothing)."""
        n = 0
        for r in self.journal.records("verdict"):
            if "restart" in str(r.get("verifier", "")).lower() and r.get("status") != VerdictStatus.INCONCLUSIVE.value:
                n += 1
        return n

    def cost(self) -> dict[str, Any]:
        return {"declarations": list(self.declarations), "restart_probes": self.restart_probes()}


def bench_guard_factory(env: Any, context: IncidentContext) -> SuiteGuard:
    """The guarded arm's guard: the shipped policies in the embedded OPA engine, the full verifier suite."""
    from verifiers.suite import build_suite

    suite = build_suite(context.model_dump(mode="json"), catalogue=_catalogue())
    return SuiteGuard(_engine(), context, env=env, suite=suite)
