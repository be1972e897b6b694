"""Turn an engine's answer into a Decision, and an engine failure into a fail-closed Decision.

Shared by EmbeddedOPA and OPAServer so both read the document `data.guardrail.decision` the same way and fail
closed the same way: an error, a timeout, an undefined or malformed result denies a mutating action (mutating
true or "unknown", or an input we cannot read) and allows a read-only one unless `allow_readonly_on_error` is off.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from typing import Any, Callable, Mapping

from guardrail.policy.base import Decision, Finding, Outcome

__all__ = ["FAIL_CLOSED_RULE", "DecisionIds", "from_document", "fail_closed", "is_mutating_input",
           "MalformedDecision", "findings", "POLICY_BUG_ADVICE"]

FAIL_CLOSED_RULE = "GUARDRAIL-ENGINE-001"


class MalformedDecision(ValueError):
    """The engine answered, but not with {"deny": [findings], "warn": [findings]}."""


class DecisionIds:
    """Unique decision ids: process, start time and a counter (cheaper than uuid4 on the hot path)."""

    def __init__(self, prefix: str = "d"):
        self._prefix = f"{prefix}-{os.getpid():x}-{time.time_ns():x}"
        self._counter = itertools.count(1)

    def __call__(self) -> str:
        return f"{self._prefix}-{next(self._counter)}"


def findings(items: Any, where: str) -> tuple[Finding, ...]:
    """The findings of a deny or warn list; MalformedDecision when it is not a list of {id, msg, details}."""
    if items is None:
        return ()
    if not isinstance(items, list):
        raise MalformedDecision(f"{where} is not a list")
    out = []
    for f in items:
        if not isinstance(f, dict) or not isinstance(f.get("id"), str) or not isinstance(f.get("msg"), str):
            raise MalformedDecision(f"{where} holds a finding without a string id and msg: {f!r}")
        det = f.get("details")
        out.append(Finding(f["id"], f["msg"], det if isinstance(det, dict) else {}))
    return tuple(out)


def from_document(doc: Any, *, decision_id: str, engine: str, duration_ms: float) -> Decision:
    """A Decision from the value of data.guardrail.decision. Raises MalformedDecision on a wrong shape."""
    if not isinstance(doc, dict) or "deny" not in doc:
        raise MalformedDecision("data.guardrail.decision is not an object with a deny list")
    denies = findings(doc.get("deny"), "deny")
    warns = findings(doc.get("warn"), "warn")
    exempted = findings(doc.get("exempted"), "exempted")
    outcome = Outcome.DENY if denies else Outcome.WARN if warns else Outcome.ALLOW
    return Decision(outcome, decision_id, denies, warns, engine=engine, duration_ms=duration_ms,
                    exempted=exempted)


def is_mutating_input(input: Any) -> bool:
    """Mutating unless the input plainly says `mutating: false`; unknown and unreadable count as mutating."""
    try:
        return input["action"]["mutating"] is not False
    except (KeyError, TypeError):
        return True


# Errors that come from the policy's own rules (they recur on every retry), not from the engine being busy or away.
_POLICY_BUG = re.compile(r"eval_(builtin_|conflict_|type_)?error|MalformedDecision|rego_|took longer than")


POLICY_BUG_ADVICE = ("The policy itself is in error: whoever owns it must fix it (`guardrail policy test` runs its "
                     "tests); until then changes are blocked, and read-only commands (get, describe, logs, SELECT) "
                     "still run.")


def fail_closed(input: Any, error: str, *, decision_id: str, engine: str, duration_ms: float,
                allow_readonly_on_error: bool = True) -> Decision:
    """The default Decision when the engine could not decide."""
    if allow_readonly_on_error and not is_mutating_input(input):
        return Decision(Outcome.ALLOW, decision_id, engine=engine, error=error, duration_ms=duration_ms)
    if _POLICY_BUG.search(error):
        advice = POLICY_BUG_ADVICE
    else:
        advice = "Retry in a moment; read-only commands (get, describe, logs, SELECT) still run."
    finding = Finding(
        FAIL_CLOSED_RULE,
        f"The policy engine could not decide ({error}), so this change is blocked (fail closed). {advice}",
        {"error": error},
    )
    return Decision(Outcome.DENY, decision_id, (finding,), engine=engine, error=error, duration_ms=duration_ms)


def timed(clock: Callable[[], float]) -> Callable[[], float]:
    """A stopwatch in milliseconds on an injected clock."""
    start = clock()
    return lambda: (clock() - start) * 1000.0


def as_input(input: Mapping[str, Any]) -> Any:
    return dict(input) if isinstance(input, Mapping) else input
