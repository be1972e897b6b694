"""Honesty rule 1 for the simulated agents: building or running one reads no grader field (they see `public`,
their own solution scripts and the scripts' labels in `agent_blocks`)."""

import ast
from pathlib import Path

import pytest

from arena.agents.blocks import derive_blocks
from arena.scenario import load_scenario

AGENTS = Path(__file__).resolve().parents[3] / "arena" / "agents"


@pytest.mark.parametrize("path", sorted(AGENTS.glob("*.py")), ids=lambda p: p.name)
def test_no_agent_module_reads_a_grader_field(path):
    tree = ast.parse(path.read_text())
    hits = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "grader"]
    hits += [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value == "grader"]
    assert not hits, f"{path} reads the grader at {hits}"


def test_the_blocks_come_from_the_scenarios_labels_not_the_matrix():
    sc = load_scenario("ia-011")
    blocks = derive_blocks(sc)
    labelled = {n for k in ("alternatives", "ephemeral", "overbroad", "symptom", "partial", "premature")
                for n in getattr(sc.agent_blocks, k)}
    assert labelled and labelled <= set(sc.solutions)
    # Without labels there is nothing but the reference: no grader verdict fills them in.
    bare = sc.model_copy(update={"agent_blocks": None})
    empty = derive_blocks(bare)
    assert empty.reference == blocks.reference
    assert all(not getattr(empty, k) for k in ("ephemeral", "overbroad", "symptom", "partial", "premature"))
