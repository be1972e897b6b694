"""Issue #23's production set-up through the shim path: `guardrail shell --env kubernetes:NS --kubeconfig FILE
--prometheus URL --slo slo.yaml --context ctx.yaml -- bash agent.sh`.

The agent is a bash script, as a shell-based agent's commands would be: it runs the real kubectl and redis-cli
through the guard's shims (first on its PATH) and declares with the shim's `declare_repair_complete`, whose exit
code and lines are all it learns. The set-up (emulated API server, a real redis-server as the StatefulSet's pod,
real Prometheus, the SLO file) is tests/guardrail/prodcluster.py, shared with the MCP e2e.

The flow: a runtime-only repair and an in-container one (`kubectl exec redis-0 -- redis-cli CONFIG SET`) are each
NOT_DURABLE (exit 1); the ConfigMap repair plus `kubectl rollout restart` is held while Prometheus shows the SLO
breached (the shim's progress lines on stderr), then accepted (exit 0) once the SLO holds for the configured
windows after the test repairs the exporter, the restart probe having restarted the StatefulSet through the API and
re-verified. Negative control: with the emulator's controller stopped the probe is ERROR/INCONCLUSIVE and the
declaration is refused. Waits are bounded waits on observed lines and conditions; no timed assertions.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

from tests.guardrail.prodcluster import (CONFIGMAP_REPAIR, ProdCluster, needs_production_parts, probe_criteria,
                                         wait_for)

pytestmark = needs_production_parts


class ShellSession:
    """`guardrail shell` running one agent script, its stdout and stderr read line by line as they come."""

    def __init__(self, prod: ProdCluster, criteria: str, script: str, on_stderr=None):
        self.agent = prod.tmp / "agent.sh"
        self.agent.write_text("set -u\n" + script)
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.proc = subprocess.Popen(
            [prod.guardrail, "shell", *prod.guard_args(criteria), "--journal", str(prod.journals / "shell.jsonl"),
             "--", "bash", str(self.agent)],
            cwd=str(prod.tmp), env=prod.guard_env(GUARDRAIL_PROGRESS_EVERY_S="0.5"), text=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.stdout, None), daemon=True),
                        threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr, on_stderr),
                                         daemon=True)]
        for t in self.readers:
            t.start()

    @staticmethod
    def _read(stream, lines: list[str], callback) -> None:
        for line in stream:
            lines.append(line.rstrip("\n"))
            if callback is not None:
                callback(line)

    def wait(self, bound_s: float = 280.0) -> int:
        code = self.proc.wait(timeout=bound_s)
        for t in self.readers:
            t.join(timeout=30)
        return code

    def marks(self) -> dict[str, str]:
        """The script's own `MARK name=value` lines."""
        return dict(line[len("MARK "):].split("=", 1) for line in self.stdout if line.startswith("MARK "))


def declare(label: str, summary: str) -> str:
    return f'declare_repair_complete {summary}\necho "MARK {label}=$?"\n'


