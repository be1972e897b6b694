"""The world: components, declared stores, the load schedule, the ledger, and the simulator that moves them in time.

This is the core of the twin. `arena.twin.engine.TwinEnvironment` wraps a World behind the Environment seam;
`arena.gates` reads a World's ground truth directly (`truth()`, `config()`, `restart(..., by="verifier")`).
Substrates (arena/twin/slack, frappe, saleor) subclass `Substrate` and `Component` from here.

Simulation: `advance_to(t)` cuts time into segments at load-phase boundaries, scheduled events and the moments a
component says its state will change by itself (`Component.next_change`, e.g. a pod becoming ready or a backlog
emptying; `max_step` bounds segments while something drains). Inside a segment the offered rates are constant, so
the substrate is asked once per segment how each driver's requests end (`Substrate.serve`), and the ledger
records integer counts and a latency histogram for each driver. Quiet stretches cost one step per phase.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping

from arena.twin.clock import VirtualClock
from arena.twin.ledger import Ledger, LedgerRecord, apportion
from arena.twin.load import DriverSpec, EventSpec, LoadProfile, LoadSchedule, Phase
from arena.twin.mech import DROPPED, ERROR, OK, TIMEOUT, Mode, finish
from arena.twin.state import DeclaredStore, SettingTable

__all__ = ["Component", "Substrate", "World", "GaugePoint", "register_substrate", "SUBSTRATES", "RestartRecord"]


class Component:
    """One workload of the system under test (a Deployment or StatefulSet pod, a DB, a broker)."""

    kind: ClassVar[str] = "Deployment"
    container: ClassVar[str] = "app"

    def __init__(self, name: str, *, image: str = "", namespace: str = "default", restartable: bool = True,
                 stateful: bool = False, boot_s: float = 5.0, hosts: tuple[str, ...] = ()):
        self.name = name
        self.image = image or f"ghcr.io/abundant-ai/sre-world/{name}@sha256:{_h(name)[:64]}"
        self.namespace = namespace
        self.restartable = restartable
        self.stateful = stateful
        self.boot_s = boot_s
        self.hosts = hosts or (name,)
        self.settings = SettingTable()
        self.generation = 0
        self.restarts = 0
        self.ready_at = -math.inf
        self.started_at = -math.inf
        self.world: World | None = None
        self.log: list[str] = []

    # --- lifecycle --------------------------------------------------------------------------------------
    def attach(self, world: "World") -> None:
        self.world = world

    def boot(self, now: float) -> None:
        """Start (or restart) the process: drop runtime state, re-read declared sources."""
        self.settings.drop_runtime()
        self.load_declared()
        self.reset_runtime()
        self.started_at = now
        self.ready_at = now + (self.boot_s if self.generation > 0 else 0.0)
        self.generation += 1

    def load_declared(self) -> None:
        """Copy declared values from this component's DeclaredStores into `settings` (override)."""

    def reset_runtime(self) -> None:
        """Forget process memory: runtime events, caches, open connections (override)."""

    def ready(self, now: float) -> bool:
        return now >= self.ready_at

    @property
    def pod(self) -> str:
        suffix = _h(f"{self.name}/{self.generation}")[:5]
        return f"{self.name}-0" if self.stateful else f"{self.name}-{_h(self.name)[:9]}-{suffix}"

    @property
    def uid(self) -> str:
        return _h(f"uid/{self.name}/{self.generation}")[:36]

    # --- time ---------------------------------------------------------------------------------------------
    def next_change(self, now: float) -> float:
        """The next moment this component's state changes by itself (becoming ready, a backlog emptying)."""
        return self.ready_at if self.ready_at > now else math.inf

    def max_step(self, now: float) -> float:
        """The longest segment this component tolerates now (short while something drains)."""
        return math.inf

    def advance(self, t0: float, t1: float) -> None:
        """Evolve internal state over [t0, t1) (drain a backlog, age a lock...)."""

    def on_event(self, event: EventSpec, active: bool, now: float) -> None:
        """A load-generator event targets this component (override to react)."""

    # --- observation and truth --------------------------------------------------------------------------
    def truth(self) -> dict[str, Any]:
        """Ground truth for the gates, as flat keys without the component prefix (override and extend)."""
        out: dict[str, Any] = {"generation": self.generation, "restarts": self.restarts, "image": self.image}
        for k, v in self.settings.effective().items():
            out[f"settings.{k}"] = v
        for k, v in self.settings.declared().items():
            out[f"declared.{k}"] = v
        return out

    def config(self) -> dict[str, Any]:
        """Configuration keys an operator can change (for the changed-keys scope check): effective values."""
        return dict(self.settings.effective())

    def exec(self, argv: list[str], stdin: str, now: float) -> tuple[str, str, int]:
        """`kubectl exec <pod> -- argv`: default is a shell without the tool."""
        return "", f"OCI runtime exec failed: exec: \"{argv[0]}\": executable file not found in $PATH\n", 126

    def http(self, method: str, path: str, body: str, now: float) -> tuple[int, str]:
        """Requests to this component's HTTP API (curl). Default: nothing listens."""
        return 404, '{"detail":"Not Found"}'

    def say(self, now: float, msg: str) -> None:
        self.log.append(f"{_ts(now)} {msg}")
        if len(self.log) > 400:
            del self.log[:100]


