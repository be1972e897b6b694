"""One safeguard library, read the same way by its consumers: the policies (data.safeguards, SRE-SAFE-008) and the
declaration-time scope audit (verifiers/scope.py), and guardrail's context checks.

The entries are compared as loaded, and then every switchable setting is tried through both: a value that switches
it off is denied by the policy and reported by the audit; a value that keeps it on is neither (the control)."""

from __future__ import annotations

import re

import pytest

from guardrail import safeguards as guard_side
from guardrail.policy.embedded import EmbeddedOPA
from guardrail.policy.loader import PolicyTree
from guardrail.resources import shipped_policy_dir
from verifiers.context import PublicContext
from verifiers.safeguards import LIBRARY_PATH, SafeguardLibrary, key_matches, safeguard_library
from verifiers.scope import SafeguardRule

LIB = safeguard_library()
SWITCHABLE = [(cat, s) for cat, c in LIB.categories.items() for s in c.settings if s.off_when]


def test_the_policies_the_audit_and_the_context_checks_read_one_library():
    tree = PolicyTree.load(shipped_policy_dir())
    assert SafeguardLibrary.model_validate(tree.data["safeguards"]) == LIB
    assert (shipped_policy_dir() / "safeguards" / "data.yaml").resolve() == LIBRARY_PATH.resolve()
    assert guard_side.safeguard_library() is LIB
    said = SafeguardRule.of(PublicContext.of({"instruction": "do not disable safeguards"}))
    assert said.library is LIB and said.said


def _a_key(pattern: str) -> str:
    return re.sub(r"\*", "x", pattern.replace("**", "svc.role"))


@pytest.mark.parametrize("pattern, key, hit", [
    ("postgres.autovacuum_*", "postgres.autovacuum_naptime", True),
    ("postgres.autovacuum_*", "postgres.autovacuum_x.y", False),  # `*` stays within one segment, as glob.match
    ("**.auth_*", "app.roles.auth.db.auth_enabled", True),
    ("**.auth_*", "auth_enabled", False),
    ("maintenance.enabled", "maintenance.enabled", True),
])
def test_a_pattern_covers_a_key_as_the_policies_glob_match_does(pattern, key, hit):
    assert key_matches(pattern, key) is hit


@pytest.fixture(scope="module")
def engine():
    with EmbeddedOPA() as e:
        yield e


@pytest.mark.parametrize("cat, setting", SWITCHABLE, ids=[f"{c}:{s.key}" for c, s in SWITCHABLE])
def test_a_value_that_switches_a_safeguard_off_is_denied_by_the_policy_and_reported_by_the_audit(engine, cat,
                                                                                                 setting):
    key = _a_key(setting.key)
    off, on = (False, True) if setting.off_when == "falsy" else (0, 5)
    rule = SafeguardRule.of(PublicContext.of({"instruction": "do not disable safeguards"}))
    ctx = {"safeguards": {"keep_on": ["all"]}}

    def denied(value):
        d = engine.decide({"action": {"tool": "psql", "verb": "alter", "mutating": True, "layer": "declared",
                                      "keys": [{"key": key, "value": value}]}, "context": ctx, "command": ""})
        return "SRE-SAFE-008" in {f.id for f in d.denies}

    assert denied(off) and rule.category(key, off) is not None, (key, off)
    assert not denied(on) and rule.category(key, on) is None, (key, on)
