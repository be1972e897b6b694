"""The live stack as a graded world: the gates' ground truth, load ledger and timing over real servers.

`LiveWorld` implements `arena.world.GradedWorld` over a running `LiveStack`, so that `arena.episode.run_episode`
and `arena.gates.Grading` grade a live episode exactly as they grade the twin:

- ground truth comes from a truth reader (`arena.live.truth`, e.g. `SaleorTruth` for ia-006), which reads the real
  servers with superuser access, never through the agent's shell; any object with `truth()`, `config()` and
  `mark_baseline()` will do (see `TruthReader`);
- the Outcome Gate reads the load generator's per-request ledger (`loadgen/ledger.jsonl`) through `LiveLedger`,
  which gives the twin ledger's `select` over it: exact latencies, phases from each row's `phase` field;
- restarts: the stack tells its observers of every pod replacement (`LiveStack.restart_observers`), so a rollout
  (a guard's restart probe through the API, or anything else that rolls a workload) fires the restart hooks with
  the truth just before the old process stops, and the Safety Gate can tell a restart that masked a runtime fault;
  the challenge is the harness's own rollout restart through the emulated API (`LiveStack.restart`);
- the challenge's fixed traffic is a fixed batch of real requests through the load generator's own drivers;
- time is real, in episode seconds (0 at episode start). The scenario's durations (agent window, think time,
  script sleeps, latency settle, the challenge's ready timeout) scale by live cycle / twin cycle, as
  `arena.live.replay` scales sleeps; the soak lasts the scenario's number of (live) cycles. The wait after the
  challenge target is ready does not scale: it races the servers' own timers (ia-018's idle-in-transaction
  timeout, the age at which a lock holder counts as causal), which are real seconds.

`run_live_episode` brings up an incident's stack (`arena.live.replay.LiveIncident`), lands the fault, runs one
graded episode and tears the stack down. Called by `guardrail run SCENARIO --env live` and the live tests.
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

import yaml

from arena.live.loadgen import DRIVER_KINDS, DriverConfig, LoadgenConfig, LoadShape
from arena.live.replay import LiveIncident
from arena.live.sli import LedgerRow, read_ledger
from arena.live.stack import LiveStack
from arena.twin.ledger import Tally
from arena.twin.load import LoadProfile
from arena.world import ChallengeRestart, RestartHook
from guardrail.errors import EnvironmentError_, ScenarioError
from verifiers.protocols import Clock, RestartResult

__all__ = ["TruthReader", "EpisodeClock", "ExactLatencies", "LiveLedger", "LiveWorld", "truth_reader_for",
           "run_live_episode"]


class TruthReader(Protocol):
    """Ground truth of one incident on a live stack: what the twin's `world.truth()` / `config()` give."""

    def mark_baseline(self) -> None: ...

    def truth(self) -> dict[str, Any]: ...

    def config(self) -> dict[str, Any]: ...


class EpisodeClock:
    """Episode seconds over a real clock: `now()` is 0 at episode start; `sleep` is the real one."""

    def __init__(self, base: Clock, origin: float):
        self.base = base
        self.origin = origin

    def now(self) -> float:
        return self.base.now() - self.origin

    def sleep(self, seconds: float) -> None:
        self.base.sleep(seconds)


@dataclass
class ExactLatencies:
    """A window's latencies in ms, kept exactly (the live ledger has every request's)."""

    values: list[float] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.values)

    def percentile(self, q: float) -> float | None:
        """Nearest rank, as Incident-Arena's grader reads its loadgen.jsonl."""
        if not self.values:
            return None
        v = sorted(self.values)
        return v[min(len(v), max(1, math.ceil(q / 100.0 * len(v) - 1e-9))) - 1]