def test_through_the_shims_ephemeral_repairs_are_not_durable_and_the_configmap_repair_is_held_until_the_slo_holds(
        prod):
    prod.shop.fault()
    held_messages: set[str] = set()
    held = threading.Event()

    def on_stderr(line: str) -> None:
        # The shim's line every 0.5 s while the guard holds the declaration: Prometheus shows the SLO breached.
        if "held by the guard for" in line and "(failing)" in line:
            held_messages.add(line.split(": ", 2)[-1])
            if len(held_messages) >= 2:
                held.set()

    script = (f"{prod.runtime_repair()}\n" + declare("runtime", "CONFIG SET at runtime")
              + f"{prod.in_container_repair()}\n" + declare("in_container", "CONFIG SET in the pod")
              + "".join(f"{cmd} || exit 9\n" for cmd in CONFIGMAP_REPAIR)
              + declare("configmap", "ConfigMap and rollout"))
    session = ShellSession(prod, "convergence: {failure_limit: 1000}\n" + probe_criteria(), script, on_stderr)
    started_while_held: list[str] = []
    try:
        wait_for(lambda: held.is_set() or session.proc.poll() is not None, "the declaration held", 240)
        assert held.is_set(), (session.stdout, session.stderr)
        started_while_held = list(prod.runtime.started)
        repaired_at = time.time()
        prod.shop.repair()
        code = session.wait()
    finally:
        if session.proc.poll() is None:
            session.proc.kill()
    marks = session.marks()
    assert code == 0, (session.stdout, session.stderr)
    # 1. Both ephemeral repairs: the shim's declare exited 1 with NOT_DURABLE; the in-container one was judged
    # from the live server read through the same pod.
    assert marks["runtime"] == "1" and marks["in_container"] == "1", marks
    assert sum("NOT_DURABLE" in line for line in session.stderr) >= 2, session.stderr
    first, second, *_ = prod.verdicts("persistence")
    assert first["status"] == "FAIL" and second["status"] == "FAIL"
    exec_key = next(k for k in second["evidence"]["keys"] if k["via"] == ["kubectl exec"])
    assert exec_key["status"] == "not_durable" and exec_key["effective"] == "allkeys-lru", exec_key
    assert any(c.startswith("kubectl exec redis-0 -- redis-cli") for c in exec_key["commands"]), exec_key
    # 2. Held while Prometheus showed the SLO breached (the progress lines), accepted once it held after the repair.
    assert marks["configmap"] == "0"
    assert "declare_repair_complete: accepted by the guard" in session.stdout
    assert started_while_held.count("redis-0") == 2  # the probe had not restarted anything yet
    (conv,) = [v for v in prod.verdicts("convergence") if v["status"] == "PASS"]
    assert all(w["t_start"] >= repaired_at - 2 * 2 for w in conv["evidence"]["cycles"][-2:])
    assert "error_ratio{slo=shop-availability}" in conv["evidence"]["samples"]
    # 3. The restart probe restarted the StatefulSet through the API and re-verified the key and the SLOs.
    (probe,) = prod.verdicts("restart_probe")
    assert probe["status"] == "PASS", probe
    assert prod.runtime.started.count("redis-0") == 3
    (receipt,) = probe["evidence"]["targets"]
    assert receipt["rollout"] == "complete" and receipt["old_pod"] != receipt["new_pod"], receipt
    assert probe["evidence"]["post_restart"]["redis.maxmemory-policy (component=redis; on redis)"] == "allkeys-lru"
    assert probe["evidence"]["convergence_after_restart"]["status"] == "PASS"
    assert prod.runtime_policy() == "allkeys-lru"


def test_through_the_shims_with_the_controller_stopped_the_restart_probe_does_not_pass(prod, tmp_path):
    prod.shop.repair()
    go = tmp_path / "go"
    os.mkfifo(go)
    script = ("".join(f"{cmd} || exit 9\n" for cmd in CONFIGMAP_REPAIR)
              + 'echo "MARK rolled_out=yes"\n'
              + f'read -r _ < "{go}"\n'
              + declare("configmap", "ConfigMap and rollout"))
    session = ShellSession(prod, "convergence: {failure_limit: 1000}\n" + probe_criteria(5), script)
    try:
        wait_for(lambda: "rolled_out" in session.marks() or session.proc.poll() is not None, "the rollout done")
        assert session.marks().get("rolled_out") == "yes", (session.stdout, session.stderr)
        prod.api.controller.stop()
        Path(go).write_text("declare\n")
        code = session.wait()
    finally:
        if session.proc.poll() is None:
            session.proc.kill()
    assert session.marks()["configmap"] == "1", (session.stdout, session.stderr)
    assert code == 0  # the agent's own exit: its script went on after the refusal
    (probe,) = prod.verdicts("restart_probe")
    assert probe["status"] in ("ERROR", "INCONCLUSIVE"), probe
    assert prod.runtime.started.count("redis-0") == 2  # nothing restarted the pod
    (receipt,) = probe["evidence"]["targets"]
    assert receipt["rollout"] == "stalled" and receipt["ready"] is False, receipt
