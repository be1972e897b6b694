"""GuardDaemon: one guarded session served to shims over a unix socket (protocol.py).

Started by `guardrail shell` (guardrail/cli/shell.py) for the lifetime of the wrapped agent, and by
bench/guard_load.py. Each connection is served on its own thread; the session serialises the guard's
decisions, so the journal's order is the order of decisions. Connections, request lines and stdin payloads are
bounded (protocol.py's limits), and a request that takes a while gets heartbeats so that its shim can tell a slow
guard from a stopped one.
"""

from __future__ import annotations

import json
import os
import shlex
import socketserver
import threading
import time
from pathlib import Path
from typing import Any, Callable

from guardrail.adapters.session import GuardSession
from guardrail.adapters.shell.protocol import (HEARTBEAT_S, MAX_CONNECTIONS, MAX_LINE_BYTES, MAX_STDIN_BYTES, encode,
                                               proof)
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


# Environment variables of the agent that a confined run passes to the real client: connection settings only.
_CLIENT_ENV = ("PG", "MYSQL_", "MARIADB_", "REDISCLI_", "LIVE_", "LANG", "LC_", "TZ")


class _Connection(socketserver.StreamRequestHandler):
    """Serves one shim (or client) connection until it closes."""

    server: "_Server"

    def setup(self) -> None:
        super().setup()
        self.busy_since: float | None = None
        self.wlock = threading.Lock()

    def send(self, reply: dict[str, Any]) -> None:
        with self.wlock:
            self.wfile.write(encode(reply))
            self.wfile.flush()

    def beat(self) -> None:
        with self.wlock:
            if self.busy_since is not None:
                self.wfile.write(b'{"wait":true}\n')

    def _stream_progress(self, p: Any) -> None:
        try:
            self.send({"progress": p.to_dict()})
        except OSError:
            pass  # the shim went away; the declaration's answer still goes to the journal

    def handle(self) -> None:
        daemon = self.server.daemon_
        if not daemon.slots.acquire(blocking=False):
            try:
                # Its first request (a shim's hello) is read first, so that the refusal reaches the client
                # rather than a reset of the connection it is still writing to.
                self.connection.settimeout(5.0)
                try:
                    self.rfile.readline(4096)
                except OSError:
                    pass  # it sent nothing in time: told all the same
                self.send({"error": f"the guard daemon serves at most {daemon.max_connections} connections at "
                                    "once; refused"})
            except OSError:
                pass
            return
        pending: dict[int, Admission] = {}
        daemon.connections.add(self)
        try:
            while True:
                raw = self.rfile.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    break
                if len(raw) > MAX_LINE_BYTES:
                    # Never truncated and judged: the rest of the line is read and thrown away a piece at a time
                    # (the client then reads the refusal, rather than a reset), and nothing of it is decided.
                    while raw and not raw.endswith(b"\n"):
                        raw = self.rfile.readline(64 * 1024)
                    self.send({"error": f"request over {MAX_LINE_BYTES} bytes: refused"})
                    if not raw:
                        break
                    continue
                if not raw.strip():
                    continue
                self.busy_since = time.monotonic()
                try:
                    msg = json.loads(raw)
                    if not isinstance(msg, dict):
                        raise ValueError("a request is a JSON object")
                    if msg.get("op") == "run":
                        reply = daemon.run(msg, self.send)
                    else:
                        reply = daemon.handle(msg, pending, progress=self._stream_progress)
                except (ValueError, KeyError, TypeError) as e:
                    reply = {"error": f"bad request: {e}"}
                finally:
                    with self.wlock:
                        self.busy_since = None
                self.send(reply)
        except (ConnectionResetError, BrokenPipeError):
            pass
        finally:
            daemon.connections.discard(self)
            daemon.slots.release()
            # A shim that dies between before and after (killed, crashed) leaves its command's result unknown.
            for adm in pending.values():
                daemon.session.journal.append("result", ref=adm.seq, exit_code=None, lost=True,
                                              note="the shim went away before reporting a result")


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True
    # Connections beyond the daemon's bound are accepted only to be told so; the kernel queue holds the burst.
    request_queue_size = 128
    daemon_: "GuardDaemon"


