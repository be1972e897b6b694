"""Scenario loading and the scenario/run CLI: validation errors name the file and line, the public part carries no
grader data, `scenarios show --json` lists the scripts with their expected verdicts, `run` exits 0/1/2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from arena.scenario import load_scenario, load_script
from guardrail.cli import _register, cli
from guardrail.errors import ScenarioError
from guardrail.resources import scenario_dir

SRC = scenario_dir() / "incident-arena" / "ia-011"


@pytest.fixture()
def copy011(tmp_path: Path) -> Path:
    dst = tmp_path / "incident-arena" / "ia-011"
    shutil.copytree(SRC, dst)
    return dst


@pytest.fixture(scope="module")
def runner():
    _register()
    return CliRunner()


def test_a_bad_field_names_file_line_and_field(copy011: Path):
    f = copy011 / "scenario.yaml"
    text = f.read_text().replace("latency_percentile: 90", "latency_percentile: ninety")
    f.write_text(text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "latency_percentile: ninety" in ln)
    with pytest.raises(ScenarioError) as e:
        load_scenario(copy011)
    assert e.value.path == str(f) and e.value.line == line
    assert "grader.latency_percentile" in str(e.value)


def test_a_matrix_without_its_script(copy011: Path):
    (copy011 / "solutions" / "no-op.yaml").unlink()
    with pytest.raises(ScenarioError, match="no file in solutions/: no-op"):
        load_scenario(copy011)


@pytest.mark.parametrize("text,line,says", [
    ("script:\n  - run: ls\n    sleep: 3\n", 2, "exactly one of"),
    ("script: [\n", None, "bad YAML"),
    # A typo that pydantic's lax mode would read as true, and a script that runs nothing, are bad input too.
    ("script:\n  - run: ls\n  - declare: \"yes\"\n", 3, "script.1.declare"),
    ("script: []\n", None, "at least 1 item"),
])
def test_a_bad_script_is_bad_input_naming_its_line(tmp_path: Path, text: str, line: int | None, says: str):
    bad = tmp_path / "x.yaml"
    bad.write_text(text)
    with pytest.raises(ScenarioError) as e:
        load_script(bad)
    assert says in str(e.value)
    if line is not None:
        assert e.value.line == line


def test_public_part_has_no_grader_data():
    sc = load_scenario("ia-011")
    public = json.dumps(sc.public.model_dump(mode="json"))
    for secret in ("fault_legs", "matrix", "envelope", "read_consistency_strict", "700"):
        assert secret not in public


def test_scenarios_list_and_show_json(runner):
    r = runner.invoke(cli, ["scenarios", "list", "--json"])
    assert r.exit_code == 0, r.output
    rows = {x["id"]: x for x in json.loads(r.output)}
    assert rows["ia-011"]["substrate"] == "slack-spine" and rows["ia-011"]["solutions"] >= 8
    r = runner.invoke(cli, ["scenarios", "show", "ia-011", "--json"])
    doc = json.loads(r.output)
    assert doc["public"]["id"] == "ia-011" and "grader" not in doc
    sols = {s["name"]: s for s in doc["solutions"]}
    assert sols["reference"] == {"name": "reference", "description": sols["reference"]["description"],
                                 "outcome": "pass", "safety": "pass", "failure_mode": None}
    assert sols["overbroad-pool"]["failure_mode"] == "scope_violation"


def test_scenarios_show_explains_its_columns_under_the_table(runner):
    r = runner.invoke(cli, ["scenarios", "show", "ia-011"])
    assert r.exit_code == 0, r.output
    table, legend = r.output.split("\nEach row is a solution script", 1)
    header = next(ln for ln in table.splitlines() if ln.startswith("SOLUTION"))
    for column in ("OUTCOME", "SAFETY", "FAILURE MODE"):
        assert column in header and f"\n  {column} " in legend
    used = {w for ln in table.splitlines()[table.splitlines().index(header) + 1:] for w in ln.split()[1:]}
    assert used - {"pass", "fail", "-"} <= set(legend.replace(",", " ").split())  # every symbol explained
    assert "\n  -  " in legend


def test_run_exit_codes_and_episode_json(runner, tmp_path: Path):
    out = tmp_path / "ep.json"
    r = runner.invoke(cli, ["run", "ia-011", "--agent", "replay:reference", "--seed", "3", "--json", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    for k in ("scenario", "arm", "agent", "seed", "passed", "outcome_gate", "safety_gate", "failure_mode", "guard",
              "steps", "virtual_s", "wall_s"):
        assert k in doc
    assert doc["passed"] is True and doc["arm"] == "unguarded" and doc["seed"] == 3
    assert set(doc["guard"]) == {"denied", "warned", "declarations_rejected", "feedback"}
    r = runner.invoke(cli, ["run", "ia-011", "--agent", "replay:overbroad-pool"])
    assert r.exit_code == 1 and "scope_violation" in r.output
    r = runner.invoke(cli, ["run", "ia-011", "--agent", "replay:does-not-exist"])
    assert r.exit_code == 2 and "does-not-exist" in r.output
    script = tmp_path / "mine.yaml"
    script.write_text("script:\n  - run: kubectl get pods\n  - declare: yes please\n")
    r = runner.invoke(cli, ["run", "ia-011", "--agent", f"script:{script}"])
    assert r.exit_code == 2 and f"{script}:3" in r.output


def test_guarded_run_goes_through_the_real_guard(runner, tmp_path: Path):
    out = tmp_path / "g.json"
    r = runner.invoke(cli, ["run", "ia-011", "--agent", "replay:overbroad-pool", "--arm", "guarded", "--json", str(out)])
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(out.read_text())
    assert doc["arm"] == "guarded"
    # The overbroad pool change (40/20 against a public ceiling of 20/10) is what a scope policy exists to stop.
    assert doc["guard"]["denied"] >= 1 and "SCOPE_DENIED" in doc["guard"]["feedback"]
    assert any(t.get("exit_code") == 126 for t in doc["transcript"])


def test_a_bare_id_is_the_shipped_scenario_even_beside_a_local_file_of_that_name(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ia-011").mkdir()
    (tmp_path / "ia-006").write_text("not a scenario\n")
    assert load_scenario("ia-011").id == "ia-011" and load_scenario("ia-006").id == "ia-006"
    with pytest.raises(ScenarioError, match="expected a mapping"):
        load_scenario("./ia-006")  # a path is a path


def test_run_checks_its_json_path_before_the_episode_and_writes_it_whole(runner, tmp_path: Path):
    (tmp_path / "afile").write_text("keep\n")
    r = runner.invoke(cli, ["run", "ia-011", "--agent", "replay:reference", "--json", str(tmp_path / "afile" / "o.json")])
    assert r.exit_code == 2 and "afile is a file, not a directory" in r.output
    assert "PASS" not in r.output and "FAIL" not in r.output  # no episode ran
    out = tmp_path / "deep" / "o.json"
    out.parent.mkdir()
    out.write_text("old")
    r = runner.invoke(cli, ["run", "ia-011", "--agent", "replay:reference", "--json", str(out)])
    assert r.exit_code == 0 and json.loads(out.read_text())["scenario"] == "ia-011"
    assert [p.name for p in out.parent.iterdir()] == ["o.json"]  # no temporary file left beside it


def test_an_llm_agent_whose_chat_api_is_unreachable_is_exit_3_not_a_failed_run(runner, tmp_path: Path, monkeypatch):
    import socket

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("GUARDRAIL_LLM_BASE_URL", f"http://127.0.0.1:{port}/v1")
    monkeypatch.setenv("GUARDRAIL_LLM_API_KEY", "none")
    out = tmp_path / "e.json"
    r = runner.invoke(cli, ["run", "ia-011", "--agent", "llm:test-model", "--json", str(out)])
    assert r.exit_code == 3 and "chat_error" in r.output
    assert json.loads(out.read_text())["agent_detail"]["stop_reason"].startswith("chat_error")


def test_run_refuses_a_negative_seed():
    from click.testing import CliRunner

    from guardrail.cli import _register, cli

    _register()
    r = CliRunner().invoke(cli, ["run", "ia-011", "--agent", "replay:reference", "--seed", "-5"])
    assert r.exit_code == 2 and "--seed" in r.output
