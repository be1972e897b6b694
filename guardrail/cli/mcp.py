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
from guardrail.cli.observe import observed, slo_options
from guardrail.errors import InputError
from guardrail.policy.base import Mode

__all__ = ["mcp"]


@cli.command("mcp")
@click.option("--env", "env_spec", default="local", show_default=True,
              help="Where commands run: `local` (this machine's shell), `kubernetes[:NAMESPACE]` (a cluster through "
                   "its API) or `twin:<scenario>`.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="--env kubernetes: the kubeconfig file (default: KUBECONFIG, ~/.kube/config, or in-cluster).")
@click.option("--context-name", default=None, help="--env kubernetes: the kubeconfig context to use.")
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
@click.option("--token-file", type=click.Path(dir_okay=False), default=None,
              help="HTTP: bearer tokens, one a line (`TOKEN` or `NAME:TOKEN`), in a file only you can read. "
                   "Default: a fresh token, written to a 0600 file whose path is logged on stderr.")
@click.option("--no-auth", is_flag=True, default=False,
              help="HTTP on a loopback address only: accept requests without a token (any local process can "
                   "then run commands through the guard).")
@click.option("--max-sessions", type=click.IntRange(1, 100_000), default=None,
              help="Most guard sessions served at once (default 256); a new one beyond is refused.")
@click.option("--max-request-bytes", type=click.IntRange(1024, 64 * 1024 * 1024), default=None,
              help="HTTP: largest request body (default 1 MiB); a larger one gets 413 before it is parsed.")
@slo_options
def mcp(env_spec: str, kubeconfig: str | None, context_name: str | None, context_path: str | None, policy: str | None, journal_dir: str, criteria_path: str | None,
        mode: str, transport: str,
        host: str, port: int, http_path: str, token_file: str | None, no_auth: bool, max_sessions: int | None,
        max_request_bytes: int | None, prometheus_url: str | None, slo_path: str | None) -> None:
    """Serve exec / declare_repair_complete / guard_status as MCP tools, every call guarded and journalled."""
    from guardrail.adapters.http_gate import MAX_REQUEST_BYTES, is_loopback, load_token_file
    from guardrail.adapters.mcp_server import build_server
    from guardrail.adapters.session import MAX_SESSIONS, GuardSessions, context_from, load_criteria, load_engine
    from guardrail.envs import resolve_environment
    from guardrail.ownfiles import OwnFiles

    credentials = None
    if transport == "http":
        if no_auth and token_file:
            raise InputError("--no-auth and --token-file exclude each other", path="--no-auth")
        if no_auth and not is_loopback(host):
            raise InputError(f"--no-auth is allowed on a loopback address only, not {host}", path="--no-auth")
        if token_file:
            credentials = load_token_file(token_file)
    elif no_auth or token_file:
        raise InputError("--token-file and --no-auth apply to --transport http", path="--transport")
    context = context_from(context_path, env_spec=env_spec)
    # Resolve once now so a bad --env fails at start (exit 2), not on the agent's first command.
    env_options = {"kubeconfig": kubeconfig, "context_name": context_name}
    resolve_environment(env_spec, context, env_options)
    # The lambda reads `criteria` when a session starts: the merged criteria this line assigns (the restart bounds).
    env_factory, criteria = observed(lambda ctx: resolve_environment(env_spec, ctx, env_options, criteria),
                                     prometheus_url, slo_path, load_criteria(criteria_path))
    sessions = GuardSessions(load_engine(policy), context, journal_dir=Path(journal_dir),
                             env_factory=env_factory, mode=Mode(mode), criteria=criteria,
                             max_sessions=max_sessions or MAX_SESSIONS,
                             own_files=OwnFiles().add_files([context_path, criteria_path, slo_path, token_file]))
    # Journals are written when a client connects; a directory that cannot take them fails now, at start.
    _check_journal_dir(Path(journal_dir))
    server = build_server(sessions)
    pygc.settle()  # engines and sessions are built: stop re-scanning them (guardrail/pygc.py)
    try:
        if transport == "stdio":
            _check_stdio()
            server.run("stdio")
        else:
            _serve_http(server, host=host, port=port, path=http_path, credentials=credentials, no_auth=no_auth,
                        max_body=max_request_bytes or MAX_REQUEST_BYTES, max_sessions=max_sessions or MAX_SESSIONS)
    finally:
        sessions.close()


def _serve_http(server, *, host: str, port: int, path: str, credentials, no_auth: bool, max_body: int,
                max_sessions: int) -> None:
    """Streamable HTTP behind the gate (guardrail/adapters/http_gate.py): a token on every request."""
    import shutil
    import signal
    import tempfile

    import uvicorn

    from guardrail.adapters.http_gate import HttpGate, write_token_file

    token_dir = None
    if no_auth:
        _say("guardrail mcp: WARNING: --no-auth: requests need no token. Any process on this machine, of any "
             f"user, can run commands through this guard at http://{host}:{port}{path} and act in any session.")
    elif credentials is None:
        token_dir = tempfile.mkdtemp(prefix="guardrail-mcp-")  # 0700, this user's
        token_path, credentials = write_token_file(token_dir)
        _say(f"guardrail mcp: bearer token in {token_path} (mode 0600); clients send "
             f"`Authorization: Bearer <its content>`")
    else:
        names = ", ".join(name for name, _ in credentials.tokens)
        _say(f"guardrail mcp: {len(credentials.tokens)} credential(s) from --token-file: {names}")
    app = server.streamable_http_app(streamable_http_path=path, max_request_body_size=max_body,
                                     max_sessions=max_sessions, host=host)
    gated = HttpGate(app, credentials, max_body_bytes=max_body)
    # uvicorn re-raises the SIGTERM it caught once it has shut down; as an exception, so the token goes with it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        uvicorn.Server(uvicorn.Config(gated, host=host, port=port, log_level="info")).run()
    finally:
        if token_dir is not None:
            shutil.rmtree(token_dir, ignore_errors=True)


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


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
