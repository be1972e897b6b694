"""Build the shim directory that `guardrail shell` puts first on the agent's PATH.

Called by guardrail/cli/shell.py. Each shim is a one-line POSIX sh script that hands its argv to shim.py under
this interpreter with `-S` (standard library only, so each wrapped call starts in a few tens of milliseconds).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Iterable

__all__ = ["SHIMMED_TOOLS", "SHIM_SCRIPT", "build_shim_dir"]

# The operator's shell surface that can change a system (see DESIGN.md, "Shell surface").
SHIMMED_TOOLS = ("kubectl", "helm", "psql", "mysql", "mariadb", "redis-cli", "curl", "restart-svc.sh",
                 "reconfigure-infra.sh", "declare_repair_complete")
SHIM_SCRIPT = Path(__file__).resolve().parent / "shim.py"


def build_shim_dir(directory: str | Path, tools: Iterable[str] = SHIMMED_TOOLS, *,
                   python: str | None = None) -> Path:
    """Write one executable shim per tool into `directory` and return it."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    py = shlex.quote(python or sys.executable)
    script = shlex.quote(str(SHIM_SCRIPT))
    for tool in tools:
        p = d / tool
        p.write_text(f'#!/bin/sh\nexec {py} -S {script} {shlex.quote(tool)} "$@"\n')
        os.chmod(p, 0o755)
    return d
