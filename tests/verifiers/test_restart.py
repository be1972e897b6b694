"""Restart probe: restarts only what the context allows, waits for ready, and reports what reverted."""

from __future__ import annotations

from tests.verifiers.fakes import FakeEnv, FakeJournal, ManualClock, action, comp
from tests.verifiers.test_persistence import REDIS_ACTION, REDIS_SET, helm_upgrade_maxmemory
from verifiers.protocols import FeedbackCode, VerdictStatus
from verifiers.restart import RestartProbe

CTX = {"id": "t", "components": ["redis-queue", "mariadb"], "restartable": ["redis-queue"],
       "not_restartable": ["mariadb"], "extra": {"helm_release": "erpnext"},
       "slos": [{"sli": "error_ratio", "op": "<=", "value": 0.05}]}
FAST = {"restart": {"post_ready_wait_s": 5.0, "poll_s": 2.0}, "convergence": {"max_wait_cycles": 4}}


def env_with(health=None, ready_after=0.0) -> FakeEnv:
    env = FakeEnv(clock=ManualClock(600.0), components=[comp("redis-queue", kind="StatefulSet"),
                                                       comp("mariadb", kind="StatefulSet", stateful=True)],
                  ready_after_restart_s=ready_after, health=health)
    env.helm["erpnext"] = {"redis-queue": {"master": {"extraFlags": ["--maxmemory 2mb"]}}}
    env.layer("redis-queue").declared["maxmemory"] = "2097152"
    return env


def test_ephemeral_change_reverts_on_restart_and_is_named():
    env = env_with()
    j = FakeJournal(env.clock)
    j.run(env, REDIS_SET, [REDIS_ACTION])
    v = RestartProbe(CTX).check(env, j, FAST)
    assert v.status is VerdictStatus.FAIL and v.code is FeedbackCode.RESTART_REGRESSION
    assert env.restarts == ["redis-queue"]  # only the touched, restartable component
    assert "redis.maxmemory" in v.message and "from 67108864 to 2097152" in v.message
    assert "helm upgrade erpnext" in v.message
    r = v.evidence["targets"][0]
    assert r["old_pod"] != r["new_pod"] and r["ready"] and r["image_identity_unchanged"]
    assert v.evidence["pre_restart"] != v.evidence["post_restart"]


def test_durable_change_survives_and_slis_reconverge():
    env = env_with()
    helm_upgrade_maxmemory(env, "64mb", 64 * 1024 * 1024)
    j = FakeJournal(env.clock)
    j.run(env, REDIS_SET, [REDIS_ACTION])
    v = RestartProbe(CTX).check(env, j, FAST)
    assert v.status is VerdictStatus.PASS, v.message
    assert v.evidence["convergence_after_restart"]["status"] == "PASS"
    # Convergence after the restart was judged on cycles that began after the pod was ready.
    assert v.evidence["convergence_after_restart"]["evidence"]["window_start"] >= v.evidence["ready_at"]


def test_never_restarts_a_forbidden_store_even_when_touched():
    env = env_with()
    env.handle(r"mysql -e .*", lambda m: "")
    j = FakeJournal(env.clock)
    j.run(env, 'mysql -e "SET GLOBAL max_user_connections=0"',
          [action("mysql", "set global", [{"key": "mariadb.max_user_connections", "value": 0}], layer="runtime",
                  target={"kind": "component", "name": "mariadb"})])
    ctx = dict(CTX, restartable=["redis-queue", "mariadb"])  # even listed twice, the forbid wins
    v = RestartProbe(ctx).check(env, j, dict(FAST, restart={"targets": "touched", "post_ready_wait_s": 0}))
    assert "mariadb" not in env.restarts
    assert v.status is VerdictStatus.INCONCLUSIVE and "mariadb" in v.message


def test_nothing_restartable_is_inconclusive_not_a_pass():
    env = env_with()
    v = RestartProbe({"components": ["mariadb"]}).check(env, FakeJournal(env.clock), FAST)
    assert v.status is VerdictStatus.INCONCLUSIVE and env.restarts == []


def test_restarting_all_skips_what_the_cluster_does_not_run():
    """`touched_or_all` with nothing restartable touched restarts the listed components that exist here only."""
    env = env_with()
    ctx = dict(CTX, restartable=["redis-queue", "svc-auth"])  # the runbook names a deployment this cluster lacks
    v = RestartProbe(ctx).check(env, FakeJournal(env.clock), dict(FAST, restart={"targets": "touched_or_all",
                                                                              "post_ready_wait_s": 0}))
    assert env.restarts == ["redis-queue"], env.restarts
    assert v.status is not VerdictStatus.ERROR, v.message


def test_waits_for_ready_in_the_environment_clock():
    env = env_with(ready_after=40.0)
    helm_upgrade_maxmemory(env, "64mb", 64 * 1024 * 1024)
    j = FakeJournal(env.clock)
    j.run(env, REDIS_SET, [REDIS_ACTION])
    t0 = env.clock.now()
    v = RestartProbe(CTX).check(env, j, dict(FAST, convergence={"max_wait_cycles": 4}))
    assert v.status is VerdictStatus.PASS, v.message
    assert v.evidence["ready_at"] - t0 >= 40.0


def test_component_that_never_gets_ready_is_a_regression():
    env = env_with(ready_after=10_000.0)
    v = RestartProbe(CTX).check(env, FakeJournal(env.clock),
                                dict(FAST, restart={"ready_timeout_s": 60, "poll_s": 5}))
    assert v.code is FeedbackCode.RESTART_REGRESSION and "did not become ready" in v.message


def test_fault_rearmed_by_restart_is_a_regression_with_the_flag():
    # Settings hold, but the component boots into the fault again (like a boot-time lock leak).
    state = {"broken_since": None}

    def health(sli, labels, phase, t, c):
        broken = state["broken_since"] is not None and t >= state["broken_since"]
        return (0.5 if broken else 0.0, 100)

    env = env_with(health=health)
    env.on_restart.append(lambda target: state.update(broken_since=env.clock.now()))
    v = RestartProbe(CTX).check(env, FakeJournal(env.clock), FAST)
    assert v.code is FeedbackCode.RESTART_REGRESSION and v.evidence["fault_rearmed"] is True
    assert "SLIs regressed" in v.message
