"""The safeguard library as Python reads it: categories of settings that protect a system from itself.

The library is data, `policies/safeguards/data.yaml` in the shipped policy tree; both policy engines load it as
`data.safeguards` for SRE-SAFE-008/009, and this module loads the same file (validated) for what only Python does
with it: checking a context's `safeguards:` entries on load and `guardrail context explain`
(guardrail/context_names.py).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict

from guardrail.resources import shipped_policy_dir
from guardrail.yamlio import load_model

__all__ = ["SafeguardSetting", "SafeguardCategory", "SafeguardLibrary", "safeguard_library", "ALL"]

ALL = "all"


class SafeguardSetting(BaseModel):
    """One setting of a category: a key pattern and, where it can be switched off, by what value."""

    model_config = ConfigDict(extra="forbid")

    key: str
    off_when: Literal["falsy", "nonpositive"] | None = None


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


@lru_cache(maxsize=1)
def safeguard_library() -> SafeguardLibrary:
    return load_model(SafeguardLibrary, shipped_policy_dir() / "safeguards" / "data.yaml")
