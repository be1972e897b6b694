"""The policy seam: `PolicyEngine.decide(input) -> Decision`.

Called by the Guard for each normalised Action. Implementations: `EmbeddedOPA` (the real OPA engine in process)
and `OPAServer` (an OPA server's REST Data API). Both load the same `policies/` tree and answer the same
document, `data.guardrail.decision` (see policies/README.md).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Protocol, runtime_checkable

__all__ = ["Mode", "Outcome", "Finding", "Decision", "PolicyEngine", "distinct_findings"]


class Mode(str, enum.Enum):
    ENFORCE = "enforce"  # a deny blocks the command
    DRY_RUN = "dry-run"  # a would-deny is journalled, and the command runs
    WARN_ONLY = "warn-only"  # denies are reported to the agent as warnings, and the command runs


class Outcome(str, enum.Enum):
    ALLOW = "allow"
    DENY = "deny"
    WARN = "warn"


@dataclass(frozen=True)
class Finding:
    """One rule that fired: its stable id, the message for the agent (with what to do instead), details."""

    id: str
    msg: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "msg": self.msg, "details": dict(self.details)}


def distinct_findings(findings: Iterable[Finding], *, besides: Iterable[Finding] = ()) -> tuple[Finding, ...]:
    """Each (rule id, message) once, in first-seen order, leaving out those already in `besides`.

    A command's actions are decided one by one, so one rule fires once per action it matches (`redis-cli FLUSHALL;
    redis-cli FLUSHALL`, `DROP TABLE a; DROP TABLE b` with the same message): the per-action decisions keep every
    finding (journal, `check --json`'s `decisions`), and what is said about the whole command says each once."""
    seen = {(f.id, f.msg) for f in besides}
    out = []
    for f in findings:
        if (f.id, f.msg) not in seen:
            seen.add((f.id, f.msg))
            out.append(f)
    return tuple(out)


@dataclass(frozen=True)
class Decision:
    """The engine's answer for one input. `outcome` is what the rules said; `enforced` is what the guard does."""

    outcome: Outcome
    decision_id: str
    denies: tuple[Finding, ...] = ()
    warns: tuple[Finding, ...] = ()
    engine: str = ""
    error: str | None = None  # set when the engine failed and the decision is a fail-closed/open default
    duration_ms: float = 0.0
    exempted: tuple[Finding, ...] = ()  # findings an exception waived: kept for the journal, never enforced

    @property
    def allowed(self) -> bool:
        return self.outcome is not Outcome.DENY

    @property
    def rule_ids(self) -> list[str]:
        return [f.id for f in self.denies] + [f.id for f in self.warns]

    @property
    def messages(self) -> list[str]:
        return [f.msg for f in self.denies] + [f.msg for f in self.warns]

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "decision_id": self.decision_id,
            "deny": [f.to_dict() for f in self.denies],
            "warn": [f.to_dict() for f in self.warns],
            "rule_ids": self.rule_ids,
            "engine": self.engine,
            "error": self.error,
            "duration_ms": round(self.duration_ms, 4),
            "exempted": [f.to_dict() for f in self.exempted],
        }


@runtime_checkable
class PolicyEngine(Protocol):
    """Decides one input document ({"action", "context", "command"}). Never raises for engine failures:
    it returns a fail-closed Decision with `error` set (deny mutating, allow read-only unless configured)."""

    def decide(self, input: Mapping[str, Any]) -> Decision: ...
