"""A guarded session killed with SIGKILL in mid-command leaves a journal that `guardrail audit` reads.

The whole process group (guardrail shell, its daemon thread, the bash agent, the shim and redis-cli) is killed
while redis-cli blocks in BLPOP. Every record written before the kill is complete (each is one fsync'd line);
a torn last line, which a kill in the middle of a write would leave, is skipped by the reader.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from guardrail.journal import read_journal


def test_sigkill_mid_command_then_audit(guardrail_cmd, redis_server, tmp_path):
    p = redis_server.port
    redis_server.cli("CONFIG", "SET", "maxmemory", "32mb")  # the agent raises it (lowering is SRE-CAP-006)
    agent = tmp_path / "agent.sh"
    agent.write_text(f"redis-cli -h 127.0.0.1 -p {p} SET job:1 queued\n"
                     f"redis-cli -h 127.0.0.1 -p {p} CONFIG SET maxmemory 64mb\n"
                     f"redis-cli -h 127.0.0.1 -p {p} BLPOP never-filled 600\n")
    journal = tmp_path / "j.jsonl"
    proc = subprocess.Popen([guardrail_cmd, "shell", "--journal", str(journal), "--", "bash", str(agent)],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300  # generous: each wait ends as soon as its event comes
        while True:
            cmds = [r["command"] for r in read_journal(journal) if r["kind"] == "command"] if journal.exists() else []
            if any("BLPOP" in c for c in cmds):
                break
            assert proc.poll() is None, "the session ended before the blocking command"
            assert time.monotonic() < deadline, "the blocking command never reached the guard"
            time.sleep(0.05)
        # Kill once redis-cli blocks, so that the kill lands mid-command (waited for, not a fixed pause).
        while redis_server.cli("CLIENT", "LIST").count("cmd=blpop") != 1:
            assert proc.poll() is None and time.monotonic() < deadline, "redis-cli never blocked"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGKILL

    records = read_journal(journal)
    blpop = next(r for r in records if r["kind"] == "command" and "BLPOP" in r["command"])
    assert not any(r["kind"] == "result" and r.get("ref") == blpop["seq"] for r in records)  # never finished
    seqs = [r["seq"] for r in records]
    assert seqs == list(range(1, len(seqs) + 1))

    def audit():
        out = subprocess.run([guardrail_cmd, "audit", str(journal), "--json"], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    rep = audit()
    assert [s["command"].split()[-2] for s in rep["steps"]] == ["job:1", "maxmemory", "never-filled"]
    assert rep["summary"]["torn"] is False
    assert [u["key"] for u in rep["unpersisted"]] == ["redis.maxmemory"]

    # A kill in the middle of writing a record leaves a torn last line: audit reads up to the record before it.
    with open(journal, "ab") as fh:
        fh.write(b'{"seq":%d,"kind":"result","ref":%d,"exit_co' % (seqs[-1] + 1, blpop["seq"]))
    rep = audit()
    assert rep["summary"]["torn"] is True and rep["summary"]["steps"] == 3
    assert rep["findings"][-1]["kind"] == "torn_tail"
