"""Runtime checks the guard runs on what an operator can observe: convergence, persistence, restart
survivability, scope audit and the loop watchdog. Never imports `guardrail` or `arena`."""

from verifiers.protocols import (
    Clock,
    CommandResult,
    ComponentInfo,
    Environment,
    EnvironmentDescription,
    FeedbackCode,
    RestartResult,
    Sample,
    SLISource,
    Verdict,
    VerdictStatus,
)

__all__ = [
    "Clock",
    "CommandResult",
    "ComponentInfo",
    "Environment",
    "EnvironmentDescription",
    "FeedbackCode",
    "RestartResult",
    "Sample",
    "SLISource",
    "Verdict",
    "VerdictStatus",
]
