"""Exception patterns are matched by OPA's glob.match in guardrail.rego, and in Python where the guard checks a
list when it loads (exception_problem) or applies it after a rules package failed on an OPA server
(OPAServer._salvage). The two must agree: here each pattern is matched by the real engine and by glob_matches."""

from __future__ import annotations

import pytest
from opa_bindings import OpaEngine

from guardrail.policy.exceptions import exception_problem, glob_matches
from guardrail.policy.loader import shipped_rule_ids

IDS = ["SRE-DATA-001", "SRE-DATA-015", "SRE-SCOPE-001", "SRE-TRAFFIC-008", "SUB-SQL-004", "TEAM-1", "a^b", "x]y"]
PATTERNS = ["SRE-DATA-001", "SRE-DATA-*", "SRE-*-001", "SRE-{DATA,SCOPE}-001", "SRE-{DATA,{SCOPE,TRAFFIC}}-00?",
            "SRE-DATA-01[0-9]", "SRE-DATA-00[!1]", "SUB-SQL-00[34]", "*", "?", "TEAM-\\1", "a^b", "x]y", "[a]^b",
            "SRE-{DATA", "SRE-DATA-}", "SRE-[", "*-008", "sre-data-001"]


@pytest.fixture(scope="module")
def opa():
    engine = OpaEngine()
    yield engine
    engine.close()


@pytest.mark.parametrize("pattern", PATTERNS)
def test_glob_matches_agrees_with_opas_glob_match(opa, pattern):
    try:
        rows = opa.eval_query("x := [i | some i in input.ids; glob.match(input.p, [], i)]",
                              input={"ids": IDS, "p": pattern})
    except Exception:  # a pattern OPA cannot compile matches nothing there; Python must not match more
        expected = set()
    else:
        expected = set(rows[0]["x"])
    assert {i for i in IDS if glob_matches(pattern, i)} == expected


def test_an_alternative_glob_is_a_valid_exception():
    ids = shipped_rule_ids()
    assert exception_problem(["SRE-{DATA,SCOPE}-001"], ids) is None
    assert "matches no rule" in exception_problem(["SRE-{DATA,SCOPE}-999"], ids)
