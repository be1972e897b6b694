"""`guardrail mcp`: serve the guard as an MCP server (stdio or streamable HTTP) for agents like Claude Code.

Attached to the root group by guardrail/cli/commands.py; the server itself is guardrail/adapters/mcp_server.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from guardrail import pygc
from guardrail.cli import POLICY_HELP, cli
from guardrail.errors import InputError
from guardrail.policy.base import Mode

__all__ = ["mcp"]


@cli.command("mcp")
@click.option("--env", "env_spec", default="local", show_default=True,
              help="Where commands run: `local` (this machine's shell) or `twin:<scenario>`.")
@click.option("--context", "context_path", type=click.Path(dir_okay=False), default=None,
              help="Public incident context (YAML/JSON, or a scenario file: only its public part is read).")
@click.option("--policy", "policy", type=click.Path(file_okay=False), default=None,
              help=POLICY_HELP)
@click.option("--journal-dir", type=click.Path(file_okay=False), default="guardrail-journals", show_default=True,
              help="One journal file per client session is written here.")
@click.option("--criteria", "criteria_path", type=click.Path(dir_okay=False), default=None,
              help="Verifier criteria overrides (YAML), e.g. convergence: {default_cycle_s: 30, max_wait_cycles: 4}.")
@click.option("--mode", type=click.Choice([m.value for m in Mode]), default=Mode.ENFORCE.value, show_default=True)
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="HTTP port; 0 picks a free one (the server's start-up log names it).")
@click.option("--path", "http_path", default="/mcp", show_default=True, help="Streamable HTTP endpoint path.")
def mcp(env_spec: str, context_path: str | None, policy: str | None, journal_dir: str, criteria_path: str | None,
        mode: str, transport: str,
        host: str, port: int, http_path: str) -> None:
    """Serve exec / declare_repair_complete / guard_status as MCP tools, every call guarded and journalled."""
    from guardrail.adapters.mcp_server import build_server
    from guardrail.adapters.session import GuardSessions, context_from, load_criteria, load_engine
    from guardrail.envs import resolve_environment
    from guardrail.ownfiles import OwnFiles

    context = context_from(context_path, env_spec=env_spec)
    # Resolve once now so a bad --env fails at start (exit 2), not on the agent's first command.
    resolve_environment(env_spec, context)
    sessions = GuardSessions(load_engine(policy), context, journal_dir=Path(journal_dir),
                             env_factory=lambda ctx: resolve_environment(env_spec, ctx), mode=Mode(mode),
                             criteria=load_criteria(criteria_path),
                             own_files=OwnFiles().add_files([context_path, criteria_path]))
    # Journals are written when a client connects; a directory that cannot take them fails now, at start.
    _check_journal_dir(Path(journal_dir))
    server = build_server(sessions)
    pygc.settle()  # engines and sessions are built: stop re-scanning them (guardrail/pygc.py)
    try:
        if transport == "stdio":
            _check_stdio()
            server.run("stdio")
        else:
            server.run("streamable-http", host=host, port=port, streamable_http_path=http_path)
    finally:
        sessions.close()


def _check_journal_dir(d: Path) -> None:
    """Create the journal directory and prove it writable (guardrail.fileio), or bad input (exit 2)."""
    import errno

    from guardrail.fileio import ensure_writable_dir

    try:
        ensure_writable_dir(d)
    except OSError as e:
        if e.errno in (errno.ENOTDIR, errno.EEXIST):
            raise InputError(f"{d}: not a directory", path="--journal-dir") from e
        verb = "cannot write" if d.is_dir() else "cannot create"
        raise InputError(f"{d}: {verb}: {e.strerror or e}", path="--journal-dir") from e


def _check_stdio() -> None:
    """The stdio transport speaks to its client on stdin and stdout: bad input (exit 2) when either is closed."""
    for name, stream, fd in (("stdin", sys.stdin, 0), ("stdout", sys.stdout, 1)):
        try:
            if stream is None:
                raise OSError("closed")
            os.fstat(fd)
        except OSError as e:
            raise InputError(f"stdio needs an MCP client on stdin and stdout ({name} is {e.strerror or e})",
                             path="--transport") from e
