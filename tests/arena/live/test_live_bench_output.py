"""`guardrail bench --env live` output: rows reach results.jsonl only when every pair has run, and an interrupt
starts no queued pair and leaves an earlier run's results as they were. The pairs are stand-ins (no stacks)."""

from __future__ import annotations

import json
import time

import pytest

from arena.live import bench, stack


@pytest.fixture(autouse=True)
def _not_stopping():
    stack.STOPPING.clear()
    yield
    stack.STOPPING.clear()


def fake_pair(calls, seconds=0.0):
    def pair(sid, spec, arm, seed, guard_factory):
        calls.append(spec)
        time.sleep(seconds)
        return {"scenario": sid, "agent": spec, "arm": arm, "agree": True, "episodes": {}}
    return pair


def test_results_replace_the_earlier_ones_only_when_every_pair_has_run(tmp_path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(bench, "_pair", fake_pair(calls))
    (tmp_path / "results.jsonl").write_text('{"old": "row"}\n')
    rows = bench.run_live_agreement([("ia-006", "a", "guarded"), ("ia-006", "b", "guarded")], tmp_path)
    assert [r["agent"] for r in rows] == ["a", "b"]
    lines = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [x["agent"] for x in lines] == ["a", "b"]
    assert json.loads((tmp_path / "agreement.json").read_text())["agree"] == 2
    assert not (tmp_path / "results.jsonl.partial").exists()


def test_an_interrupt_starts_no_queued_pair_and_keeps_the_earlier_results(tmp_path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(bench, "_pair", fake_pair(calls, seconds=0.2))
    (tmp_path / "results.jsonl").write_text('{"old": "row"}\n')
    plan = [("ia-006", f"pair-{i}", "guarded") for i in range(20)]

    def ctrl_c(row):  # the signal arrives in the main thread while it waits on the pool, as a Ctrl-C does
        raise KeyboardInterrupt

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        bench.run_live_agreement(plan, tmp_path, jobs=1, on_row=ctrl_c)
    assert time.monotonic() - start < 2  # not the 4 s the queued pairs would take
    assert stack.STOPPING.is_set()  # and so no live stack comes up after it
    time.sleep(0.5)
    assert len(calls) <= 3, calls  # the pair under way may finish; the queued ones never start
    assert (tmp_path / "results.jsonl").read_text() == '{"old": "row"}\n'
    kept = [json.loads(x)["agent"] for x in (tmp_path / "results.jsonl.partial").read_text().splitlines()]
    assert kept == ["pair-0"]


def test_no_stack_comes_up_once_stopping(tmp_path):
    stack.STOPPING.set()
    with pytest.raises(RuntimeError, match="no new live stack"):
        stack.LiveStack.__new__(stack.LiveStack).up()
