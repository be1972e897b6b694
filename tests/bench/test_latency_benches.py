"""Smoke runs of bench/policy_latency.py and bench/guard_load.py: tiny sizes, real engines, real server process.

They check that the benches run and report what their docs promise (the memo-off headline keys, the memo hit
rate, the fsync floor; no dropped or duplicated journal records, RSS by decision count), not the figures: those
depend on the machine and are read from the full runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str, out: Path) -> dict:
    subprocess.run([sys.executable, str(ROOT / "bench" / script), *args, "--out", str(out)], check=True,
                   capture_output=True, text=True, timeout=120)
    return json.loads(out.read_text())


def test_policy_latency_reports_memo_off_headlines_and_the_hit_rate(tmp_path):
    doc = _run("policy_latency.py", "--n", "60", out=tmp_path / "pl.json")
    for key in ("embedded_p99_ms", "guard_before_p99_ms", "rest_p99_ms", "embedded_memo_p99_ms",
                "guard_before_nofsync_p99_ms", "fsync_p99_ms", "bindings_floor_p99_ms"):
        assert doc[key] > 0, key
    assert 0.0 <= doc["embedded_memo_hit_rate"] < 1.0  # the first pass over the corpus always misses
    assert doc["load_average"] and set(doc["targets"]) == {
        "embedded_p99_le_0.3ms", "guard_before_p99_le_2ms", "embedded_5x_faster_than_rest"}


def test_guard_load_journals_every_decision_once(tmp_path):
    doc = _run("guard_load.py", "--transports", "socket", "--sessions", "2", "--rate", "40", "--duration", "2",
               "--targets", "2", out=tmp_path / "gl.json")
    assert doc["params"]["targets"] == 2
    r = doc["results"][0]
    assert r["decisions"] >= 2 and r["errors"] == 0  # each session decided (a count, not a speed)
    assert r["journal"]["dropped"] == 0 and r["journal"]["duplicated"] == 0
    assert r["journal"]["sessions_with_seq_gaps"] == 0
    assert r["rss_mb"]["max"] > 50  # an interpreter with the OPA engine loaded (the milestones: a unit test below)
    assert r["server_cpu_ms_per_decision"] > 0


def test_guard_load_with_a_server_per_session_sums_them(tmp_path):
    doc = _run("guard_load.py", "--transports", "socket", "--server-per-session", "--sessions", "2", "--rate", "40",
               "--duration", "2", out=tmp_path / "gl.json")
    r = doc["results"][0]
    assert r["transport"] == "socket, a server per session" and doc["params"]["server_per_session"] is True
    assert r["decisions"] >= 2 and r["errors"] == 0  # each session decided (a count, not a speed)
    assert r["journal"]["journals"] == 2 and r["journal"]["dropped"] == 0 and r["journal"]["duplicated"] == 0
    assert set(doc["go_runtime"]) == {"GOGC", "GOMEMLIMIT", "set_by"}
    # Two processes, each with its own interpreter and OPA engine: well above one server's ~100 MB.
    assert r["rss_mb"]["max"] > 150


def test_rss_milestones_take_the_first_sample_at_or_after_each_decision_count():
    sys.path.insert(0, str(ROOT / "bench"))
    import guard_load

    s = guard_load.RssSampler([0])  # not started: the samples are given
    s.at_decisions = [(0, 100 * 1024), (900, 150 * 1024), (1200, 160 * 1024), (9999, 170 * 1024),
                      (12000, 175 * 1024)]
    assert guard_load.RSS_MILESTONES == (1000, 10000, 50000)
    assert s.milestones() == {"1000": 160.0, "10000": 175.0, "50000": None}