class Substrate:
    """A system under test (slack-spine, frappe, saleor): it builds the components and serves the load."""

    name: ClassVar[str] = ""

    def __init__(self, world: "World", spec: Mapping[str, Any]):
        self.world = world
        self.spec = spec

    def build(self) -> None:
        """Create components and declared stores; apply the scenario's fault injection (override)."""

    def commands(self) -> dict[str, Callable]:
        """Shell commands this substrate adds: name -> handler(shell, argv, stdin) -> (stdout, stderr, code, s)."""
        return {}

    def serve(self, rates: Mapping[str, float], phase: Phase, t0: float, t1: float) -> dict[str, list[Mode]]:
        """How each driver's requests end over [t0, t1) given every driver's rate (override)."""
        raise NotImplementedError

    def fixed_traffic(self, spec: Mapping[str, Any], now: float) -> dict[str, Any]:
        """A challenge's fixed probe traffic, e.g. one write and readback per channel (override)."""
        return {"scheduled": 0, "attempted": 0, "completed": 0, "correct": 0}

    def on_record(self, rec: LedgerRecord) -> None:
        """The ledger's integer counts for one driver and segment (e.g. persist the writes that succeeded)."""

    def inject(self, now: float) -> None:
        """Land the faults that arrive at episode start (a faultInit Job, SET GLOBAL...), after the healthy
        pre-incident history. Faults that ship in the release go in `build` instead (override)."""

    def backlog(self) -> float:
        """Queued work not yet done, as the `backlog` SLI sees it."""
        return 0.0

    def begin_soak(self, now: float) -> None:
        """The harness opened the soak after its pre-soak phase: a load generator that keeps a ledger of accepted
        work starts a fresh one (Frappe's `PreparedReportLedger.begin_soak`) (override)."""


SUBSTRATES: dict[str, type[Substrate]] = {}


def register_substrate(cls: type[Substrate]) -> type[Substrate]:
    SUBSTRATES[cls.name] = cls
    return cls


@dataclass(frozen=True)
class GaugePoint:
    """Gauges sampled at the end of each segment: readiness, restart counters and backlog."""

    t: float
    ready: Mapping[str, int]
    restarts: Mapping[str, int]
    backlog: float


@dataclass(frozen=True)
class RestartRecord:
    t: float
    component: str
    by: str  # agent | guard | verifier
    old_uid: str
    new_uid: str


@dataclass
class _Timed:
    t: float
    seq: int
    event: EventSpec
    active: bool


