"""The journal: durable appends, torn-tail recovery, and the JournalView the verifiers read."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from guardrail.errors import InputError, JournalError
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
    # Every record read back is whole: its own command and the full padding (the torn tail was dropped).
    assert all(r["command"] == f"c{r['seq'] - 1}" and r["pad"] == "x" * 2000 for r in recs)


def _session(j, n):
    for i in range(n):
        mutating = i % 3 == 0
        rec = j.append("command", command=f"c{i}", ran=i % 5 != 4,
                       actions=[{"tool": "redis-cli", "mutating": mutating}], decisions=[{"pad": "x" * 300}])
        j.append("result", ref=rec["seq"], exit_code=0 if rec["ran"] else 126, stdout_head=f"out{i}")


def test_a_long_file_backed_session_keeps_only_a_bounded_tail_in_memory(tmp_path, monkeypatch):
    import guardrail.journal as journal_mod

    p = tmp_path / "j.jsonl"
    j = Journal(p)
    _session(j, 1000)
    assert len(j._tail) == journal_mod.TAIL_RECORDS and j._records is None
    on_disk = read_journal(p)
    assert list(j.records()) == list(on_disk) and len(j.records()) == 2000
    assert [r["seq"] for r in j.records("result")] == [r["seq"] for r in on_disk if r["kind"] == "result"]
    # The newest records, the counts and the executed() count need no read of the file.
    real_read = journal_mod.read_journal
    monkeypatch.setattr(journal_mod, "read_journal", lambda *a: pytest.fail("read the whole file"))
    assert j.records("command")[-1]["command"] == "c999"
    assert len(j.records("command")) == 1000 and j.counts() == {"command": 1000, "result": 1000}
    assert [r["seq"] for r in j.since(1995)] == [1996, 1997, 1998, 1999, 2000]
    assert j.executed_count() == 800
    # Memory holds at most 2 x EXECUTED_TAIL executed() entries; the whole list comes back from the file.
    assert len(j._executed) < 2 * journal_mod.EXECUTED_TAIL
    monkeypatch.setattr(journal_mod, "read_journal", real_read)
    ex = j.executed()
    assert len(ex) == 800 and ex[-1]["command"] == "c998" and ex[-1]["exit_code"] == 0
    assert ex[0]["command"] == "c0" and [e["seq"] for e in ex] == sorted(e["seq"] for e in ex)
    j.close()


def test_executed_is_rebuilt_on_reopen_and_reads_back_old_records(tmp_path):
    p = tmp_path / "j.jsonl"
    with Journal(p) as j:
        _session(j, 300)
        before = j.executed()
    with Journal(p) as j:
        assert j.executed() == before
        assert j.since(3)[0]["seq"] == 4  # older than the tail: read back from the file
        assert len(j.records()) == 600


def test_a_result_is_group_committed_and_the_next_command_makes_it_durable(tmp_path, monkeypatch):
    import guardrail.journal as journal_mod

    synced = []
    monkeypatch.setattr(journal_mod.os, "fsync", lambda fd: synced.append(fd))
    j = Journal(tmp_path / "j.jsonl")
    j.append("command", command="a", ran=True)
    assert len(synced) == 1  # the command is on disk before it runs
    j.append("result", ref=1, exit_code=0)
    j.append("feedback", code="WARN", message="m")
    assert len(synced) == 1
    j.append("command", command="b", ran=True)
    assert len(synced) == 2  # one fsync covers the earlier result too
    j.append("result", ref=4, exit_code=0)
    j.close()
    assert len(synced) == 3  # close leaves nothing unsynced
    strict = Journal(tmp_path / "k.jsonl", group_commit=False)
    strict.append("command", command="a", ran=True)
    strict.append("result", ref=1, exit_code=0)
    assert len(synced) == 5
    strict.close()
    assert len(synced) == 5


def test_in_memory_journal_keeps_every_record():
    j = Journal(None)
    _session(j, 400)
    assert len(j.records()) == 800 and j.records()[0]["seq"] == 1
    assert [r["seq"] for r in j.since(2)][:2] == [3, 4]


def test_the_executed_index_is_bounded_and_older_entries_come_back_from_the_file(tmp_path, monkeypatch):
    """A long session keeps at most 2 x EXECUTED_TAIL entries in memory; executed() still lists every command
    that ran, the same as a journal that keeps everything, including a result that arrives out of order."""
    import guardrail.journal as journal_mod

    monkeypatch.setattr(journal_mod, "EXECUTED_TAIL", 8)
    bounded, everything = Journal(tmp_path / "j.jsonl"), Journal(None)
    for j in (bounded, everything):
        _session(j, 100)
        late = j.append("command", command="late", ran=True, actions=[])
        j.append("command", command="next", ran=True, actions=[])
        j.append("result", ref=late["seq"] + 1, exit_code=0)
        j.append("result", ref=late["seq"], exit_code=3)
    assert len(bounded._executed) < 16 and bounded._executed_dropped > 0
    assert bounded.executed_count() == everything.executed_count() == 82
    ex = bounded.executed()
    assert [e["command"] for e in ex][-2:] == ["late", "next"] and ex[-2]["exit_code"] == 3
    assert [(e["seq"], e["command"], e["exit_code"]) for e in ex] == [
        (e["seq"], e["command"], e["exit_code"]) for e in everything.executed()]
    assert ex == everything.executed()
    bounded.close()


def test_a_batch_shares_one_fsync_at_its_end(tmp_path, monkeypatch):
    import guardrail.journal as journal_mod

    synced: list[int] = []
    monkeypatch.setattr(journal_mod.os, "fsync", lambda fd: synced.append(fd))
    j = Journal(tmp_path / "j.jsonl")
    j.append("command", command="a")
    assert len(synced) == 1
    with j.batch():
        j.append("command", command="b")
        j.append("snapshot", key="k", value=1)
        assert len(synced) == 1  # nothing acted on yet: not durable yet
        # Written already (a crash here loses at most these unsynced lines, never an earlier record).
        assert [r["command"] for r in read_journal(tmp_path / "j.jsonl") if r["kind"] == "command"] == ["a", "b"]
    assert len(synced) == 2
    with j.batch():
        pass
    assert len(synced) == 2  # an empty batch costs no fsync
    j.close()


def test_a_non_utf8_last_record_is_torn_and_reopen_drops_it(tmp_path):
    p = tmp_path / "j.jsonl"
    with Journal(p) as j:
        j.append("command", command="a", ran=True)
    good = p.read_bytes()
    with open(p, "ab") as fh:
        fh.write(b'{"seq":2,"kind":"command","command":"\xff"}\n\n')
    recs = read_journal(p)
    assert recs.torn and recs.torn_line == 2 and recs.torn_bytes == len(p.read_bytes()) - len(good)
    assert [r["command"] for r in recs] == ["a"]
    with Journal(p) as j:
        j.append("command", command="b", ran=True)
    assert [r["kind"] for r in read_journal(p)] == ["command", "recovery", "command"]


def test_a_non_utf8_record_before_the_last_names_its_line(tmp_path):
    p = tmp_path / "j.jsonl"
    p.write_bytes(b'{"seq":1,"kind":"command"}\n\n{"seq":2,"kind":"command","command":"\xff"}\n{"seq":3,"kind":"x"}\n')
    with pytest.raises(InputError) as e:
        read_journal(p)
    assert e.value.line == 3 and str(p) in e.value.one_line() and "UTF-8" in e.value.message


def test_records_carry_their_file_lines(tmp_path):
    p = tmp_path / "j.jsonl"
    p.write_text('\n{"seq":1,"kind":"a"}\n\n\n{"seq":2,"kind":"b"}\n{"seq":3,"ki')
    recs = read_journal(p)
    assert recs.lines == [2, 5] and recs.torn_line == 6


def test_a_journal_under_a_regular_file_is_a_journal_error(tmp_path):
    (tmp_path / "f").write_text("")
    for path in (tmp_path / "f" / "j.jsonl", tmp_path / "f" / "sub" / "j.jsonl"):
        with pytest.raises(JournalError) as e:
            Journal(path)
        assert str(path) in str(e.value) and "not a directory" in str(e.value)
