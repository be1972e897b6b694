"""Build the shim directory that `guardrail shell` puts first on the agent's PATH.

Called by guardrail/cli/shell.py (and arena/live/hostwrap.py asks `judged_by_active_shim`). Each shim is a
POSIX sh wrapper that hands its argv to shim.py under this interpreter with `-S` (standard library only, so each
wrapped call starts in a few tens of milliseconds), naming its session, the daemon's socket, the session's
secret and the real binary.

The real binary of each tool is resolved here, once, when the directory is made, from the PATH the agent was
given (without the shim directory): the first executable of that name that is not one of this session's shims
by identity (its directory or its own real path inside the shim directory, the same inode as a shim, a wrapper
carrying this session's marker or naming the shim directory). A wrapper that runs "the next TOOL on PATH" at run
time can still lead back to a shim; shim.py refuses that recursion (protocol.ACTIVE_ENV).
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import sys
from pathlib import Path
from typing import Iterable, Mapping

from guardrail.adapters.shell.protocol import ACTIVE_ENV
from guardrail.adapters.shell.shim import SHIM_MARKER

__all__ = ["SHIMMED_TOOLS", "SHIM_SCRIPT", "RESOLVED_FILE", "build_shim_dir", "resolve_real_binary",
           "shim_session", "judged_by_active_shim"]

# The operator's shell surface that can change a system (see DESIGN.md, "Shell surface").
SHIMMED_TOOLS = ("kubectl", "helm", "psql", "mysql", "mariadb", "redis-cli", "curl", "restart-svc.sh",
                 "reconfigure-infra.sh", "declare_repair_complete")
SHIM_SCRIPT = Path(__file__).resolve().parent / "shim.py"
RESOLVED_FILE = "resolved.json"
_HEAD = 64 * 1024


def shim_session(path: str | os.PathLike[str]) -> str | None:
    """The session id in a guard shim's marker line, or None when the file is no guard shim."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD)
    except OSError:
        return None
    marker = SHIM_MARKER.encode()
    at = head.find(marker)
    if at < 0:
        return None
    rest = head[at + len(marker):].split(b"\n", 1)[0].split()
    return rest[0].decode("ascii", "replace") if rest else None


def judged_by_active_shim(candidate: str | os.PathLike[str], tool: str, env: Mapping[str, str]) -> bool:
    """Whether `candidate` is the guard shim of `tool` whose command is running around the caller: a wrapper
    that a shim started must pass over it to the real binary (the shim already judged this invocation)."""
    session = shim_session(candidate)
    return session is not None and f"{session}:{tool}" in env.get(ACTIVE_ENV, "").split()


def resolve_real_binary(tool: str, search_path: str, shim_dir: str | Path, session: str) -> str | None:
    """The binary `tool` runs as, on `search_path`, skipping anything that is or leads to this session's shims."""
    shim_real = os.path.realpath(shim_dir)
    own_inodes = set()
    for p in Path(shim_real).iterdir():
        try:
            st = p.stat()
        except OSError:
            continue
        own_inodes.add((st.st_dev, st.st_ino))
    for d in search_path.split(os.pathsep):
        if not d or os.path.realpath(d) == shim_real:
            continue
        cand = os.path.join(d, tool)
        try:
            st = os.stat(cand)
        except OSError:
            continue
        if not os.path.isfile(cand) or not os.access(cand, os.X_OK):
            continue
        real = os.path.realpath(cand)
        if os.path.dirname(real) == shim_real or (st.st_dev, st.st_ino) in own_inodes:
            continue
        if _leads_to(cand, session, shim_real):
            continue
        return os.path.abspath(cand)
    return None


def _leads_to(path: str, session: str, shim_dir: str) -> bool:
    """A script that carries this session's marker, or names the shim directory, runs one of our shims."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD)
    except OSError:
        return False
    return (SHIM_MARKER + session).encode() in head or shim_dir.encode() in head


def build_shim_dir(directory: str | Path, tools: Iterable[str] = SHIMMED_TOOLS, *,
                   python: str | None = None, search_path: str | None = None, socket_path: str | None = None,
                   secret_file: str | None = None, session: str | None = None, via_daemon: bool = False,
                   script: str | Path | None = None) -> Path:
    """Write one executable shim per tool into `directory`, each naming the real binary it resolved on
    `search_path` (default: this process's PATH), and record the resolution in RESOLVED_FILE; return the dir.
    With `via_daemon` the shims ask the daemon to run their tool (`guardrail shell --confine`)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    session = session or secrets.token_hex(8)
    py = shlex.quote(python or sys.executable)
    script = shlex.quote(str(script or SHIM_SCRIPT))
    tools = list(tools)
    search = os.environ.get("PATH", "") if search_path is None else search_path
    # Written once without a resolution, so that a hard link to one of them on the PATH is known by its inode.
    for tool in tools:
        _write(d / tool, session, f"exit {126}\n")
    resolved = {t: resolve_real_binary(t, search, d, session) for t in tools}
    for tool in tools:
        opts = [f"--session {shlex.quote(session)}"]
        if socket_path is not None:
            opts.append(f"--socket {shlex.quote(str(socket_path))}")
        if secret_file is not None:
            opts.append(f"--secret {shlex.quote(str(secret_file))}")
        opts.append(f"--real {shlex.quote(resolved[tool] or '')}")
        if via_daemon:  # confined: the agent's user cannot run the real tool; the daemon runs it
            opts.append("--via daemon")
        _write(d / tool, session, f'exec {py} -S {script} {" ".join(opts)} {shlex.quote(tool)} "$@"\n')
    (d / RESOLVED_FILE).write_text(json.dumps({"session": session, "resolved": resolved}, indent=1) + "\n")
    return d


def _write(path: Path, session: str, body: str) -> None:
    # In place (same inode): the first pass's inodes are the ones resolve_real_binary compares against.
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\n{SHIM_MARKER}{session}\n{body}")
    os.chmod(path, 0o755)
