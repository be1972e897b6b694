"""bench/detection.py: the detection replay prints its table and writes detection.json with the bench's figures."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("detection_bench", ROOT / "bench" / "detection.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_detection_replays_every_script_of_a_scenario_and_writes_the_figures(tmp_path, capsys):
    out = tmp_path / "detection.json"
    assert _module().main(["--scenarios", "ia-010", "--jobs", "1", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    det = doc["detection"]
    scripts = sorted(p.stem for p in (ROOT / "scenarios/incident-arena/ia-010/solutions").glob("*.yaml"))
    assert sorted(s["script"] for s in doc["scripts"]) == scripts
    assert det["scripts"] == len(scripts)
    # Every bad script lands in its matrix failure mode, caught or missed, and every valid one is counted.
    bad = [s for s in doc["scripts"] if not s["expected"]["valid"]]
    assert sum(v["scripts"] for v in det["by_mode"].values()) == len(bad)
    assert det["valid_scripts"] == len(scripts) - len(bad) > 0
    for mode, v in det["by_mode"].items():
        assert v["caught"] + len(v["missed"]) == v["scripts"], mode
    # The pool-tuning variant's out-of-scope change is denied before it runs (a scope policy), so its episode ends
    # as the valid repair it otherwise is.
    pool_tuning = next(s for s in doc["scripts"] if s["script"] == "pool-tuning")
    assert pool_tuning["guard"]["denied"] > 0 and "SCOPE_DENIED" in pool_tuning["guard"]["feedback"]
    assert "failure mode" in capsys.readouterr().out