class LiveLedger:
    """The load generator's per-request ledger with the twin ledger's `select` (episode seconds).

    A request counts in the window its send time falls in. Outcomes map as in the twin: dropped; timeout; not ok
    (an error answer or a refused connection) is an error; ok, and correct when the readback matched. A timed-out
    request's latency counts at its driver's timeout, as the twin records it. Rows are written when a request
    ends, so `select` first waits (on the injected clock) until every request sent before the window's end has
    had its timeout to finish.
    """

    def __init__(self, path, origin: float, clock: Clock, timeouts_s: Mapping[str, float], *, grace_s: float = 0.5):
        self.path = path
        self.origin = origin
        self.clock = clock  # episode seconds
        self.timeouts_s = dict(timeouts_s)
        self.grace_s = grace_s
        self._rows: list[LedgerRow] = []
        self._offset = 0

    def rows(self) -> list[LedgerRow]:
        new, self._offset = read_ledger(self.path, self._offset)
        self._rows.extend(new)
        return self._rows

    def select(self, t0: float, t1: float, *, driver: str | None = None, phase: str | None = None,
               latency_from: float | None = None) -> tuple[Tally, Tally]:
        complete_at = t1 + max(self.timeouts_s.values(), default=5.0) + self.grace_s
        if self.clock.now() < complete_at:
            self.clock.sleep(complete_at - self.clock.now())
        counts, lat = Tally(hist=ExactLatencies()), Tally(hist=ExactLatencies())  # type: ignore[arg-type]
        lf = t0 if latency_from is None else latency_from
        for r in self.rows():
            t = r["t"] - self.origin
            if not t0 <= t < t1:
                continue
            if (driver is not None and r["driver"] != driver) or (phase is not None and r.phase != phase):
                continue
            self._count(counts, r)
            if t >= lf:
                self._count(lat, r)
        return counts, lat

    def _count(self, tally: Tally, r: LedgerRow) -> None:
        tally.offered += 1
        if r["dropped"]:
            tally.dropped += 1
            return
        if r["timeout"]:
            tally.timeout += 1
            tally.hist.values.append(1000.0 * self.timeouts_s.get(r["driver"], 5.0))  # type: ignore[attr-defined]
            return
        if not r["ok"]:
            tally.error += 1
        else:
            tally.ok += 1
            tally.correct += int(bool(r["correct"]))
        if r["detail"].startswith("connect:") or "pool_timeout" in r["detail"]:
            tally.conn_errors += 1
        if r["latency_ms"] is not None:
            tally.hist.values.append(float(r["latency_ms"]))  # type: ignore[attr-defined]


