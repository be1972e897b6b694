"""The graded world: what the gates and the episode runner need from an environment's ground truth.

`arena.gates.Grading` and `arena.episode.run_episode` drive an episode through a `GradedWorld`, never through a
concrete environment, so that the same runner and gates grade the digital twin (`TwinWorld`, here) and the live
stack (`arena.live.world.LiveWorld`). A graded world carries:

- `env`: the `verifiers.protocols.Environment` the agent and the guard act on (nothing else reaches them);
- `clock`: episode seconds, 0 at episode start (the fault has landed, the agent has not acted);
- ground truth for the gates (`truth()`, `config()`), which the guard and the verifiers never see;
- the load ledger (`ledger.select`) the Outcome Gate reads, and the readiness it checks at soak end;
- restart hooks, fired on every restart the agent or the guard causes, with the truth just before it, so that
  the Safety Gate can tell a restart that masked a runtime fault;
- the verifier-owned challenge's means (`challenge_restart`, `fixed_traffic`);
- the episode's timing in its own seconds: load cycle, agent window, declaration deadline, soak window, and
  `seconds(s)`, which turns a scenario's (twin) seconds into the world's (identity on the twin; the live stack
  runs short cycles, so a scenario's waits scale by live cycle / twin cycle, as `arena.live.replay` scales sleeps).

`TwinWorld` adapts `arena.twin.world.World` without changing what it does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

from arena.twin.engine import TwinEnvironment, TwinSpec, build_twin
from verifiers.protocols import Clock, Environment

__all__ = ["GradedWorld", "LoadLedger", "WindowTally", "LatencyWindow", "ChallengeRestart", "RestartHook",
           "TwinWorld"]

# hook(component, by, truth_before): by is agent | guard | verifier | broker | ...
RestartHook = Callable[[str, str, Mapping[str, Any]], None]


class LatencyWindow(Protocol):
    """Latencies of a window; a nearest-rank percentile in ms, None when the window is empty."""

    def percentile(self, q: float) -> float | None: ...


class WindowTally(Protocol):
    """Arrivals of a window by outcome (what the Outcome Gate reads)."""

    offered: float
    dropped: float
    hist: LatencyWindow

    @property
    def base(self) -> float: ...

    def error_rate(self) -> float | None: ...

    def goodput(self) -> float | None: ...


class LoadLedger(Protocol):
    """The load generator's record of every arrival, selectable by send time (episode seconds)."""

    def select(self, t0: float, t1: float, *, driver: str | None = None, phase: str | None = None,
               latency_from: float | None = None) -> tuple[WindowTally, WindowTally]: ...


@dataclass(frozen=True)
class ChallengeRestart:
    """The verifier's restart of the challenge target, once it is ready again (or has given up)."""

    target: str
    ready: bool
    old_uid: str
    new_uid: str
    image_unchanged: bool


@runtime_checkable
class GradedWorld(Protocol):
    """An environment plus the ground truth, load ledger and timing the gates grade it by."""

    env: Environment
    clock: Clock
    ledger: LoadLedger
    restart_hooks: list[RestartHook]
    cycle_s: float
    agent_window_s: float
    declare_deadline_s: float
    # True where an agent that stops without declaring ends its window at once (real time is not free); the
    # twin waits the window out, as Incident-Arena's harness does.
    quit_ends_window: bool

    def seconds(self, scenario_s: float) -> float: ...

    def truth(self) -> dict[str, Any]: ...

    def config(self) -> dict[str, Any]: ...

    def not_ready(self) -> list[str]: ...

    def soak_window(self, declared_at: float) -> tuple[float, float]: ...

    def declare(self, t: float) -> None: ...

    def hold_load(self, t: float) -> None: ...

    def begin_soak(self, t: float) -> None: ...

    def challenge_restart(self, target: str) -> ChallengeRestart | None: ...

    def fixed_traffic(self, spec: Mapping[str, Any]) -> dict[str, Any]: ...


class TwinWorld:
    """The digital twin as a graded world: a thin view over `TwinEnvironment.world`."""

    quit_ends_window = False

    def __init__(self, env: TwinEnvironment):
        self.env = env
        self.world = env.world
        self.clock = self.world.clock
        self.ledger = self.world.ledger
        self.restart_hooks = self.world.restart_hooks
        profile = self.world.profile
        self.cycle_s = profile.cycle_s
        self.agent_window_s = profile.agent_window_s
        self.declare_deadline_s = profile.declare_deadline_s

    @classmethod
    def build(cls, spec: TwinSpec | Mapping[str, Any], seed: int = 0) -> "TwinWorld":
        return cls(build_twin(spec, seed))

    def seconds(self, scenario_s: float) -> float:
        return scenario_s  # the scenario's seconds are the twin's

    def truth(self) -> dict[str, Any]:
        return self.world.truth()

    def config(self) -> dict[str, Any]:
        return self.world.config()

    def not_ready(self) -> list[str]:
        now = self.clock.now()
        return sorted(n for n, c in self.world.components.items() if not c.ready(now))

    def soak_window(self, declared_at: float) -> tuple[float, float]:
        return self.world.schedule.soak_window(declared_at)

    def declare(self, t: float) -> None:
        self.world.declare(t)

    def hold_load(self, t: float) -> None:
        self.world.hold_load(t)

    def begin_soak(self, t: float) -> None:
        self.world.begin_soak(t)

    def challenge_restart(self, target: str) -> ChallengeRestart | None:
        c = self.world.component(target)
        if c is None:
            return None
        image, old = c.image, c.uid
        self.world.restart(c.name, by="verifier")
        if c.ready_at > self.clock.now():
            self.clock.sleep(c.ready_at - self.clock.now())
        return ChallengeRestart(c.name, c.ready(self.clock.now()), old, c.uid, c.image == image)

    def fixed_traffic(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        assert self.world.substrate is not None
        return self.world.substrate.fixed_traffic(spec, self.clock.now())
