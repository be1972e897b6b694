"""Where the shipped data lives: `policies/` and `scenarios/`.

A non-editable install carries them as package data (guardrail/_data/policies, arena/_data/scenarios, see
pyproject's force-include); a source checkout has them at the repository root. Environment variables
GUARDRAIL_POLICY_DIR and GUARDRAIL_SCENARIO_DIR override both (a GUARDRAIL_POLICY_DIR of one's own rules, with no
`package guardrail`, is layered on the shipped library by guardrail/policy/loader.py).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["policy_dir", "shipped_policy_dir", "scenario_dir"]

_HERE = Path(__file__).resolve().parent


def _shipped(packaged: Path, name: str) -> Path:
    return packaged if packaged.is_dir() else _HERE.parent / name


def _find(env: str, packaged: Path, name: str) -> Path:
    return Path(os.environ[env]) if os.environ.get(env) else _shipped(packaged, name)


def policy_dir() -> Path:
    return _find("GUARDRAIL_POLICY_DIR", _HERE / "_data" / "policies", "policies")


def shipped_policy_dir() -> Path:
    """The library this package ships, whatever GUARDRAIL_POLICY_DIR says (the base a tree of one's own rules is
    layered on when that variable names such a tree)."""
    return _shipped(_HERE / "_data" / "policies", "policies")


def scenario_dir() -> Path:
    # arena's data; located here so guardrail needs no import of arena to find it.
    return _find("GUARDRAIL_SCENARIO_DIR", _HERE.parent / "arena" / "_data" / "scenarios", "scenarios")