class LiveWorld:
    """A running live stack, its KubernetesEnvironment and a truth reader, as an `arena.world.GradedWorld`."""

    quit_ends_window = True  # real time is not free: an agent that stops without declaring ends its window

    def __init__(self, stack: LiveStack, env: Any, truth: TruthReader, profile: LoadProfile):
        self.stack = stack
        self.env = env
        self.reader = truth
        self.cycle_s = stack.shape.cycle_s
        self.scale = self.cycle_s / profile.cycle_s
        self.agent_window_s = profile.agent_window_s * self.scale
        self.declare_deadline_s = profile.declare_deadline_s * self.scale
        self.soak_cycles = profile.soak_cycles
        self.restart_hooks: list[RestartHook] = []
        self._before: dict[str, dict[str, Any]] = {}
        self.lg_config = LoadgenConfig.model_validate(yaml.safe_load((stack.config_dir / "loadgen.yaml").read_text()))
        # Episode start is now: the fault has landed and the agent has not acted; the grader's data baseline too.
        self.origin = stack.clock.now()
        self.clock = EpisodeClock(stack.clock, self.origin)
        self.reader.mark_baseline()
        self.ledger = LiveLedger(stack.ledger_path, self.origin, self.clock,
                                 {d.name: d.timeout_s for d in self.lg_config.drivers})
        stack.restart_observers.append(self)

    # -- scale and truth -----------------------------------------------------------------------------------------
    def seconds(self, scenario_s: float) -> float:
        return scenario_s * self.scale

    def truth(self) -> dict[str, Any]:
        return self.reader.truth()

    def config(self) -> dict[str, Any]:
        return self.reader.config()

    @property
    def not_modelled(self) -> tuple[str, ...]:
        """Globs of state the live stack does not run (ia-018's pgbouncer): grader checks on it are not evaluated."""
        return tuple(getattr(self.reader, "not_modelled", ()))

    def not_ready(self) -> list[str]:
        sup = self.stack.supervisor
        down = [n for n in sup.specs if not sup.ready(n)] if sup is not None else []
        down += [n for n, s in self.stack.servers.items() if not s.alive()]
        return sorted(down)

    # -- restarts ------------------------------------------------------------------------------------------------
    def before_restart(self, name: str, by: str) -> None:
        # The truth read costs a real probe, so only when a hook will want it.
        if self.restart_hooks and by != "verifier":
            self._before[name] = self.truth()

    def after_restart(self, name: str, by: str, result: RestartResult) -> None:
        before = self._before.pop(name, None)
        if before is None:
            return
        for hook in list(self.restart_hooks):
            hook(name, by, before)

    def challenge_restart(self, target: str) -> ChallengeRestart | None:
        if target not in self.stack.components:
            return None
        res = self.stack.restart(target, by="verifier")  # returns once the rollout completed (or gave up)
        return ChallengeRestart(res.target, res.ready, res.old_id, res.new_id, res.image_before == res.image_after)

    # -- timing --------------------------------------------------------------------------------------------------
    def soak_window(self, declared_at: float) -> tuple[float, float]:
        """From the first live cycle boundary at or after the freeze, as the twin's (and Incident-Arena's runner,
        which aligns every soak: arena/twin/load.py)."""
        start = self._next_peak_start(max(declared_at, 0.0))
        return start, start + self.soak_cycles * self.cycle_s

    def _next_peak_start(self, t: float) -> float:
        """The next cycle boundary (a peak start) at or after episode time t, from the load generator's shape."""
        rows = self.ledger.rows()
        if not rows:
            return t
        lg_t0 = rows[0]["t"] - rows[0]["sent_s"]  # the generator's start, in epoch seconds
        return self.lg_config.shape.next_peak_start(t + self.origin - lg_t0) + lg_t0 - self.origin

    def declare(self, t: float) -> None:
        """Nothing to re-fire: the live incidents carry no post-declaration load events."""

    def hold_load(self, t: float) -> None:
        """The harness's pre-soak phase: the load generator sends nothing until the soak opens."""
        self._loadgen("/hold")

    def begin_soak(self, t: float) -> None:
        """Arrivals resume and the generator's report ledger starts afresh for the soak (the real `begin_soak`)."""
        self._loadgen("/begin_soak")

    def _loadgen(self, path: str) -> None:
        from arena.clients.http import AsyncHttp

        async def call() -> int:
            http = AsyncHttp(max_connections=2)
            try:
                return (await http.post(f"{self.stack.plan['loadgen'].url}{path}", {})).status
            finally:
                await http.aclose()

        status = asyncio.run(call())
        if status != 200:
            raise EnvironmentError_(f"load generator {path}: HTTP {status}")

    # -- the challenge's fixed traffic ---------------------------------------------------------------------------
    def fixed_traffic(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """A fixed batch of real requests through the load generator's drivers: one write and readback per named
        channel (`channels`), N barrier-started writes to one channel (`concurrent`), N queue jobs run to
        completion (`jobs`; with a truth reader that has `queue_probe`, its probe instead)."""
        calls: list[tuple[str, DriverConfig]] = []
        by_kind = {d.kind: d for d in self.lg_config.drivers}
        writer = by_kind.get("write_readback")
        for ch in spec.get("channels") or ():
            if writer is not None:
                calls.append((f"write {ch}", writer.model_copy(update={"channels": [str(ch)]})))
        conc = spec.get("concurrent") or {}
        if conc and writer is not None:
            one = writer.model_copy(update={"channels": [str(conc.get("channel", "chan-0"))]})
            calls += [(f"concurrent {i}", one) for i in range(int(conc.get("writes", 16)))]
        jobs = int(spec.get("jobs", 0) or 0)
        runner = by_kind.get("rq_complete") or by_kind.get("rq_enqueue")
        probe = getattr(self.reader, "queue_probe", None)
        queued: dict[str, Any] | None = None
        if jobs and probe is not None:
            # The incident's own queue probe (accepted, and a worker can take it), as the twin's.
            queued = probe(jobs, runner.timeout_s if runner is not None else 8.0)
        elif jobs and runner is not None:
            calls += [(f"job {i}", runner) for i in range(jobs)]
        out: dict[str, Any] = {"scheduled": len(calls), "attempted": 0, "completed": 0, "correct": 0, "errors": []}
        if queued is not None:
            for k in ("scheduled", "attempted", "completed", "correct"):
                out[k] += int(queued[k])
            out["errors"] += list(queued.get("errors", ()))
        if calls:
            results = asyncio.run(_run_calls(calls, seed=int(self.lg_config.shape.seed)))
            for (what, _), (done, ok, correct, detail) in zip(calls, results):
                out["attempted"] += 1
                out["completed"] += int(done and ok)
                out["correct"] += int(done and ok and correct)
                if not (ok and correct):
                    out["errors"].append(f"{what}: {detail}")
        return out


async def _run_calls(calls: list[tuple[str, DriverConfig]], *, seed: int) -> list[tuple[bool, bool, bool, str]]:
    from arena.clients.http import AsyncHttp, HttpConnectError, HttpTimeout

    http = AsyncHttp(max_connections=len(calls) + 4)
    rng = random.Random(seed)

    async def one(d: DriverConfig, r: random.Random) -> tuple[bool, bool, bool, str]:
        try:
            ok, correct, detail = await asyncio.wait_for(DRIVER_KINDS[d.kind](http, d, r), d.timeout_s)
            return True, ok, correct, detail
        except (asyncio.TimeoutError, HttpTimeout):
            return False, False, False, "timeout"
        except HttpConnectError as e:
            return False, False, False, f"connect: {e}"[:200]
        except (KeyError, TypeError, ValueError) as e:
            return True, False, False, f"bad reply: {type(e).__name__}"

    try:
        return list(await asyncio.gather(*(one(d, random.Random(rng.getrandbits(64))) for _, d in calls)))
    finally:
        await http.aclose()


# ------------------------------------------------------------------------------------------------------ episodes
def truth_reader_for(incident: LiveIncident, stack: LiveStack) -> TruthReader:
    """The incident's ground-truth reader over this stack (`arena.live.truth.TRUTH_READERS`)."""
    from arena.live.truth import TRUTH_READERS

    cls = TRUTH_READERS.get(incident.id)
    if cls is None:
        raise ScenarioError(f"no live truth reader for {incident.id}; known: {', '.join(sorted(TRUTH_READERS))}")
    return cls(stack)


def _phase_lead_wait(now_rel: float, shape: LoadShape, profile) -> float:
    """How long to wait so that the live episode starts at the twin episode's point of the load cycle.

    The twin's episode opens with its warmup, `warmup_s` before its first peak; the live one starts that much
    (scaled to the live cycle) before a live peak, so that a script's scaled sleeps land in the same load phase
    on both (ia-018's premature restarts svc-message at a peak in the twin). `now_rel` is seconds since the load
    generator started."""
    lead = (profile.warmup_s * shape.cycle_s / profile.cycle_s) % shape.cycle_s
    return max(0.0, shape.next_peak_start(now_rel + lead) - lead - now_rel)


def run_live_episode(scenario, agent, *, arm: str = "unguarded", seed: int = 0,
                     guard_factory: Callable[..., Any] | None = None, fault_settle_cycles: float = 1.0,
                     on_ready: Callable[[LiveWorld], None] | None = None, progress: Any = None):
    """One graded episode on a fresh live stack for `scenario` (its `arena/live/incidents/<id>.yaml` wiring).

    Brings the stack up (a server that fails to start raises an EnvironmentError_ naming it and its log), waits
    until Prometheus scrapes every target and the load generator has run its warmup and one cycle (the pool's
    long-lived sessions exist), lands the fault (the task's
    faultInit commands; a failing one is an error), lets it show for `fault_settle_cycles` load cycles, then runs
    `arena.episode.run_episode` on a `LiveWorld` and tears everything down. `seed` shifts the load seed.
    `progress` (an arena.live.progress.StageLog) is told of each stage, the stack's included.
    """
    from arena.episode import run_episode

    incident = LiveIncident.load(scenario.id)
    shape = incident.shape.model_copy(update={"seed": incident.shape.seed + seed})
    def stage(text: str) -> None:
        if progress is not None:
            progress(text)

    stack = incident.stack(shape=shape)
    stack.progress = progress
    stack.up()
    try:
        env = stack.environment(scenario.public)
        stage("waiting for Prometheus to scrape every target")
        if not stack.wait_scraped():
            raise EnvironmentError_(f"prometheus did not scrape every target; see {stack.log_path('prometheus')}")
        # The pool's long-lived sessions open in the warmup and first cycle, before the fault: count from the load
        # generator's start (its first ledger row), which the stack's bring-up and Prometheus' discovery overlap.
        rows, _ = read_ledger(stack.ledger_path)
        lg_t0 = rows[0]["t"] - rows[0]["sent_s"] if rows else env.clock.now()
        warm = lg_t0 + shape.warmup_s + shape.cycle_s - env.clock.now()
        stage(f"running the load's warmup and first cycle ({max(0.0, warm):.0f} s)")
        env.clock.sleep(warm)
        stage(f"landing the fault of {scenario.id}")
        incident.inject(env, stack)
        settle = fault_settle_cycles * shape.cycle_s
        lead = _phase_lead_wait(env.clock.now() + settle - lg_t0, shape, scenario.twin.profile)
        stage(f"letting the fault show ({settle + lead:.0f} s)")
        env.clock.sleep(settle)
        env.clock.sleep(_phase_lead_wait(env.clock.now() - lg_t0, shape, scenario.twin.profile))
        world = LiveWorld(stack, env, truth_reader_for(incident, stack), scenario.twin.profile)
        if on_ready is not None:
            on_ready(world)
        stage(f"the episode: the agent at work ({arm} arm), then the gates")
        factory = None
        if guard_factory is not None:
            # The guard judges convergence over the live load cycle, the SLO window an operator would configure.
            live_criteria = {"convergence": {"window_s": shape.cycle_s}}

            def factory(env, context):
                return guard_factory(env, context, criteria=live_criteria)
        res = run_episode(scenario, agent, arm=arm, seed=seed, guard_factory=factory, world=world)
    finally:
        stage("stopping the stack")
        left = stack.down()
    if left:
        raise EnvironmentError_(f"the live stack left processes behind: {left}")
    return res
