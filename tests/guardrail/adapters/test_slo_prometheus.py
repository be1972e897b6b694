"""`guardrail mcp --env local --prometheus URL --slo FILE`, driven by the official MCP SDK client, against a real
Prometheus scraping a real prometheus_client exporter whose metrics the test moves.

The exporter serves a request counter by status code and a queue-depth gauge. The SLO file is a Sloth spec (an
availability SLO) plus a native backlog ceiling, judged in 2 s windows. A premature declaration (errors still
high, the queue still full) is held: the client gets progress notifications, the session answers guard_status
and read-only commands meanwhile and refuses a change with DECLARATION_PENDING. Once the test repairs the
exporter the declaration is accepted after the SLOs hold for the configured windows. Waits are bounded waits on
observed conditions with generous bounds; no timed assertions.
"""

from __future__ import annotations

import subprocess
import threading
import time

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from guardrail.envs.local import LocalEnvironment
from guardrail.envs.observed import ObservedEnvironment
from guardrail.journal import read_journal
from guardrail.slofile import load_slo_file
from tests.guardrail.adapters.test_mcp_server import data
from tests.verifiers.fakes import FakeJournal
from tests.guardrail.prodcluster import SLO_FILE, running_shop, wait_for
from tests.verifiers.promserver import free_port
from verifiers.clients.prometheus import PrometheusSLISource
from verifiers.convergence import ConvergenceCheck
from verifiers.protocols import FeedbackCode, VerdictStatus

prometheus_client = pytest.importorskip("prometheus_client")
pytestmark = [pytest.mark.live, pytest.mark.slow]

@pytest.fixture
def shop(tmp_path):
    with running_shop(tmp_path) as (exporter, url):
        yield exporter, url


def test_a_premature_declaration_is_held_with_progress_then_accepted_over_mcp(shop, tmp_path, guardrail_cmd):
    exporter, url = shop
    slo = tmp_path / "slo.yaml"
    slo.write_text(SLO_FILE)
    # A failed window never ends this wait early: the test decides when the repair lands.
    criteria = tmp_path / "criteria.yaml"
    criteria.write_text("convergence: {failure_limit: 1000}\n")
    exporter.fault()
    jdir = tmp_path / "journals"
    params = StdioServerParameters(command=guardrail_cmd, cwd=str(tmp_path), args=[
        "mcp", "--env", "local", "--journal-dir", str(jdir), "--prometheus", url, "--slo", str(slo),
        "--criteria", str(criteria)])
    progress: list[tuple[float, str]] = []
    seen_held = threading.Event()

    async def on_progress(value, total, message):
        progress.append((value, message or ""))
        if "convergence:" in (message or "") and sum("convergence:" in m for _, m in progress) >= 2:
            seen_held.set()

    async def session():
        async with Client(stdio_client(params)) as c:
            during: dict = {}

            async def meanwhile():
                await anyio.to_thread.run_sync(lambda: seen_held.wait(120))
                # The declaration is held: the session still answers, reads run, a change waits.
                during["status"] = data(await c.call_tool("guard_status", {}))
                during["read"] = data(await c.call_tool("exec", {"command": "echo still-here"}))
                during["change"] = data(await c.call_tool("exec", {"command": f"touch {tmp_path / 'changed'}"}))
                during["again"] = data(await c.call_tool("declare_repair_complete", {"summary": "again"}))
                exporter.repair()
                during["repaired_at"] = time.time()

            async with anyio.create_task_group() as tg:
                tg.start_soon(meanwhile)
                declared = data(await c.call_tool("declare_repair_complete", {"summary": "fixed it"},
                                                  progress_callback=on_progress))
            return declared, during

    declared, during = anyio.run(session)
    assert during["status"]["declaration_pending"]["stage"] == "convergence"
    assert during["read"]["ran"] and during["read"]["stdout"] == "still-here\n"
    assert not during["change"]["ran"] and "DECLARATION_PENDING" in during["change"]["stderr"]
    assert not (tmp_path / "changed").exists()
    assert during["again"]["accepted"] is False and during["again"]["codes"] == ["DECLARATION_PENDING"]
    # Accepted, once the SLOs held for the configured windows after the repair.
    assert declared["accepted"] is True, declared
    conv = next(c for c in declared["checks"] if c["verifier"] == "convergence")
    assert conv["status"] == "PASS" and "windows of 2 s" in conv["summary"]
    # Progress reached the client while it was held: checks starting and convergence's measurements.
    messages = [m for _, m in progress]
    assert any(m.startswith("checking convergence") for m in messages)
    assert sum("convergence:" in m for m in messages) >= 2
    assert [v for v, _ in progress] == sorted(v for v, _ in progress)
    # The full evidence is in the journal: the windows judged, each SLO's PromQL, its latest samples.
    (records,) = [read_journal(p) for p in jdir.glob("*.jsonl")]
    verdict = next(r for r in records if r["kind"] == "verdict" and r["verifier"] == "convergence")
    ev = verdict["evidence"]
    assert {s["name"] for s in ev["slos"]} == {"shop-availability", "jobs"}
    assert all(c["t_start"] >= during["repaired_at"] - 2 * 2 for c in ev["cycles"][-2:])
    assert "error_ratio{slo=shop-availability}" in ev["samples"]
    held = next(r for r in records if r["kind"] == "declaration_outcome" and r["accepted"])
    assert held["held_s"] > 0


