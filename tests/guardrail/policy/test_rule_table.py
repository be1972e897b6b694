"""policies/README.md's rule table against the rules: every rule id the library emits has exactly one row, and
every row names a rule that exists. Two meanings under one id (SRE-DATA-008 was briefly both a keepdata warn and
a host-destruction deny) would make exceptions (`extra.exceptions`) and the reports ambiguous."""

from __future__ import annotations

import re
from collections import Counter

from guardrail.resources import shipped_policy_dir

ROW = re.compile(r"^\| (SRE-[A-Z]+-\d{3}) \| (deny|warn) \|", re.M)
EMITTED = re.compile(r'"id": "(SRE-[A-Z]+-\d{3})"')


def _rules() -> dict[str, set[str]]:
    """id -> the kinds (deny/warn) of the rule heads that emit it, over the library's non-test modules."""
    out: dict[str, set[str]] = {}
    for f in shipped_policy_dir().rglob("*.rego"):
        if f.name.endswith("_test.rego"):
            continue
        text = f.read_text()
        for m in re.finditer(r'^(deny|warn) contains \{\s*"id": "(SRE-[A-Z]+-\d{3})"', text, re.M):
            out.setdefault(m.group(2), set()).add(m.group(1))
        for m in EMITTED.finditer(text):
            out.setdefault(m.group(1), set())
    return out


def test_every_rule_id_has_one_row_of_its_kind_and_every_row_a_rule():
    rows = ROW.findall((shipped_policy_dir() / "README.md").read_text())
    counts = Counter(i for i, _ in rows)
    assert [i for i, n in counts.items() if n > 1] == []
    rules = _rules()
    assert sorted(set(rules) - set(counts)) == []  # emitted, not documented
    assert sorted(set(counts) - set(rules)) == []  # documented, not emitted
    kinds = dict(rows)
    assert [i for i, k in rules.items() if k and k != {kinds[i]}] == []  # one kind per id, as documented