class World:
    """Everything simulated in one episode, and the simulator that advances it."""

    def __init__(self, profile: LoadProfile, seed: int):
        self.load_held = False  # the harness holds the load generator between declaration and soak
        self.profile = profile
        self.seed = seed
        self.schedule = LoadSchedule(profile)
        self.clock = VirtualClock(self.schedule.start, self.advance_to)
        self.ledger = Ledger()
        self.gauges: list[GaugePoint] = []
        self.components: dict[str, Component] = {}
        self.stores: dict[str, DeclaredStore] = {}
        self.substrate: Substrate | None = None
        self.restart_log: list[RestartRecord] = []
        self.restart_hooks: list[Callable[[str, str, str], None]] = []
        self._rng = {d.name: random.Random(f"{seed}/{profile.action_seed}/{d.name}") for d in profile.drivers}
        self._events: list[_Timed] = []
        self._seq = 0
        self.declared_at: float | None = None
        for e in profile.events:
            if e.at_s is not None:
                self.schedule_event(e.at_s, e, e.active)

    # --- building -----------------------------------------------------------------------------------------
    def add(self, c: Component) -> Component:
        self.components[c.name] = c
        c.attach(self)
        return c

    def store(self, name: str, data: dict[str, Any] | None = None, *, file_key: str | None = None) -> DeclaredStore:
        if name not in self.stores:
            self.stores[name] = DeclaredStore(name, data, file_key=file_key)
        return self.stores[name]

    def boot_all(self) -> None:
        for c in self.components.values():
            c.boot(self.clock.now())

    def component(self, name: str) -> Component | None:
        if name in self.components:
            return self.components[name]
        for c in self.components.values():
            if name == c.pod or name in c.hosts:
                return c
        return None

    # --- events -------------------------------------------------------------------------------------------
    def schedule_event(self, t: float, event: EventSpec, active: bool) -> None:
        self._seq += 1
        self._events.append(_Timed(t, self._seq, event, active))
        self._events.sort(key=lambda e: (e.t, e.seq))

    def hold_load(self, t: float) -> None:
        """The harness's pre-soak phase starts: the load generator's runner awaits its boundary hook, so no
        arrivals are sent until the soak opens (SW substrates/frappe/loadgen_sidecar.py: "the runner awaits this
        before it opens the graded soak"; the backlog drains "until arrivals stop")."""
        self.advance_to(t)
        self.load_held = True

    def begin_soak(self, t: float) -> None:
        """The harness's pre-soak phase is over: arrivals resume and the soak starts now."""
        assert self.substrate is not None
        self.advance_to(t)
        self.load_held = False
        self.substrate.begin_soak(t)

    def declare(self, t: float) -> None:
        """The declaration landed: schedule the re-fires the profile asks for."""
        self.declared_at = t
        for e in self.profile.events:
            if e.refire_after_declare_s is not None:
                self.schedule_event(t + e.refire_after_declare_s, e, e.active)

    def _fire_due(self, now: float) -> None:
        while self._events and self._events[0].t <= now + 1e-9:
            ev = self._events.pop(0)
            for target in ev.event.targets:
                c = self.components.get(target)
                if c is not None:
                    c.on_event(ev.event, ev.active, now)

    # --- simulation ---------------------------------------------------------------------------------------
    def advance_to(self, t: float) -> None:
        now = self.clock.now()
        self._fire_due(now)
        while now < t - 1e-9:
            ph = self.schedule.phase_at(now)
            end = min(t, ph.end)
            if self._events:
                end = min(end, max(self._events[0].t, now))
            for c in self.components.values():
                nc = c.next_change(now)
                if nc > now + 1e-9:
                    end = min(end, nc)
                ms = c.max_step(now)
                if ms < math.inf:
                    end = min(end, now + max(ms, 0.05))
            if end <= now + 1e-9:
                end = min(t, now + 0.05)
            self._segment(ph, now, end)
            now = end
            self.clock.set(now)
            self._fire_due(now)

    def _segment(self, ph: Phase, t0: float, t1: float) -> None:
        dt = t1 - t0
        rates = {d.name: 0.0 if self.load_held else ph.rps * d.rate_scale for d in self.profile.drivers}
        assert self.substrate is not None
        outcomes = self.substrate.serve(rates, ph, t0, t1)
        for d in self.profile.drivers:
            rec = self._record(d, rates[d.name], dt, ph, t0, t1, outcomes.get(d.name, []))
            self.ledger.append(rec)
            self.substrate.on_record(rec)
        for c in self.components.values():
            c.advance(t0, t1)
        self.gauges.append(GaugePoint(
            t1,
            {n: int(c.ready(t1)) for n, c in self.components.items()},
            {n: c.restarts for n, c in self.components.items()},
            self.substrate.backlog(),
        ))

    def _record(self, d: DriverSpec, rps: float, dt: float, ph: Phase, t0: float, t1: float,
                modes: list[Mode]) -> LedgerRecord:
        rng = self._rng[d.name]
        mean = rps * dt
        noise = rng.gauss(0.0, 1.0)
        n = max(0, int(round(mean * (1.0 + d.jitter * noise) + rng.random() - 0.5)))
        rec = LedgerRecord(t0, t1, d.name, ph.name, ph.cycle, offered=n)
        if n == 0:
            return rec
        modes = finish(modes, d.timeout_s) if modes else [Mode(1.0, 0.0, DROPPED)]
        # Seeded latency wobble per segment, so identical segments are not bit-identical copies.
        wobble = 1.0 + 0.03 * rng.gauss(0.0, 1.0)
        for m, k in zip(modes, apportion(n, [m.weight for m in modes])):
            if k == 0:
                continue
            if m.status == DROPPED:
                rec.dropped += k
                continue
            if m.status == TIMEOUT:
                rec.timeout += k
            elif m.status == ERROR:
                rec.error += k
            else:
                rec.ok += k
                if m.status == OK:
                    rec.correct += k
            if m.conn:
                rec.conn_errors += k
            lat = m.latency_ms if m.status == TIMEOUT else m.latency_ms * wobble
            rec.hist.add_spread(max(lat, 0.5), k)
        return rec

    # --- restarts -----------------------------------------------------------------------------------------
    def restart(self, name: str, by: str = "agent") -> RestartRecord:
        c = self.component(name)
        if c is None:
            raise KeyError(name)
        old = c.uid
        before = self.truth()
        c.restarts += 1
        c.boot(self.clock.now())
        rec = RestartRecord(self.clock.now(), c.name, by, old, c.uid)
        self.restart_log.append(rec)
        for hook in self.restart_hooks:
            hook(c.name, by, before)  # type: ignore[arg-type]
        return rec

    # --- ground truth -------------------------------------------------------------------------------------
    def truth(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for n, c in self.components.items():
            for k, v in c.truth().items():
                out[f"{n}.{k}"] = v
        for sname, s in self.stores.items():
            for k, v in s.flat().items():
                out[f"store:{sname}.{k}"] = v
        return out

    def config(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for n, c in self.components.items():
            for k, v in c.config().items():
                out[f"{n}.{k}"] = v
        for sname, s in self.stores.items():
            for k, v in s.flat().items():
                out[f"store:{sname}.{k}"] = v
        return out


def _h(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


def _ts(t: float) -> str:
    # Episode time as a log timestamp on a fixed date, so logs read like real ones and stay deterministic.
    base = 1_790_000_000 + t
    import datetime as _dt

    return _dt.datetime.fromtimestamp(base, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
