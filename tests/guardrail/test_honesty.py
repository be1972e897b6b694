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


def _modules(package: str):
    """(path, syntax tree) of every module of the package."""
    for p in sorted((ROOT / package).rglob("*.py")):
        yield p, ast.parse(p.read_text(), filename=str(p))


@pytest.mark.parametrize("package", ["guardrail", "verifiers"])
def test_no_code_reads_a_grader_field_or_imports_arena(package):
    for p, tree in _modules(package):
        assert not _reads_of_grader(tree), f"{p} reads a grader field at {_reads_of_grader(tree)}"
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module:
                assert not n.module.split(".")[0] == "arena", f"{p}:{n.lineno} imports arena"
            if isinstance(n, ast.Import):
                assert all(a.name.split(".")[0] != "arena" for a in n.names), f"{p}:{n.lineno} imports arena"


# The twin's own state (its world, its ledger of ground truth, truth()) is for the gates, never the guard.
_TWIN_INTERNALS = {"world", "truth", "ledger"}
# The only module that turns a scenario file into what the guard sees (its `public` part).
_SCENARIO_READERS = {"guardrail/context.py"}


def _dynamic_arena_imports(tree: ast.AST) -> list[int]:
    """importlib.import_module("arena..."), __import__("arena..."): an import of arena the static check misses."""
    hits = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call) or not n.args or not isinstance(n.args[0], ast.Constant):
            continue
        name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
        if name in ("import_module", "__import__") and str(n.args[0].value).split(".")[0] == "arena":
            hits.append(n.lineno)
    return hits


@pytest.mark.parametrize("package", ["guardrail", "verifiers"])
def test_no_code_imports_arena_dynamically_or_touches_the_twins_state(package):
    for p, tree in _modules(package):
        assert not _dynamic_arena_imports(tree), f"{p} imports arena at {_dynamic_arena_imports(tree)}"
        touches = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in _TWIN_INTERNALS]
        assert not touches, f"{p} reads the twin's internal state (world/truth/ledger) at {touches}"


@pytest.mark.parametrize("package", ["guardrail", "verifiers"])
def test_only_the_context_loader_reads_a_scenario_file_and_it_keeps_public(package):
    for p in sorted((ROOT / package).rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        text = p.read_text()
        key_reads = [n.lineno for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Constant)
                     and n.value in ("public", "twin", "scenario.yaml")]
        if rel in _SCENARIO_READERS or not key_reads:
            continue
        # Elsewhere a scenario file is only located and handed to load_context (which keeps `public`).
        assert "load_context(" in text and '"public"' not in text, f"{rel} reads a scenario file at {key_reads}"


def test_the_checks_above_can_fail():
    bad = ast.parse('import importlib\nm = importlib.import_module("arena.twin")\nx = env.world.truth()\n')
    assert _dynamic_arena_imports(bad) == [2]
    assert {n.attr for n in ast.walk(bad) if isinstance(n, ast.Attribute)} & _TWIN_INTERNALS == {"world", "truth"}


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
