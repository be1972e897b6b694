"""Runtime checks the guard runs on what an operator can observe: convergence, persistence, restart
survivability, scope audit and the loop watchdog. Never imports `guardrail` or `arena`."""

from verifiers.base import AllOf, AnyOf, Verifier
from verifiers.criteria import ConvergenceCriteria, Criteria, RestartCriteria, WatchdogCriteria
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
    "AllOf",
    "AnyOf",
    "Verifier",
    "Criteria",
    "ConvergenceCriteria",
    "RestartCriteria",
    "WatchdogCriteria",
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