def test_a_breached_slo_stays_not_converged_with_evidence(shop, tmp_path):
    exporter, url = shop
    exporter.fault()
    slo = tmp_path / "slo.yaml"
    slo.write_text(SLO_FILE)
    slos = load_slo_file(slo)
    env = ObservedEnvironment(LocalEnvironment(cwd=tmp_path), PrometheusSLISource(url, timeout_s=5), slos=slos,
                              url=url)
    # Wait until Prometheus holds two whole windows of the fault, so the first measurements have data.
    wait_for(lambda: len([s for s in env.sli("backlog", 10, labels={"slo": "jobs"}) if s.value == 400]) >= 2,
              "two windows of the fault in Prometheus")
    journal = FakeJournal(env.clock)
    journal.append("command", command="kubectl get pods", actions=[], ran=True)
    crit = {"convergence": {**slos.criteria()["convergence"], "max_wait_cycles": 6}}
    v = ConvergenceCheck({}).check(env, journal, crit)
    assert v.status is VerdictStatus.FAIL and v.code is FeedbackCode.NOT_CONVERGED, v.message
    failing = {f["sli"] for f in v.evidence["failing"]}
    assert failing & {"error_ratio{slo=shop-availability}", "backlog{slo=jobs}"}, failing
    assert any(s[2] == 400 for s in v.evidence["samples"]["backlog{slo=jobs}"])
    promql = {s["name"]: s["promql"] for s in v.evidence["slos"]}
    assert promql["shop-availability"] == ('((sum(rate(http_requests_total{code=~"5.."}[2s]))) or vector(0)) / '
                                           '(sum(rate(http_requests_total[2s])))')


def test_prometheus_unreachable_is_an_error_verdict(tmp_path):
    slo = tmp_path / "slo.yaml"
    slo.write_text(SLO_FILE)
    slos = load_slo_file(slo)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = ObservedEnvironment(LocalEnvironment(cwd=tmp_path), PrometheusSLISource(url, timeout_s=2), slos=slos,
                              url=url)
    v = ConvergenceCheck({}).check(env, FakeJournal(env.clock), slos.criteria())
    assert v.status is VerdictStatus.ERROR
    assert "the SLI source failed 3 times in a row" in v.message and "Connection" in v.message


def test_promql_prometheus_refuses_is_bad_input_at_start_naming_its_line(shop, tmp_path, guardrail_cmd):
    _, url = shop
    slo = tmp_path / "slo.yaml"
    slo.write_text(SLO_FILE.replace("backlog: {query: 'sum(queue_depth)'", "backlog: {query: 'sum(queue_depth'"))
    proc = subprocess.run([guardrail_cmd, "mcp", "--env", "local", "--prometheus", url, "--slo", str(slo)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    entry = slo.read_text().splitlines().index("  - name: jobs") + 1
    assert line.startswith(f"error: {slo}:{entry}: SLO jobs: Prometheus refuses its query: ")
    assert "parse error" in line and "\\" not in line
