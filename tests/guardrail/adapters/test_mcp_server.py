"""`guardrail mcp`, driven by the official MCP SDK's own client over stdio and streamable HTTP.

The stdio and HTTP servers are the real CLI in a subprocess (real normaliser, embedded OPA, shipped policies/,
`--env local`). The declaration test runs the server in a thread so it can plug in a declaration check.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

import anyio
import httpx2
import pytest
import uvicorn
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from guardrail.adapters.mcp_server import SESSION_HEADER, build_server
from guardrail.adapters.session import GuardSessions, load_engine
from guardrail.audit import UnpersistedChangesCheck
from guardrail.context import IncidentContext
from guardrail.envs.local import LocalEnvironment
from guardrail.journal import read_journal
from verifiers.protocols import FeedbackCode


def data(result) -> dict:
    assert not result.is_error, result
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


def journals(d):
    return {p.name: read_journal(p) for p in sorted(d.glob("*.jsonl"))}


def commands_in(records):
    return [r["command"] for r in records if r["kind"] == "command"]


def test_stdio_denies_flushall_runs_echo_and_declares(guardrail_cmd, tmp_path):
    jdir = tmp_path / "journals"
    # The default criteria: a convergence wait would be 8 minutes of 60 s cycles (past the test's timeout).
    params = StdioServerParameters(command=guardrail_cmd, cwd=str(tmp_path),
                                   args=["mcp", "--env", "local", "--journal-dir", str(jdir)])

    async def session():
        async with Client(stdio_client(params)) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            assert {"exec", "declare_repair_complete", "guard_status"} <= tools
            # The same rule fires for both actions: the agent reads it once.
            denied = data(await c.call_tool("exec", {"command": "redis-cli FLUSHALL; redis-cli FLUSHALL"}))
            hi = data(await c.call_tool("exec", {"command": "echo hi"}))
            declared = data(await c.call_tool("declare_repair_complete", {"summary": "nothing to fix"}))
            status = data(await c.call_tool("guard_status", {}))
            return denied, hi, declared, status

    denied, hi, declared, status = anyio.run(session)
    assert denied["denied"] and denied["exit_code"] == 126
    assert denied["rules"] == ["SRE-DATA-001"] and len(denied["messages"]) == 1
    assert denied["stderr"].count("FLUSHALL deletes every key") == 1
    assert hi["ran"] and hi["exit_code"] == 0 and hi["stdout"] == "hi\n"
    # No SLI source behind a bare shell: the guard says at once that it cannot judge convergence and what the
    # operator must configure, and does not accept what it could not verify.
    assert declared["accepted"] is False and declared["verdict"] == "REJECTED"
    assert declared["codes"] == ["NO_SLI_SOURCE"]
    assert "--prometheus URL --slo FILE" in declared["feedback"][0]["message"]
    assert declared["checks"][-1] == {"verifier": "convergence", "status": "INCONCLUSIVE", "code": "NO_SLI_SOURCE",
                                      "summary": declared["feedback"][0]["message"]}
    assert "evidence" not in declared["feedback"][0]  # the evidence is in the journal
    assert status["commands"] == 2 and status["denied"] == 1 and status["declarations"] == 1
    (records,) = journals(jdir).values()
    assert commands_in(records) == ["redis-cli FLUSHALL; redis-cli FLUSHALL", "echo hi"]
    assert [r["kind"] for r in records].count("declare") == 1


TOKEN = "test-token-0123456789abcdef"


@pytest.fixture
def http_server(guardrail_cmd, tmp_path, free_port_factory):
    port = free_port_factory()
    jdir = tmp_path / "journals"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"agents:{TOKEN}\n")
    tokens.chmod(0o600)
    proc = subprocess.Popen([guardrail_cmd, "mcp", "--transport", "http", "--port", str(port), "--env", "local",
                             "--journal-dir", str(jdir), "--token-file", str(tokens)], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp", jdir
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_for_port(port, proc=None, timeout=300.0):  # generous: ends as soon as the port answers
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("server did not start")


def test_http_sessions_have_separate_journals(http_server):
    url, jdir = http_server

    async def agent(name, commands, mode="legacy", headers=None):
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}", **(headers or {})})
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as c:
            out = [data(await c.call_tool("exec", {"command": cmd})) for cmd in commands]
            return out, data(await c.call_tool("guard_status", {}))

    async def both():
        return (await agent("a", ["echo alpha", "redis-cli FLUSHALL"]),
                await agent("b", ["echo beta"]),
                await agent("c", ["echo gamma"], mode="auto", headers={SESSION_HEADER: "team-c"}))

    (a_out, a_st), (b_out, b_st), (c_out, c_st) = anyio.run(both)
    assert a_out[0]["stdout"] == "alpha\n" and a_out[1]["denied"] and a_out[1]["rules"] == ["SRE-DATA-001"]
    assert b_out[0]["stdout"] == "beta\n" and c_out[0]["stdout"] == "gamma\n"
    assert a_st["session"] != b_st["session"] != c_st["session"]
    assert (a_st["commands"], b_st["commands"], c_st["commands"]) == (2, 1, 1)
    by_session = {r[0]["session"]: commands_in(r) for r in journals(jdir).values()}
    assert by_session[a_st["session"]] == ["echo alpha", "redis-cli FLUSHALL"]
    assert by_session[b_st["session"]] == ["echo beta"]
    assert by_session["http-agents.team-c"] == ["echo gamma"]
    assert len(by_session) == 3


def test_declare_returns_structured_feedback_until_the_change_is_durable(redis_server, tmp_path, free_port_factory):
    """A runtime-only CONFIG SET is not durable: the declaration is refused with NOT_DURABLE, naming the key."""
    sessions = GuardSessions(load_engine(), IncidentContext(), journal_dir=tmp_path,
                             env_factory=lambda ctx: LocalEnvironment(cwd=tmp_path),
                             declaration_checks=[UnpersistedChangesCheck()])
    app = build_server(sessions).streamable_http_app()
    port = free_port_factory()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        _wait_for_port(port)

        async def session():
            async with Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp"), mode="legacy") as c:
                set_ = data(await c.call_tool("exec", {
                    "command": f"redis-cli -h 127.0.0.1 -p {redis_server.port} CONFIG SET maxmemory 64mb"}))
                return set_, data(await c.call_tool("declare_repair_complete", {"summary": "raised maxmemory"}))

        set_, declared = anyio.run(session)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sessions.close()
    assert set_["ran"] and set_["exit_code"] == 0
    assert redis_server.cli("CONFIG", "GET", "maxmemory").splitlines()[-1] == str(64 * 1024 * 1024)
    assert declared["accepted"] is False
    (fb,) = declared["feedback"]
    assert fb["code"] == "NOT_DURABLE" and "redis.maxmemory" in fb["message"]
    assert declared["checks"][0]["status"] == "FAIL"
    # The answer is short; the evidence is in the journal it names.
    (journalled,) = [r for r in read_journal(declared["journal"]) if r["kind"] == "feedback"]
    assert journalled["evidence"]["pending"][0]["layer"] == "runtime"


def test_unknown_environment_is_bad_input(guardrail_cmd, tmp_path):
    proc = subprocess.run([guardrail_cmd, "mcp", "--env", "nosuch"], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: --env: unknown environment 'nosuch'")
    assert len(proc.stderr.strip().splitlines()) == 1
