"""What the Guard runs: the declaration verifiers in order, the step checks, and the criteria defaults.

`declare_verifiers(context)` is what `guardrail.guard` calls when no checks were configured: a list of
verifiers in the order the guard runs them, stopping at the first FAIL or ERROR:

    1. persistence    reads only; the cheapest way to tell an agent its change will not survive a restart
    2. scope audit    reads only; protected state unchanged since the first step
    3. convergence    waits in the environment's clock for N full load cycles in band
    4. restart probe  disruptive, so last: only a repair that passed everything else is restarted

`build_suite(context)` also gives the step checks (the scope audit's first-step snapshot, then the watchdog)
sharing the same ScopeAudit instance, which a Guard passes as `step_checks`, and `before_run()`, which a Guard
calls before running an admitted command: the first-step snapshot, and the prior values to journal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from verifiers.base import AllOf, Verifier
from verifiers.catalogue import Catalogue, load_catalogue
from verifiers.context import PublicContext
from verifiers.convergence import ConvergenceCheck
from verifiers.criteria import Criteria
from verifiers.protocols import Environment
from verifiers.observe import JournalLog, observe, prior_snapshots
from verifiers.persistence import PersistenceCheck, PersistenceReader, capture_prior
from verifiers.restart import RestartProbe
from verifiers.scope import ScopeAudit
from verifiers.watchdog import LoopWatchdog

__all__ = ["VerifierSuite", "build_suite", "declare_verifiers", "step_verifiers", "DEFAULT_CRITERIA"]

DEFAULT_CRITERIA = Criteria()


@dataclass
class VerifierSuite:
    """One session's verifiers: those run on a declaration, and those run after every step."""

    declare: list[Verifier]
    step: list[Verifier]
    criteria: Criteria = field(default_factory=Criteria)
    scope: ScopeAudit | None = None
    reader: PersistenceReader | None = None
    journal_log: JournalLog = field(default_factory=JournalLog)  # observe()'s incremental read of the journal

    def as_one(self) -> AllOf:
        """The declaration checks as one verifier (AllOf, stopping at the first failure)."""
        return AllOf(*self.declare, name="declaration")

    def observe(self, env: Environment, journal: Any, actions: Sequence[Mapping[str, Any]]) -> list[dict]:
        """What a guard calls before deciding a command: for each action, the state it is about to change and
        this session's earlier changes of the same keys (`input.observed` for the policies; verifiers.observe)."""
        return observe(env, journal, actions, self.reader, self.journal_log)

    def before_run(self, env: Environment, journal: Any, actions: Sequence[Mapping[str, Any]],
                   observed: Sequence[Mapping[str, Any]] | None = None) -> list[dict]:
        """What a guard calls after admitting a command and before running it: takes the scope audit's
        first-step snapshot (once), and returns the `snapshot` records to journal, each key's value before the
        change ({key, scope, target, before}). Persistence and the restart probe use them to tell a change a
        restart would undo into the incident's state from one whose declared value is merely different.
        `observed` (what observe() read for the same actions just before the decision) supplies those values
        without reading them again."""
        if self.scope is not None and self.scope.snapshot_at_start is None and self.scope.items():
            self.scope.take_baseline(env, journal)
        if observed is not None:
            return prior_snapshots(observed)
        return capture_prior(env, actions, reader=self.reader) if self.reader is not None else []


def build_suite(context: Any, *, catalogue: Catalogue | None = None,
                catalogue_files: Sequence[str | Path] = (), criteria: Any = None,
                restart_probe: bool = True) -> VerifierSuite:
    ctx = PublicContext.of(context)
    cat = catalogue or load_catalogue(catalogue_files)
    scope = ScopeAudit(ctx, cat)
    declare: list[Verifier] = [PersistenceCheck(ctx, cat), scope, ConvergenceCheck(ctx)]
    if restart_probe:
        declare.append(RestartProbe(ctx, cat))
    step: list[Verifier] = [scope.baseline_step, LoopWatchdog(ctx)]
    return VerifierSuite(declare, step, Criteria.coerce(criteria), scope, PersistenceReader(ctx, cat))


def declare_verifiers(context: Any, **kw: Any) -> list[Verifier]:
    """The declaration verifiers in the order the guard runs them."""
    return build_suite(context, **kw).declare


def step_verifiers(context: Any, **kw: Any) -> list[Verifier]:
    """The per-step checks: the scope audit's first-step snapshot, then the loop watchdog."""
    return build_suite(context, **kw).step
