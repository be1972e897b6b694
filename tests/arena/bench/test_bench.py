"""`guardrail bench`: the files it writes, resume, interruption, the bootstrap, detection and the report's order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from arena.bench import runner as bench_runner
from arena.bench.report import SECTION_TITLES
from arena.bench.stats import MIN_CI_TASKS, paired_task_bootstrap, summarise, task_bootstrap
from arena.cli import bench

SCENARIOS = "ia-014,ia-017"
AGENTS = "replay:reference,replay:restart-only"


def _bench(out: Path, *extra: str) -> object:
    return CliRunner().invoke(bench, ["--scenarios", SCENARIOS, "--agents", "replay:reference", "--seeds", "2",
                                      "--jobs", "1", "--no-detection", "--responsiveness", "", "--out", str(out),
                                      *extra], catch_exceptions=False)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    res = _bench(out)
    assert res.exit_code == 0, res.output
    return out


def test_tiny_bench_writes_every_file_with_the_summary_keys(tiny: Path):
    for name in ("results.jsonl", "summary.json", "report.md", "report.html"):
        assert (tiny / name).stat().st_size > 0, name
    rows = [json.loads(line) for line in (tiny / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 2 * 2  # scenarios x seeds x arms
    s = json.loads((tiny / "summary.json").read_text())
    assert s["episodes"] == 8 and s["wall_s"] > 0
    for arm in ("guarded", "unguarded"):
        a = s["arms"][arm]
        assert {"pass_rate", "ci95", "full_fix_pass_rate", "failure_modes"} <= set(a)
        assert set(a["failure_modes"]) == {"fix_missing", "premature_declaration", "not_durable",
                                           "scope_violation", "budget_exhausted", "residual_cause"}
        assert a["ci95"] == [None, None]  # two tasks: too few for an interval (MIN_CI_TASKS)
    assert "recall" in s["detection"] and "false_rejection_rate" in s["detection"]
    assert s["calibration"] == {}  # only the calibrated agent is set beside the paper: this run has none
    # The reference replays in both arms ran the whole reference fix.
    assert all(r["full_fix"] for r in rows)
    # Pairing: every (scenario, agent, seed) ran in both arms.
    pairs = {(r["scenario"], r["agent"], r["seed"]) for r in rows}
    assert all(sum((r["scenario"], r["agent"], r["seed"]) == p for r in rows) == 2 for p in pairs)
    # Each declaration is logged once: the rejected ones plus the accepted one, if any.
    for r in rows:
        if r["arm"] == "guarded":
            decls = r["cost"]["declarations"]
            assert len(decls) == r["guard"]["declarations_rejected"] + (r["declared_at"] is not None), decls
    assert "<svg" in (tiny / "report.html").read_text()


def test_report_sections_appear_in_order(tiny: Path):
    for name in ("report.md", "report.html"):
        text = (tiny / name).read_text()
        at = [text.find(t) for t in SECTION_TITLES]
        assert -1 not in at and at == sorted(at), (name, at)


def test_resume_skips_finished_episodes_and_runs_only_the_missing(tiny: Path, tmp_path: Path, monkeypatch):
    out = tmp_path / "b"
    out.mkdir()
    lines = (tiny / "results.jsonl").read_text().splitlines()
    (out / "results.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # the last episode never finished
    ran: list[str] = []
    real = bench_runner.run_one

    def counting(spec):
        ran.append(spec.key())
        return real(spec)

    monkeypatch.setattr(bench_runner, "run_one", counting)
    res = _bench(out, "--resume")
    assert res.exit_code == 0, res.output
    assert ran == [json.loads(lines[-1])["key"]]
    assert len((out / "results.jsonl").read_text().splitlines()) == len(lines)
    assert json.loads((out / "summary.json").read_text())["episodes"] == len(lines)


def test_interruption_keeps_the_lines_that_finished(tmp_path: Path):
    plan = bench_runner.plan_bench(["ia-014"], ["replay:reference"], ["unguarded"], 3, [], detection=False)
    results = tmp_path / "results.jsonl"
    seen: list[dict] = []

    def stop_after_two(row: dict) -> None:
        seen.append(row)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        bench_runner.run_plan(plan, results, jobs=1, on_result=stop_after_two)
    # The finished lines are kept in the partial file; results.jsonl appears only when a run completes.
    partial = bench_runner.partial_path(results)
    assert not results.exists()
    with partial.open("a") as f:
        f.write('{"key": "torn')  # a write cut off mid-line
    kept = bench_runner.read_results(partial)
    assert [r["seed"] for r in kept] == [0, 1] and kept.torn
    rows = bench_runner.run_plan(plan, results, jobs=1, resume=True)
    assert [r["seed"] for r in rows] == [0, 1, 2]
    assert not partial.exists()
    assert [json.loads(line)["seed"] for line in results.read_text().splitlines()] == [0, 1, 2]


def test_bootstrap_ci_on_a_synthetic_case():
    # 100 tasks, half always pass, half never: the pooled rate is 0.5 and the task-level standard error is
    # sqrt(0.25/100) = 0.05, so the 95% CI is about 0.5 +- 0.098 however many episodes each task has.
    tasks = {f"t{i}": [float(i % 2)] * 7 for i in range(100)}
    b = task_bootstrap(tasks, seed=1)
    assert b["rate"] == pytest.approx(0.5)
    assert b["ci95"][0] == pytest.approx(0.402, abs=0.025) and b["ci95"][1] == pytest.approx(0.598, abs=0.025)
    # Episode-level resampling would give +-0.037 here; the task-level interval must be wider.
    assert b["ci95"][1] - b["ci95"][0] > 0.15
    # Every task passing: the percentile interval would collapse to [1, 1]; the rule of three bounds it (3/n).
    same = task_bootstrap({f"t{i}": [1.0, 1.0] for i in range(20)})
    assert same["rate"] == 1.0 and same["ci95"] == [pytest.approx(0.85), 1.0]
    assert task_bootstrap({f"t{i}": [0.0] for i in range(10)})["ci95"] == [0.0, pytest.approx(0.3)]
    # Fewer than MIN_CI_TASKS tasks: no interval at all (one task gave [33.3, 33.3]).
    few = task_bootstrap({f"t{i}": [1.0, 0.0, 0.0] for i in range(MIN_CI_TASKS - 1)})
    assert few["rate"] == pytest.approx(1 / 3) and few["ci95"] == [None, None]
    assert paired_task_bootstrap({"t0": [1.0]}, {"t0": [0.0]})["ci95"] == [None, None]
    d = paired_task_bootstrap({t: [1.0] for t in tasks}, tasks, seed=1)
    assert d["diff"] == pytest.approx(0.5) and d["ci95"][0] > 0.3 and d["ci95"][1] < 0.7


def _row(scenario, agent, passed, mode, *, denied=0, rejected=0, decls=(), valid=None, expected_mode=None):
    row = {"scenario": scenario, "agent": agent, "arm": "guarded", "seed": 0, "params": {}, "passed": passed,
           "failure_mode": mode, "full_fix": False, "steps": 5, "wall_s": 0.1, "declared_at": None,
           "guard": {"denied": denied, "declarations_rejected": rejected, "feedback": []},
           "cost": {"declarations": list(decls), "restart_probes": 0}, "key": f"{scenario}{agent}"}
    if valid is not None:
        row["expected"] = {"valid": valid, "failure_mode": expected_mode}
    return row


def test_detection_counts_caught_scripts_and_false_rejections():
    acc = {"t": 100.0, "held_s": 50.0, "accepted": True, "codes": []}
    held = {"t": 100.0, "held_s": 50.0, "accepted": False, "codes": ["NOT_CONVERGED"]}
    rows = [
        _row("a", "replay:eph", False, "budget_exhausted", rejected=1, decls=[held], valid=False,
             expected_mode="not_durable"),
        _row("b", "replay:eph", False, "not_durable", decls=[acc], valid=False, expected_mode="not_durable"),
        _row("a", "replay:wide", False, "fix_missing", denied=1, decls=[acc], valid=False,
             expected_mode="scope_violation"),
        _row("a", "replay:reference", True, None, decls=[acc], valid=True),
        _row("b", "replay:reference", True, None, decls=[held, acc], valid=True),  # held, then resolved
        _row("c", "replay:reference", False, "budget_exhausted", rejected=1, decls=[held], valid=True),
    ]
    s = summarise(rows, agents=["replay:*"], arms=["guarded"], responsiveness=[], wall_s=1.0)
    det = s["detection"]
    assert det["recall"]["not_durable"] == 0.5 and det["by_mode"]["not_durable"]["missed"] == ["b/eph"]
    assert det["recall"]["scope_violation"] == 1.0
    assert det["false_rejections"] == 1 and det["false_rejected"] == ["c/reference"]
    assert det["false_rejection_rate"] == pytest.approx(1 / 3)


def _ab(scenario, agent, arm, passed, seed=0, params=None):
    row = _row(scenario, agent, passed, None if passed else "not_durable")
    row.update(arm=arm, seed=seed, params=params or {}, key=f"{scenario}/{agent}/{arm}/{seed}/{params}")
    return row


def test_agents_are_broken_down_and_only_the_calibrated_one_is_set_beside_the_paper():
    tasks = [f"t{i}" for i in range(6)]
    rows = [_ab(t, "calibrated", arm, passed=(arm == "guarded")) for t in tasks for arm in ("guarded", "unguarded")]
    rows += [_ab(t, "replay:reference", arm, passed=True) for t in tasks for arm in ("guarded", "unguarded")]
    # The responsiveness 0 run; 0.8 is the calibrated agent's default, read from its A/B guarded episodes.
    rows += [_ab(t, "calibrated", "guarded", passed=False, params={"responsiveness": 0.0}) for t in tasks]
    s = summarise(rows, agents=["calibrated", "replay:reference"], arms=["guarded", "unguarded"],
                  responsiveness=[0.0, 0.8], wall_s=1.0,
                  agent_defaults={"calibrated": {"responsiveness": 0.8}, "replay:reference": {}})
    assert s["arms"]["unguarded"]["pass_rate"] == 0.5  # pooled over both agents
    assert s["by_agent"]["calibrated"]["unguarded"]["pass_rate"] == 0.0
    assert s["by_agent"]["replay:reference"]["unguarded"]["pass_rate"] == 1.0
    assert s["calibration"]["pass_rate"]["bench"] == 0.0  # the calibrated agent's own, not the pooled 50%
    assert s["calibration"]["pass_rate"]["within_4pp"] is False
    assert s["sensitivity"]["0.8"]["episodes"] == 6 and s["sensitivity"]["0.8"]["pass_rate"] == 1.0
    assert s["sensitivity"]["0.0"]["pass_rate"] == 0.0
    few = summarise([r for r in rows if r["scenario"] in tasks[:2]], agents=["calibrated"],
                    arms=["guarded", "unguarded"], responsiveness=[], wall_s=1.0)
    assert few["calibration"]["pass_rate"]["within_4pp"] is None  # two tasks: no verdict
    assert "by_agent" not in summarise([r for r in rows if r["agent"] == "calibrated"], agents=["calibrated"],
                                       arms=["guarded", "unguarded"], responsiveness=[], wall_s=1.0)


def test_the_calibrated_agents_default_responsiveness_is_not_planned_twice():
    from arena.bench.runner import default_params, plan_bench

    plan = plan_bench(["ia-011"], ["calibrated"], ["guarded", "unguarded"], 2, [0.0, 0.8], detection=False)
    assert default_params("calibrated") == {"responsiveness": 0.8}
    params = sorted({s.params for s in plan.episodes})
    assert (("responsiveness", 0.8),) not in params and (("responsiveness", 0.0),) in params


def test_bad_input_exits_2(tmp_path: Path):
    from guardrail.cli import _register, cli

    _register()
    r = CliRunner().invoke(cli, ["bench", "--scenarios", "ia-999", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "ia-999" in r.output
    r = CliRunner().invoke(cli, ["bench", "--scenarios", "ia-014", "--arms", "both", "--agents", "replay:reference",
                                   "--out", str(tmp_path)])
    assert r.exit_code == 2


def test_an_llm_agent_whose_api_fails_is_no_verdict():
    import httpx

    from arena.bench.runner import _row_problem, not_a_verdict
    from arena.clients.llm import preflight

    down = httpx.MockTransport(lambda request: httpx.Response(503, text="upstream down"))
    up = httpx.MockTransport(lambda request: httpx.Response(200, json={
        "choices": [{"message": {"role": "assistant", "content": "p"}, "finish_reason": "length"}]}))
    assert "503" in preflight("m", env={"GUARDRAIL_LLM_BASE_URL": "http://api"}, transport=down)
    assert preflight("m", env={"GUARDRAIL_LLM_BASE_URL": "http://api"}, transport=up) is None
    rows = [_ab(f"t{i}", "llm:m", arm, passed=False) for i in range(2) for arm in ("guarded", "unguarded")]
    for r in rows[:2]:
        r["agent_detail"] = {"stop_reason": "chat_error: chat API unreachable"}
    assert not_a_verdict(rows[0]) and not not_a_verdict(rows[2])
    assert "not a verdict" in _row_problem({**rows[0], "key": json.dumps(["t0", "llm:m", "guarded", 0, []])})
    s = summarise(rows, agents=["llm:m"], arms=["guarded", "unguarded"], responsiveness=[], wall_s=1.0)
    assert s["arms"]["guarded"]["episodes"] == 1 and "2 episodes left out" in s["notes"][0]
