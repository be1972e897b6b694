"""`guardrail check`: the issue's acceptance commands, exit codes, modes and bad input."""

import json

import pytest
from click.testing import CliRunner

from guardrail.cli import _register, cli

_register()


def run(*args):
    return CliRunner().invoke(cli, ["check", *args])


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
