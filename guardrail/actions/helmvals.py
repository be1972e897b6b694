"""Helm's `--set` value grammar (strvals): splitting `a=1,b={x,y}` and typing each value as helm does.

One statement of the grammar for the two places that read `--set`: the helm classifier (guardrail.actions),
which turns it into keys an action touches, and the twin's helm (arena.twin.frappe.helm), which applies it to a
release's values.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["typed", "split_top", "value_of"]


def typed(v: str, string: bool = False) -> Any:
    """helm --set infers booleans, null and integers (a leading zero keeps the text); --set-string keeps it all."""
    if string:
        return v
    if v in ("true", "false"):
        return v == "true"
    if v == "null":
        return None
    if re.fullmatch(r"-?\d+", v) and not (len(v) > 1 and v.lstrip("-").startswith("0")):
        return int(v)
    return v


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split at `sep` where it is neither escaped nor inside a `{a,b}` list."""
    out, buf, depth, i = [], [], 0, 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            buf.append(text[i:i + 2])
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
        i += 1
    out.append("".join(buf))
    return out


def value_of(raw: str, string: bool = False) -> Any:
    """One `--set` value: `{x,y}` is a list (its commas do not end the pair); `\\,` is a literal comma."""
    if raw.startswith("{") and raw.endswith("}"):
        return [typed(x.replace("\\,", ","), string) for x in split_top(raw[1:-1]) if x != ""]
    return typed(raw.replace("\\,", ","), string)
