"""`guardrail mcp --transport http` stays up and bounded under a flood of session names and an oversized request:
the real CLI server in a subprocess, measured from outside through /proc/PID."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx2
import pytest

from guardrail.adapters.http_gate import MAX_REQUEST_BYTES
from guardrail.adapters.session import GuardSessions, SessionLimitError, load_engine
from guardrail.context import IncidentContext

TOKEN = "flood-token-0123456789abcdef"
PROTOCOL = "2026-07-28"


def _call(tool: str, arguments: dict, rid: int = 1) -> dict:
    meta = {"io.modelcontextprotocol/protocolVersion": PROTOCOL,
            "io.modelcontextprotocol/clientInfo": {"name": "flood", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "_meta": meta}}


def _headers(session: str | None = None, tool: str = "guard_status") -> dict:
    h = {"authorization": f"Bearer {TOKEN}", "accept": "application/json, text/event-stream",
         "content-type": "application/json", "mcp-protocol-version": PROTOCOL, "mcp-method": "tools/call",
         "mcp-name": tool}
    if session is not None:
        h["guardrail-session"] = session
    return h


def _status(pid: int) -> tuple[int, int]:
    """(open file descriptors, VmRSS KB) of a process."""
    fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    rss = next(int(ln.split()[1]) for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
               if ln.startswith("VmRSS:"))
    return fds, rss


@pytest.fixture
def capped_server(guardrail_cmd, tmp_path, free_port_factory):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"flood:{TOKEN}\n")
    tokens.chmod(0o600)
    port = free_port_factory()
    proc = subprocess.Popen([guardrail_cmd, "mcp", "--transport", "http", "--port", str(port), "--env", "local",
                             "--journal-dir", str(tmp_path / "journals"), "--token-file", str(tokens),
                             "--max-sessions", "16"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", proc, tmp_path / "journals"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _result(r) -> dict:
    assert r.status_code == 200, r.text[:500]
    text = r.text
    if text.startswith("event:") or "\ndata:" in text or text.startswith("data:"):
        text = next(ln[5:] for ln in text.splitlines() if ln.startswith("data:"))
    return json.loads(text)["result"]


# 10,000 requests: about 100 s on an idle machine, and over the suite's 300 s default on a busy one (load ~25, where it
# was cut off mid-flood); the flood's own waits (900 s per thread) are the bound.
@pytest.mark.timeout(3600)
def test_ten_thousand_session_names_keep_the_servers_fds_and_memory_bounded(capped_server):
    url, proc, jdir = capped_server
    with httpx2.Client(timeout=60) as http:
        # Warm up: the first sessions open, so the baseline holds a full server's worth of them.
        for i in range(16):
            assert not _result(http.post(url, json=_call("guard_status", {}), headers=_headers(f"s{i}")))["isError"]
        fds0, rss0 = _status(proc.pid)
        refused: list[str] = []
        lock = threading.Lock()

        def flood(start: int) -> None:
            with httpx2.Client(timeout=60) as h:
                for i in range(start, 10_016, 4):
                    res = _result(h.post(url, json=_call("guard_status", {}), headers=_headers(f"flood-{i}")))
                    if res.get("isError"):
                        with lock:
                            refused.append(res["content"][0]["text"])

        threads = [threading.Thread(target=flood, args=(16 + k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(900)
        assert not any(t.is_alive() for t in threads)
        fds1, rss1 = _status(proc.pid)
        # The sessions already open still answer.
        again = _result(http.post(url, json=_call("guard_status", {}), headers=_headers("s3")))
    assert proc.poll() is None
    assert len(refused) == 10_000 and "new session refused" in refused[0] and "16 sessions" in refused[0]
    assert not again["isError"]
    assert len(list(jdir.glob("*.jsonl"))) == 16
    assert fds1 - fds0 < 32, (fds0, fds1)
    assert rss1 - rss0 < 100 * 1024, (rss0, rss1)  # KB: generous; 10,000 open sessions would be far above


def test_a_100_mb_request_is_refused_with_413_and_bounded_memory(capped_server):
    url, proc, jdir = capped_server
    _, rss0 = _status(proc.pid)
    chunk = b"x" * (1024 * 1024)

    def body():
        yield b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"exec","arguments":{"command":"'
        for _ in range(100):
            yield chunk
        yield b'"}}}'

    with httpx2.Client(timeout=120) as http:
        declared = http.post(url, content=b"".join(body()), headers=_headers(tool="exec"))
        streamed = http.post(url, content=body(), headers=_headers(tool="exec"))  # chunked: no length to trust
        tiny_over = http.post(url, content=b" " * (MAX_REQUEST_BYTES + 1), headers=_headers(tool="exec"))
        unauth = http.post(url, content=b"".join(body()), headers={"content-type": "application/json"})
    _, rss1 = _status(proc.pid)
    assert declared.status_code == 413 and streamed.status_code == 413 and tiny_over.status_code == 413
    assert unauth.status_code == 401  # the token is checked first: an anonymous flood costs no parsing
    assert proc.poll() is None
    assert not list(jdir.glob("*.jsonl"))
    assert rss1 - rss0 < 50 * 1024, (rss0, rss1)


def test_an_idle_session_gives_its_place_and_its_name_reopens_its_journal(tmp_path):
    now = [0.0]
    sessions = GuardSessions(load_engine(), IncidentContext(), journal_dir=tmp_path, max_sessions=2,
                             idle_close_s=60, clock=lambda: now[0])
    a = sessions.get("a")
    a.journal.append("note", text="before")
    sessions.get("b")
    with pytest.raises(SessionLimitError, match="already serves 2 sessions"):
        sessions.get("c")
    now[0] = 61.0
    sessions.get("b")  # b is in use again; a has been idle for 61 s
    sessions.get("c")  # a gives its place
    assert sorted(sessions.keys()) == ["b", "c"]
    now[0] = 200.0
    reopened = sessions.get("a")  # b and c idle: the oldest, b, makes room
    kinds = [r["kind"] for r in reopened.journal.records()]
    sessions.close()
    assert kinds[:4] == ["session_start", "note", "session_closed", "session_start"]
    assert [int(r["seq"]) for r in reopened.journal.records()] == list(range(1, len(kinds) + 1))
