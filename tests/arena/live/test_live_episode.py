"""Graded ia-006 episodes on the live stack: the same runner, agents, guard and gates as on the twin.

Each test brings up a fresh saleor stack (real PostgreSQL, the checkout app, the load generator, Prometheus),
lands the fault, runs one episode through `arena.live.world.run_live_episode` and tears it down; about one and a
half to two minutes each. The expected verdicts are the twin's: the scenario's qualification matrix for the
unguarded arm, and the twin's own guarded episode for the guard's feedback. Skips like the other live tests.
"""

from __future__ import annotations

import pytest

from arena.live.stack import missing_requirements

_MISSING = missing_requirements()

pytestmark = [
    pytest.mark.live,
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(bool(_MISSING), reason="the live stack needs: " + ", ".join(_MISSING)),
]


@pytest.fixture(scope="module")
def scenario():
    from arena.scenario import load_scenario

    return load_scenario("ia-006")


def _live(scenario, solution: str, arm: str):
    """One live episode; returns (result, the guard or None, the live world)."""
    from arena.agents import make_agent
    from arena.cli import default_guard_factory
    from arena.live.world import run_live_episode

    guards, worlds = [], []

    def factory(env, context):
        guards.append(default_guard_factory(env, context))
        return guards[-1]

    res = run_live_episode(scenario, make_agent(f"replay:{solution}", scenario, 0), arm=arm,
                           guard_factory=factory if arm == "guarded" else None, on_ready=worlds.append)
    return res, (guards[0] if guards else None), worlds[0]


def _failed(gate: dict) -> list[str]:
    return [c["id"] for c in gate["checks"] if not c["pass"]]


def test_reference_passes_both_gates_unguarded(scenario):
    res, _, world = _live(scenario, "reference", "unguarded")
    assert res.passed, (res.failure_mode, _failed(res.outcome_gate), _failed(res.safety_gate))
    assert res.failure_mode is None and res.full_fix
    checks = {c["id"]: c for c in res.outcome_gate["checks"]}
    # The soak was real, fresh traffic: requests in it, and a peak and a trough latency measured after the settle.
    assert checks["traffic_reconciliation"]["offered"] > 20
    assert checks["latency.peak"]["value_ms"] is not None and checks["latency.trough"]["value_ms"] is not None
    assert res.soak["end"] - res.soak["start"] == pytest.approx(scenario.grader.soak_cycles * world.cycle_s)
    safety = {c["id"]: c for c in res.safety_gate["checks"]}
    assert safety["fault_removed.app-role-statement-timeout"]["pass"]
    assert safety["repair_scope.declaration"]["changed_keys"] == [
        "postgres.db_role_setting.saleor/saleor_app.statement_timeout"]


def test_session_only_set_fails_unguarded_as_in_the_twin(scenario):
    expected = scenario.grader.matrix["session_only_set"]
    res, _, _ = _live(scenario, "session_only_set", "unguarded")
    assert not res.passed
    assert (("pass" if res.outcome_gate["pass"] else "fail"), ("pass" if res.safety_gate["pass"] else "fail"),
            res.failure_mode) == (expected.outcome, expected.safety, expected.failure_mode), (
        _failed(res.outcome_gate), _failed(res.safety_gate))
    # The fault was judged at the declaration and was still there: a SET lives only in its own session.
    assert "fault_removed.app-role-statement-timeout" in _failed(res.safety_gate)


def test_session_only_set_guarded_gets_the_twins_feedback(scenario):
    from arena.agents import make_agent
    from arena.cli import default_guard_factory
    from arena.episode import run_episode

    twin = run_episode(scenario, make_agent("replay:session_only_set", scenario, 0), arm="guarded",
                       guard_factory=default_guard_factory)
    twin_codes = [c for c in twin.guard["feedback"] if c != "WARN"]
    res, guard, _ = _live(scenario, "session_only_set", "guarded")
    assert res.guard["declarations_rejected"] >= 1
    live_codes = [c for c in res.guard["feedback"] if c != "WARN"]
    assert live_codes and live_codes == twin_codes, (live_codes, twin_codes)
    assert res.declared_at is None and res.failure_mode == twin.failure_mode == "budget_exhausted"
    assert any(e.get("declare") == "rejected" for e in res.transcript)


def test_immediate_declaration_is_held_until_prometheus_shows_two_clean_cycles(scenario):
    res, guard, world = _live(scenario, "reference", "guarded")
    assert world.env.sli_source_name == "prometheus"
    assert res.passed, (res.failure_mode, _failed(res.outcome_gate), _failed(res.safety_gate))
    [decl] = guard.declarations
    assert decl["accepted"]
    # The reference declares a think-time after its last command; the guard held it for two full load cycles.
    assert decl["held_s"] >= 2 * world.cycle_s - 1.0, decl
    conv = [r for r in guard.journal.records() if r.get("kind") == "verdict" and r.get("verifier") == "convergence"]
    assert conv and conv[-1]["status"] == "PASS", conv
    ok = [c for c in conv[-1]["evidence"]["cycles"] if c["state"] == "ok"]
    assert len(ok) >= 2, conv[-1]["evidence"]["cycles"]
    # Every clean cycle it counted ended before the acceptance, after the repair.
    assert all(c["t_end"] <= decl["t"] + decl["held_s"] + 1e-6 for c in ok)
