"""`guardrail check`: the issue's acceptance commands, exit codes, modes and bad input."""

import json

import pytest
from click.testing import CliRunner

from guardrail.cli import _register, cli

_register()


def run(*args):
    return CliRunner().invoke(cli, ["check", "--json", *args])


def test_base64_payload_into_bash_is_denied():
    r = run("--", 'bash -c "$(echo cmVkaXMtY2xpIEZMVVNIQUxM | base64 -d)"')
    assert r.exit_code == 1, r.output
    out = json.loads(r.output)
    assert out["decision"]["outcome"] == "deny"
    assert out["decision"]["deny"][0]["msg"]  # tells the agent what to do instead
    assert any(a["mutating"] != False for a in out["actions"])  # noqa: E712


def test_reading_pods_in_the_incident_namespace_is_allowed():
    r = run("--", "kubectl get pods -n slack")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["decision"]["outcome"] == "allow" and out["decision"]["runs"] is True
    assert out["actions"][0]["tool"] == "kubectl" and out["actions"][0]["mutating"] is False


def test_flushall_is_denied_and_dry_run_lets_it_run():
    assert run("--", "redis-cli -h redis-queue FLUSHALL").exit_code == 1
    r = run("--mode", "dry-run", "--", "redis-cli -h redis-queue FLUSHALL")
    assert r.exit_code == 0
    assert json.loads(r.output)["decision"]["outcome"] == "deny"


def test_a_command_given_as_several_words_is_decided_with_its_quoting():
    # The argv a shell passes for `check -- kubectl patch ... -p '{"spec": {"replicas": 0}}'`: the patch is one word.
    r = run("--", "kubectl", "patch", "deploy", "api", "-n", "slack", "-p", '{"spec": {"replicas": 0}}')
    assert r.exit_code == 1, r.output
    assert "SRE-WORKLOAD-001" in [f["id"] for f in json.loads(r.output)["decision"]["deny"]]
    r = run("--", "redis-cli", "-h", "redis-queue", "CONFIG", "SET", "save", "")
    assert json.loads(r.output)["actions"][0]["keys"] == [{"key": "redis.save", "value": "", "scope": {"component": "redis-queue"}}]


def test_context_namespaces_are_applied(tmp_path):
    ctx = tmp_path / "ctx.yaml"
    ctx.write_text("namespaces: [slack]\n")
    assert run("--context", str(ctx), "--", "kubectl delete pod web-0 -n payments").exit_code == 1


@pytest.mark.parametrize("content,line", [("namespaces: [slack\n", 2), ("namespaces: slack\nbogus: 1\n", None)])
def test_bad_context_exits_2_with_file_and_line(tmp_path, content, line):
    ctx = tmp_path / "ctx.yaml"
    ctx.write_text(content)
    r = run("--context", str(ctx), "--", "ls")
    assert r.exit_code == 2
    assert str(ctx) in r.output and r.output.count("\n") <= 1
    if line:
        assert f"{ctx}:{line}" in r.output


def test_missing_context_file_exits_2():
    r = run("--context", "/nonexistent/ctx.yaml", "--", "ls")
    assert r.exit_code == 2 and "/nonexistent/ctx.yaml" in r.output


def test_non_utf8_context_is_one_line_exit_2(tmp_path):
    ctx = tmp_path / "ctx.yaml"
    ctx.write_bytes(b"namespaces: [slack]\nid: \xff\n")
    r = run("--context", str(ctx), "--", "ls")
    assert r.exit_code == 2, r.output
    assert r.output.strip() == r.output.strip().splitlines()[0] and f"error: {ctx}:2: " in r.output


def test_tab_indented_json_context_is_accepted(tmp_path):
    ctx = tmp_path / "ctx.json"
    ctx.write_text('{\n\t"namespaces": ["slack"]\n}\n')
    assert run("--context", str(ctx), "--", "kubectl get pods -n slack").exit_code == 0
    assert run("--context", str(ctx), "--", "kubectl delete pod web-0 -n payments").exit_code == 1


def test_duplicate_key_in_a_context_is_rejected_with_its_line(tmp_path):
    ctx = tmp_path / "ctx.yaml"
    ctx.write_text("id: x\nnamespaces: [slack]\nid: y\n")
    r = run("--context", str(ctx), "--", "ls")
    assert r.exit_code == 2 and f"error: {ctx}:3: duplicate key 'id'" in r.output


