"""The seams that the verifiers, the guard and the benchmark all stand on.

This module sits at the bottom of the dependency stack (arena -> guardrail -> verifiers -> here). It defines
what an operator can observe of a system (`Environment`, `SLISource`), and the typed verdict every verifier
returns. It imports nothing from the project and no third-party client.

Implementations: `arena.twin` (virtual time), later `arena.live` (real servers on loopback) and a Kubernetes
environment. Tests use fakes at this seam.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

__all__ = [
    "Clock",
    "CommandResult",
    "RestartResult",
    "ComponentInfo",
    "EnvironmentDescription",
    "Sample",
    "SLI_NAMES",
    "SLISource",
    "Environment",
    "DeclaredRef",
    "DeclaredLayerReader",
    "VerdictStatus",
    "FeedbackCode",
    "Verdict",
    "JournalView",
]


@runtime_checkable
class Clock(Protocol):
    """Real or virtual time, in seconds. Library code waits only through `sleep` of an injected clock."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


@dataclass(frozen=True)
class CommandResult:
    """What a shell command printed and how it ended."""

    command: str
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class RestartResult:
    """Evidence of one restart, in the spirit of Incident-Arena's restart receipt."""

    target: str
    old_id: str
    new_id: str
    ready: bool
    image_before: str
    image_after: str
    duration_s: float = 0.0
    detail: str = ""
    # "" when the environment only asked for the restart (the probe then waits on describe()); otherwise the
    # environment waited on the rollout itself and `ready` is final: "complete", "not_ready" (new pods came up and
    # did not become ready: the restart regressed), or "stalled" (the platform never carried the restart out: the
    # controller did not observe it, or no new pod appeared), which leaves survivability unknown.
    rollout: str = ""

    @property
    def image_unchanged(self) -> bool:
        return self.image_before == self.image_after


@dataclass(frozen=True)
class ComponentInfo:
    name: str
    kind: str  # Deployment, StatefulSet, ConfigMap, ...
    namespace: str = "default"
    replicas: int = 1
    ready_replicas: int = 1
    restarts: int = 0
    stateful: bool = False
    restartable: bool = False
    image: str = ""
    # What `kubectl get` shows of a rollout, where the environment knows it (None elsewhere).
    updated_replicas: int | None = None
    available_replicas: int | None = None


@dataclass(frozen=True)
class EnvironmentDescription:
    name: str
    components: tuple[ComponentInfo, ...]
    namespaces: tuple[str, ...] = ()
    # Load shape an operator knows from the load generator's config (None when unknown): seconds per cycle.
    cycle_s: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    # False when nothing answers `sli()` (a bare shell with no Prometheus configured): convergence cannot be judged,
    # and the guard says so at once instead of waiting out a window of empty samples.
    observes_slis: bool = True

    def component(self, name: str) -> ComponentInfo | None:
        return next((c for c in self.components if c.name == name), None)


# The named SLI queries every SLI source answers. Labels narrow them: driver, phase (peak|trough|warmup|soak...),
# component.
SLI_NAMES = (
    "error_ratio",  # (timeouts + non-ok) / non-dropped arrivals
    "goodput",  # ok and correct / non-dropped arrivals
    "latency_p95_ms",
    "latency_p99_ms",
    "latency_p90_ms",
    "offered_rps",
    "conn_errors",  # connection refused / reset / pool timeouts, a count per sample
    "backlog",  # queued work not yet done (jobs, outbox, ...), a gauge
    "ready_replicas",  # labels: component
    "restarts",  # labels: component; a counter
)


@dataclass(frozen=True)
class Sample:
    """One observation over [t_start, t_end) with its labels. `count` is how many requests it is based on."""

    t_start: float
    t_end: float
    value: float | None
    labels: Mapping[str, str] = field(default_factory=dict)
    count: int = 0


