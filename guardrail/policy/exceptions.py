"""Rule exceptions (`data.exceptions` beside the policies, `extra.exceptions` in an incident context): the shape
policies/guardrail.rego reads, and the patterns that cannot be meant.

guardrail.rego reads a string as an id glob and a mapping by its `id`, and silently skips anything else; a pattern
that matches no rule exempts nothing, and `*` exempts everything, so the guard denies nothing at all. Each is a
load error naming the file instead (the policy tree's data file, or the context's line), and so is one that
exempts more than half of the rules (`SRE-*`).
"""

from __future__ import annotations

import fnmatch
import functools
import re
from typing import Any, Iterable

__all__ = ["RULE_ID", "rule_ids", "shipped_rule_ids", "exception_problem"]

# A finding's id as the rules write it: {"id": "SRE-DATA-001", ...}.
RULE_ID = re.compile(r'"id"\s*:\s*"([A-Za-z][\w]*(?:-[\w]+)+)"')


def rule_ids(sources: Iterable[str]) -> frozenset[str]:
    """The finding ids written in these Rego sources."""
    return frozenset(i for src in sources for i in RULE_ID.findall(src))


@functools.lru_cache(maxsize=1)
def shipped_rule_ids() -> frozenset[str]:
    from guardrail.policy.loader import PolicyTree
    from guardrail.resources import shipped_policy_dir

    return rule_ids(m.source for m in PolicyTree._load_one(shipped_policy_dir()).decision_modules)


def exception_problem(entries: Any, ids: frozenset[str], *, unknown_is_an_error: bool = True) -> str | None:
    """What is wrong with a list of exceptions, or None. `ids` are the rules they may name."""
    if not isinstance(entries, list):
        return ("exceptions must be a list of rule ids (or globs such as SRE-TRAFFIC-*), or of {id: ..., "
                "reason: ...}")
    for n, e in enumerate(entries, 1):
        pattern = e if isinstance(e, str) else e.get("id") if isinstance(e, dict) else None
        if not isinstance(pattern, str) or not pattern.strip():
            return f"exception {n} ({e!r}) is neither a rule id nor {{id: ..., reason: ...}}"
        matched = {i for i in ids if fnmatch.fnmatchcase(i, pattern)}
        if len(ids) > 1 and len(matched) * 2 > len(ids):
            what = "every rule" if matched == ids else f"{len(matched)} of the library's {len(ids)} rules"
            return (f"exception {pattern!r} exempts {what}, so the guard would deny next to nothing; exempt the "
                    "rules you mean by id (or by family: SRE-TRAFFIC-*), or, to let every command run while the "
                    "guard logs what it would deny, use --mode dry-run (or warn-only)")
        if unknown_is_an_error and ids and not matched:
            return f"exception {pattern!r} matches no rule id of the policy library (a typo? ids look like SRE-DATA-001)"
    return None
