"""The guard's restart probe on a live stack, through `KubernetesEnvironment` and the emulated API, with its negative
control: ia-018's stack (real PostgreSQL, svc-message as a pod), the probe restarts svc-message through the API and
passes once the new process is up; with the emulator's controller stopped the same probe must not pass.
About 30 s. Skips like the other live tests.
"""

from __future__ import annotations

import pytest

from tests.arena.live.livemarks import live_marks
from tests.verifiers.fakes import FakeJournal

pytestmark = live_marks(300)
FAST = {"restart": {"targets": "all", "post_ready_wait_s": 0, "recheck_convergence": False}}


@pytest.fixture(scope="module")
def live():
    from arena.live.replay import LiveIncident
    from arena.scenario import load_scenario

    scenario = load_scenario("ia-018")
    stack = LiveIncident.load("ia-018").stack()
    stack.up()
    try:
        yield scenario, stack
    finally:
        assert stack.down() == []


def test_the_probe_restarts_the_workload_through_the_api_and_passes(live):
    from verifiers.protocols import VerdictStatus
    from verifiers.restart import RestartProbe

    scenario, stack = live
    env = stack.environment(scenario.public, rollout_timeout_s=60)
    old = stack.supervisor.instance("svc-message")
    v = RestartProbe(scenario.public).check(env, FakeJournal(env.clock), FAST)
    assert v.status is VerdictStatus.PASS, v
    [receipt] = v.evidence["targets"]
    assert receipt["target_service"] == "svc-message" and receipt["rollout"] == "complete"
    assert receipt["old_pod"] == old and receipt["new_pod"] == stack.supervisor.instance("svc-message") != old
    assert stack.supervisor.ready("svc-message")  # the new pod's process answers


def test_with_the_controller_stopped_the_probe_does_not_pass(live):
    from verifiers.protocols import VerdictStatus
    from verifiers.restart import RestartProbe

    scenario, stack = live
    env = stack.environment(scenario.public, rollout_timeout_s=5)
    before = stack.supervisor.instance("svc-message")
    stack.cluster.api.controller.stop()
    try:
        v = RestartProbe(scenario.public).check(env, FakeJournal(env.clock), FAST)
    finally:
        stack.cluster.api.controller.start()
    assert v.status is not VerdictStatus.PASS, v
    assert v.status is VerdictStatus.ERROR and v.evidence["targets"][0]["rollout"] == "stalled", v
    assert stack.supervisor.instance("svc-message") == before  # nothing restarted the process
