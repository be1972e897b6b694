"""Which build made a results row: a digest of everything that decides an episode's outcome.

A row's verdict depends on the guard, the verifiers, the twin, the agents and the shipped policies and scenarios,
so `build_id()` hashes the files of the three packages (`guardrail`, `verifiers`, `arena`: code and the data
files they carry) and of the policy and scenario directories in use (GUARDRAIL_POLICY_DIR and
GUARDRAIL_SCENARIO_DIR included). The bench stamps every row with it; `--resume` runs again the episodes whose
rows another build made, instead of mixing verdicts of two versions in one report.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

__all__ = ["build_id"]

_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache"}


def _files(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*")
                  if p.is_file() and not _SKIP_DIRS.intersection(p.relative_to(root).parts)
                  and p.suffix not in (".pyc", ".pyo"))


@lru_cache(maxsize=1)
def build_id() -> str:
    """A short digest (16 hex digits) of the code and data an episode runs on; stable across processes."""
    import arena
    import guardrail
    import verifiers
    from guardrail.resources import policy_dir, scenario_dir

    h = hashlib.sha256()
    roots = [("guardrail", Path(guardrail.__file__).parent), ("verifiers", Path(verifiers.__file__).parent),
             ("arena", Path(arena.__file__).parent), ("policies", policy_dir()), ("scenarios", scenario_dir())]
    for name, root in roots:
        for p in _files(root):
            h.update(f"{name}/{p.relative_to(root).as_posix()}\0".encode())
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()[:16]
