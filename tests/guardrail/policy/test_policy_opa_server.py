"""OPAServer over OPA's REST Data API, through opa-python-client.

The server here is guardrail.policy.testserver.StandInOPAServer: it STANDS IN FOR AN OPA SERVER. It speaks
OPA's Data API on loopback and answers with the embedded OPA engine; no `opa` binary runs in these tests.
"""

from __future__ import annotations

import threading

import pytest

from guardrail.errors import PolicyEngineError, PolicyLoadError
from guardrail.policy.base import Outcome
from guardrail.policy.decisions import EVAL_TIMEOUT_RULE, FAIL_CLOSED_RULE
from guardrail.policy.embedded import EmbeddedOPA
from guardrail.policy.server import OPAServer
from guardrail.policy.testserver import StandInOPAServer

CTX = {"namespaces": ["slack"], "restartable": ["svc-channel"], "not_restartable": ["postgres"],
       "constraints": [{"id": "m", "text": "keep maintenance", "kind": "keep_enabled", "targets": ["maintenance"]}]}
INPUTS = [
    {"action": {"tool": "kubectl", "verb": "get", "mutating": False, "target": {"kind": "pod", "namespace": "slack"}}},
    {"action": {"tool": "redis-cli", "verb": "flushall", "mutating": True}},
    {"action": {"tool": "curl", "verb": "PUT", "mutating": True, "layer": "runtime",
                "keys": [{"key": "maintenance.enabled", "value": False}]}},
    {"action": {"tool": "kubectl", "verb": "delete", "mutating": True,
                "target": {"kind": "pod", "name": "postgres-0", "namespace": "slack"}}},
    {"action": {"tool": "shell", "verb": "eval", "mutating": "unknown", "opaque_reason": "eval"}},
]
MUTATING = {"action": {"tool": "redis-cli", "verb": "config set", "mutating": True}, "context": {}}
READ = {"action": {"tool": "kubectl", "verb": "get", "mutating": False}, "context": {}}


TINY = """package guardrail

decision := {"deny": deny, "warn": []}

deny contains {"id": "T-001", "msg": "no flushing", "details": {}} if input.action.verb == "flushall"
"""


@pytest.fixture
def tiny(tmp_path):
    # A one-rule policy for the transport tests: uploading it is quick, and what is tested is the failure path.
    (tmp_path / "guardrail.rego").write_text(TINY)
    return tmp_path


@pytest.fixture(scope="module")
def opa():
    with StandInOPAServer() as server:
        yield server, OPAServer(server.url, timeout_s=60)  # generous: the stand-in answers at once


def test_server_decisions_match_the_embedded_engine(opa):
    server, remote = opa
    with EmbeddedOPA() as local:
        for inp in INPUTS:
            inp = {**inp, "context": CTX, "command": ""}
            r, l = remote.decide(inp), local.decide(inp)
            assert r.error is None
            assert (r.outcome, r.rule_ids) == (l.outcome, l.rule_ids)
            assert r.engine == "opa-server"
    assert remote.healthy()


def test_policies_were_uploaded_without_their_tests(opa):
    server, _ = opa
    assert "guardrail.rego" in server.modules and "rules/data.rego" in server.modules
    assert not any(pid.endswith("_test.rego") for pid in server.modules)


def test_server_down_fails_closed(tiny):
    server = StandInOPAServer().start()
    remote = OPAServer(server.url, tiny, timeout_s=60)
    flush = {"action": {"tool": "redis-cli", "verb": "flushall", "mutating": True}, "context": {}}
    assert remote.decide(flush).rule_ids == ["T-001"] and remote.decide(MUTATING).outcome is Outcome.ALLOW
    server.stop()
    d = remote.decide(MUTATING)
    assert d.outcome is Outcome.DENY and d.rule_ids == [FAIL_CLOSED_RULE] and "unreachable" in d.error
    r = remote.decide(READ)  # a read the engine could not decide is denied too
    assert r.outcome is Outcome.DENY and r.rule_ids == [FAIL_CLOSED_RULE] and r.error
    assert not remote.healthy()
    lenient = OPAServer(server.url, upload=False, allow_readonly_on_error=True)  # the operator's opt-in
    assert lenient.decide(READ).outcome is Outcome.ALLOW and lenient.decide(MUTATING).outcome is Outcome.DENY


def test_a_slow_server_times_out_and_fails_closed(tiny):
    release = threading.Event()
    with StandInOPAServer(before_answer=lambda path: release.wait(120)) as server:  # answers after the test
        remote = OPAServer(server.url, tiny, timeout_s=0.1)
        try:
            for inp in (MUTATING, READ):
                d = remote.decide(inp)
                assert d.outcome is Outcome.DENY and "timed out" in d.error
                assert d.rule_ids == [EVAL_TIMEOUT_RULE] and "several smaller commands" in d.denies[0].msg
        finally:
            release.set()


def test_an_undefined_answer_fails_closed():
    with StandInOPAServer() as server:
        remote = OPAServer(server.url, upload=False)  # nothing loaded: data.guardrail.decision is undefined
        d = remote.decide(MUTATING)
        assert d.outcome is Outcome.DENY and "undefined" in d.error


