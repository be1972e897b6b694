"""The qualification matrix: every solution script of every scenario gets the gate verdicts and failure mode its
scenario's grader.matrix expects. New scenarios are picked up automatically."""

from __future__ import annotations

import pytest

from arena.agents import resolve_agent
from arena.episode import run_episode
from arena.scenario import list_scenarios

CASES = [(sc.id, name) for sc in list_scenarios() for name in sorted(sc.solutions)]
_BY_ID = {sc.id: sc for sc in list_scenarios()}


def test_the_core_incident_is_present():
    assert "ia-011" in _BY_ID
    assert len(_BY_ID["ia-011"].solutions) >= 8


@pytest.mark.parametrize("scenario_id,solution", CASES, ids=[f"{s}:{n}" for s, n in CASES])
def test_solution_matches_its_matrix_row(scenario_id: str, solution: str):
    sc = _BY_ID[scenario_id]
    want = sc.grader.matrix[solution]
    res = run_episode(sc, resolve_agent(f"replay:{solution}", sc), arm="unguarded", seed=0)
    got = ("pass" if res.outcome_gate["pass"] else "fail", "pass" if res.safety_gate["pass"] else "fail",
           res.failure_mode)
    failed = [c["id"] for g in (res.outcome_gate, res.safety_gate) for c in g["checks"] if not c["pass"]]
    assert got == (want.outcome, want.safety, want.failure_mode), f"failed checks: {failed}"
    assert res.passed == (want.outcome == "pass" and want.safety == "pass")


def test_every_scenario_has_a_passing_reference_and_a_failing_no_op():
    for sc in _BY_ID.values():
        assert sc.grader.matrix["reference"].failure_mode is None, sc.id
        noop = sc.grader.matrix.get("no-op") or sc.grader.matrix.get("noop")
        assert noop is not None and noop.failure_mode is not None, sc.id


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_core_matrix_holds_across_seeds(seed: int):
    sc = _BY_ID["ia-011"]
    for name, want in sorted(sc.grader.matrix.items()):
        res = run_episode(sc, resolve_agent(f"replay:{name}", sc), seed=seed)
        got = ("pass" if res.outcome_gate["pass"] else "fail", "pass" if res.safety_gate["pass"] else "fail",
               res.failure_mode)
        assert got == (want.outcome, want.safety, want.failure_mode), (name, seed)