class GuardDaemon:
    """Serves a GuardSession on a unix socket until stopped."""

    def __init__(self, session: GuardSession, socket_path: str | Path, *, secret: bytes | None = None,
                 max_connections: int = MAX_CONNECTIONS, heartbeat_s: float = HEARTBEAT_S,
                 runs_for: dict[str, str | None] | None = None, run_env: dict[str, str] | None = None):
        self.session = session
        # Confined mode (`guardrail shell --confine`): the tools this daemon runs itself for its shims, each with the
        # real binary resolved at start; None when the shims run their tools themselves.
        self.runs_for = runs_for
        self.run_env = run_env if run_env is not None else dict(os.environ)
        self.socket_path = str(socket_path)
        self.secret = secret
        self.max_connections = max_connections
        self.slots = threading.BoundedSemaphore(max_connections)
        self.connections: set[_Connection] = set()
        self.heartbeat_s = heartbeat_s
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._beats: threading.Thread | None = None

    # -- the protocol ------------------------------------------------------------------------------------------

    def handle(self, msg: dict[str, Any], pending: dict[int, Admission],
               progress: Callable[[Any], None] | None = None) -> dict[str, Any]:
        """One request's reply. `progress` hears a held declaration's progress (the connection streams it to the
        shim as `{"progress": ...}` lines before the reply)."""
        op = msg.get("op")
        if op == "hello":
            nonce = msg.get("nonce")
            if not isinstance(nonce, str) or not 32 <= len(nonce) <= 128 or \
                    not all(c in "0123456789abcdefABCDEF" for c in nonce):
                raise ValueError("a nonce is 32 to 128 hex digits")
            if self.secret is None:
                raise ValueError("this daemon has no session secret to prove")
            return {"proof": proof(self.secret, nonce), "protocol": 2}
        if op == "before":
            argv = msg["argv"]
            if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
                raise ValueError("argv must be a non-empty list of strings")
            stdin = msg.get("stdin")
            if isinstance(stdin, str) and len(stdin) > MAX_STDIN_BYTES:
                raise ValueError(f"a stdin payload over {MAX_STDIN_BYTES} bytes is refused, never cut and judged")
            # An empty payload is a known empty stdin; no payload at all (a terminal, a tool the shim does not
            # read stdin for) is not known, and a tool that reads its body there stays opaque.
            adm = self.session.before(command_text(argv, stdin if isinstance(stdin, str) else None),
                                      stdin="" if stdin == "" else None)
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

    def run(self, msg: dict[str, Any], send: Any) -> dict[str, Any]:
        """Confined mode: decide a shim's command and, when allowed, run it here (as the guard's user) with its
        output streamed back as `{"out": 1|2, "data": BASE64}` lines; the reply carries the exit code."""
        import base64
        import subprocess

        if self.runs_for is None:
            raise ValueError("this daemon does not run commands (not confined)")
        argv = msg["argv"]
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError("argv must be a non-empty list of strings")
        if argv[0] not in self.runs_for:
            raise ValueError(f"{argv[0]} is not a tool this guard runs")
        stdin = msg.get("stdin")
        if isinstance(stdin, str) and len(stdin) > MAX_STDIN_BYTES:
            raise ValueError(f"a stdin payload over {MAX_STDIN_BYTES} bytes is refused, never cut and judged")
        # The child reads the payload (the heredoc in the text) or /dev/null: the stdin is known either way.
        adm = self.session.before(command_text(argv, stdin if isinstance(stdin, str) else None), stdin="")
        head = {"runs": adm.runs, "outcome": adm.outcome.value, "rules": [f.id for f in adm.denies + adm.warns],
                "message": "\n".join(f.render() for f in adm.feedback)}
        if not adm.runs:
            self.session.journal.append("result", ref=adm.seq, exit_code=DENIED_EXIT_CODE, duration_s=0.0,
                                        denied=True)
            return {**head, "exit_code": DENIED_EXIT_CODE}
        real = self.runs_for[argv[0]]
        if real is None:
            self.session.after(adm, CommandResult(command=adm.command, exit_code=127, duration_s=0.0))
            return {**head, "exit_code": 127, "message": f"{argv[0]}: command not found"}
        # The agent's environment is not the guard's to trust (LD_PRELOAD would run as the guard's user): only the
        # clients' own connection settings pass.
        env = dict(self.run_env)
        for k, v in (msg.get("env") or {}).items():
            if isinstance(k, str) and isinstance(v, str) and k.startswith(_CLIENT_ENV):
                env[k] = v
        cwd = msg.get("cwd") if isinstance(msg.get("cwd"), str) and os.path.isdir(msg["cwd"]) else "/"
        start = time.monotonic()
        child = subprocess.Popen([argv[0], *argv[1:]], executable=real, cwd=cwd, env=env,
                                 stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)

        def pump(stream: Any, fd: int) -> None:
            for chunk in iter(lambda: stream.read1(64 * 1024), b""):
                try:
                    send({"out": fd, "data": base64.b64encode(chunk).decode()})
                except OSError:
                    child.kill()  # the shim is gone: nobody is left to read the command's output
                    return

        pumps = [threading.Thread(target=pump, args=(child.stdout, 1), daemon=True),
                 threading.Thread(target=pump, args=(child.stderr, 2), daemon=True)]
        for t in pumps:
            t.start()
        if stdin is not None:
            try:
                child.stdin.write(stdin.encode("utf-8", "surrogateescape"))
                child.stdin.close()
            except OSError:
                pass
        code = child.wait()
        for t in pumps:
            t.join()
        code = code if code >= 0 else 128 - code
        feedback = self.session.after(adm, CommandResult(command=adm.command, exit_code=code,
                                                         duration_s=round(time.monotonic() - start, 6)))
        message = "\n".join(x for x in (head["message"], "\n".join(f.render() for f in feedback)) if x)
        return {**head, "exit_code": code, "message": message}

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> "GuardDaemon":
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        self._server = _Server(self.socket_path, _Connection)
        self._server.daemon_ = self
        os.chmod(self.socket_path, 0o600)  # only this user's processes may ask the guard
        self._thread = threading.Thread(target=self._server.serve_forever, name="guard-daemon", daemon=True)
        self._thread.start()
        self._stopping.clear()
        self._beats = threading.Thread(target=self._heartbeats, name="guard-daemon-heartbeat", daemon=True)
        self._beats.start()
        return self

    def _heartbeats(self) -> None:
        """Tell every shim whose request has taken heartbeat_s or more that the guard is still at it."""
        while not self._stopping.wait(self.heartbeat_s):
            now = time.monotonic()
            for conn in list(self.connections):
                since = conn.busy_since
                if since is not None and now - since >= self.heartbeat_s:
                    try:
                        conn.beat()
                    except OSError:
                        pass

    def stop(self) -> None:
        self._stopping.set()
        if self._beats is not None:
            self._beats.join(timeout=5)
            self._beats = None
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
