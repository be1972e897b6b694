"""The journal: durable appends, torn-tail recovery, and the JournalView the verifiers read."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from guardrail.errors import InputError
from guardrail.journal import Journal, read_journal


def test_records_survive_reopen_in_order(tmp_path):
    p = tmp_path / "j.jsonl"
    with Journal(p, session="s1") as j:
        j.append("command", command="kubectl get pods", ran=True, actions=[])
        j.append("result", ref=1, exit_code=0)
    recs = read_journal(p)
    assert [r["kind"] for r in recs] == ["command", "result"]
    assert [r["seq"] for r in recs] == [1, 2]
    assert not recs.torn
    with Journal(p) as j2:
        rec = j2.append("command", command="x", ran=False)
    assert rec["seq"] == 3


def test_torn_last_line_is_skipped_and_nothing_before_it_lost(tmp_path):
    p = tmp_path / "j.jsonl"
    with Journal(p) as j:
        for i in range(5):
            j.append("command", command=f"c{i}", ran=True)
    with open(p, "ab") as fh:
        fh.write(b'{"seq": 6, "kind": "comm')  # a crash mid-write
    recs = read_journal(p)
    assert recs.torn and recs.torn_bytes > 0
    assert [r["command"] for r in recs] == [f"c{i}" for i in range(5)]


def test_reopen_truncates_torn_tail_and_records_recovery(tmp_path):
    p = tmp_path / "j.jsonl"
    with Journal(p) as j:
        j.append("command", command="a", ran=True)
    with open(p, "ab") as fh:
        fh.write(b'{"seq": 2, "kin')
    with Journal(p) as j:
        j.append("command", command="b", ran=True)
    recs = read_journal(p)
    assert not recs.torn
    assert [r["kind"] for r in recs] == ["command", "recovery", "command"]
    assert recs[1]["torn_bytes"] == len(b'{"seq": 2, "kin')


def test_corrupt_middle_line_names_file_and_line(tmp_path):
    p = tmp_path / "j.jsonl"
    p.write_text('{"seq":1,"kind":"command"}\nnot json\n{"seq":3,"kind":"result"}\n')
    with pytest.raises(InputError) as e:
        read_journal(p)
    assert e.value.line == 2 and str(p) in e.value.one_line()


def test_executed_joins_commands_with_results_and_skips_denied(tmp_path):
    j = Journal(None)
    j.append("command", command="redis-cli CONFIG SET maxmemory 64mb", ran=True,
             actions=[{"tool": "redis-cli", "keys": [{"key": "redis.maxmemory", "value": "64mb"}]}])
    j.append("result", ref=1, exit_code=0)
    j.append("command", command="redis-cli FLUSHALL", ran=False, actions=[])
    j.append("result", ref=3, exit_code=126, denied=True)
    ex = j.executed()
    assert len(ex) == 1
    assert ex[0]["command"].startswith("redis-cli CONFIG SET")
    assert ex[0]["actions"][0]["keys"][0]["key"] == "redis.maxmemory"


def test_sigkill_mid_session_leaves_readable_journal(tmp_path):
    """A writer killed with SIGKILL leaves every record it completed readable."""
    p = tmp_path / "j.jsonl"
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(os.getcwd())!r})
        from guardrail.journal import Journal
        j = Journal({str(p)!r})
        i = 0
        while True:
            j.append("command", command="c%d" % i, ran=True, pad="x" * 2000)
            i += 1
            if i == 50:
                print("ready", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    recs = read_journal(p)
    assert len(recs) >= 50
    assert [r["seq"] for r in recs] == list(range(1, len(recs) + 1))
    assert all(json.dumps(r) for r in recs)
