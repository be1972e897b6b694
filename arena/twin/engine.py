"""The twin behind the Environment seam: build a World from a scenario's `twin` section and operate it.

Called by `arena.episode.run_episode` (and by tests and bench/twin_speed.py) through `build_twin(spec, seed)`.
`TwinEnvironment` implements `verifiers.protocols.Environment`: `run(command)` goes through the operator shell,
`clock` is virtual, `sli()` answers the named SLIs, `restart(target)` restarts a component and waits until it is
ready, `describe()` lists the components. The gates use `.world` for ground truth; the guard must not.
"""

from __future__ import annotations

from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, model_validator

from arena.twin.load import LoadProfile
from arena.twin.programs import install_generic
from arena.twin.shell import Shell
from arena.twin.sli import TwinSLISource
from arena.twin.tools import tool_surfaces
from arena.twin.world import SUBSTRATES, World
from verifiers.protocols import (CommandResult, ComponentInfo, EnvironmentDescription, RestartResult,
                                 Sample)

__all__ = ["TwinSpec", "TwinEnvironment", "build_twin", "start_at_onset"]


class TwinSpec(BaseModel):
    """A scenario's `twin` section: which substrate, its wiring and faults, the load profile, the agent's RBAC."""

    model_config = ConfigDict(extra="forbid")

    substrate: str
    profile: LoadProfile = Field(default_factory=LoadProfile)
    # Kubernetes writes the agent's RBAC allows (none in Incident-Arena): delete, rollout, scale, helm... Only where
    # the substrate's tool surface (arena/twin/tools.yaml) has write authority.
    rbac: list[str] = Field(default_factory=list)
    # Environment variables of the operator shell (DB_ADMIN_DSN ...).
    shell_env: dict[str, str] = Field(default_factory=dict)
    # Substrate-specific wiring and fault injection, validated by the substrate's own model.
    spec: dict[str, Any] = Field(default_factory=dict)
    # Whether the telemetry before episode start is healthy. False where the fault ships in the release (the
    # history already has it, SREGym's HEALTHY_BASELINE = False): then no incident start is advertised, and a
    # guard has no pre-incident baseline to lean on, as an operator would not.
    healthy_history: bool = True

    @model_validator(mode="after")
    def _rbac_within_surface(self) -> "TwinSpec":
        surfaces = tool_surfaces()
        if self.substrate in surfaces.substrates and self.rbac and \
                surfaces.surface(self.substrate).kubernetes != "write":
            raise ValueError(f"rbac {self.rbac} grants Kubernetes writes, but the {self.substrate} agent's `main` "
                             f"pod has {surfaces.surface(self.substrate).kubernetes!r} authority (arena/twin/tools.yaml)")
        return self


class TwinEnvironment:
    """The digital twin as an `Environment`."""

    def __init__(self, world: World, spec: TwinSpec):
        self.world = world
        self.spec = spec
        self.shell = Shell(self.world.clock.sleep, spec.shell_env)
        self._sli = TwinSLISource(world)
        # When the incident began, as the page tells an operator: episode start, or the onset for a session that
        # starts there (arena.twin.make_environment).
        self.incident_start_s = 0.0
        install_generic(self)
        assert world.substrate is not None
        for name, handler in world.substrate.commands().items():
            self.shell.register(name, handler)
        self._restrict_to_surface()

    # --- the seam -----------------------------------------------------------------------------------------
    @property
    def clock(self):
        return self.world.clock

    def run(self, command: str) -> CommandResult:
        return self.shell.run(command)

    def sli(self, query: str, window: float, *, labels: Mapping[str, str] | None = None,
            step: float | None = None) -> list[Sample]:
        return self._sli.sli(query, window, labels=labels, step=step)

    def restart(self, target: str) -> RestartResult:
        c = self.world.component(target)
        if c is None:
            raise KeyError(f"no component {target!r}")
        t0 = self.clock.now()
        image = c.image
        rec = self.world.restart(c.name, by="guard")
        if c.ready_at > self.clock.now():
            self.clock.sleep(c.ready_at - self.clock.now())
        return RestartResult(c.name, rec.old_uid, rec.new_uid, c.ready(self.clock.now()), image, c.image,
                             round(self.clock.now() - t0, 6))

    def describe(self) -> EnvironmentDescription:
        now = self.clock.now()
        comps = tuple(ComponentInfo(name=c.name, kind=c.kind, namespace=c.namespace, replicas=1,
                                    ready_replicas=int(c.ready(now)), restarts=c.restarts, stateful=c.stateful,
                                    restartable=c.restartable, image=c.image)
                      for c in self.world.components.values())
        namespaces = tuple(sorted({c.namespace for c in self.world.components.values()}))
        return EnvironmentDescription(name=f"twin:{self.spec.substrate}", components=comps, namespaces=namespaces,
                                      cycle_s=self.world.profile.cycle_s,
                                      extra=self._extra())

    def _extra(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"agent_window_s": self.world.profile.agent_window_s}
        if self.spec.healthy_history and self.world.profile.prehistory_cycles > 0:
            # Episode start is when the incident began, as the page tells an operator; telemetry before it is
            # the pre-incident baseline Prometheus would keep.
            extra["incident_start_s"] = self.incident_start_s
        return extra

    def operator_view(self) -> "OperatorView":
        """The same world through an operator's read-only credential: every program the twin models (helm get
        values, kubectl get/describe/logs), no Kubernetes writes. What a guard deployed beside the agent with its
        own read access observes; the agent's commands still run on `run`."""
        return OperatorView(self)

    # --- helpers ------------------------------------------------------------------------------------------
    def rbac_allows(self, verb: str) -> bool:
        return verb in self.spec.rbac

    @property
    def kubernetes_authority(self) -> str:
        """none | read | write: what the agent's `main` pod may do with kubectl (arena/twin/tools.yaml)."""
        surfaces = tool_surfaces()
        if self.spec.substrate not in surfaces.substrates:
            return "write"
        return surfaces.surface(self.spec.substrate).kubernetes

    def _restrict_to_surface(self) -> None:
        self._all_handlers = dict(self.shell.handlers)
        """Keep only the programs the real `main` pod has (arena/twin/tools.yaml); a program the surface lists but
        nothing implements is a data error, found when the twin is built."""
        surfaces = tool_surfaces()
        if self.spec.substrate not in surfaces.substrates:
            return  # a test substrate with no real counterpart keeps every program it registers
        wanted = surfaces.programs(self.spec.substrate)
        missing = sorted(wanted - set(self.shell.handlers))
        if missing:
            from guardrail.errors import ScenarioError

            raise ScenarioError(f"the {self.spec.substrate} tool surface lists programs the twin does not "
                                f"implement: {', '.join(missing)}", path="arena/twin/tools.yaml")
        self.shell.handlers = {k: v for k, v in self.shell.handlers.items() if k in wanted}


