"""Turn an engine's answer into a Decision, and an engine failure into a fail-closed Decision.

Shared by EmbeddedOPA and OPAServer so both read the document `data.guardrail.decision` the same way and fail
closed the same way: an error, a timeout, an undefined or malformed result denies the action, read-only ones
included: a read the policy would deny (`SELECT rolpassword FROM pg_authid`, `kubectl get secret -o yaml`) is
as dangerous as a write, and an engine that cannot decide does not know which reads those are. A timeout has its
own rule id (EVAL_TIMEOUT_RULE) and tells the agent to split the command. `allow_readonly_on_error=True` is an
operator's explicit opt-in to let plain reads run when the engine cannot decide; nothing in the guard sets it.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from guardrail.policy.base import Decision, Finding, Outcome

__all__ = ["FAIL_CLOSED_RULE", "EVAL_TIMEOUT_RULE", "OVER_LIMIT_RULE", "over_limit", "DecisionIds", "from_document", "fail_closed", "is_mutating_input",
           "MalformedDecision", "findings", "POLICY_BUG_ADVICE", "decide_without_broken", "rule_packages"]

FAIL_CLOSED_RULE = "GUARDRAIL-ENGINE-001"
# A command past the normaliser's size limits (guardrail.actions.normalise MAX_CHARS, MAX_ACTIONS, MAX_COMMANDS):
# refused whole by the guard, before and whatever the policy (no exception waives it).
OVER_LIMIT_RULE = "GUARDRAIL-LIMIT-001"
# The evaluation ran past its deadline: the decision is unknown, so the action is denied, reads included.
EVAL_TIMEOUT_RULE = "GUARDRAIL-ENGINE-002"


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
                     "tests); until then every command it cannot decide is blocked, read-only ones included.")

SPLIT_ADVICE = ("Run it as several smaller commands (fewer statements, files or resources in each); if a small "
                "command also times out, the policy itself is in error and whoever owns it must fix it.")


def fail_closed(input: Any, error: str, *, decision_id: str, engine: str, duration_ms: float,
                allow_readonly_on_error: bool = False, timed_out: bool = False) -> Decision:
    """The default Decision when the engine could not decide: a denial of the action, read-only or not (unless the
    operator opted in to `allow_readonly_on_error`). `timed_out` names the evaluation deadline as the cause."""
    if allow_readonly_on_error and not is_mutating_input(input):
        return Decision(Outcome.ALLOW, decision_id, engine=engine, error=error, duration_ms=duration_ms)
    if timed_out:
        finding = Finding(
            EVAL_TIMEOUT_RULE,
            f"The policy could not decide this command in time ({error}), so it is blocked, read-only or not "
            f"(fail closed). {SPLIT_ADVICE}",
            {"error": error},
        )
        return Decision(Outcome.DENY, decision_id, (finding,), engine=engine, error=error, duration_ms=duration_ms)
    if _POLICY_BUG.search(error):
        advice = POLICY_BUG_ADVICE
    else:
        advice = "Retry in a moment; until the engine answers, every command is blocked, read-only ones included."
    finding = Finding(
        FAIL_CLOSED_RULE,
        f"The policy engine could not decide ({error}), so this command is blocked (fail closed). {advice}",
        {"error": error},
    )
    return Decision(Outcome.DENY, decision_id, (finding,), engine=engine, error=error, duration_ms=duration_ms)


def over_limit(action: Any, *, decision_id: str) -> Decision | None:
    """The refusal of an action the normaliser marked as past its limits (`details.limit`), or None."""
    try:
        limit = action["details"]["limit"]
    except (KeyError, TypeError):
        return None
    if not limit:
        return None
    why = action.get("opaque_reason") or "the command is past the guard's size limits"
    finding = Finding(OVER_LIMIT_RULE, f"This command is refused whole, unread: {why}.", {"limit": limit})
    return Decision(Outcome.DENY, decision_id, (finding,), engine="guard")


def rule_packages(modules: Iterable[Any], decision_module: Path) -> list[str]:
    """The rules packages a decision module gathers as the shipped one does (`data.guardrail.rules[pkg]`): their
    names, when `decision_module` (the shipped policies/guardrail.rego) is among `modules`; else none."""
    modules = list(modules)
    if not any(m.package == "guardrail" and m.path.resolve() == decision_module.resolve() for m in modules):
        return []
    prefix = "guardrail.rules."
    return sorted({m.package[len(prefix):] for m in modules
                   if m.package.startswith(prefix) and "." not in m.package[len(prefix):]})


def decide_without_broken(input: Any, error: str, packages: Sequence[str],
                          evaluate: Callable[[str], tuple[Any, Any]],
                          exempt: Callable[[list[dict[str, Any]]], Iterable[int]], *,
                          decision_id: str, engine: str, duration_ms: Callable[[], float],
                          allow_readonly_on_error: bool = False) -> Decision | None:
    """The decision without the rules packages that cannot decide this input, or None when every one can.

    A rule in error (a conflict, a type error, a finding without an id) makes the whole decision document
    undefined, and a read-only action would then be allowed with no rule read at all: one bad team rule let
    `kubectl get secret` through. So each package is evaluated alone (`evaluate(pkg)` -> its deny and warn
    lists): the findings of those that decide stand, less what `exempt` (indices into them) exempts, and each one
    that cannot adds a fail-closed finding: a denial, read-only or not (what the broken package would have said
    of a read is unknown), or a warning on a read-only action when the operator opted in to
    `allow_readonly_on_error`."""
    denies: list[Finding] = []
    warns: list[Finding] = []
    broken: list[tuple[str, str]] = []
    for pkg in packages:
        try:
            deny, warn = evaluate(pkg)
            d = findings(deny, f"deny of guardrail.rules.{pkg}")
            w = findings(warn, f"warn of guardrail.rules.{pkg}")
        except Exception as e:  # noqa: BLE001  (that package is broken for this input; the others still decide)
            broken.append((pkg, str(e) or type(e).__name__))
            continue
        denies += d
        warns += w
    if not broken:
        return None
    found = denies + warns
    try:
        exempted = {n for n in exempt([f.to_dict() for f in found]) if isinstance(n, int) and 0 <= n < len(found)}
    except Exception:  # noqa: BLE001  (exceptions that cannot be read exempt nothing: more is denied, not less)
        exempted = set()
    names = ", ".join(f"guardrail.rules.{p}" for p, _ in broken)
    why = "; ".join(f"guardrail.rules.{p}: {e}" for p, e in broken)
    blocks = is_mutating_input(input) or not allow_readonly_on_error
    failed = Finding(FAIL_CLOSED_RULE, (
        f"The rules of {names} could not decide this action ({why}), so they count as a denial of it "
        f"(fail closed); the rest of the library decided it. {POLICY_BUG_ADVICE}" if blocks else
        f"The rules of {names} could not decide this read-only action ({why}); the rest of the library decided "
        "it. The policy itself is in error: whoever owns it must fix it (`guardrail policy test`)."),
        {"error": why, "packages": [p for p, _ in broken]})
    kept_denies = tuple(f for n, f in enumerate(denies) if n not in exempted)
    kept_warns = tuple(f for n, f in enumerate(warns, len(denies)) if n not in exempted)
    if blocks:
        kept_denies += (failed,)
    else:
        kept_warns += (failed,)
    outcome = Outcome.DENY if kept_denies else Outcome.WARN if kept_warns else Outcome.ALLOW
    return Decision(outcome, decision_id, kept_denies, kept_warns, engine=engine, error=error,
                    duration_ms=duration_ms(), exempted=tuple(found[n] for n in sorted(exempted)))


def timed(clock: Callable[[], float]) -> Callable[[], float]:
    """A stopwatch in milliseconds on an injected clock."""
    start = clock()
    return lambda: (clock() - start) * 1000.0


def as_input(input: Mapping[str, Any]) -> Any:
    return dict(input) if isinstance(input, Mapping) else input
