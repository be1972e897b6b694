"""What a Decision does under a Mode: does the command run, what does the agent see, what is journalled.

The Guard applies the mode; this pure function is the one statement of the rules, shared by the guard, the CLI
and the tests:

    mode        deny                                  warn                allow
    enforce     blocked; agent sees the denial        runs; shown         runs
    dry-run     runs; would-deny journalled, silent   runs; shown         runs
    warn-only   runs; denial shown as a warning       runs; shown         runs
"""

from __future__ import annotations

from dataclasses import dataclass

from guardrail.policy.base import Decision, Finding, Mode, Outcome

__all__ = ["Enforcement", "enforce"]


@dataclass(frozen=True)
class Enforcement:
    """The effect of one decision under one mode."""

    runs: bool
    denied: tuple[Finding, ...]  # shown to the agent as a denial (the command did not run)
    warned: tuple[Finding, ...]  # shown to the agent as warnings (the command runs)
    would_deny: tuple[Finding, ...]  # denies the mode did not enforce, for the journal

    @property
    def shown(self) -> tuple[Finding, ...]:
        return self.denied + self.warned


def enforce(decision: Decision, mode: Mode | str) -> Enforcement:
    """Apply `mode` to `decision` (see the table in the module docstring)."""
    mode = Mode(mode)
    if decision.outcome is not Outcome.DENY:
        return Enforcement(True, (), decision.warns, ())
    if mode is Mode.ENFORCE:
        return Enforcement(False, decision.denies, decision.warns, ())
    if mode is Mode.DRY_RUN:
        return Enforcement(True, (), decision.warns, decision.denies)
    return Enforcement(True, (), decision.denies + decision.warns, decision.denies)
