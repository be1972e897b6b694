"""bench/convergence.py: its intervals and target verdicts, and a small synthetic run end to end."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("convergence_bench", ROOT / "bench" / "convergence.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up by name
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


def test_the_wilson_interval_matches_the_textbook_figure(bench):
    # 17 in 4,000 (the bench's false accepts on seed 0): p = 0.425%, Wilson 95% about 0.265%-0.680%.
    lo, hi = bench.wilson_interval(17, 4000)
    assert lo == pytest.approx(0.00265, abs=5e-5) and hi == pytest.approx(0.00680, abs=5e-5)
    assert bench.wilson_interval(0, 100)[0] == 0.0 < bench.wilson_interval(0, 100)[1]


def test_the_median_interval_holds_the_median_and_narrows_with_more_data(bench):
    small = [i / 10 for i in range(40)]
    large = small * 25
    lo_s, hi_s = bench.median_interval(small)
    lo_l, hi_l = bench.median_interval(large)
    assert lo_s <= statistics.median(small) <= hi_s and lo_l <= statistics.median(large) <= hi_l
    assert hi_l - lo_l < hi_s - lo_s
    assert bench.median_interval(small) == (lo_s, hi_s)  # seeded


def test_a_target_verdict_says_whether_the_interval_agrees_with_the_estimate(bench):
    assert bench.target_verdict(1.97, (1.96, 1.99), 2.0) == "met"
    assert bench.target_verdict(1.99, (1.95, 2.04), 2.0).startswith("met by the estimate")
    assert bench.target_verdict(2.03, (1.98, 2.06), 2.0).startswith("missed by the estimate")
    assert bench.target_verdict(2.10, (2.05, 2.2), 2.0) == "missed"


def test_a_small_run_prints_the_intervals_and_writes_the_targets(bench, tmp_path, capsys):
    out = tmp_path / "convergence.json"
    bench.main(["--episodes", "80", "--out", str(out)])
    doc = json.loads(out.read_text())
    a = doc["summary"]["all"]
    lo, hi = a["after_recovery_median_cycles_95ci"]
    assert lo <= a["after_recovery_median_cycles"] <= hi
    flo, fhi = a["false_accept_rate_95ci"]
    assert flo <= a["false_accept_rate"] <= fhi
    assert set(doc["targets"]) == {"after_recovery_median_le_2_cycles", "false_accepts_le_1pct"}
    assert len(doc["rows"]) == 80
    printed = capsys.readouterr().out
    assert "95% intervals" in printed and "targets (all episodes)" in printed
