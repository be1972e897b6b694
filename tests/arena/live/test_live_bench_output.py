"""`guardrail bench --env live` output: rows reach results.jsonl only when every pair has run, and an interrupt
starts no queued pair and leaves an earlier run's results as they were. The pairs are stand-ins (no stacks)."""

from __future__ import annotations

import json
import threading

import pytest

from arena.live import bench, stack


@pytest.fixture(autouse=True)
def _not_stopping():
    stack.STOPPING.clear()
    yield
    stack.STOPPING.clear()


def fake_pair(calls, gate: threading.Event | None = None):
    """A pair that returns at once; with a gate, every pair after the first runs until the test opens it."""
    def pair(sid, spec, arm, seed, guard_factory):
        calls.append(spec)
        if gate is not None and len(calls) > 1:
            gate.wait()
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
    gate = threading.Event()
    monkeypatch.setattr(bench, "_pair", fake_pair(calls, gate))
    (tmp_path / "results.jsonl").write_text('{"old": "row"}\n')
    plan = [("ia-006", f"pair-{i}", "guarded") for i in range(20)]

    def ctrl_c(row):  # the signal arrives in the main thread while it waits on the pool, as a Ctrl-C does
        raise KeyboardInterrupt

    before = set(threading.enumerate())
    try:
        # The pair under way (if any) runs until the gate opens: had the interrupt waited for it, or for the
        # queued ones, this call would not return.
        with pytest.raises(KeyboardInterrupt):
            bench.run_live_agreement(plan, tmp_path, jobs=1, on_row=ctrl_c)
        assert stack.STOPPING.is_set()  # and so no live stack comes up after it
    finally:
        gate.set()
    for t in set(threading.enumerate()) - before:  # the pool's worker ends once the pair under way has
        t.join(timeout=60)
        assert not t.is_alive()
    assert len(calls) <= 2, calls  # the pair under way may finish; the queued ones never start
    assert (tmp_path / "results.jsonl").read_text() == '{"old": "row"}\n'
    kept = [json.loads(x)["agent"] for x in (tmp_path / "results.jsonl.partial").read_text().splitlines()]
    assert kept == ["pair-0"]


def test_no_stack_comes_up_once_stopping(tmp_path):
    stack.STOPPING.set()
    with pytest.raises(RuntimeError, match="no new live stack"):
        stack.LiveStack.__new__(stack.LiveStack).up()