_HELM_WRITES = ("upgrade", "install", "rollback", "uninstall")


class OperatorView:
    """A read-only operator's `Environment` over a twin: all modelled programs, kubectl reads, no writes."""

    kubernetes_authority = "read"

    def __init__(self, twin: TwinEnvironment):
        self.twin = twin
        self.world = twin.world
        self.spec = twin.spec
        self.shell = Shell(self.world.clock.sleep, twin.spec.shell_env)
        install_generic(self)  # type: ignore[arg-type]
        for name, handler in getattr(twin, "_all_handlers", twin.shell.handlers).items():
            if name not in ("kubectl", "curl", "helm"):
                self.shell.register(name, handler)
        helm = getattr(twin, "_all_handlers", twin.shell.handlers).get("helm")
        if helm is not None:
            self.shell.register("helm", _read_only_helm(helm))

    @property
    def clock(self):
        return self.world.clock

    def run(self, command: str) -> CommandResult:
        return self.shell.run(command)

    def sli(self, query: str, window: float, *, labels: Mapping[str, str] | None = None,
            step: float | None = None) -> list[Sample]:
        return self.twin.sli(query, window, labels=labels, step=step)

    def restart(self, target: str) -> RestartResult:
        return self.twin.restart(target)

    def describe(self) -> EnvironmentDescription:
        return self.twin.describe()

    def rbac_allows(self, verb: str) -> bool:
        return False


def _read_only_helm(helm: Any) -> Any:
    def run(inv: Any) -> tuple[str, str, int, float]:
        if len(inv.argv) > 1 and inv.argv[1] in _HELM_WRITES:
            return "", "Error: the operator view is read-only\n", 1, 0.0
        return helm(inv)

    return run


def build_twin(spec: TwinSpec | Mapping[str, Any], seed: int = 0, *, start: bool = True) -> TwinEnvironment:
    """Build the world, boot it at the start of the pre-incident history, and (by default) simulate up to
    episode start (t = 0), where the substrate lands the faults that do not ship in the release."""
    if not isinstance(spec, TwinSpec):
        spec = TwinSpec.model_validate(spec)
    cls = SUBSTRATES.get(spec.substrate)
    if cls is None:
        _load_substrates()
        cls = SUBSTRATES.get(spec.substrate)
    if cls is None:
        raise KeyError(f"unknown substrate {spec.substrate!r}; known: {', '.join(sorted(SUBSTRATES))}")
    world = World(spec.profile, seed)
    sub = cls(world, spec.spec)
    world.substrate = sub
    sub.build()
    world.boot_all()
    env = TwinEnvironment(world, spec)
    if start:
        world.advance_to(0.0)
        sub.inject(0.0)
    return env


def start_at_onset(env: TwinEnvironment) -> TwinEnvironment:
    """Simulate `env` (at episode start) up to its incident's onset (LoadProfile.onset_s), which becomes the
    incident's start: where an agent paged into the running incident begins. Otherwise a session's agent would
    start before the faults land (ia-011's events come at t = 40 s) and apply the right fix to a healthy system,
    which the faults then undo."""
    onset = env.world.profile.onset_s
    if onset > env.clock.now():
        env.world.advance_to(onset)
    env.incident_start_s = onset
    return env


def _load_substrates() -> None:
    import importlib

    for mod in ("arena.twin.slack", "arena.twin.frappe", "arena.twin.saleor"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise
