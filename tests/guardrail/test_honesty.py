"""Honesty rule 1 for the guard: guardrail/ never reads a scenario's grader part, and never imports arena."""

import ast
from pathlib import Path

import pytest
from pydantic import ValidationError

from guardrail.context import IncidentContext, load_context
from guardrail.resources import scenario_dir

ROOT = Path(__file__).resolve().parents[2]


def _reads_of_grader(tree: ast.AST) -> list[int]:
    """Lines where code reads something named grader: `x.grader`, `x["grader"]`, `x.get("grader")`."""
    hits = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr == "grader":
            hits.append(n.lineno)
        elif isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value == "grader":
            hits.append(n.lineno)
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("get", "pop")
              and n.args and isinstance(n.args[0], ast.Constant) and n.args[0].value == "grader"):
            hits.append(n.lineno)
    return hits


@pytest.mark.parametrize("package", ["guardrail", "verifiers"])
def test_no_code_reads_a_grader_field_or_imports_arena(package):
    for p in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(p.read_text(), filename=str(p))
        assert not _reads_of_grader(tree), f"{p} reads a grader field at {_reads_of_grader(tree)}"
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module:
                assert not n.module.split(".")[0] == "arena", f"{p}:{n.lineno} imports arena"
            if isinstance(n, ast.Import):
                assert all(a.name.split(".")[0] != "arena" for a in n.names), f"{p}:{n.lineno} imports arena"


def test_the_context_model_has_no_room_for_grader_data():
    with pytest.raises(ValidationError):
        IncidentContext.model_validate({"id": "x", "grader": {"bands": {}}})


def test_loading_a_scenario_as_context_keeps_only_its_public_part():
    path = scenario_dir() / "incident-arena" / "ia-011" / "scenario.yaml"
    ctx = load_context(path)
    dumped = ctx.model_dump_json()
    assert ctx.id == "ia-011"
    # Grader-only vocabulary (the bands and the matrix) is in the file and never reaches the guard's context.
    raw = path.read_text()
    for word in ("soak_cycles", "fault_legs", "failure_mode", "envelope", "matrix"):
        assert word in raw, word
        assert word not in dumped, word
