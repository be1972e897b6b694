"""`guardrail mcp --transport http` authenticates: the official MCP SDK client against the real CLI server.

No token or a wrong one gets 401 and runs nothing; a right token runs commands; two credentials that name the
same `guardrail-session` get two sessions and two journals, and one cannot use the other's transport session.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from guardrail.adapters.http_gate import Credentials, load_token_file
from guardrail.adapters.mcp_server import SESSION_HEADER
from guardrail.errors import InputError
from guardrail.journal import read_journal



def data(result) -> dict:
    assert not result.is_error, result
    return result.structured_content if result.structured_content is not None else json.loads(result.content[0].text)


def _wait_for_port(port, proc, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("server did not start")

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef"


def _start(guardrail_cmd, tmp_path, port, *extra):
    return subprocess.Popen([guardrail_cmd, "mcp", "--transport", "http", "--port", str(port), "--env", "local",
                             "--journal-dir", str(tmp_path / "journals"), *extra], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def two_agents(guardrail_cmd, tmp_path, free_port_factory):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# per-agent credentials\nalice:{ALICE}\nbob:{BOB}\n")
    tokens.chmod(0o600)
    port = free_port_factory()
    proc = _start(guardrail_cmd, tmp_path, port, "--token-file", str(tokens))
    try:
        _wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp", tmp_path / "journals"
    finally:
        _stop(proc)


def _client(url, token=None, session=None, mode="auto", statuses=None):
    headers = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if session is not None:
        headers[SESSION_HEADER] = session
    hooks = {}
    if statuses is not None:
        async def record(response):
            statuses.append(response.status_code)
        hooks["response"] = [record]
    return Client(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, event_hooks=hooks)),
                  mode=mode)


def _fails_with_401(url, token):
    statuses: list[int] = []

    async def go():
        async with _client(url, token, statuses=statuses) as c:
            await c.call_tool("exec", {"command": "touch ran"})

    with pytest.raises(BaseException):
        anyio.run(go)
    assert statuses and set(statuses) == {401}, statuses


def test_no_token_and_a_wrong_token_get_401_and_run_nothing(two_agents, tmp_path):
    url, jdir = two_agents
    _fails_with_401(url, None)
    _fails_with_401(url, "alice-token-0123456789abcdeX")  # one character off
    _fails_with_401(url, ALICE[:-1])
    for headers in ({}, {"Authorization": f"Basic {ALICE}"}, {"Authorization": "Bearer x"}):
        r = httpx2.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith("Bearer")
    assert not (tmp_path / "ran").exists()
    assert not list(jdir.glob("*.jsonl"))  # no session was even opened


def test_a_right_token_runs_and_a_second_credential_cannot_act_in_the_first_ones_session(two_agents):
    url, jdir = two_agents

    async def agents():
        async with _client(url, ALICE, "shared") as a:
            first = data(await a.call_tool("exec", {"command": "echo from-alice"}))
            a_status = data(await a.call_tool("guard_status", {}))
        async with _client(url, BOB, "shared") as b:
            b_status = data(await b.call_tool("guard_status", {}))
            b_run = data(await b.call_tool("exec", {"command": "echo from-bob"}))
        return first, a_status, b_status, b_run

    first, a_status, b_status, b_run = anyio.run(agents)
    assert first["ran"] and first["stdout"] == "from-alice\n"
    assert b_run["ran"] and b_run["stdout"] == "from-bob\n"
    # Same header, different credentials: different sessions; bob sees none of alice's commands.
    assert a_status["session"] == "http-alice.shared" and b_status["session"] == "http-bob.shared"
    assert a_status["commands"] == 1 and b_status["commands"] == 0
    by_session = {r[0]["session"]: [x["command"] for x in r if x["kind"] == "command"]
                  for r in map(read_journal, jdir.glob("*.jsonl"))}
    assert by_session == {"http-alice.shared": ["echo from-alice"], "http-bob.shared": ["echo from-bob"]}


def test_a_transport_session_opened_by_one_credential_is_refused_to_another(two_agents):
    url, _ = two_agents
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "1"}}}
    accept = {"accept": "application/json, text/event-stream"}
    r = httpx2.post(url, json=init, headers={"Authorization": f"Bearer {ALICE}", **accept})
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "guard_status", "arguments": {}}}
    stolen = httpx2.post(url, json=call, headers={"Authorization": f"Bearer {BOB}", "mcp-session-id": sid,
                                                  "mcp-protocol-version": "2025-06-18", **accept})
    assert stolen.status_code == 403
    own = httpx2.post(url, json=call, headers={"Authorization": f"Bearer {ALICE}", "mcp-session-id": sid,
                                               "mcp-protocol-version": "2025-06-18", **accept})
    assert own.status_code == 200 and "http-alice." in own.text


def test_the_default_token_is_generated_into_a_private_file_named_on_stderr(guardrail_cmd, tmp_path,
                                                                           free_port_factory):
    port = free_port_factory()
    proc = _start(guardrail_cmd, tmp_path, port)
    try:
        line = proc.stderr.readline().decode()
        m = re.search(r"bearer token in (\S+) \(mode 0600\)", line)
        assert m, line
        token_file = Path(m.group(1))
        assert token_file.stat().st_mode & 0o777 == 0o600
        token = token_file.read_text().strip()
        _wait_for_port(port, proc)

        async def go():
            async with _client(f"http://127.0.0.1:{port}/mcp", token) as c:
                return data(await c.call_tool("exec", {"command": "echo ok"}))

        assert anyio.run(go)["stdout"] == "ok\n"
        assert httpx2.post(f"http://127.0.0.1:{port}/mcp", json={}).status_code == 401
    finally:
        _stop(proc)
    assert not token_file.exists()  # removed with the server


@pytest.mark.parametrize("args,needle", [
    (["--token-file", "{open}"], "open to other users"),
    (["--token-file", "{short}"], ":1: a token is at least 16 characters"),
    (["--token-file", "{missing}"], "cannot read token file"),
    (["--no-auth", "--host", "0.0.0.0"], "loopback address only"),
    (["--no-auth", "--token-file", "{open}"], "exclude each other"),
])
def test_unsafe_auth_settings_are_bad_input(guardrail_cmd, tmp_path, args, needle):
    files = {"open": tmp_path / "open", "short": tmp_path / "short", "missing": tmp_path / "missing"}
    files["open"].write_text(f"{ALICE}\n")
    files["open"].chmod(0o644)
    files["short"].write_text("tooshort\n")
    files["short"].chmod(0o600)
    argv = [a.format(**{k: str(v) for k, v in files.items()}) for a in args]
    proc = subprocess.run([guardrail_cmd, "mcp", "--transport", "http", "--port", "1", *argv], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_no_auth_on_loopback_warns_loudly_and_serves(guardrail_cmd, tmp_path, free_port_factory):
    port = free_port_factory()
    proc = _start(guardrail_cmd, tmp_path, port, "--no-auth")
    try:
        assert "WARNING: --no-auth" in proc.stderr.readline().decode()
        _wait_for_port(port, proc)

        async def go():
            async with _client(f"http://127.0.0.1:{port}/mcp", None, "x") as c:
                return data(await c.call_tool("guard_status", {}))

        assert anyio.run(go)["session"] == "http-noauth.x"
    finally:
        _stop(proc)


def test_a_token_file_names_each_credential_and_matches_whole_tokens_only(tmp_path):
    f = tmp_path / "t"
    f.write_text(f"alice:{ALICE}\n{BOB}\n\n# comment\n")
    f.chmod(0o600)
    creds = load_token_file(f)
    assert isinstance(creds, Credentials)
    assert creds.match(ALICE.encode()) == "alice"
    assert creds.match(BOB.encode()).startswith("token-")
    assert creds.match(ALICE.encode()[:-1]) is None and creds.match(b"") is None
    f.write_text(f"alice:{ALICE}\nalice:{BOB}\n")
    with pytest.raises(InputError, match="given twice") as e:
        load_token_file(f)
    assert e.value.line == 2
    os.mkfifo(tmp_path / "fifo", 0o600)
    with pytest.raises(InputError, match="regular file"):
        load_token_file(tmp_path / "fifo")
