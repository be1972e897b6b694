"""Same scenario, agent and seed give identical episode JSON (apart from wall time); another seed differs."""

from __future__ import annotations

import json

import pytest

from arena.agents import resolve_agent
from arena.episode import run_episode
from arena.scenario import load_scenario
from arena.twin.engine import build_twin


def _episode_json(solution: str, seed: int) -> str:
    sc = load_scenario("ia-011")
    doc = run_episode(sc, resolve_agent(f"replay:{solution}", sc), seed=seed).to_json()
    doc.pop("wall_s")
    return json.dumps(doc, sort_keys=True)


def test_same_seed_same_json():
    for solution in ("reference", "premature", "no-op"):
        assert _episode_json(solution, 7) == _episode_json(solution, 7)


def test_the_ledger_is_identical_for_a_seed_and_differs_across_seeds():
    sc = load_scenario("ia-011")

    def ledger(seed: int) -> list[dict]:
        env = build_twin(sc.twin, seed)
        env.clock.sleep(600)
        return [r.to_json() for r in env.world.ledger.records]

    a, b, c = ledger(3), ledger(3), ledger(4)
    assert a == b
    assert a != c
    # The noise is seeded, not absent: offered counts vary around the profile's rates.
    peaks = {r["offered"] for r in a if r["phase"] == "peak" and r["driver"] == "write_readback" and r["t0"] > 0}
    assert len(peaks) > 1


def test_identical_across_processes_with_different_hash_seeds(tmp_path):
    import os
    import subprocess
    import sys

    docs = []
    for hs in ("1", "2"):
        out = tmp_path / f"ep{hs}.json"
        code = ("import sys; from guardrail.cli import main; "
                f"main(['run', 'ia-011', '--agent', 'replay:reference', '--seed', '5', '--json', {str(out)!r}])")
        r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": hs},
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        doc = json.loads(out.read_text())
        doc.pop("wall_s")
        docs.append(doc)
    assert docs[0] == docs[1]


def test_the_transcript_says_what_the_guard_denied_and_how_long_it_held_the_declaration():
    """`run --json` showed a denial only as exit code 126, and an accepted declaration only at its acceptance."""
    from arena.bench.guarding import bench_guard_factory
    from arena.episode import run_episode
    from arena.agents import make_agent
    from arena.scenario import load_scenario

    sc = load_scenario("ia-011")
    res = run_episode(sc, make_agent("replay:overbroad-pool", sc, 0), arm="guarded", seed=0,
                      guard_factory=bench_guard_factory)
    denied = [e for e in res.transcript if e.get("exit_code") == 126]
    assert denied and "SRE-CAP-001" in denied[0]["denied"] and "ceiling" in denied[0]["denied"]
    accepted = [e for e in res.transcript if e.get("declare") == "accepted"]
    assert accepted and accepted[0]["asked_at"] <= accepted[0]["t"]
    assert accepted[0]["held_s"] == pytest.approx(accepted[0]["t"] - accepted[0]["asked_at"], abs=1e-5)
