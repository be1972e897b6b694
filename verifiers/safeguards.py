"""The safeguard library (verifiers/safeguards.yaml): settings that protect a system from itself, by category.

One library with three readers: the scope audit (verifiers/scope.py, a safeguard switched off under "leave
safeguards alone" is SCOPE_DRIFT), both policy engines (the same file as `data.safeguards`, through the link
policies/safeguards/data.yaml, for SRE-SAFE-008/009), and guardrail/safeguards.py (a context's `safeguards:`
entries, `guardrail context explain`). Matching and "switched off" are the Rego rules' own
(policies/lib/sre.rego `safeguards_covering`, policies/rules/safeguards.rego `safeguard_off`), so a key is a
safeguard, and a value switches it off, the same way for the policy and for the audit.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from verifiers.datafile import load_model

__all__ = ["LIBRARY_PATH", "ALL", "SafeguardSetting", "SafeguardCategory", "SafeguardLibrary", "safeguard_library",
           "key_matches", "FALSE_VALUES"]

LIBRARY_PATH = Path(__file__).with_name("safeguards.yaml")
ALL = "all"
# policies/lib/sre.rego `false_values` (strings compared trimmed and lower-cased, as `is_false` does).
FALSE_VALUES = frozenset({"false", "off", "no", "disabled", "disable", "inactive", "0", "n", "none", ""})


@functools.lru_cache(maxsize=512)
def _glob(pattern: str) -> re.Pattern[str]:
    # OPA's glob.match(pattern, ["."], key): `**` any characters, `*` any within one dotted segment, `?` one.
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append(r"[^.]*")
            i += 1
        elif pattern[i] == "?":
            out.append(r"[^.]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def key_matches(pattern: str, key: str) -> bool:
    """Whether a library pattern covers a key, as the policies' glob.match with "." delimiters does."""
    return pattern == key if "*" not in pattern and "?" not in pattern else bool(_glob(pattern).fullmatch(key))


class SafeguardSetting(BaseModel):
    """One setting of a category: a key pattern and, where it can be switched off, by what value."""

    model_config = ConfigDict(extra="forbid")

    key: str
    off_when: Literal["falsy", "nonpositive"] | None = None

    def switched_off_by(self, value: Any) -> bool:
        """Whether setting it to `value` switches it off (the policies' safeguard_off)."""
        if self.off_when == "falsy":
            return value is None or value is False or value == 0 or (
                isinstance(value, str) and value.strip().lower() in FALSE_VALUES)
        if self.off_when == "nonpositive":
            try:
                return not isinstance(value, bool) and float(str(value).strip()) <= 0
            except ValueError:
                return False
        return False


class SafeguardCategory(BaseModel):
    """A category of safeguards (autovacuum, checkpoints ...): what it is, in words, and its settings."""

    model_config = ConfigDict(extra="forbid")

    text: str
    settings: list[SafeguardSetting]


class SafeguardLibrary(BaseModel):
    """Every category the guard knows."""

    model_config = ConfigDict(extra="forbid")

    categories: dict[str, SafeguardCategory]

    def expand(self, names: list[str]) -> list[str]:
        """The categories a context's list names (`all`: every one), in library order."""
        if ALL in names:
            return list(self.categories)
        return [n for n in self.categories if n in names]

    def covering(self, key: str) -> list[tuple[str, SafeguardSetting]]:
        """(category, setting) of every library entry that covers this key, in library order."""
        return [(c, s) for c, cat in self.categories.items() for s in cat.settings if key_matches(s.key, key)]


@functools.lru_cache(maxsize=1)
def safeguard_library() -> SafeguardLibrary:
    """verifiers/safeguards.yaml, validated, read once per process."""
    return load_model(SafeguardLibrary, LIBRARY_PATH)