def test_a_bad_option_value_is_one_line_exit_2():
    r = run("--mode", "bogus", "--", "ls")
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == ["error: --mode: 'bogus' is not one of 'enforce', 'dry-run', 'warn-only'."]


def test_ctrl_c_in_a_command_without_its_own_handler_exits_130(monkeypatch):
    import guardrail.cli.check as check_mod

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(check_mod, "load_context", interrupted)
    _register()
    r = CliRunner().invoke(cli, ["check", "--context", __file__, "--", "kubectl get pods"])
    assert r.exit_code == 130 and "interrupted" in r.output


def test_show_input_prints_the_documents_the_rules_see_and_policy_eval_decides_them_alike(tmp_path):
    ctx = tmp_path / "ctx.yaml"
    ctx.write_text("id: x\nnamespaces: [slack]\nextra: {exceptions: [SRE-DURABLE-001]}\n")
    r = run("--context", str(ctx), "--show-input", "--", "redis-cli -h redis-queue CONFIG SET maxmemory 64mb; ls")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert [i["action"]["tool"] for i in out["inputs"]] == ["redis-cli", "ls"]
    first = out["inputs"][0]
    assert first["context"]["namespaces"] == ["slack"] and first["command"].startswith("redis-cli")
    assert [f["id"] for f in out["decision"]["exempted"]] == ["SRE-DURABLE-001"]
    (tmp_path / "in.json").write_text(json.dumps(first))
    r = CliRunner().invoke(cli, ["policy", "eval", "--input", str(tmp_path / "in.json")])
    assert r.exit_code == 0, r.output
    assert [f["id"] for f in json.loads(r.output)["result"]["exempted"]] == ["SRE-DURABLE-001"]
    assert "inputs" not in json.loads(run("--", "ls").output)  # only when asked


def test_a_context_file_far_larger_than_any_incident_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    import guardrail.context as context

    monkeypatch.setattr(context, "MAX_CONTEXT_BYTES", 1024)
    ctx = tmp_path / "ctx.yaml"
    ctx.write_text("id: x\nextra:\n  blob: '" + "a" * 2000 + "'\n")
    r = run("--context", str(ctx), "--", "ls")
    assert r.exit_code == 2 and r.output.startswith(f"error: {ctx}: is 2,024 bytes") and "the limit is 1,024 bytes" in r.output, r.output


def test_check_prints_a_verdict_a_person_reads_at_a_glance_and_the_document_with_json():
    r = CliRunner().invoke(cli, ["check", "--", "redis-cli -h redis-queue FLUSHALL"])
    assert r.exit_code == 1
    lines = r.output.splitlines()
    assert lines[0] == "DENY (would not run): redis-cli -h redis-queue FLUSHALL"
    assert lines[1].startswith("  SRE-DATA-001 (deny): ") and "Do not flush" in lines[1]  # what to do instead
    assert lines[2].startswith("  actions: redis-cli flushall") and len(lines) == 3
    r = CliRunner().invoke(cli, ["check", "--", "kubectl get pods -n slack"])
    assert r.exit_code == 0 and r.output.splitlines() == ["ALLOW (runs): kubectl get pods -n slack",
                                                          "  actions: kubectl get [read-only]"]
    r = CliRunner().invoke(cli, ["check", "--mode", "dry-run", "--", "redis-cli FLUSHALL"])
    assert r.exit_code == 0 and r.output.startswith("DENY (dry-run: runs anyway): ")
    # --show-input prints the document (with its inputs) as before, with or without --json.
    for args in (["--show-input"], ["--show-input", "--json"]):
        r = CliRunner().invoke(cli, ["check", *args, "--", "redis-cli FLUSHALL"])
        assert r.exit_code == 1 and json.loads(r.output)["inputs"][0]["action"]["verb"] == "flushall"


def test_a_rule_that_fires_for_two_actions_is_listed_once():
    r = CliRunner().invoke(cli, ["check", "--", "redis-cli FLUSHALL; redis-cli FLUSHALL"])
    assert r.exit_code == 1 and r.output.count("SRE-DATA-001") == 1, r.output
    out = json.loads(run("--", "redis-cli FLUSHALL; redis-cli FLUSHALL").output)
    assert [f["id"] for f in out["decision"]["deny"]] == ["SRE-DATA-001"]
    assert [[f["id"] for f in d["deny"]] for d in out["decisions"]] == [["SRE-DATA-001"], ["SRE-DATA-001"]]
    assert out["feedback"][0]["message"].count("SRE-DATA-001") == 1
