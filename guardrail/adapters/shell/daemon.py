"""GuardDaemon: one guarded session served to shims over a unix socket (protocol.py).

Started by `guardrail shell` (guardrail/cli/shell.py) for the lifetime of the wrapped agent, and by
bench/guard_load.py. Each connection is served on its own thread; the session serialises the guard's
decisions, so the journal's order is the order of decisions.
"""

from __future__ import annotations

import json
import os
import shlex
import socketserver
import threading
from pathlib import Path
from typing import Any, Callable

from guardrail.adapters.session import GuardSession
from guardrail.adapters.shell.protocol import encode
from guardrail.guard import DENIED_EXIT_CODE, Admission
from verifiers.protocols import CommandResult

__all__ = ["GuardDaemon", "command_text", "STDIN_MARK"]

# The heredoc delimiter that carries a shim's stdin payload to the normaliser, as a shell would see it.
STDIN_MARK = "GUARDRAIL_STDIN"


def command_text(argv: list[str], stdin: str | None = None) -> str:
    """The shell text the agent effectively ran: argv with shell quoting, and its stdin payload as a heredoc.

    The payload is the agent's, so it may hold the delimiter itself: a line `GUARDRAIL_STDIN` would end the
    heredoc early and the rest of the payload would be read as shell, not as the tool's input (the guard would
    decide on other text than the tool runs). The delimiter is therefore one that occurs nowhere in the payload."""
    text = shlex.join(argv)
    if stdin:
        body = stdin if stdin.endswith("\n") else stdin + "\n"
        mark, n = STDIN_MARK, 0
        while mark in body:
            n += 1
            mark = f"{STDIN_MARK}_{n}"
        text = f"{text} <<'{mark}'\n{body}{mark}"
    return text


class _Connection(socketserver.StreamRequestHandler):
    """Serves one shim (or client) connection until it closes."""

    server: "_Server"

    def _stream_progress(self, p: Any) -> None:
        try:
            self.wfile.write(encode({"progress": p.to_dict()}))
            self.wfile.flush()
        except OSError:
            pass  # the shim went away; the declaration's answer still goes to the journal

    def handle(self) -> None:
        pending: dict[int, Admission] = {}
        try:
            for raw in self.rfile:
                if not raw.strip():
                    continue
                try:
                    msg = json.loads(raw)
                    if not isinstance(msg, dict):
                        raise ValueError("a request is a JSON object")
                    reply = self.server.daemon_.handle(msg, pending, progress=self._stream_progress)
                except (ValueError, KeyError, TypeError) as e:
                    reply = {"error": f"bad request: {e}"}
                self.wfile.write(encode(reply))
                self.wfile.flush()
        except (ConnectionResetError, BrokenPipeError):
            pass
        finally:
            # A shim that dies between before and after (killed, crashed) leaves its command's result unknown.
            for adm in pending.values():
                self.server.daemon_.session.journal.append("result", ref=adm.seq, exit_code=None, lost=True,
                                                           note="the shim went away before reporting a result")


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True
    daemon_: "GuardDaemon"


class GuardDaemon:
    """Serves a GuardSession on a unix socket until stopped."""

    def __init__(self, session: GuardSession, socket_path: str | Path):
        self.session = session
        self.socket_path = str(socket_path)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- the protocol ------------------------------------------------------------------------------------------

    def handle(self, msg: dict[str, Any], pending: dict[int, Admission],
               progress: Callable[[Any], None] | None = None) -> dict[str, Any]:
        """One request's reply. `progress` hears a held declaration's progress (the connection streams it to the
        shim as `{"progress": ...}` lines before the reply)."""
        op = msg.get("op")
        if op == "before":
            argv = msg["argv"]
            if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
                raise ValueError("argv must be a non-empty list of strings")
            stdin = msg.get("stdin")
            adm = self.session.before(command_text(argv, stdin if isinstance(stdin, str) else None))
            reply = {"id": adm.seq, "runs": adm.runs, "outcome": adm.outcome.value,
                     "rules": [f.id for f in adm.denies + adm.warns],
                     "message": "\n".join(f.render() for f in adm.feedback)}
            if adm.runs:
                pending[adm.seq] = adm
            else:
                self.session.journal.append("result", ref=adm.seq, exit_code=DENIED_EXIT_CODE, duration_s=0.0,
                                            denied=True)
            return reply
        if op == "after":
            adm = pending.pop(int(msg["id"]))
            result = CommandResult(command=adm.command, exit_code=int(msg.get("exit_code", 0)),
                                   duration_s=float(msg.get("duration_s", 0.0)))
            feedback = self.session.after(adm, result)
            return {"ok": True, "feedback": [f.to_dict() for f in feedback],
                    "message": "\n".join(f.render() for f in feedback)}
        if op == "declare":
            out = self.session.declare(str(msg.get("summary") or ""), progress=progress)
            return {**out.brief(), "message": out.message()}
        if op == "status":
            return self.session.status()
        raise ValueError(f"unknown op {op!r}")

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> "GuardDaemon":
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        self._server = _Server(self.socket_path, _Connection)
        self._server.daemon_ = self
        os.chmod(self.socket_path, 0o600)  # only this user's processes may ask the guard
        self._thread = threading.Thread(target=self._server.serve_forever, name="guard-daemon", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)

    def __enter__(self) -> "GuardDaemon":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
