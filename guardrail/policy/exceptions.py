"""Rule exceptions (`data.exceptions` beside the policies, `extra.exceptions` in an incident context): the shape
policies/guardrail.rego reads, and the patterns that cannot be meant.

guardrail.rego reads a string as an id glob and a mapping by its `id`, and silently skips anything else; a pattern
that matches no rule exempts nothing, and `*` exempts everything, so the guard denies nothing at all. Each is a
load error naming the file instead (the policy tree's data file, or the context's line), and so is one that
exempts more than half of the rules (`SRE-*`).
"""

from __future__ import annotations

import functools
import re
from typing import Any, Iterable

__all__ = ["RULE_ID", "rule_ids", "exception_problem", "glob_matches"]

# A finding's id as the rules write it: {"id": "SRE-DATA-001", ...}.
RULE_ID = re.compile(r'"id"\s*:\s*"([A-Za-z][\w]*(?:-[\w]+)+)"')


def rule_ids(sources: Iterable[str]) -> frozenset[str]:
    """The finding ids written in these Rego sources."""
    return frozenset(i for src in sources for i in RULE_ID.findall(src))


def glob_matches(pattern: str, text: str) -> bool:
    """OPA's `glob.match(pattern, [], text)`, as guardrail.rego matches exceptions against finding ids: `*` any
    run of characters (no delimiters are given), `?` one, `[abc]`, `[a-z]`, `[!abc]`, `{a,b}` alternatives (they
    nest), `\\` escapes the next character. fnmatch differs on `{a,b}` and `[^...]`."""
    return _glob_regex(pattern).fullmatch(text) is not None


@functools.lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, depth, i = [], 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1:end]
            neg = body.startswith("!")
            body = body[1:] if neg else body
            out.append("[" + ("^" if neg else "") + body.replace("\\", "\\\\").replace("^", "\\^") + "]")
            i = end + 1
            continue
        elif c == "{":
            depth += 1
            out.append("(?:")
        elif c == "}" and depth:
            depth -= 1
            out.append(")")
        elif c == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(c))
        i += 1
    try:
        return re.compile("".join(out) + ")" * depth, re.S)
    except re.error:
        return re.compile(re.escape(pattern))


def exception_problem(entries: Any, ids: frozenset[str], *, unknown_is_an_error: bool = True) -> str | None:
    """What is wrong with a list of exceptions, or None. `ids` are the rules they may name."""
    if not isinstance(entries, list):
        return ("exceptions must be a list of rule ids (or globs such as SRE-TRAFFIC-*), or of {id: ..., "
                "reason: ...}")
    for n, e in enumerate(entries, 1):
        pattern = e if isinstance(e, str) else e.get("id") if isinstance(e, dict) else None
        if not isinstance(pattern, str) or not pattern.strip():
            return f"exception {n} ({e!r}) is neither a rule id nor {{id: ..., reason: ...}}"
        matched = {i for i in ids if glob_matches(pattern, i)}
        if len(ids) > 1 and len(matched) * 2 > len(ids):
            what = "every rule" if matched == ids else f"{len(matched)} of the library's {len(ids)} rules"
            return (f"exception {pattern!r} exempts {what}, so the guard would deny next to nothing; exempt the "
                    "rules you mean by id (or by family: SRE-TRAFFIC-*), or, to let every command run while the "
                    "guard logs what it would deny, use --mode dry-run (or warn-only)")
        if unknown_is_an_error and ids and not matched:
            return f"exception {pattern!r} matches no rule id of the policy library (a typo? ids look like SRE-DATA-001)"
    return None
