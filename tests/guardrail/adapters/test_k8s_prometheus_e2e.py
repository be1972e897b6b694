"""Issue #23's production set-up end to end: `guardrail mcp --env kubernetes:NS --kubeconfig FILE --prometheus URL
--slo slo.yaml --context ctx.yaml`, driven by the official MCP SDK client, as Claude Code would drive it.

The set-up (emulated API server, a real redis-server as the StatefulSet's pod, real kubectl, real Prometheus, the
SLO file) is tests/guardrail/prodcluster.py, shared with the `guardrail shell` e2e.

The flow an agent goes through: a runtime-only repair (redis-cli CONFIG SET at the server) or an in-container one
(the same through `kubectl exec` into the pod) is NOT_DURABLE; the ConfigMap repair plus `kubectl rollout
restart` is held while Prometheus shows the SLO breached (progress notifications reach the client), then accepted
once the SLO holds for the configured windows after the test repairs the exporter, the restart probe having
restarted the StatefulSet through the API (a new redis-server, its receipt in the journal) and re-verified; or
NOT_CONVERGED if the exporter stays breached; with the controller stopped the probe is ERROR/INCONCLUSIVE.
Windows of 2 s. Waits are bounded waits on observed conditions with generous bounds; no timed assertions.
"""

from __future__ import annotations

import threading
import time

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.guardrail.prodcluster import CONFIGMAP_REPAIR, ProdCluster, needs_production_parts, probe_criteria
from tests.guardrail.adapters.test_mcp_server import data

pytestmark = needs_production_parts


def mcp_server(prod: ProdCluster, criteria: str) -> StdioServerParameters:
    return StdioServerParameters(command=prod.guardrail, cwd=str(prod.tmp), env=prod.guard_env(), args=[
        "mcp", *prod.guard_args(criteria), "--journal-dir", str(prod.journals)])


async def _exec(c: Client, command: str) -> dict:
    out = data(await c.call_tool("exec", {"command": command}))
    assert out["ran"] and out["exit_code"] == 0, (command, out)
    return out


def configmap_repair_then_declare(prod: ProdCluster, criteria: str, before_declaring=lambda: None) -> dict:
    """One MCP session: the ConfigMap repair and its rollout, then the declaration's answer."""
    params = mcp_server(prod, criteria)

    async def session():
        async with Client(stdio_client(params)) as c:
            for cmd in CONFIGMAP_REPAIR:
                await _exec(c, cmd)
            before_declaring()
            return data(await c.call_tool("declare_repair_complete", {"summary": "ConfigMap + rollout"}))

    return anyio.run(session)


def check(declared: dict, verifier: str) -> dict:
    return next(c for c in declared["checks"] if c["verifier"] == verifier)


def test_runtime_repair_is_not_durable_then_the_configmap_repair_is_held_until_prometheus_shows_the_slo_met(prod):
    prod.shop.fault()
    # A failed window never ends the wait early: the test decides when the exporter is repaired.
    params = mcp_server(prod, "convergence: {failure_limit: 1000}\n" + probe_criteria())
    progress: list[tuple[float, str]] = []
    held = threading.Event()

    async def on_progress(value, total, message):
        progress.append((value, message or ""))
        # Held while Prometheus shows the SLO breached: the measurements say so, window after window.
        if sum(m.startswith("convergence:") and "(failing)" in m for _, m in progress) >= 2:
            held.set()

    async def session():
        async with Client(stdio_client(params)) as c:
            await _exec(c, prod.runtime_repair())
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
    assert probe["evidence"]["post_restart"]["redis.maxmemory-policy (component=redis; on redis)"] == "allkeys-lru"
    assert probe["evidence"]["convergence_after_restart"]["status"] == "PASS"


def test_the_configmap_repair_while_the_slo_stays_breached_is_not_converged(prod):
    prod.shop.fault()
    declared = configmap_repair_then_declare(prod, "convergence: {max_wait_cycles: 4}\n" + probe_criteria())
    assert declared["accepted"] is False and declared["codes"] == ["NOT_CONVERGED"], declared
    assert check(declared, "convergence")["status"] == "FAIL"
    verdict = next(r for r in prod.journal() if r["kind"] == "verdict" and r["verifier"] == "convergence")
    assert "error_ratio{slo=shop-availability}" in {f["sli"] for f in verdict["evidence"]["failing"]}, verdict
    assert prod.runtime.started.count("redis-0") == 2  # never converged, so never restarted by the probe


def test_with_the_controller_stopped_the_restart_probe_is_an_error_and_the_declaration_is_not_accepted(prod):
    prod.shop.repair()
    declared = configmap_repair_then_declare(prod, "convergence: {failure_limit: 1000}\n" + probe_criteria(5),
                                             before_declaring=prod.api.controller.stop)
    assert declared["accepted"] is False, declared
    probe = check(declared, "restart_probe")
    assert probe["status"] in ("ERROR", "INCONCLUSIVE"), probe
    assert prod.runtime.started.count("redis-0") == 2  # nothing restarted the pod
    verdict = next(r for r in prod.journal() if r["kind"] == "verdict" and r["verifier"] == "restart_probe")
    (receipt,) = verdict["evidence"]["targets"]
    assert receipt["rollout"] == "stalled" and receipt["ready"] is False, receipt


def test_an_in_container_repair_through_kubectl_exec_is_not_durable_and_the_configmap_repair_then_is(prod):
    prod.shop.repair()
    params = mcp_server(prod, "convergence: {failure_limit: 1000}\n" + probe_criteria())

    async def session():
        async with Client(stdio_client(params)) as c:
            exec_out = await _exec(c, prod.in_container_repair())
            policy_in_pod = prod.runtime_policy()
            in_container = data(await c.call_tool("declare_repair_complete", {"summary": "CONFIG SET in the pod"}))
            for cmd in CONFIGMAP_REPAIR:
                await _exec(c, cmd)
            declared = data(await c.call_tool("declare_repair_complete", {"summary": "ConfigMap + rollout"}))
            return exec_out, policy_in_pod, in_container, declared

    exec_out, policy_in_pod, in_container, declared = anyio.run(session)
    # kubectl exec ran redis-cli beside the pod's redis-server: the live server took the change.
    assert exec_out["stdout"].strip() == "OK" and policy_in_pod == "allkeys-lru"
    assert in_container["accepted"] is False and in_container["codes"] == ["NOT_DURABLE"], in_container
    (first, *_) = prod.verdicts("persistence")
    (key,) = first["evidence"]["keys"]
    assert key["via"] == ["kubectl exec"] and key["status"] == "not_durable", key
    # The guard read the effective value the way the change went in: through the same pod.
    assert key["effective"] == "allkeys-lru" and key["declared"] == "noeviction"
    assert any(c.startswith("kubectl exec redis-0 -- redis-cli") for c in key["commands"]), key
    # The ConfigMap repair plus rollout makes the same key durable; accepted, the probe having restarted the pod.
    assert declared["accepted"] is True, declared
    assert check(declared, "persistence")["status"] == "PASS" and check(declared, "restart_probe")["status"] == "PASS"
    assert prod.runtime.started.count("redis-0") == 3 and prod.runtime_policy() == "allkeys-lru"
