"""The verifier contract and its combinators, in the style of tenacity's strategies.

Every verifier is a small object with `check(env, journal, criteria) -> Verdict`. `AllOf` runs its parts in
order and stops at the first that does not pass (the guard's declaration sequence); `AnyOf` passes when one
part passes. `VerifierBase.check` turns any exception from a backend into an ERROR verdict, so a broken
Prometheus or a failing shell never ends the agent's session. Called by `verifiers.suite` and the Guard.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from verifiers.protocols import Environment, Verdict, VerdictStatus

__all__ = [
    "Verifier",
    "VerifierBase",
    "AllOf",
    "AnyOf",
    "worst",
    "mutations",
    "last_mutation_t",
    "is_mutating_action",
]

# Worst first: a combined verdict takes the worst status of its parts.
_SEVERITY = {VerdictStatus.FAIL: 3, VerdictStatus.ERROR: 2, VerdictStatus.INCONCLUSIVE: 1, VerdictStatus.PASS: 0}


@runtime_checkable
class Verifier(Protocol):
    """Anything the guard can ask for a verdict."""

    name: str

    def check(self, env: Environment, journal: Any, criteria: Any = None) -> Verdict: ...


class VerifierBase:
    """Shared plumbing: a name, combinators, and backend failures turned into ERROR verdicts."""

    name = "verifier"

    def check(self, env: Environment, journal: Any, criteria: Any = None) -> Verdict:
        try:
            return self._check(env, journal, criteria)
        except Exception as e:  # noqa: BLE001 - Argo's rule: a backend failure is an ERROR verdict, not a crash
            return Verdict(status=VerdictStatus.ERROR, verifier=self.name,
                           message=f"{self.name} could not run: {type(e).__name__}: {e}",
                           evidence={"error": f"{type(e).__name__}: {e}"})

    def _check(self, env: Environment, journal: Any, criteria: Any) -> Verdict:
        raise NotImplementedError

    def __and__(self, other: "Verifier") -> "AllOf":
        return AllOf(self, other)

    def __or__(self, other: "Verifier") -> "AnyOf":
        return AnyOf(self, other)


def worst(verdicts: Sequence[Verdict]) -> Verdict | None:
    """The most severe verdict (FAIL > ERROR > INCONCLUSIVE > PASS); the first one on ties."""
    if not verdicts:
        return None
    return max(verdicts, key=lambda v: _SEVERITY[v.status])


class AllOf(VerifierBase):
    """Passes when every part passes; by default stops at the first FAIL or ERROR, like the guard does."""

    def __init__(self, *parts: Verifier, stop_early: bool = True, name: str = "all_of"):
        self.parts = tuple(parts)
        self.stop_early = stop_early
        self.name = name

    def _check(self, env: Environment, journal: Any, criteria: Any) -> Verdict:
        children: list[Verdict] = []
        for part in self.parts:
            v = part.check(env, journal, criteria)
            children.append(v)
            if self.stop_early and v.status in (VerdictStatus.FAIL, VerdictStatus.ERROR):
                break
        w = worst(children)
        if w is None or w.status is VerdictStatus.PASS:
            return Verdict(VerdictStatus.PASS, self.name, message="all checks passed", children=tuple(children))
        return Verdict(w.status, self.name, code=w.code, message=w.message, evidence=w.evidence,
                       children=tuple(children))

    def __and__(self, other: Verifier) -> "AllOf":
        return AllOf(*self.parts, other, stop_early=self.stop_early, name=self.name)


class AnyOf(VerifierBase):
    """Passes when one part passes; otherwise answers with the least severe failure."""

    def __init__(self, *parts: Verifier, name: str = "any_of"):
        self.parts = tuple(parts)
        self.name = name

    def _check(self, env: Environment, journal: Any, criteria: Any) -> Verdict:
        children: list[Verdict] = []
        for part in self.parts:
            v = part.check(env, journal, criteria)
            children.append(v)
            if v.passed:
                return Verdict(VerdictStatus.PASS, self.name, message=f"{v.verifier} passed",
                               children=tuple(children))
        best = min(children, key=lambda v: _SEVERITY[v.status]) if children else None
        if best is None:
            return Verdict(VerdictStatus.INCONCLUSIVE, self.name, message="no checks to run")
        return Verdict(best.status, self.name, code=best.code, message=best.message, evidence=best.evidence,
                       children=tuple(children))

    def __or__(self, other: Verifier) -> "AnyOf":
        return AnyOf(*self.parts, other, name=self.name)


# -- reading the journal -----------------------------------------------------------------------------------------

def is_mutating_action(action: Mapping[str, Any]) -> bool:
    """Unknown counts as mutating, as everywhere in the guard."""
    return action.get("mutating", "unknown") is not False


def mutations(journal: Any) -> list[Mapping[str, Any]]:
    """Executed commands with at least one mutating action, in order."""
    if journal is None:
        return []
    return [e for e in journal.executed() if any(is_mutating_action(a) for a in e.get("actions") or ())]


def last_mutation_t(journal: Any) -> float | None:
    """When the agent last changed anything (the environment-clock time its command finished)."""
    ts = [float(e["t"]) for e in mutations(journal) if e.get("t") is not None]
    return max(ts) if ts else None
