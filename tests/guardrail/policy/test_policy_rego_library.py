"""The shipped policies/ library: its Rego tests pass, every module has a test file beside it, and the tests
can fail (a broken rule is caught), so the count of passing tests means something."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from guardrail.errors import PolicyLoadError
from guardrail.policy.loader import PolicyTree
from guardrail.policy.testing import run_rego_tests
from guardrail.resources import policy_dir


@pytest.fixture(scope="module")
def report():
    return run_rego_tests(policy_dir())


def test_every_rego_test_passes(report):
    failures = [f"{r.path}: {r.name} {r.status} {r.message}" for r in report.results if not r.passed]
    assert failures == []
    assert report.passed >= 90


def test_every_module_has_a_test_file_beside_it():
    tree = PolicyTree.load(policy_dir())
    missing = [m.relpath for m in tree.decision_modules
               if not m.path.with_name(m.path.stem + "_test.rego").exists()]
    assert missing == []


def test_every_rule_id_is_exercised_by_a_test():
    tree = PolicyTree.load(policy_dir())
    ids = set()
    for m in tree.decision_modules:
        ids |= set(re.findall(r'"id":\s*"((?:SRE|SUB)-[A-Z]+-\d{3})"', m.source))
    tested = "\n".join(m.source for m in tree.test_modules)
    assert len(ids) >= 40
    assert sorted(i for i in ids if i not in tested) == []


def test_rule_ids_are_stable_and_unique_per_meaning():
    # One id may have several bodies (two ways to detect the same thing), but never two different messages' prefixes.
    tree = PolicyTree.load(policy_dir())
    seen: dict[str, str] = {}
    for m in tree.decision_modules:
        for rid in re.findall(r'"id":\s*"([A-Z]+-[A-Z]+-\d{3})"', m.source):
            seen.setdefault(rid, m.relpath)
            assert seen[rid] == m.relpath, f"{rid} defined in {seen[rid]} and {m.relpath}"


def test_a_broken_rule_makes_tests_fail(tmp_path):
    tree_copy = tmp_path / "policies"
    shutil.copytree(policy_dir(), tree_copy)
    data_rules = tree_copy / "rules" / "data.rego"
    text = data_rules.read_text()
    assert 'lib.verb in {"flushall", "flushdb"}' in text
    data_rules.write_text(text.replace('lib.verb in {"flushall", "flushdb"}', 'lib.verb in {"flushnothing"}'))
    broken = run_rego_tests(tree_copy)
    failed = {r.name for r in broken.results if not r.passed}
    assert {"test_flushall_denied", "test_flushdb_denied", "test_decision_gathers_denies_from_rule_packages"} <= failed


def test_a_rego_syntax_error_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.rego"
    bad.write_text("package guardrail.rules.bad\n\ndeny contains x if {\n\tx := input.a\n\tfoo(\n}\n")
    with pytest.raises(PolicyLoadError) as e:
        run_rego_tests(tmp_path)
    assert e.value.path == str(bad)
    assert e.value.line == 6
    assert "rego_parse_error" in e.value.message


def test_a_compile_error_names_file_and_line(tmp_path):
    bad = tmp_path / "typed.rego"
    bad.write_text("package guardrail.rules.typed\n\ndeny contains x if {\n\tx := data.nowhere.fn(1)\n}\n")
    with pytest.raises(PolicyLoadError) as e:
        run_rego_tests(tmp_path)
    assert (e.value.path, e.value.line) == (str(bad), 4)
