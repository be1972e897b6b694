"""The policy engine: the seam (base), EmbeddedOPA (in process), OPAServer (REST), and the mode helper.

Called by the Guard and the CLI. The engines load lazily, so importing the seam does not load OPA.
"""

from __future__ import annotations

from typing import Any

from guardrail.policy.base import Decision, Finding, Mode, Outcome, PolicyEngine

__all__ = ["Decision", "Finding", "Mode", "Outcome", "PolicyEngine", "EmbeddedOPA", "OPAServer", "enforce",
           "Enforcement"]

_LAZY = {
    "EmbeddedOPA": "guardrail.policy.embedded",
    "OPAServer": "guardrail.policy.server",
    "enforce": "guardrail.policy.enforcement",
    "Enforcement": "guardrail.policy.enforcement",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)