def test_a_rejected_policy_raises_policy_load_error_with_file_and_line(tmp_path):
    (tmp_path / "guardrail.rego").write_text('package guardrail\n\ndecision := {"deny": [], "warn": []}\n')
    bad = tmp_path / "broken.rego"
    bad.write_text("package guardrail.rules.broken\n\ndeny contains x if {\n\tx := \n}\n")
    with StandInOPAServer() as server:
        with pytest.raises(PolicyLoadError) as e:
            OPAServer(server.url, tmp_path)
    assert e.value.path == str(bad) and e.value.line == 5


def test_uploading_to_a_down_server_is_an_engine_error(tiny):
    server = StandInOPAServer().start()
    url = server.url
    server.stop()
    with pytest.raises(PolicyEngineError):
        OPAServer(url, tiny)


def test_data_exceptions_are_uploaded_too(opa):
    server, _ = opa
    remote = OPAServer(server.url, upload=False)
    remote.client.put_data("", {"exceptions": ["SRE-DATA-001"]})
    try:
        d = remote.decide({"action": {"tool": "redis-cli", "verb": "flushall", "mutating": True}, "context": {}})
        assert d.outcome is Outcome.ALLOW and [f.id for f in d.exempted] == ["SRE-DATA-001"]
    finally:
        remote.client.put_data("", {})


TEAM_AT_LIBRARY_PATH = """package guardrail.rules.team

deny contains {"id": "TEAM-001", "msg": "no scaling payments", "details": {}} if {
	input.action.verb == "scale"
	input.action.target.name == "payments-api"
}
"""


def test_a_layered_tree_keeps_the_library_on_a_server_even_where_its_paths_match_the_librarys(tmp_path):
    """A team file at the same relative path as a library file (rules/data.rego) is uploaded under overlay/, so
    it adds its rule and the library's rule still holds, as in the embedded engine."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "data.rego").write_text(TEAM_AT_LIBRARY_PATH)
    flush = {"action": {"tool": "redis-cli", "verb": "flushall", "mutating": True}, "context": {}}
    scale = {"action": {"tool": "kubectl", "verb": "scale", "mutating": True,
                        "target": {"kind": "deployment", "name": "payments-api"}}, "context": {}}
    with StandInOPAServer() as server, EmbeddedOPA(tmp_path) as local:
        remote = OPAServer(server.url, tmp_path, timeout_s=60)
        assert "rules/data.rego" in server.modules
        assert any(pid.startswith("overlay/") and pid.endswith("/rules/data.rego") for pid in server.modules)
        for inp, rule in ((flush, "SRE-DATA-001"), (scale, "TEAM-001")):
            r, l = remote.decide(inp), local.decide(inp)
            assert r.error is None and rule in r.rule_ids and (r.outcome, r.rule_ids) == (l.outcome, l.rule_ids)


BROKEN_TEAM = """package guardrail.rules.team

import data.guardrail.lib

deny contains {"id": "TEAM-001", "msg": "no labels", "details": {"r": 1 / count(input.action.keys)}} if {
	input.action.tool == "kubectl"
}
"""


def test_a_team_rule_in_error_fails_closed_alone_on_the_server_as_in_process(tmp_path):
    """A rule that errors on some inputs (here a division by zero when an action has no keys) must not silence
    the library on the server either: the server's error is read (it was an anonymous HTTPError, and a read was
    then allowed), each rules package is asked for alone, and the broken one fails closed on its own."""
    (tmp_path / "team.rego").write_text(BROKEN_TEAM)
    (tmp_path / "data.yaml").write_text("exceptions: [SRE-WORKLOAD-004]\n")
    secret = {"action": {"tool": "kubectl", "verb": "get", "mutating": False, "keys": [],
                         "target": {"kind": "secret", "name": "db"}, "details": {"output": "yaml"}}}
    label = {"action": {"tool": "kubectl", "verb": "label", "mutating": True, "keys": [{"key": "k8s.label.a"}],
                        "target": {"kind": "pod", "name": "x"}}}
    scale = {"action": {"tool": "kubectl", "verb": "scale", "mutating": True, "keys": [],
                        "target": {"kind": "deployment", "name": "svc-channel", "namespace": "slack"},
                        "details": {"replicas": 3}}}
    with StandInOPAServer() as server, EmbeddedOPA(tmp_path) as local:
        remote = OPAServer(server.url, tmp_path, timeout_s=60)
        try:
            for inp in (secret, label, scale):
                inp = {**inp, "context": CTX, "command": ""}
                here, there = local.decide(inp), remote.decide(inp)
                assert (there.outcome, there.rule_ids) == (here.outcome, here.rule_ids), inp
                assert [f.id for f in there.exempted] == [f.id for f in here.exempted]
            d = remote.decide({**secret, "context": CTX, "command": ""})
            assert d.outcome is Outcome.DENY and "SRE-SECRET-001" in d.rule_ids  # the library still decided
            assert [f.id for f in d.denies] == ["SRE-SECRET-001", FAIL_CLOSED_RULE]  # and the read fails closed
            assert "eval_builtin_error" in d.error
            d = remote.decide({**label, "context": CTX, "command": ""})
            assert d.rule_ids == ["TEAM-001"]  # the rule decides where it can
            d = remote.decide({**scale, "context": CTX, "command": ""})
            assert [f.id for f in d.exempted] == ["SRE-WORKLOAD-004"]  # exceptions apply to what still decided
            assert d.rule_ids == [FAIL_CLOSED_RULE]
        finally:
            remote.close()
