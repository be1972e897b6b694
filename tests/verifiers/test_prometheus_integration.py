"""PrometheusSLISource against a real Prometheus (the Debian package), scraping a real prometheus_client exporter.

The test drives the exporter's traffic through healthy, faulty and recovering phases in short load cycles
(4 s: a 1.6 s peak, then a trough), starts Prometheus on a loopback port from a temp dir with a 0.5 s scrape
interval, waits for `up == 1`, and runs the convergence verifier on it in real time. The same world, replayed
in virtual time through the fake environment's synthetic samples, must get the same verdicts.
Skips when the prometheus binary is absent; leaves no process behind.
"""

from __future__ import annotations

import math
import random
import threading
import time
from dataclasses import dataclass, field

import pytest

from tests.verifiers.fakes import FakeEnv, FakeJournal, LoadShape, ManualClock
from tests.verifiers.promserver import free_port, running_prometheus
from verifiers.clock import RealClock
from verifiers.convergence import ConvergenceCheck
from verifiers.protocols import EnvironmentDescription, VerdictStatus

prometheus_client = pytest.importorskip("prometheus_client")
pytestmark = [pytest.mark.live, pytest.mark.slow]

CYCLE_S, PEAK_S = 4.0, 1.6
CTX = {"id": "prom-it", "components": [],
       "slos": [{"sli": "error_ratio", "op": "<=", "value": 0.05, "driver": "write_readback"},
                {"sli": "goodput", "op": ">=", "value": 0.9}]}
CRIT = {"convergence": {"baseline_min_segments": 1, "min_count": 20, "failure_limit": 2}}


@dataclass
class World:
    """The system under load: a mode timeline (healthy, faulty, recovering) that both telemetry paths read."""

    t0: float
    modes: list[tuple[float, str]] = field(default_factory=list)
    drain_per_s: float = 60.0
    backlog_at_fix: float = 240.0

    def mode(self, t: float) -> tuple[str, float]:
        cur, since = "healthy", self.t0
        for at, m in self.modes:
            if t >= at:
                cur, since = m, at
        return cur, since

    def phase(self, t: float) -> tuple[int, str]:
        c = math.floor((t - self.t0) / CYCLE_S)
        return c, ("peak" if (t - self.t0) - c * CYCLE_S < PEAK_S else "trough")

    def error_p(self, t: float) -> float:
        m, _ = self.mode(t)
        return 0.5 if m == "faulty" and self.phase(t)[1] == "peak" else (0.08 if m == "faulty" else 0.005)

    def latency_s(self, t: float) -> float:
        m, _ = self.mode(t)
        return 0.8 if m == "faulty" and self.phase(t)[1] == "peak" else 0.02

    def backlog(self, t: float) -> float:
        m, since = self.mode(t)
        if m == "faulty":
            return min(self.backlog_at_fix, 40.0 * (t - since))
        if m == "recovering":
            return max(0.0, self.backlog_at_fix - self.drain_per_s * (t - since))
        return 0.0


class Exporter:
    """A real prometheus_client exporter whose counters a traffic thread drives from the World."""

    def __init__(self, world: World, port: int):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

        self.world = world
        self.reg = CollectorRegistry()
        self.requests = Counter("loadgen_requests", "requests", ["driver", "outcome"], registry=self.reg)
        self.latency = Histogram("loadgen_request_duration_seconds", "latency", ["driver"], registry=self.reg,
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5))
        self.phase = Gauge("loadgen_phase", "current phase", ["phase"], registry=self.reg)
        self.cycle = Gauge("loadgen_cycle", "current cycle", registry=self.reg)
        self.backlog = Gauge("backlog", "queued work", ["queue"], registry=self.reg)
        for o in ("ok", "error", "timeout", "dropped"):
            self.requests.labels("write_readback", o)
        self.server, self.server_thread = start_http_server(port, addr="127.0.0.1", registry=self.reg)
        self.stop = threading.Event()
        self.rng = random.Random(11)
        self.thread = threading.Thread(target=self._traffic, daemon=True)
        self.thread.start()

    def _traffic(self) -> None:
        while not self.stop.is_set():
            t = time.time()
            c, ph = self.world.phase(t)
            self.cycle.set(c)
            for p in ("peak", "trough"):
                self.phase.labels(p).set(1 if p == ph else 0)
            self.backlog.labels("jobs").set(self.world.backlog(t))
            for _ in range(6 if ph == "peak" else 2):
                bad = self.rng.random() < self.world.error_p(t)
                self.requests.labels("write_readback", "error" if bad else "ok").inc()
                self.latency.labels("write_readback").observe(self.world.latency_s(t) * self.rng.uniform(0.8, 1.0))
            self.stop.wait(0.02)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prometheus(tmp_path):
    world = World(t0=time.time())
    exp_port = free_port()
    exporter = Exporter(world, exp_port)
    try:
        with running_prometheus(tmp_path, exp_port, up_within_s=120) as url:
            from verifiers.clients.prometheus import PrometheusSLISource

            yield world, PrometheusSLISource(url, timeout_s=30), time.time()
    finally:
        exporter.close()


