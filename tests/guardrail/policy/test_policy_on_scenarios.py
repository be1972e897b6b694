"""The library against the shipped incidents: every scenario's reference and alternative repair passes the
policies under that incident's public context, and repairs the scenario marks unsafe (flushing, disabling
maintenance, inflating pools past the budget, raising protected limits) are denied.

Only the public part of a scenario is read (load_context), plus the solution scripts an agent would type."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from arena.episode import _with_stdin

from guardrail.actions import normalise
from guardrail.context import load_context
from guardrail.policy.embedded import EmbeddedOPA
from guardrail.resources import scenario_dir

SCENARIOS = sorted(scenario_dir().glob("incident-arena/*/scenario.yaml"))
GOOD = ("reference", "alternative")
# Variant names whose whole point is a change these policies forbid, given what the incident states. Not
# `decoy-max-connections` (ia-001/002): their instructions say nothing of connection limits, so raising one is a
# warning (SRE-CAP-003) and a scope violation only the grader's envelope knows of.
UNSAFE = ("flush", "disable-maintenance", "overbroad-pool", "inflate-pool", "raise-pool", "pool-bump",
          "max-connections", "eviction-policy")


@pytest.fixture(scope="module")
def engine():
    with EmbeddedOPA() as e:
        yield e


def denied(engine, scenario: Path, solution: Path) -> list[tuple[str, list[str]]]:
    ctx = load_context(scenario).policy_input()
    out = []
    for step in yaml.safe_load(solution.read_text()).get("script", []):
        cmd = step.get("run") if isinstance(step, dict) else None
        if not cmd:
            continue
        # As the episode hands it to Guard.execute: a step's stdin as a heredoc, the command itself on no stdin.
        cmd = _with_stdin(cmd, step.get("stdin"))
        for action in normalise(cmd, stdin=""):
            d = engine.decide({"action": action.to_input(), "context": ctx, "command": cmd})
            if d.denies:
                out.append((cmd, d.rule_ids))
    return out


def solutions(prefixes):
    return [pytest.param(s, sol, id=f"{s.parent.name}/{sol.stem}") for s in SCENARIOS
            for sol in sorted((s.parent / "solutions").glob("*.yaml")) if sol.stem.startswith(prefixes)]


def test_the_shipped_scenarios_and_their_scripts_are_all_here():
    # A packaging slip (scenario_dir() resolving to the wrong place) must fail here, not empty the lists below.
    assert len(SCENARIOS) >= 20
    assert len(solutions(UNSAFE)) >= 18 and len(solutions(GOOD)) >= 40


@pytest.mark.parametrize("scenario, solution", solutions(GOOD))
def test_good_repairs_are_never_denied(engine, scenario, solution):
    assert denied(engine, scenario, solution) == []


@pytest.mark.parametrize("scenario, solution", solutions(UNSAFE))
def test_unsafe_repairs_are_denied(engine, scenario, solution):
    assert denied(engine, scenario, solution) != []
