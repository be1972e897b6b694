"""`guardrail policy test` and `guardrail policy eval`, through click's CliRunner."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from guardrail.cli import _register, cli

_register()
GUARDRAIL = str(Path(sys.executable).parent / "guardrail")


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_policy_test_runs_the_shipped_library():
    r = run("policy", "test")
    assert r.exit_code == 0, r.output
    last = r.output.strip().splitlines()[-1]
    m = re.fullmatch(r"(\d+) passed, (\d+) failed", last)
    assert m and int(m.group(1)) >= 60 and m.group(2) == "0"
    assert "PASS rules/data_test.rego: data.guardrail.rules.data_test.test_flushall_denied" in r.output


def test_policy_test_fails_on_a_failing_test(tmp_path):
    (tmp_path / "x.rego").write_text("package x\n\nallow if input.ok\n")
    (tmp_path / "x_test.rego").write_text(
        "package x_test\n\nimport data.x\n\ntest_ok if x.allow with input as {\"ok\": true}\n\n"
        "test_wrong if x.allow with input as {\"ok\": false}\n")
    r = run("policy", "test", str(tmp_path))
    assert r.exit_code == 1
    assert "PASS x_test.rego: data.x_test.test_ok" in r.output
    assert "FAIL x_test.rego:7: data.x_test.test_wrong" in r.output  # a failure names its line
    assert r.output.strip().splitlines()[-1] == "1 passed, 1 failed"


def _two_tests(tmp_path):
    (tmp_path / "x.rego").write_text("package x\n\nallow if input.ok\n")
    (tmp_path / "x_test.rego").write_text(
        "package x_test\n\nimport data.x\n\ntest_ok if x.allow with input as {\"ok\": true}\n\n"
        "test_wrong if x.allow with input as {\"ok\": false}\n")


def test_policy_test_run_selects_tests_by_full_name(tmp_path):
    _two_tests(tmp_path)
    r = run("policy", "test", str(tmp_path), "--run", "x_test.test_ok$")
    assert r.exit_code == 0, r.output  # the failing test is not selected, so it does not run
    assert r.output.strip().splitlines() == ["PASS x_test.rego: data.x_test.test_ok", "1 passed, 0 failed"]
    r = run("policy", "test", str(tmp_path), "-r", "wrong")
    assert r.exit_code == 1 and r.output.strip().splitlines()[-1] == "0 passed, 1 failed"
    r = CliRunner().invoke(cli, ["policy", "test", str(tmp_path), "--run", "nothing_like_this"])
    assert r.exit_code == 2 and "match --run 'nothing_like_this'" in r.output
    r = CliRunner().invoke(cli, ["policy", "test", str(tmp_path), "--run", "("])
    assert r.exit_code == 2 and r.output.startswith("error: Invalid value for --run: '(' is not a regular expression")


def test_policy_test_json(tmp_path):
    _two_tests(tmp_path)
    r = run("policy", "test", str(tmp_path), "--json")
    assert r.exit_code == 1
    doc = json.loads(r.output)
    assert (doc["passed"], doc["failed"]) == (1, 1)
    by_name = {t["name"]: t for t in doc["tests"]}
    assert by_name["test_ok"]["status"] == "PASS" and by_name["test_ok"]["package"] == "x_test"
    assert by_name["test_wrong"] == {**by_name["test_wrong"], "status": "FAIL", "message": "undefined",
                                     "path": "x_test.rego", "line": 7}


def test_a_rego_file_that_is_not_utf8_names_its_line(tmp_path):
    (tmp_path / "x.rego").write_bytes(b"package x\n\n# caf\xe9\nallow if input.ok\n")
    r = run("policy", "test", str(tmp_path))
    assert r.exit_code == 2 and r.output.strip() == f"error: {tmp_path / 'x.rego'}:3: not UTF-8 text (undecodable byte 0xe9)"


def test_policy_test_syntax_error_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.rego"
    bad.write_text("package bad\n\nallow if {\n")
    r = CliRunner().invoke(cli, ["policy", "test", str(tmp_path)])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}:") and re.match(r"error: .*:\d+: ", lines[0])


def test_policy_test_missing_dir_exit_2(tmp_path):
    r = CliRunner().invoke(cli, ["policy", "test", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "no such policy directory" in r.output


def test_policy_eval_prints_the_decision(tmp_path):
    f = tmp_path / "in.json"
    f.write_text(json.dumps({"action": {"tool": "redis-cli", "verb": "flushall", "mutating": True},
                             "context": {}, "command": "redis-cli FLUSHALL"}))
    r = run("policy", "eval", "--input", str(f))
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert [x["id"] for x in doc["result"]["deny"]] == ["SRE-DATA-001"]


def test_policy_eval_with_a_query_and_policy_dir(tmp_path):
    (tmp_path / "p.rego").write_text("package p\n\ndouble := input.n * 2\n")
    f = tmp_path / "in.json"
    f.write_text('{"n": 21}')
    r = run("policy", "eval", "--input", str(f), "--query", "data.p.double", "--policy", str(tmp_path))
    assert json.loads(r.output) == {"result": 42}
    r = run("policy", "eval", "--input", str(f), "--query", "data.p.nothing", "--policy", str(tmp_path))
    assert json.loads(r.output) == {}
    r = run("policy", "eval", "--input", str(f), "--query", "x := data.p.double + 1", "--policy", str(tmp_path))
    assert json.loads(r.output) == {"result": [{"x": 43}]}


def test_policy_eval_an_iterating_reference_prints_its_values(tmp_path):
    f = tmp_path / "in.json"
    f.write_text(json.dumps({"action": {"tool": "redis-cli", "verb": "flushall", "mutating": True},
                             "context": {}, "command": "redis-cli FLUSHALL"}))
    r = run("policy", "eval", "--input", str(f), "--query", "data.guardrail.decision.deny[_].id")
    assert json.loads(r.output) == {"result": ["SRE-DATA-001"]}
    r = run("policy", "eval", "--input", str(f), "--query", "data.guardrail.decision.warn[_].id")
    assert json.loads(r.output) == {"result": []}


def test_policy_eval_nan_in_the_input_is_bad_json_not_a_bad_query(tmp_path):
    f = tmp_path / "in.json"
    f.write_text('{\n  "n": 1,\n  "m": NaN\n}\n')
    r = CliRunner().invoke(cli, ["policy", "eval", "--input", str(f)])
    assert r.exit_code == 2
    assert r.output.strip() == f"error: {f}:3: bad JSON: NaN is not a JSON number"


def test_policy_eval_bad_json_names_the_line(tmp_path):
    f = tmp_path / "in.json"
    f.write_text('{\n  "action": {\n    "tool": ,\n  }\n}\n')
    r = CliRunner().invoke(cli, ["policy", "eval", "--input", str(f)])
    assert r.exit_code == 2
    assert r.output.strip() == f"error: {f}:3: bad JSON: Expecting value"


def test_policy_eval_missing_input_and_bad_query_exit_2(tmp_path):
    r = CliRunner().invoke(cli, ["policy", "eval", "--input", str(tmp_path / "none.json")])
    assert r.exit_code == 2 and r.output.startswith(f"error: {tmp_path / 'none.json'}: cannot read")
    f = tmp_path / "in.json"
    f.write_text("{}")
    r = CliRunner().invoke(cli, ["policy", "eval", "--input", str(f), "--query", "x := := 1"])
    assert r.exit_code == 2 and r.output.startswith("error: --query: bad query")


def test_policy_test_reports_an_erroring_test_and_keeps_the_others(tmp_path):
    (tmp_path / "y_test.rego").write_text(
        "package y_test\n\nconflict := 1 if count([1]) == 1\n\nconflict := 2 if count([1, 2]) == 2\n\n"
        "test_ok if true\n\ntest_conflicting if conflict == 1\n")
    r = run("policy", "test", str(tmp_path))
    assert r.exit_code == 1
    assert "PASS y_test.rego: data.y_test.test_ok" in r.output
    assert "ERROR y_test.rego:9: data.y_test.test_conflicting" in r.output
    assert r.output.strip().splitlines()[-1] == "1 passed, 1 failed"


def test_policy_eval_non_utf8_input_is_one_line_exit_2(tmp_path):
    f = tmp_path / "in.json"
    f.write_bytes(b'{\n  "command": "\xff"\n}\n')
    r = CliRunner().invoke(cli, ["policy", "eval", "--input", str(f)])
    assert r.exit_code == 2
    assert r.output.strip() == f"error: {f}:2: not UTF-8 text (undecodable byte 0xff)"


def test_policy_test_with_no_test_rules_is_bad_input(tmp_path):
    (tmp_path / "x.rego").write_text("package x\n\nallow if input.ok\n")
    (tmp_path / "x_more.rego").write_text("package x_more\n\ntest_not_in_a_test_file if true\n")
    r = CliRunner().invoke(cli, ["policy", "test", str(tmp_path)])
    assert r.exit_code == 2
    assert r.output.strip() == f"error: {tmp_path}: no test_ rules found in *_test.rego files"


def test_usage_errors_are_one_line_exit_2(tmp_path):
    for args, line in [(["policy", "eval"], "error: Missing option '--input'."),
                       (["policy", "test", "--zzz"], "error: No such option '--zzz'."),
                       (["nosuchcommand"], "error: No such command 'nosuchcommand'.")]:
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 2 and r.output.strip().splitlines() == [line], (args, r.output)
    r = CliRunner().invoke(cli, ["policy", "test", "--help"])
    assert r.exit_code == 0 and "Usage: " in r.output and "policy test [OPTIONS] [DIRECTORY]" in r.output
    r = CliRunner().invoke(cli, ["policy"])  # a bare group still shows its help, as click does
    assert "Commands:" in r.output


def test_a_closed_stdout_ends_quietly_with_141(tmp_path):
    (tmp_path / "x_test.rego").write_text("package x_test\n\ntest_a if true\n\ntest_b if true\n")
    for args in (["policy", "test", str(tmp_path)], ["--help"]):
        r, w = os.pipe()
        os.close(r)  # the reader is gone before the first write, like `| head -0`
        try:
            p = subprocess.run([GUARDRAIL, *args], stdout=w, stderr=subprocess.PIPE, text=True, timeout=120)
        finally:
            os.close(w)
        assert p.returncode == 141 and p.stderr == "", (args, p.stderr)


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_a_reader_leaving_during_a_large_write_ends_with_141(tmp_path, unbuffered):
    """`guardrail audit --json ... | head -c 5`: under PYTHONUNBUFFERED the kernel's short count on the write was
    not retried, no EPIPE was seen, and the command ended 0 with its output cut."""
    f = tmp_path / "cmds.txt"
    f.write_text("kubectl get pods -n default\n" * 2000)
    env = {**os.environ, "PYTHONUNBUFFERED": unbuffered}
    p = subprocess.run(f"{GUARDRAIL} audit --json --format commands {f} | head -c 5 >/dev/null; "
                       "exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash", env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 141, p.stderr


TEAM_RULE = """package guardrail.rules.team