@runtime_checkable
class SLISource(Protocol):
    """A named-SLI telemetry source (the twin's metrics, Prometheus, ...). It returns samples; it never judges.

    `step=None` asks for one sample per load-phase segment (each peak and each trough of each cycle on its own,
    labelled with `phase` and `cycle`); a number asks for fixed steps of that many seconds.
    """

    def sli(
        self,
        query: str,
        window: float,
        *,
        labels: Mapping[str, str] | None = None,
        step: float | None = None,
    ) -> list[Sample]: ...


@runtime_checkable
class Environment(Protocol):
    """What the agent and the guard act on. Three implementations over time: twin, live, kubernetes."""

    @property
    def clock(self) -> Clock: ...

    # Runs shell text with no stdin (a heredoc or pipe in the text is its only input): Guard.execute tells the
    # normaliser so, and a tool that reads its body on stdin is then judged on an empty one.
    def run(self, command: str) -> CommandResult: ...

    def sli(
        self,
        query: str,
        window: float,
        *,
        labels: Mapping[str, str] | None = None,
        step: float | None = None,
    ) -> list[Sample]: ...

    def restart(self, target: str) -> RestartResult: ...

    def describe(self) -> EnvironmentDescription: ...


@dataclass(frozen=True)
class DeclaredRef:
    """One declared-layer object a persistence read names: Helm release values, a ConfigMap (one key of it, or the
    whole object), or one environment variable of a workload (resolved through the ConfigMaps it takes env from)."""

    kind: str  # helm_values | configmap | workload_env
    name: str
    namespace: str = ""
    key: str = ""
    workload_kind: str = "deployment"


@runtime_checkable
class DeclaredLayerReader(Protocol):
    """An environment that reads the declared layer through its platform's API (the guard's own reads, never
    shown to the agent). `read_declared` answers with the text the equivalent operator command prints (`helm get
    values -o json`, `kubectl get configmap -o yaml` or one key's value, one env var's value), so the catalogue's
    parse steps apply unchanged; it raises LookupError when the object is absent."""

    def read_declared(self, ref: DeclaredRef) -> str: ...


class VerdictStatus(str, enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"
    ERROR = "ERROR"


class FeedbackCode(str, enum.Enum):
    """Stable codes the agent receives, also written to the journal."""

    NOT_CONVERGED = "NOT_CONVERGED"
    NOT_DURABLE = "NOT_DURABLE"
    RESTART_REGRESSION = "RESTART_REGRESSION"
    SCOPE_DENIED = "SCOPE_DENIED"
    SCOPE_DRIFT = "SCOPE_DRIFT"
    LOOP_DETECTED = "LOOP_DETECTED"
    RESIDUAL_CAUSE = "RESIDUAL_CAUSE"
    # The environment has no SLI source: convergence cannot be judged until the operator configures one.
    NO_SLI_SOURCE = "NO_SLI_SOURCE"
    # A declaration is being verified: a second one, or a change that would move what it measures, waits for it.
    DECLARATION_PENDING = "DECLARATION_PENDING"


@dataclass(frozen=True)
class Verdict:
    """A verifier's typed answer: status, a stable reason code, a message for the agent, and the evidence."""

    status: VerdictStatus
    verifier: str
    code: FeedbackCode | None = None
    message: str = ""
    evidence: Mapping[str, Any] = field(default_factory=dict)
    children: Sequence["Verdict"] = ()

    @property
    def passed(self) -> bool:
        return self.status is VerdictStatus.PASS

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "verifier": self.verifier,
            "code": self.code.value if self.code else None,
            "message": self.message,
            "evidence": dict(self.evidence),
            "children": [c.to_dict() for c in self.children],
        }


@runtime_checkable
class JournalView(Protocol):
    """What the verifiers read of the guard's journal (implemented by `guardrail.journal.Journal`).

    `executed()` lists the commands that actually ran, in order, each a mapping:
      {"seq": int, "t": float (environment clock), "command": str, "exit_code": int,
       "actions": [Action as JSON: {"tool","verb","target","keys","layer","mutating","raw",...}]}
    `records()` lists every record (actions, decisions, results, snapshots, declarations, verdicts).
    """

    def executed(self) -> list[Mapping[str, Any]]: ...

    def records(self) -> list[Mapping[str, Any]]: ...
