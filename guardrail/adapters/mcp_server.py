"""The guard as an MCP server: `exec`, `declare_repair_complete` and `guard_status` tools on the official SDK.

Started by `guardrail mcp` (guardrail/cli/mcp.py) over stdio or streamable HTTP, and by bench/guard_load.py.
Every tool call is routed to the GuardSession of the client that made it, so each client session has its own
journal, context and environment:

    stdio                        the process serves one client: one session for its lifetime
    HTTP, handshake (legacy)     the transport's `mcp-session-id`
    HTTP, any protocol version   a `guardrail-session` header the client chooses, when it sends one
    HTTP, stateless, no header   one shared "http-anonymous" session (send `guardrail-session` to separate them)

A declaration may be held for minutes (convergence is measured over whole windows). While it is, the tool sends
MCP progress notifications (when the client's request carried a progressToken): one for every check that starts
and every measurement convergence makes, and at least one every `progress_every_s` (30 s). It runs on a worker
thread, so the session's other tools are answered meanwhile (guardrail/adapters/session.py). The answer is the
short form (DeclareOutcome.brief: verdict, codes, one line per check); the evidence is in the session's journal.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer

from guardrail.adapters.session import GuardSessions
from guardrail.guard import DENIED_EXIT_CODE

__all__ = ["build_server", "session_key", "SESSION_HEADER"]

SESSION_HEADER = "guardrail-session"
_INSTRUCTIONS = (
    "Run every shell command through the `exec` tool: the guard checks it against the incident's policy before it "
    "runs, and a refused command comes back with the rule and what to do instead. When you believe the incident is "
    "repaired, call `declare_repair_complete`; the guard verifies the repair and either accepts or tells you what "
    "is still wrong. `guard_status` shows what the guard has seen in this session."
)


ANONYMOUS = "http-anonymous"
_warned_anonymous: list[bool] = []


def session_key(ctx: Context | None, stdio_key: str) -> str:
    """Which client session a tool call belongs to (see the module docstring)."""
    headers = ctx.headers if ctx is not None else None
    if headers is None:
        return stdio_key
    chosen = headers.get(SESSION_HEADER)
    if chosen:
        return f"http-{chosen}"
    sid = headers.get("mcp-session-id")
    if sid:
        return f"http-{sid}"
    if not _warned_anonymous:
        _warned_anonymous.append(True)
        sys.stderr.write(f"guardrail mcp: an HTTP client sent neither a {SESSION_HEADER} header nor an "
                         f"mcp-session-id; every such client shares the session {ANONYMOUS}. Give each agent its "
                         f"own `{SESSION_HEADER}: NAME` header to keep their journals and checks apart.\n")
        sys.stderr.flush()
    return ANONYMOUS


# At least one progress notification this often while a declaration is held.
PROGRESS_EVERY_S = 30.0


def build_server(sessions: GuardSessions, *, name: str = "guardrail",
                 progress_every_s: float = PROGRESS_EVERY_S) -> MCPServer:
    """An MCPServer whose tools go through `sessions`."""
    app: MCPServer = MCPServer(name, instructions=_INSTRUCTIONS)
    # A stdio server lives for one client, so its session is named once, at start.
    stdio_key = f"stdio-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"

    @app.tool(name="exec", description="Run one shell command through the guard. A command the policy refuses "
              f"does not run: it returns exit code {DENIED_EXIT_CODE}, the rule id and a message saying what to "
              "do instead.")
    def exec_(command: str, ctx: Context) -> dict[str, Any]:
        session = sessions.get(session_key(ctx, stdio_key))
        if session.env is None:
            raise RuntimeError("this guard has no environment to run commands in (start it with --env)")
        result, record = session.execute(command)
        denies = [f for d in record.get("decisions", []) for f in d.get("deny", [])]
        warns = [f for d in record.get("decisions", []) for f in d.get("warn", [])]
        return {
            "exit_code": result.exit_code,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "ran": bool(record.get("ran")),
            "denied": not record.get("ran"),
            "outcome": record.get("outcome"),
            "rules": [f["id"] for f in denies + warns],
            "messages": [f"{f['id']}: {f['msg']}" for f in denies + warns],
            "seq": record.get("seq"),
        }

    @app.tool(name="declare_repair_complete", description="Declare the incident repaired. The guard verifies the "
              "repair (convergence, durability, scope, restart) and returns accepted, or the structured feedback "
              "saying what is not yet satisfied; keep working and declare again. Verifying may take minutes "
              "(the SLOs must hold for whole windows): progress is reported meanwhile, read-only commands still "
              "run, and changes are refused until the answer.")
    async def declare_repair_complete(summary: str, ctx: Context) -> dict[str, Any]:
        # Opening a session builds its environment and journal: blocking work, kept off the event loop.
        key = session_key(ctx, stdio_key)
        session = await anyio.to_thread.run_sync(sessions.get, key)
        sent = [0]
        latest: list[str] = ["declaration received"]
        started = time.monotonic()

        async def send(message: str) -> None:
            sent[0] += 1  # progress must increase with every notification
            try:
                await ctx.report_progress(sent[0], None, message)
            except Exception:  # noqa: BLE001 - a client gone or not listening does not stop the verification
                pass

        def heard(p: Any) -> None:  # on the worker thread: hand the report to the event loop
            latest[0] = p.message
            anyio.from_thread.run(send, p.message)

        async def beat() -> None:
            while True:
                await anyio.sleep(progress_every_s)
                await send(f"still verifying after {time.monotonic() - started:.0f} s: {latest[0]}")

        async with anyio.create_task_group() as tg:
            tg.start_soon(beat)
            outcome = await anyio.to_thread.run_sync(lambda: session.declare(summary, progress=heard))
            tg.cancel_scope.cancel()
        return {"session": session.key, "journal": str(session.journal.path) if session.journal.path else None,
                **outcome.brief()}

    @app.tool(name="guard_status", description="What the guard has seen in this session: commands, denials, "
              "warnings, declarations, feedback codes, and where the journal is.")
    def guard_status(ctx: Context) -> dict[str, Any]:
        return sessions.get(session_key(ctx, stdio_key)).status()

    return app