import data.guardrail.lib

deny contains {"id": "TEAM-001", "msg": "Do not scale the payments API; page its on-call.", "details": {}} if {
	input.action.tool == "kubectl"
	lib.verb == "scale"
	lib.target_name == "payments-api"
}
"""
TEAM_TEST = """package guardrail.rules.team_test

import data.guardrail.rules.team

test_scaling_payments_is_denied if {
	count(team.deny) == 1 with input as {"action": {"tool": "kubectl", "verb": "scale",
		"target": {"name": "payments-api"}}}
}

test_scaling_another_api_is_allowed if {
	count(team.deny) == 0 with input as {"action": {"tool": "kubectl", "verb": "scale",
		"target": {"name": "search-api"}}}
}
"""


def _outcome(r) -> tuple[str, list[str]]:
    d = json.loads(r.output)
    return d["outcome"], sorted(f["id"] for x in d["decisions"] for f in x["deny"])


def test_a_team_tree_without_the_decision_package_is_layered_on_the_library(tmp_path):
    """A team's own rules (package guardrail.rules.<team>, importing lib) add to the shipped library: its tests
    can use lib, only its own tests run, and a decision applies both its rules and the library's."""
    (tmp_path / "team.rego").write_text(TEAM_RULE)
    (tmp_path / "team_test.rego").write_text(TEAM_TEST)
    r = run("policy", "test", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines() == [
        "PASS team_test.rego: data.guardrail.rules.team_test.test_scaling_payments_is_denied",
        "PASS team_test.rego: data.guardrail.rules.team_test.test_scaling_another_api_is_allowed",
        "2 passed, 0 failed"]
    r = CliRunner().invoke(cli, ["check", "--json", "--policy", str(tmp_path), "--", "kubectl", "scale",
                                 "deploy/payments-api", "--replicas=3"])
    assert r.exit_code == 1 and _outcome(r) == ("deny", ["TEAM-001"]), r.output
    r = CliRunner().invoke(cli, ["check", "--json", "--policy", str(tmp_path), "--", "redis-cli", "FLUSHALL"])
    assert r.exit_code == 1 and _outcome(r) == ("deny", ["SRE-DATA-001"]), r.output  # the library still applies
    r = CliRunner().invoke(cli, ["check", "--json", "--policy", str(tmp_path), "--", "kubectl", "get", "pods"])
    assert r.exit_code == 0 and _outcome(r) == ("allow", []), r.output


def test_a_tree_with_its_own_decision_package_replaces_the_library(tmp_path):
    """A whole library of one's own (it builds data.guardrail.decision) is not mixed with the shipped one."""
    (tmp_path / "guardrail.rego").write_text(
        'package guardrail\n\ndecision := {"deny": [f | some f in data.guardrail.rules.team.deny], "warn": [], '
        '"exempted": []}\n')
    (tmp_path / "team.rego").write_text(TEAM_RULE.replace("import data.guardrail.lib\n", "").replace(
        "lib.verb", "input.action.verb").replace("lib.target_name", "input.action.target.name"))
    r = CliRunner().invoke(cli, ["check", "--json", "--policy", str(tmp_path), "--", "redis-cli", "FLUSHALL"])
    assert r.exit_code == 0 and _outcome(r) == ("allow", []), r.output  # no SRE-DATA-001: the library is not loaded
    r = CliRunner().invoke(cli, ["check", "--json", "--policy", str(tmp_path), "--", "kubectl", "scale",
                                 "deploy/payments-api", "--replicas=3"])
    assert r.exit_code == 1 and _outcome(r) == ("deny", ["TEAM-001"]), r.output


def test_the_library_a_tree_is_layered_on_follows_guardrail_policy_dir(tmp_path, monkeypatch):
    """GUARDRAIL_POLICY_DIR naming a team tree layers it on the shipped library; a --policy tree is then layered
    on both; the same tree given twice is loaded once."""
    from guardrail.policy.loader import PolicyTree
    from guardrail.resources import shipped_policy_dir

    team, other = tmp_path / "team", tmp_path / "other"
    team.mkdir(), other.mkdir()
    (team / "team.rego").write_text(TEAM_RULE)
    (team / "team_test.rego").write_text(TEAM_TEST)
    (other / "other.rego").write_text(TEAM_RULE.replace("team", "other").replace("TEAM-001", "OTHER-001")
                                      .replace("payments-api", "search-api"))
    monkeypatch.setenv("GUARDRAIL_POLICY_DIR", str(team))
    base = PolicyTree.load()
    assert base.root == team and base.library == shipped_policy_dir()
    assert [m.package for m in base.test_modules] == ["guardrail.rules.team_test"]
    assert PolicyTree.load(team).modules == base.modules
    both = PolicyTree.load(other)
    assert both.library == team and {"guardrail", "guardrail.rules.team", "guardrail.rules.other"} <= {
        m.package for m in both.decision_modules}
    for cmd, rule in ((["redis-cli", "FLUSHALL"], "SRE-DATA-001"),
                      (["kubectl", "scale", "deploy/payments-api", "--replicas=3"], "TEAM-001"),
                      (["kubectl", "scale", "deploy/search-api", "--replicas=3"], "OTHER-001")):
        r = CliRunner().invoke(cli, ["check", "--json", "--policy", str(other), "--", *cmd])
        assert r.exit_code == 1 and _outcome(r) == ("deny", [rule]), (cmd, r.output)


def test_a_test_module_in_package_guardrail_does_not_make_a_tree_a_whole_library(tmp_path):
    (tmp_path / "team.rego").write_text(TEAM_RULE)
    (tmp_path / "decision_test.rego").write_text(
        'package guardrail_test\n\nimport data.guardrail\n\n'
        'test_payments if {\n\tids := {f.id | some f in guardrail.decision.deny} with input as '
        '{"action": {"tool": "kubectl", "verb": "scale", "target": {"name": "payments-api"}}}\n'
        '\t"TEAM-001" in ids\n}\n')
    (tmp_path / "more_test.rego").write_text('package guardrail\n\ntest_library_is_there if data.guardrail.lib\n')
    r = run("policy", "test", str(tmp_path))
    assert r.exit_code == 0 and r.output.strip().splitlines()[-1] == "2 passed, 0 failed", r.output


def test_layered_data_merges_object_by_object_and_a_clash_is_an_error(tmp_path, monkeypatch):
    from guardrail.errors import PolicyLoadError
    from guardrail.policy.loader import PolicyTree

    lib, team = tmp_path / "lib", tmp_path / "team"
    lib.mkdir(), team.mkdir()
    (lib / "lib.rego").write_text('package guardrail\n\ndecision := {"deny": [], "warn": [], "exempted": []}\n')
    (lib / "data.yaml").write_text("ops:\n  owners: [sre]\nexceptions: [SRE-TRAFFIC-001]\n")
    (team / "team.rego").write_text("package guardrail.rules.team\n")
    (team / "data.yaml").write_text("ops:\n  pager: payments\n")
    monkeypatch.setenv("GUARDRAIL_POLICY_DIR", str(lib))
    assert PolicyTree.load(team).data == {"ops": {"owners": ["sre"], "pager": "payments"},
                                          "exceptions": ["SRE-TRAFFIC-001"]}
    (team / "data.yaml").write_text("ops:\n  owners: nobody\n")
    with pytest.raises(PolicyLoadError, match=f"data.ops.owners is set both by {lib} and by this tree"):
        PolicyTree.load(team)
    # Exception lists are joined: each layer exempts its own.
    (team / "data.yaml").write_text("exceptions: [SRE-DATA-001]\n")
    assert PolicyTree.load(team).data["exceptions"] == ["SRE-TRAFFIC-001", "SRE-DATA-001"]


def test_a_tree_of_data_alone_adds_its_exceptions_to_the_library(tmp_path):
    (tmp_path / "data.yaml").write_text("exceptions:\n  - {id: SRE-DATA-001, reason: the cache is rebuilt nightly}\n")
    r = CliRunner().invoke(cli, ["check", "--json", "--policy", str(tmp_path), "--", "redis-cli", "FLUSHALL"])
    assert r.exit_code == 0 and _outcome(r) == ("allow", []), r.output
    r = CliRunner().invoke(cli, ["check", "--json", "--policy", str(tmp_path / "nothing"), "--", "true"])
    assert r.exit_code == 2
    (tmp_path / "empty").mkdir()
    r = CliRunner().invoke(cli, ["check", "--json", "--policy", str(tmp_path / "empty"), "--", "true"])
    assert r.exit_code == 2 and "no .rego files and no data.json/data.yaml" in r.output


@pytest.mark.parametrize("source,line,says", [
    # deny/warn that are not sets: OPA loads them, the decision never reads them.
    ("package guardrail.rules.team\n\ndeny if input.action.tool == \"kubectl\"\n", 3, "deny is not a set of findings"),
    ("package guardrail.rules.team\n\nwarn := \"x\" if input.action.tool == \"kubectl\"\n", 3,
     "warn is not a set of findings"),
    ("package guardrail.rules.team\n\ndeny[msg] if { msg := \"x\" }\n", 3, "deny is not a set of findings"),
    # packages the decision never gathers.
    ("package team.rules\n\ndeny contains {\"id\": \"T\", \"msg\": \"m\", \"details\": {}} if true\n", 1,
     "package team.rules is never read"),
    ("package guardrail.rules.team.payments\n\ndeny contains {\"id\": \"T\", \"msg\": \"m\", \"details\": {}} if "
     "true\n", 1, "(package guardrail.rules.team_payments)"),
    # the library's own package: its helpers would clash.
    ("package guardrail.rules.workload\n\nwarn contains {\"id\": \"T\", \"msg\": \"m\", \"details\": {}} if "
     "true\n", 1, "is the library's own"),
    # an id the library's rules already use.
    ("package guardrail.rules.team\n\ndeny contains {\"id\": \"SRE-DATA-001\", \"msg\": \"m\", \"details\": {}} "
     "if true\n", 3, "rule id SRE-DATA-001 is the library's"),
    # input.context is absent at decision time: lib.context reads it.
    ("package guardrail.rules.team\n\n# input.context in a comment is fine\ndeny contains {\"id\": \"T\", "
     "\"msg\": \"m\", \"details\": {}} if {\n\tinput.context.extra.freeze == true\n}\n", 5,
     "read it as lib.context"),
    # a misspelt input field or lib rule is undefined, not an error: the rule would never fire.
    ("package guardrail.rules.team\n\nimport data.guardrail.lib\n\ndeny contains {\"id\": \"T\", \"msg\": "
     "\"input.action.tols in a message is fine\", \"details\": {}} if {\n\tinput.action.tols == \"redis-cli\"\n}\n",
     6, "input.action has no tols, so a rule reading it never fires (did you mean tool?)"),
    ("package guardrail.rules.team\n\nimport data.guardrail.lib as g\n\nwarn contains {\"id\": \"T\", \"msg\": "
     "\"m\", \"details\": {}} if {\n\tinput.action.tool == \"kubectl\"\n\tg.tagret_kind == \"secret\"\n}\n", 7,
     "data.guardrail.lib has no tagret_kind, so a rule reading it never fires (did you mean target_kind?)"),
    ("package guardrail.rules.team\n\ndeny contains {\"id\": \"T\", \"msg\": \"m\", \"details\": {}} if {\n"
     "\tinput.action.target.nmae == \"db\"\n}\n", 4, "input.action.target has no nmae (did you mean name?)"
     .replace(" (did", ", so a rule reading it never fires (did")),
    ("package guardrail.rules.team\n\ndeny contains {\"id\": \"T\", \"msg\": \"m\", \"details\": {}} if {\n"
     "\tcontains(input.comand, \"flushall\")\n}\n", 4, "the guard's input has no comand"),
])
def test_a_team_rule_that_would_never_be_enforced_is_a_load_error_naming_its_line(tmp_path, source, line, says):
    (tmp_path / "team.rego").write_text(source)
    # A test beside it that reads input.context is fine: a test builds its own input.
    (tmp_path / "team_test.rego").write_text("package guardrail.rules.team_test\n\ntest_x if input.context == 1 "
                                             "with input as {\"context\": 1}\n")
    for args in (["check", "--policy", str(tmp_path), "--", "true"], ["policy", "test", str(tmp_path)]):
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 2, r.output
        assert f"team.rego:{line}:" in r.output and says in r.output, r.output


def test_right_references_and_packages_outside_the_guard_load(tmp_path):
    """Every input field and lib rule the library itself reads is known; a package outside guardrail (any tree
    `policy eval --policy` evaluates) may read any input."""
    (tmp_path / "team.rego").write_text(
        "package guardrail.rules.team\n\nimport data.guardrail.lib\n\nwarn contains {\"id\": \"T\", \"msg\": "
        "\"m\", \"details\": {}} if {\n\tinput.action.tool == \"redis-cli\"\n\tinput.action.target.name != \"\"\n"
        "\tlib.target_kind == \"component\"\n\tinput.action.details.anything\n\tcount(input.observed) > 0\n"
        "\tinput.command != \"\"\n}\n")
    (tmp_path / "other.rego").write_text("package shop\n\nallow if input.user == \"alice\"\n")
    r = CliRunner().invoke(cli, ["check", "--json", "--policy", str(tmp_path), "--", "redis-cli", "GET", "k"])
    assert r.exit_code == 0, r.output


def test_a_broken_team_rule_does_not_switch_off_the_library(tmp_path):
    """A team rule in error (here a conflict on every input) made the whole decision undefined, and a read-only
    action was then allowed with no rule read: `kubectl get secret` went through. Each package is then decided
    alone: the library's findings stand, and the broken package fails closed on its own, for reads too (what it
    would have said of them is unknown)."""
    (tmp_path / "team.rego").write_text('package guardrail.rules.team\n\nlevel := "a" if input.action.tool\n'
                                        'level := "b" if input.action.verb\n\nwarn contains {"id": "T", "msg": '
                                        'level, "details": {}} if level == "never"\n')
    r = CliRunner().invoke(cli, ["check", "--json", "--policy", str(tmp_path), "--", "kubectl get secret db -o yaml"])
    d = json.loads(r.output)
    assert r.exit_code == 1 and _outcome(r) == ("deny", ["GUARDRAIL-ENGINE-001", "SRE-SECRET-001"]), r.output
    assert "guardrail.rules.team" in d["decisions"][0]["deny"][1]["msg"]
    for command in ("kubectl get pods -n slack", "kubectl label pod x a=b"):
        r = CliRunner().invoke(cli, ["check", "--json", "--policy", str(tmp_path), "--", command])
        assert r.exit_code == 1 and _outcome(r) == ("deny", ["GUARDRAIL-ENGINE-001"]), r.output
    # An exception still applies to what the library found; the broken package still fails closed.
    (tmp_path / "data.yaml").write_text("exceptions: [SRE-SECRET-001]\n")
    r = CliRunner().invoke(cli, ["check", "--json", "--policy", str(tmp_path), "--", "kubectl get secret db -o yaml"])
    assert r.exit_code == 1 and _outcome(r) == ("deny", ["GUARDRAIL-ENGINE-001"]), r.output
    assert [f["id"] for f in json.loads(r.output)["decisions"][0]["exempted"]] == ["SRE-SECRET-001"]


def test_a_whole_library_of_ones_own_reads_input_context(tmp_path):
    """The guard passes the context by reference only to a library whose lib reads it so (the shipped one)."""
    (tmp_path / "g.rego").write_text('package guardrail\n\ndecision := {"deny": d, "warn": [], "exempted": []}\n\n'
                                     'd := [{"id": "FREEZE", "msg": "frozen", "details": {}}] if '
                                     'input.context.extra.freeze == true else := []\n')
    ctx = tmp_path / "ctx.yaml"
    ctx.write_text("id: x\nextra: {freeze: true}\n")
    r = CliRunner().invoke(cli, ["check", "--json", "--policy", str(tmp_path), "--context", str(ctx), "--", "true"])
    assert r.exit_code == 1 and _outcome(r) == ("deny", ["FREEZE"]), r.output


def test_layers_with_the_same_file_names_and_a_part_of_the_library(tmp_path, monkeypatch):
    """Two layers may both have a rules.rego; a part of the library (--policy policies/rules) is the library with
    that part's tests, not the library loaded twice."""
    from guardrail.policy.loader import PolicyTree
    from guardrail.resources import shipped_policy_dir

    team, other = tmp_path / "team", tmp_path / "other"
    team.mkdir(), other.mkdir()
    (team / "rules.rego").write_text(TEAM_RULE)
    (other / "rules.rego").write_text(TEAM_RULE.replace("team", "other").replace("TEAM-001", "OTHER-001")
                                      .replace("payments-api", "search-api"))
    monkeypatch.setenv("GUARDRAIL_POLICY_DIR", str(team))
    r = CliRunner().invoke(cli, ["check", "--json", "--policy", str(other), "--", "kubectl", "scale", "deploy/payments-api",
                                 "--replicas=3"])
    assert r.exit_code == 1 and _outcome(r) == ("deny", ["TEAM-001"]), r.output
    monkeypatch.delenv("GUARDRAIL_POLICY_DIR")

    part = PolicyTree.load(shipped_policy_dir() / "rules")
    whole = PolicyTree.load()
    assert part.decision_modules == whole.decision_modules
    assert part.test_modules and all(m.path.parent.name == "rules" for m in part.test_modules)
    r = run("policy", "test", str(shipped_policy_dir() / "lib"))
    assert r.exit_code == 0 and r.output.strip().splitlines()[-1].endswith(" passed, 0 failed"), r.output
    r = CliRunner().invoke(cli, ["check", "--json", "--policy", str(shipped_policy_dir() / "lib"), "--", "redis-cli", "FLUSHALL"])
    assert r.exit_code == 1 and _outcome(r) == ("deny", ["SRE-DATA-001"]), r.output


@pytest.mark.parametrize("text,line,msg", [
    ('{\n  "action": 1e999\n}\n', 2, "bad JSON: 1e999 is not a JSON number"),  # an infinity to Python
    ("[1, 2]\n", 1, "the input must be a JSON object"),
    ("null\n", 1, "the input must be a JSON object"),
])
def test_policy_eval_input_that_opa_cannot_take_is_bad_input_naming_the_file(tmp_path, text, line, msg):
    f = tmp_path / "in.json"
    f.write_text(text)
    r = CliRunner().invoke(cli, ["policy", "eval", "--input", str(f)])
    assert r.exit_code == 2
    assert r.output.strip().startswith(f"error: {f}:{line}: {msg}")


def test_policy_eval_blames_a_rules_runtime_error_on_its_file_and_line_not_the_query(tmp_path):
    (tmp_path / "team.rego").write_text('package guardrail.rules.team\n\nimport rego.v1\n\nx := 1 / count([])\n\n'
                                        'deny contains {"id": "A", "msg": "m", "details": {}} if x > 0\n')
    f = tmp_path / "in.json"
    f.write_text('{"action": {"tool": "ls", "verb": "ls"}}')
    r = CliRunner().invoke(cli, ["policy", "eval", "--policy", str(tmp_path), "--input", str(f)])
    assert r.exit_code == 2
    assert r.output.strip().startswith(f"error: {tmp_path / 'team.rego'}:5: ")
    assert "divide by zero" in r.output


@pytest.mark.parametrize("exceptions,says", [
    ('["*"]', "exempts every rule"),
    ('["SRE-*"]', "of the library's"),
    ('["SRE-DATA-01"]', "matches no rule id"),  # a typo: exempts nothing
    ('"SRE-DATA-001"', "must be a list"),
    ("[{reason: forgot the id}]", "neither a rule id nor"),
])
def test_exceptions_that_cannot_be_meant_are_load_errors(tmp_path, exceptions, says):
    (tmp_path / "data.yaml").write_text(f"# a deployment's exceptions\nexceptions: {exceptions}\n")
    r = CliRunner().invoke(cli, ["check", "--json", "--policy", str(tmp_path), "--", "redis-cli", "FLUSHALL"])
    assert r.exit_code == 2 and f"data.yaml:2:" in r.output and says in r.output, r.output
    ctx = tmp_path / "ctx.yaml"
    ctx.write_text(f"id: x\nextra:\n  exceptions: {exceptions}\n")
    r = CliRunner().invoke(cli, ["check", "--json", "--context", str(ctx), "--", "redis-cli", "FLUSHALL"])
    if "matches no rule id" in says:  # a context may meet another library: an unknown id is not an error there
        assert r.exit_code == 1, r.output
    else:
        assert r.exit_code == 2 and "ctx.yaml:2:" in r.output and says in r.output, r.output


def test_policy_eval_says_when_the_guard_could_not_read_the_decision(tmp_path):
    (tmp_path / "team.rego").write_text('package guardrail.rules.team\n\ndeny contains {"msg": "no id"} if true\n')
    f = tmp_path / "in.json"
    f.write_text('{"action": {"tool": "kubectl", "verb": "get", "mutating": false}, "command": "kubectl get pods"}')
    r = CliRunner().invoke(cli, ["policy", "eval", "--policy", str(tmp_path), "--input", str(f)])
    assert r.exit_code == 1 and json.loads(r.stdout)["result"]["deny"] == [{"msg": "no id"}]
    assert "the guard cannot read this decision" in r.stderr
    r = CliRunner().invoke(cli, ["policy", "eval", "--input", str(f)])
    assert r.exit_code == 0 and r.stderr == ""


def test_policy_eval_of_a_wrongly_shaped_document_is_bad_input_never_an_empty_allow(tmp_path):
    """`{}` or the whole `check --show-input` output was decided as an input of nothing: an empty decision, exit 0,
    and FLUSHALL looked allowed."""
    good = tmp_path / "flushall.json"
    good.write_text(json.dumps({"action": {"tool": "redis-cli", "verb": "flushall", "mutating": True},
                                "command": "redis-cli FLUSHALL"}))
    r = CliRunner().invoke(cli, ["policy", "eval", "--input", str(good)])
    assert r.exit_code == 0 and [f["id"] for f in json.loads(r.output)["result"]["deny"]] == ["SRE-DATA-001"]

    empty = tmp_path / "empty.json"
    empty.write_text("{}\n")
    r = CliRunner().invoke(cli, ["policy", "eval", "--input", str(empty)])
    assert r.exit_code == 2 and r.output.startswith(f"error: {empty}:1: action: missing"), r.output

    wrapped = tmp_path / "check.json"
    wrapped.write_text(CliRunner().invoke(cli, ["check", "--show-input", "--", "redis-cli FLUSHALL"]).output)
    r = CliRunner().invoke(cli, ["policy", "eval", "--input", str(wrapped)])
    assert r.exit_code == 2 and "`guardrail check` output" in r.output and "`inputs`" in r.output, r.output
    assert r.output.count("\n") == 1 and str(wrapped) in r.output

    typo = tmp_path / "typo.json"
    typo.write_text('{\n  "action": {"tool": "redis-cli", "verb": "flushall"},\n  "comand": "redis-cli FLUSHALL"\n}\n')
    r = CliRunner().invoke(cli, ["policy", "eval", "--input", str(typo), "--query", "data.guardrail.decision.deny"])
    assert r.exit_code == 2 and r.output.startswith(f"error: {typo}:3: comand: unknown field"), r.output