class PromEnv:
    """An Environment that observes through Prometheus only (no shell, no restarts: convergence needs neither)."""

    def __init__(self, source, extra):
        self.source, self.extra, self._clock = source, extra, RealClock()

    @property
    def clock(self):
        return self._clock

    def sli(self, query, window, *, labels=None, step=None):
        return self.source.sli(query, window, labels=labels, step=step)

    def describe(self):
        return EnvironmentDescription("prometheus", (), cycle_s=CYCLE_S, extra=self.extra)

    def run(self, command):
        raise NotImplementedError

    def restart(self, target):
        raise NotImplementedError


def synthetic_env(world: World, t: float) -> FakeEnv:
    """The same World as per-segment synthetic samples in virtual time (what the twin's SLI source gives)."""

    def health(sli, labels, phase, tm, c):
        p = world.error_p(tm)
        return {"error_ratio": (p, 300), "goodput": (1 - p, 300), "backlog": (world.backlog(tm), 0),
                "latency_p99_ms": (world.latency_s(tm) * 1000, 300), "latency_p95_ms": (world.latency_s(tm) * 950, 300),
                }.get(sli, (0.0, 300))

    return FakeEnv(clock=ManualClock(t), load=LoadShape(CYCLE_S, PEAK_S, start=world.t0), health=health,
                   extra={"incident_start_s": world.modes[0][0]})


def test_convergence_reaches_the_same_verdicts_on_prometheus_as_on_synthetic_samples(prometheus):
    world, source, up_at = prometheus
    # Healthy for two cycles of scraped telemetry (the baseline), then the incident.
    time.sleep(max(0.0, up_at + 2 * CYCLE_S - time.time()))
    world.modes.append((time.time(), "faulty"))
    env = PromEnv(source, {"incident_start_s": world.modes[0][0]})

    # The agent declares while the fault is still there: not converged, naming the failing SLI.
    j = FakeJournal(env.clock)
    j.append("command", command="kubectl get pods", actions=[], ran=True)
    v_fault = ConvergenceCheck(CTX).check(env, j, {**CRIT, "convergence": {**CRIT["convergence"],
                                                                            "max_wait_cycles": 2.5}})
    assert v_fault.status is VerdictStatus.FAIL, v_fault.message
    # The latest failing cycle may be the one under way, judged on whichever of its segments are finished: on a
    # loaded machine that can be a short peak segment where only latency is beyond doubt. So the message names
    # SLIs the fault degrades, and over the cycles judged both ratio SLIs were seen out of band.
    degraded = {"error_ratio", "goodput", "latency_p99_ms", "latency_p95_ms", "backlog"}
    failing = {f["sli"] for f in v_fault.evidence["failing"]}
    assert failing and {f.split("{")[0] for f in failing} <= degraded, failing
    seen = {f["sli"] for c in v_fault.evidence["cycles"] for f in c["failed"]}
    assert {"error_ratio{driver=write_readback}", "goodput"} <= seen, v_fault.evidence["cycles"]

    # The fix: errors stop at once, and the backlog drains over about a cycle. Declared at once.
    t_fix = time.time()
    world.modes.append((t_fix, "recovering"))
    j.append("command", command="fix", actions=[{"tool": "x", "verb": "set", "mutating": True, "keys": []}],
             ran=True)
    j.append("result", ref=j.records()[-1]["seq"], exit_code=0)
    v_fixed = ConvergenceCheck(CTX).check(env, j, {**CRIT, "convergence": {**CRIT["convergence"],
                                                                            "max_wait_cycles": 6}})
    assert v_fixed.status is VerdictStatus.PASS, v_fixed.message
    accepted_after = time.time() - t_fix
    assert accepted_after >= 2 * CYCLE_S  # two full cycles were seen
    bands = {b["sli"]: b for b in v_fixed.evidence["bands"]}
    assert bands["latency_p99_ms"]["source"] == "baseline"  # measured on pre-incident Prometheus data

    # The same world in virtual time, through synthetic per-segment samples: the same verdicts.
    fake = synthetic_env(world, world.modes[0][0])
    jf = FakeJournal(fake.clock)
    jf.append("command", command="kubectl get pods", actions=[], ran=True)
    f_fault = ConvergenceCheck(CTX).check(fake, jf, {**CRIT, "convergence": {**CRIT["convergence"],
                                                                              "max_wait_cycles": 2.5}})
    fake.clock.t = t_fix
    jf.append("command", command="fix", actions=[{"tool": "x", "verb": "set", "mutating": True, "keys": []}],
              ran=True)
    jf.append("result", ref=jf.records()[-1]["seq"], exit_code=0)
    f_fixed = ConvergenceCheck(CTX).check(fake, jf, {**CRIT, "convergence": {**CRIT["convergence"],
                                                                              "max_wait_cycles": 6}})
    assert (f_fault.status, f_fault.code) == (v_fault.status, v_fault.code)
    assert f_fixed.status is v_fixed.status
    # Both accept within one measurement interval of each other (Prometheus adds a scrape of lag).
    assert abs((fake.clock.now() - t_fix) - accepted_after) <= CYCLE_S
