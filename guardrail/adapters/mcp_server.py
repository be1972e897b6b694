"""The guard as an MCP server: `exec`, `declare_repair_complete` and `guard_status` tools on the official SDK.

Started by `guardrail mcp` (guardrail/cli/mcp.py) over stdio or streamable HTTP, and by bench/guard_load.py.
Every tool call is routed to the GuardSession of the client that made it, so each client session has its own
journal, context and environment:

    stdio                        the process serves one client: one session for its lifetime
    HTTP, handshake (legacy)     the transport's `mcp-session-id`
    HTTP, any protocol version   a `guardrail-session` header the client chooses, when it sends one
    HTTP, stateless, no header   one session per credential ("http-NAME")

Over HTTP every key is namespaced by the credential the gate (guardrail/adapters/http_gate.py) admitted the
request under: `http-NAME.SESSION`. A header is anyone's to send, so two credentials naming the same session get
two sessions, never each other's journal.

A declaration may be held for minutes (convergence is measured over whole windows). While it is, the tool sends
MCP progress notifications (when the client's request carried a progressToken): one for every check that starts
and every measurement convergence makes, and at least one every `progress_every_s` (30 s). It runs on a worker
thread, so the session's other tools are answered meanwhile (guardrail/adapters/session.py). The answer is the
short form (DeclareOutcome.brief: verdict, codes, one line per check); the evidence is in the session's journal.
"""

from __future__ import annotations

import os
import time
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from guardrail.adapters.http_gate import principal_of
from guardrail.adapters.session import GuardSession, GuardSessions, SessionLimitError
from guardrail.guard import DENIED_EXIT_CODE
from guardrail.policy.base import Finding, distinct_findings

__all__ = ["build_server", "session_key", "SESSION_HEADER", "MAX_SESSION_NAME"]

SESSION_HEADER = "guardrail-session"
MAX_SESSION_NAME = 128  # characters of a `guardrail-session` name
_INSTRUCTIONS = (
    "Run every shell command through the `exec` tool: the guard checks it against the incident's policy before it "
    "runs, and a refused command comes back with the rule and what to do instead. When you believe the incident is "
    "repaired, call `declare_repair_complete`; the guard verifies the repair and either accepts or tells you what "
    "is still wrong. `guard_status` shows what the guard has seen in this session."
)


def session_key(ctx: Context | None, stdio_key: str) -> str:
    """Which client session a tool call belongs to (see the module docstring)."""
    headers = ctx.headers if ctx is not None else None
    if headers is None:
        return stdio_key
    request = getattr(getattr(ctx, "request_context", None), "request", None)
    # Without the gate (an app built in process, e.g. by a test) there is one anonymous credential.
    principal = principal_of(request) or "noauth"
    chosen = headers.get(SESSION_HEADER)
    if chosen:
        if len(chosen) > MAX_SESSION_NAME:
            raise ValueError(f"a {SESSION_HEADER} name is at most {MAX_SESSION_NAME} characters")
        return f"http-{principal}.{chosen}"
    sid = headers.get("mcp-session-id")
    if sid:
        return f"http-{principal}.{sid}"
    return f"http-{principal}"


# At least one progress notification this often while a declaration is held.
PROGRESS_EVERY_S = 30.0


def build_server(sessions: GuardSessions, *, name: str = "guardrail",
                 progress_every_s: float = PROGRESS_EVERY_S) -> MCPServer:
    """An MCPServer whose tools go through `sessions`."""
    app: MCPServer = MCPServer(name, instructions=_INSTRUCTIONS)
    # A stdio server lives for one client, so its session is named once, at start.
    stdio_key = f"stdio-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"

    def session_of(ctx: Context) -> GuardSession:
        try:
            return sessions.get(session_key(ctx, stdio_key))
        except (SessionLimitError, ValueError) as e:
            # An expected refusal: its message goes to the client, and the server logs no traceback for it.
            raise ToolError(str(e)) from e

    @app.tool(name="exec", description="Run one shell command through the guard. A command the policy refuses "
              f"does not run: it returns exit code {DENIED_EXIT_CODE}, the rule id and a message saying what to "
              "do instead.")
    def exec_(command: str, ctx: Context) -> dict[str, Any]:
        session = session_of(ctx)
        if session.env is None:
            raise RuntimeError("this guard has no environment to run commands in (start it with --env)")
        result, record = session.execute(command)
        # Each rule's message once: the record keeps one decision per action, and one rule may fire for several.
        found = [(kind, Finding(f["id"], f["msg"])) for d in record.get("decisions", [])
                 for kind in ("deny", "warn") for f in d.get(kind, [])]
        denies = distinct_findings(f for kind, f in found if kind == "deny")
        warns = distinct_findings((f for kind, f in found if kind == "warn"), besides=denies)
        return {
            "exit_code": result.exit_code,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "ran": bool(record.get("ran")),
            "denied": not record.get("ran"),
            "outcome": record.get("outcome"),
            "rules": [f.id for f in denies + warns],
            "messages": [f"{f.id}: {f.msg}" for f in denies + warns],
            "seq": record.get("seq"),
        }

    @app.tool(name="declare_repair_complete", description="Declare the incident repaired. The guard verifies the "
              "repair (convergence, durability, scope, restart) and returns accepted, or the structured feedback "
              "saying what is not yet satisfied; keep working and declare again. Verifying may take minutes "
              "(the SLOs must hold for whole windows): progress is reported meanwhile, read-only commands still "
              "run, and changes are refused until the answer.")
    async def declare_repair_complete(summary: str, ctx: Context) -> dict[str, Any]:
        # Opening a session builds its environment and journal: blocking work, kept off the event loop.
        session = await anyio.to_thread.run_sync(session_of, ctx)
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
        return session_of(ctx).status()

    return app
