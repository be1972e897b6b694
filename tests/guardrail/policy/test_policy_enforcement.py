"""The mode table: what a Decision does under enforce, dry-run and warn-only (guardrail.policy.enforcement)."""

from __future__ import annotations

import pytest

from guardrail.policy.base import Decision, Finding, Mode, Outcome
from guardrail.policy.enforcement import enforce

DENY = Finding("SRE-DATA-001", "do not flush")
WARN = Finding("SRE-DURABLE-001", "make it durable")

deny = Decision(Outcome.DENY, "d1", (DENY,), (WARN,))
warn = Decision(Outcome.WARN, "d2", (), (WARN,))
allow = Decision(Outcome.ALLOW, "d3")


def test_enforce_blocks_a_deny_and_shows_it():
    e = enforce(deny, Mode.ENFORCE)
    assert (e.runs, e.denied, e.warned, e.would_deny) == (False, (DENY,), (WARN,), ())


def test_dry_run_runs_and_only_journals_the_would_deny():
    e = enforce(deny, "dry-run")
    assert (e.runs, e.denied, e.warned, e.would_deny) == (True, (), (WARN,), (DENY,))


def test_warn_only_runs_and_shows_the_deny_as_a_warning():
    e = enforce(deny, Mode.WARN_ONLY)
    assert (e.runs, e.denied, e.would_deny) == (True, (), (DENY,))
    assert e.warned == (DENY, WARN)


@pytest.mark.parametrize("mode", list(Mode))
def test_warnings_and_allows_run_in_every_mode(mode):
    assert enforce(warn, mode).runs and enforce(warn, mode).warned == (WARN,)
    assert enforce(allow, mode).runs and enforce(allow, mode).shown == ()


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError):
        enforce(deny, "yolo")


def test_the_policy_package_exports_its_engines_lazily():
    import guardrail.policy as policy

    assert set(policy.__all__) >= {"EmbeddedOPA", "OPAServer", "enforce", "Decision", "Mode"}
    for name in policy.__all__:
        assert getattr(policy, name) is not None
