"""A guarded session on the Kubernetes environment, end to end: the emulated API server, a real redis-server bound
to the StatefulSet's pod (its redis.conf rendered from a ConfigMap), the real kubectl, the embedded OPA engine and
the full verifier suite.

A runtime-only repair (redis-cli CONFIG SET) is NOT_DURABLE, read against the ConfigMap through the API; the
ConfigMap repair plus a rollout passes persistence and the restart probe (which restarts the pod through the API,
and the new redis-server reads the ConfigMap). Real time, with bounded waits: the controller runs in its thread.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from arena.live.kubeapi import kubectl_path
from guardrail.adapters.session import load_engine
from guardrail.clients.kube import KubeClient
from guardrail.context import IncidentContext
from guardrail.envs.kubernetes import KubernetesEnvironment
from guardrail.guard import Guard
from tests.guardrail.prodcluster import NS, needs_redis_and_kubectl, redis_statefulset
from tests.verifiers.fakes import LoadShape
from verifiers.clock import RealClock
from verifiers.protocols import Sample

KUBECTL = kubectl_path()
pytestmark = [*needs_redis_and_kubectl, pytest.mark.timeout(240)]


class SteadySLIs:
    """An SLI source whose every segment is healthy: the team's Prometheus on a quiet day (the SLO helper's
    PrometheusSLISource plugs in here the same way). One-second load cycles keep the convergence wait short."""

    VALUES = {"error_ratio": 0.0, "goodput": 1.0, "conn_errors": 0.0, "backlog": 0.0, "restarts": 0.0,
              "ready_replicas": 1.0, "offered_rps": 10.0}

    def __init__(self, clock):
        self.clock, self.shape = clock, LoadShape(cycle_s=1.0, peak_s=0.5, start=clock.now() - 3600)

    def sli(self, query, window, *, labels=None, step=None):
        now = self.clock.now()
        return [Sample(a, b, self.VALUES.get(query, 5.0), {**(labels or {}), "phase": phase, "cycle": str(c)}, 100)
                for c, phase, a, b in self.shape.segments(now - window, now)]


@pytest.fixture
def stack(tmp_path):
    with redis_statefulset(tmp_path) as redis:
        api, port, runtime = redis.api, redis.port, redis.runtime
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        context = IncidentContext(id="prod-redis", namespaces=[NS], components=["redis"], restartable=["redis"],
                                  expected_changes=["redis.maxmemory-policy"], declared_sources={"redis.*": "configmap/redis-config:redis.conf"})
        env = KubernetesEnvironment(KubeClient(kubeconfig=str(kubeconfig), namespace=NS), context=context,
                                    kubeconfig=str(kubeconfig), poll_s=0.2, rollout_timeout_s=60,
                                    sli_source=SteadySLIs(RealClock()),
                                    work_dir=tmp_path, shell_env={
                                        "PATH": f"{Path(KUBECTL).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                                        "KUBECACHEDIR": str(tmp_path / "cache"), "HOME": str(tmp_path)})
        assert env.run("kubectl rollout status statefulset/redis --timeout=60s").ok
        criteria = {"convergence": {"default_cycle_s": 1, "max_wait_cycles": 1, "consecutive_cycles": 1},
                    "restart": {"post_ready_wait_s": 0, "poll_s": 0.2, "recheck_convergence": False}}
        guard = Guard.standard(load_engine(), context, env=env, criteria=criteria)
        yield api, env, guard, port, runtime


def verdicts(outcome) -> dict:
    return {v.verifier: v for v in outcome.verdicts}


def test_runtime_only_repair_is_not_durable_and_the_configmap_repair_with_a_rollout_is_accepted(stack):
    api, env, guard, port, runtime = stack
    assert guard.execute(f"redis-cli -h 127.0.0.1 -p {port} CONFIG SET maxmemory-policy allkeys-lru").ok
    first = guard.on_declare()
    assert not first.accepted and [f.code for f in first.feedback] == ["NOT_DURABLE"]
    p = verdicts(first)["persistence"]
    key = next(k for k in p.evidence["keys"] if k["key"] == "redis.maxmemory-policy")
    assert (key["effective"], key["declared"], key["status"]) == ("allkeys-lru", "noeviction", "not_durable")
    assert "redis-config" in key["declared_source"] and any(c.startswith("<api: configmap") for c in key["commands"])

    patch = '{"data": {"redis.conf": "maxmemory 64mb\\nmaxmemory-policy allkeys-lru\\n"}}'
    for cmd in (f"kubectl patch configmap redis-config -p '{patch}'",
                "kubectl rollout restart statefulset/redis",
                "kubectl rollout status statefulset/redis --timeout=60s"):
        res = guard.execute(cmd)
        assert res.ok, (cmd, res.stdout, res.stderr)
    assert runtime.started.count("redis-0") == 2  # the rollout started a new redis-server from the ConfigMap
    second = guard.on_declare()
    v = verdicts(second)
    assert v["persistence"].passed, v["persistence"].message
    assert "restart_probe" in v, {k: (x.status, x.message) for k, x in v.items()}
    assert v["restart_probe"].passed, v["restart_probe"].message  # restarted through the API; the key held
    receipt = v["restart_probe"].evidence["targets"][0]
    assert receipt["rollout"] == "complete" and receipt["old_pod"] != receipt["new_pod"]
    assert runtime.started.count("redis-0") == 3
    assert second.accepted, [f.code for f in second.feedback]


def test_the_restart_probe_with_the_controller_stopped_is_an_error_not_a_pass(stack):
    api, env, guard, port, runtime = stack
    patch = '{"data": {"redis.conf": "maxmemory 64mb\\nmaxmemory-policy allkeys-lru\\n"}}'
    assert guard.execute(f"kubectl patch configmap redis-config -p '{patch}'").ok
    assert guard.execute("kubectl rollout restart statefulset/redis").ok
    assert guard.execute("kubectl rollout status statefulset/redis --timeout=60s").ok
    api.controller.stop()
    env.rollout_timeout_s = 2
    outcome = guard.on_declare()
    probe = verdicts(outcome).get("restart_probe")
    assert probe is not None and probe.status.value == "ERROR", outcome
    assert not outcome.accepted
