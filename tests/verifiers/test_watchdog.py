"""Loop watchdog: diagnostic loops and symptom-only repairs, from the journal and a cheap SLI read."""

from __future__ import annotations

from tests.verifiers.fakes import FakeEnv, FakeJournal, LoadShape, ManualClock, action
from verifiers.criteria import WatchdogCriteria
from verifiers.protocols import FeedbackCode, VerdictStatus
from verifiers.watchdog import LoopWatchdog, StepView, detect_loop

READ = [action("kubectl", "get", mutating=False)]
CTX = {"id": "t", "slos": [{"sli": "error_ratio", "op": "<=", "value": 0.05}]}


def test_detect_loop_on_repeats_and_not_on_varied_diagnosis():
    crit = WatchdogCriteria()
    same = [StepView(i, "kubectl get pods", False, 0, "NAME READY") for i in range(4)]
    assert detect_loop(same, crit)["reason"].startswith("`kubectl get pods` ran 4 times")
    varied = [StepView(i, f"kubectl logs svc-{i}", False, 0, "") for i in range(10)]
    assert detect_loop(varied, crit) is None
    # A change resets the run.
    assert detect_loop(same[:3] + [StepView(9, "fix", True)] + same[:2], crit) is None


def test_idle_steps_count_only_while_slis_stay_out_of_band():
    crit = WatchdogCriteria(idle_steps=6, window_steps=20, max_distinct_ratio=0.0)
    steps = [StepView(i, f"cmd {i}", False) for i in range(6)]
    assert detect_loop(steps, crit, slis_out_of_band=False) is None
    assert "6 steps without any change" in detect_loop(steps, crit, slis_out_of_band=True)["reason"]


def _env(health) -> FakeEnv:
    env = FakeEnv(clock=ManualClock(600.0), load=LoadShape(60.0, 20.0), health=health)
    env.handle(r"kubectl get pods", lambda m: "NAME        READY   STATUS\nsvc-a-0     1/1     Running\n")
    env.handle(r"fix", lambda m: "")
    return env


def test_watchdog_reports_a_loop_once_with_what_was_learned():
    env = _env(lambda *a: (0.3, 100))
    j = FakeJournal(env.clock)
    wd = LoopWatchdog(CTX)
    verdicts = []
    for _ in range(6):
        j.run(env, "kubectl get pods", READ)
        env.clock.sleep(5)
        verdicts.append(wd.check(env, j, None))
    fired = [v for v in verdicts if v.status is VerdictStatus.FAIL]
    assert len(fired) == 1 and fired[0].code is FeedbackCode.LOOP_DETECTED
    assert "NAME READY STATUS / svc-a-0 1/1 Running" in fired[0].message and "x4" in fired[0].message


def test_symptom_only_repair_recovers_then_regresses():
    # The change at t=605 brings error ratio down for two cycles; from t=780 it climbs back with no change.
    env = _env(lambda sli, lab, ph, t, c: (0.01 if 605 <= t < 780 else 0.4, 100))
    j = FakeJournal(env.clock)
    env.clock.t = 605.0
    j.run(env, "fix", [action("redis-cli", "config set", [{"key": "redis.maxmemory", "value": "1gb"}])])
    wd = LoopWatchdog(CTX)
    env.clock.t = 770.0
    assert wd.check(env, j, None).passed  # recovered, nothing regressed yet
    env.clock.t = 845.0
    v = wd.check(env, j, None)
    assert v.code is FeedbackCode.RESIDUAL_CAUSE and "recovered" in v.message
    assert wd.check(env, j, None).passed  # reported once


def test_restart_probe_rearm_is_reported_as_residual_cause():
    env = _env(lambda *a: (0.0, 100))
    j = FakeJournal(env.clock)
    j.append("verdict", status="FAIL", verifier="declaration", code="RESTART_REGRESSION", message="m",
             evidence={}, children=[{"status": "FAIL", "verifier": "restart_probe", "code": "RESTART_REGRESSION",
                                     "message": "SLIs regressed", "evidence": {"fault_rearmed": True},
                                     "children": []}])
    wd = LoopWatchdog(CTX)
    v = wd.check(env, j, None)
    assert v.code is FeedbackCode.RESIDUAL_CAUSE
    assert wd.check(env, j, None).passed


def test_the_incident_starting_is_not_a_relapse():
    # Healthy until t=700, then the fault: no change by the agent yet, so nothing to call symptom-only.
    env = _env(lambda sli, lab, ph, t, c: (0.01 if t < 700 else 0.4, 100))
    env.clock.t = 800.0
    j = FakeJournal(env.clock)
    j.run(env, "kubectl get pods", READ)
    assert LoopWatchdog(CTX).check(env, j, None).passed


def _trailing_idle(steps):
    out = []
    for s in reversed(steps):
        if s.mutating:
            break
        out.append(s)
    return out[::-1]


def test_the_incremental_step_log_agrees_with_a_full_read_after_every_step():
    import random

    from verifiers.base import last_mutation_t
    from verifiers.watchdog import StepLog, steps_of

    rng = random.Random(7)
    env = _env(lambda *a: (0.3, 100))
    j = FakeJournal(env.clock)
    log = StepLog()
    held = None
    for i in range(120):
        kind = rng.random()
        if kind < 0.1:  # denied: journalled, never ran
            rec = j.append("command", command=f"deny {i}", actions=READ, ran=False)
            j.append("result", ref=rec["seq"], exit_code=126, denied=True)
        elif kind < 0.15 and held is None:  # its result comes later, after other commands
            held = j.append("command", command=f"slow {i}", actions=READ, ran=True)
        elif kind < 0.45:
            j.run(env, "fix", [action("redis-cli", "config set", [{"key": "redis.maxmemory", "value": "1gb"}])])
        elif kind < 0.5:
            j.run(env, f"opaque {i}", [])  # no actions: a mutating step, but not a mutation for last_mutation_t
        else:
            j.run(env, rng.choice(["kubectl get pods", "kubectl logs x", "redis-cli info"]), READ)
        if held is not None and rng.random() < 0.3:
            j.append("result", ref=held["seq"], exit_code=0, stdout_head="late")
            held = None
        env.clock.sleep(5)
        log.update(j)
        full = steps_of(j)
        assert log.n_steps == len(full)
        assert log.idle == _trailing_idle(full)
        assert log.last_mutation_t == last_mutation_t(j)


class _SinceOnlyJournal(FakeJournal):
    """A journal that lets a reader see only what is new; a full read fails the test."""

    full_reads_allowed = True

    def since(self, seq):
        return [r for r in self._records if r["seq"] > seq]

    def records(self):
        assert self.full_reads_allowed, "the watchdog re-read the whole journal"
        return super().records()

    def executed(self):
        assert self.full_reads_allowed, "the watchdog re-read the whole journal"
        return super().executed()


def test_each_watchdog_step_reads_only_the_new_records():
    env = _env(lambda *a: (0.3, 100))
    j = _SinceOnlyJournal(env.clock)
    wd = LoopWatchdog({"id": "t"})  # no SLOs: the verdict comes from the journal alone
    j.full_reads_allowed = False
    verdicts = []
    for i in range(300):
        j.run(env, "fix" if i % 7 == 0 else "kubectl get pods", None if i % 7 == 0 else READ)
        env.clock.sleep(5)
        verdicts.append(wd.check(env, j, None))
    assert all(v.status is not VerdictStatus.ERROR for v in verdicts)
    assert any(v.code is FeedbackCode.LOOP_DETECTED for v in verdicts)
