"""Which build made a results row: a digest of everything that decides an episode's outcome.

A row's verdict depends on the guard, the verifiers, the twin, the agents, the policies and scenarios in use, and
the engines underneath (OPA's bindings, the shell parser). `build_id()` hashes the code and data files of the
three packages (`guardrail`, `verifiers`, `arena`: .py, .rego, .yaml, .yml, .json, .sql; not docs, not Rego tests,
not dotfiles), the policy and scenario trees in use (GUARDRAIL_POLICY_DIR and GUARDRAIL_SCENARIO_DIR included),
and the versions of Python and of the libraries that decide verdicts. The bench stamps every row with it;
`--resume` runs again the episodes whose rows another build made, instead of mixing verdicts of two versions in
one report. A docs-only change keeps the build.
"""

from __future__ import annotations

import hashlib
import os
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

__all__ = ["build_id"]

_SUFFIXES = {".py", ".rego", ".yaml", ".yml", ".json", ".sql"}
_SKIP_DIRS = {"__pycache__"}
# Distributions whose behaviour reaches a verdict: the policy engine, the shell parser, the models.
_DISTRIBUTIONS = ("opa-golib-python-bindings", "tree-sitter", "tree-sitter-bash", "pydantic", "pyyaml")


def _files(root: Path) -> list[Path]:
    if not root.is_dir():
        return [root] if root.is_file() else []
    return sorted(p for p in root.rglob("*")
                  if p.is_file() and p.suffix in _SUFFIXES and not p.name.endswith("_test.rego")
                  and not any(part.startswith(".") or part in _SKIP_DIRS for part in p.relative_to(root).parts))


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def build_id() -> str:
    """A short digest (16 hex digits) of the code, data and engines an episode runs on; stable across processes."""
    return _build_id(os.environ.get("GUARDRAIL_POLICY_DIR"), os.environ.get("GUARDRAIL_SCENARIO_DIR"))


@lru_cache(maxsize=4)
def _build_id(_policy_env: str | None, _scenario_env: str | None) -> str:
    import arena
    import guardrail
    import verifiers
    from guardrail.resources import policy_dir, scenario_dir, shipped_policy_dir

    h = hashlib.sha256()
    h.update(f"python {sys.version_info[0]}.{sys.version_info[1]}\0".encode())
    for dist in _DISTRIBUTIONS:
        h.update(f"{dist} {_version(dist)}\0".encode())
    roots = [("guardrail", Path(guardrail.__file__).parent), ("verifiers", Path(verifiers.__file__).parent),
             ("arena", Path(arena.__file__).parent), ("policies", policy_dir()), ("scenarios", scenario_dir())]
    if shipped_policy_dir().resolve() != policy_dir().resolve():
        roots.append(("shipped-policies", shipped_policy_dir()))  # what a GUARDRAIL_POLICY_DIR layer sits on
    for name, root in roots:
        for p in _files(root):
            rel = p.relative_to(root).as_posix() if root.is_dir() else p.name
            h.update(f"{name}/{rel}\0".encode())
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()[:16]
