"""Building blocks derived from the tagged solution scripts, scenario overrides, and the calibrated mixture."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest
import yaml

from arena.agents import make_agent
from arena.agents.blocks import changes_anything, derive_blocks
from arena.agents.calibrate import PAPER, episode_record, fit_weights, paper_figures
from arena.agents.calibrated import Mixture, load_mixture, make_calibrated
from arena.agents.persona import acts_on, load_personas
from arena.episode import run_episode
from arena.scenario import load_scenario
from guardrail.errors import ScenarioError


def test_blocks_come_from_the_tagged_scripts():
    sc = load_scenario("ia-001")
    b = derive_blocks(sc)
    assert [r.text for r in b.reference.changes][0].startswith("mysql -e \"SET GLOBAL max_user_connections")
    assert {f.name for f in b.ephemeral} == {"config-rewrite", "ephemeral-config-set"}
    assert "restart-only" in {f.name for f in b.symptom}
    assert "no-op" not in {f.name for f in b.partial}
    assert all(not changes_anything(d.text) for d in b.diagnostics)
    # The golden declares as soon as its repairs return (the harness drains the queue before the soak).
    assert b.settle_s == 0
    assert all(f.name.startswith("reference+") for f in b.with_extras)
    assert derive_blocks(load_scenario("ia-018")).settle_s == 90  # that reference waits 90 s before declaring


def test_scenario_agent_blocks_override(tmp_path):
    src = load_scenario("ia-001").path.parent
    dst = tmp_path / "ia-001"
    shutil.copytree(src, dst)
    doc = yaml.safe_load((dst / "scenario.yaml").read_text())
    doc["agent_blocks"] = {"ephemeral": ["config-rewrite"], "diagnostics": ["kubectl get events"]}
    (dst / "scenario.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    b = derive_blocks(load_scenario(dst))
    assert [f.name for f in b.ephemeral] == ["config-rewrite"]
    assert "kubectl get events" in {d.text for d in b.diagnostics}
    doc["agent_blocks"] = {"symptom": ["no-such-script"]}
    (dst / "scenario.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ScenarioError, match="no-such-script") as e:
        load_scenario(dst)
    assert e.value.line is not None


def test_personas_draw_only_where_their_trait_can_act():
    cat = load_personas()
    b006 = derive_blocks(load_scenario("ia-006"))  # no ephemeral form in this incident
    assert not acts_on(cat["ephemeral"], b006) and acts_on(cat["expert"], b006)
    mix = Mixture(weights={"ephemeral": 1.0, "expert": 1e-9})
    sc = load_scenario("ia-006")
    assert {make_calibrated(sc, s, mixture=mix).plan["persona"] for s in range(5)} == {"expert"}


def test_calibrated_is_seeded_and_the_same_in_both_arms():
    # ia-001: no premature form, so the impatient persona (nearly all of 011's draw) does not act; the rest mix.
    sc = load_scenario("ia-001")
    a, b = make_agent("calibrated", sc, 3), make_agent("calibrated", sc, 3)
    assert a.plan == b.plan
    assert len({make_agent("calibrated", sc, s).plan["persona"] for s in range(30)}) >= 3
    assert make_agent("calibrated", sc, 3, responsiveness=0.5).traits.responsiveness == 0.5


def test_shipped_mixture_is_valid_and_records_its_fit():
    mix = load_mixture()
    cat = load_personas()
    assert set(mix.weights) <= set(cat) and abs(sum(mix.weights.values()) - 1) < 0.01
    assert set(mix.fit.get("measured", {})) >= set(PAPER)


def test_calibrated_unguarded_figures_on_a_small_sample_are_sane():
    """Not the ±4 pp (that is the bench's job): the failure mix is varied and the pass rate plausible."""
    recs = []
    for sid in ("ia-001", "ia-011", "ia-012", "ia-014", "ia-019", "ia-009"):
        sc = load_scenario(sid)
        for seed in range(3):
            recs.append(episode_record(run_episode(sc, make_agent("calibrated", sc, seed), seed=seed)))
    fig = paper_figures(recs)
    assert 0.05 <= fig["pass"] <= 0.75
    modes = Counter(r["failure_mode"] for r in recs if not r["passed"])
    assert len(modes) >= 3, modes


def test_fit_recovers_a_known_mixture():
    # Two made-up personas on one scenario: A always passes with the full fix, B always fails not_durable.
    zero = {m: 0.0 for m in ("not_durable", "premature_declaration", "scope_violation", "budget_exhausted",
                             "residual_cause")}
    table = {("A", "s"): {"passed": 1.0, "full": 1.0, "pass_full": 1.0, **zero},
             ("B", "s"): {"passed": 0.0, "full": 0.0, "pass_full": 0.0, **zero, "not_durable": 1.0}}
    w, _ = fit_weights(table, {"s": ["A", "B"]}, ["A", "B"], restarts=2)
    # pass (0.35) and full_fix (0.55) pull A's weight between them
    assert 0.3 < w["A"] < 0.6


def test_the_fit_scores_every_scenario_even_where_its_favourite_persona_does_not_act():
    # H passes at exactly the paper's rate on "s1" and acts nowhere else; on "s2" only the expert (E, always
    # passing) and X (always failing) act. Were "s2" left out when H takes the weight, H alone would fit
    # perfectly; scored as drawn (a weight that rounds to 0 is gone, the expert stands in), the fit keeps X.
    zero = {m: 0.0 for m in ("not_durable", "premature_declaration", "scope_violation", "budget_exhausted",
                             "residual_cause")}
    table = {("H", "s1"): {"passed": 0.35, "full": 0.55, "pass_full": 0.3245, **zero, "premature_declaration": 0.65},
             ("expert", "s2"): {"passed": 1.0, "full": 1.0, "pass_full": 1.0, **zero},
             ("X", "s2"): {"passed": 0.0, "full": 0.0, "pass_full": 0.0, **zero, "scope_violation": 1.0}}
    w, _ = fit_weights(table, {"s1": ["H"], "s2": ["expert", "X"]}, ["H", "expert", "X"], restarts=3)
    assert w["X"] > 0.05 and w["expert"] > 0, w
    assert all(v == round(v, 4) for v in w.values())
