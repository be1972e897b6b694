"""The guard daemon's wire protocol: line-delimited JSON over a unix stream socket, one reply per request.

    {"op":"hello","nonce":HEX}                                -> {"proof":HMAC-SHA256(secret, nonce),"protocol":2}
    {"op":"before","argv":[...],"cwd":"...","stdin":"..."?}  -> {"id":N,"runs":bool,"outcome":..,"rules":[..],
                                                                 "message":"..."}
    {"op":"after","id":N,"exit_code":int,"duration_s":f}     -> {"ok":true,"feedback":[..]}
    {"op":"run","argv":[...],"cwd":"..","env":{..},"stdin":".."?}  (confined mode: the daemon runs the command)
                                                              -> {"out":1|2,"data":BASE64}... then
                                                                 {"runs":bool,"exit_code":N,"message":".."}
    {"op":"declare","summary":"..."}                          -> {"progress":{..}} lines while the guard holds it,
                                                                 then {"accepted":bool,"verdict":..,"codes":[..],
                                                                 "feedback":[..],"checks":[..],"message":".."}
    {"op":"status"}                                           -> the session's counters
    anything malformed                                        -> {"error":"..."}
    a line over MAX_LINE_BYTES                                -> {"error":"..."}, and the connection is closed
    more than MAX_CONNECTIONS connections at once             -> {"error":"..."} to the one over, then closed
    while a request takes longer than HEARTBEAT_S             -> {"wait":true} every HEARTBEAT_S, then the reply

The daemon proves itself before a shim trusts it: the shim sends a fresh nonce, the daemon answers with the HMAC
of it under the session's secret (a 0600 file in the session's private directory, SECRET_ENV), and a shim that
gets no proof, or a wrong one, runs nothing. A shim waits at most CONNECT_TIMEOUT_S to connect, HELLO_TIMEOUT_S
for the proof and SILENCE_TIMEOUT_S between lines (heartbeats included), so a stopped daemon cannot hang it.

A shim keeps its connection open from `before` to `after`; if it vanishes in between, the daemon journals the
command's result as lost. shim.py speaks this protocol with the standard library alone (it starts with
`python -S`); DaemonClient below is the same protocol for Python callers (tests, bench/guard_load.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
from typing import Any

__all__ = ["DaemonClient", "encode", "proof", "SOCKET_ENV", "SHIM_DIR_ENV", "SECRET_ENV", "SESSION_ENV",
           "ACTIVE_ENV", "MAX_LINE_BYTES", "MAX_STDIN_BYTES", "MAX_CONNECTIONS", "HEARTBEAT_S", "CONNECT_TIMEOUT_S",
           "HELLO_TIMEOUT_S", "SILENCE_TIMEOUT_S", "DaemonAuthError"]

SOCKET_ENV = "GUARDRAIL_SOCKET"
SHIM_DIR_ENV = "GUARDRAIL_SHIM_DIR"
SECRET_ENV = "GUARDRAIL_SECRET_FILE"
SESSION_ENV = "GUARDRAIL_SHIM_SESSION"
# The shims running around a command, `SESSION:TOOL ...`: a shim that finds itself here was reached again from
# inside its own command (a wrapper on PATH that runs "the next TOOL on PATH"), and refuses to recurse.
ACTIVE_ENV = "GUARDRAIL_SHIM_ACTIVE"

# Limits (docs/security.md). A stdin payload is what the guard must read whole before the tool may run; a line
# carries it JSON-escaped (up to 6 bytes a byte) beside the argv.
MAX_STDIN_BYTES = 1024 * 1024
MAX_LINE_BYTES = 8 * 1024 * 1024
MAX_CONNECTIONS = 128
HEARTBEAT_S = 5.0
CONNECT_TIMEOUT_S = 5.0
HELLO_TIMEOUT_S = 10.0
SILENCE_TIMEOUT_S = 30.0
_PROOF_CONTEXT = b"guardrail-daemon-proof:"


class DaemonAuthError(ConnectionError):
    """The socket's server could not prove it holds the session's secret."""


def proof(secret: bytes, nonce: str) -> str:
    """What the daemon answers to a shim's nonce: only a holder of the session's secret can compute it."""
    return hmac.new(secret, _PROOF_CONTEXT + nonce.encode("ascii"), hashlib.sha256).hexdigest()


def encode(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


class DaemonClient:
    """One connection to a guard daemon; with `secret`, the daemon must prove it holds it first."""

    def __init__(self, path: str, *, timeout_s: float | None = 30.0, secret: bytes | None = None):
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout_s)
        self._sock.connect(path)
        self._rfile = self._sock.makefile("rb")
        if secret is not None:
            nonce = os.urandom(16).hex()
            reply = self.request({"op": "hello", "nonce": nonce})
            if "error" in reply:  # e.g. over the daemon's bound on connections
                self.close()
                raise ConnectionError(f"{path}: {reply['error']}")
            got = reply.get("proof")
            if not isinstance(got, str) or not hmac.compare_digest(got, proof(secret, nonce)):
                self.close()
                raise DaemonAuthError(f"{path}: the server did not prove the session's secret")

    def request(self, msg: dict[str, Any], progress: Any = None) -> dict[str, Any]:
        """Send one request and return its reply; `progress` (when given) hears each progress line before it."""
        self._sock.sendall(encode(msg))
        while True:
            line = self._rfile.readline(MAX_LINE_BYTES + 1)
            if not line:
                raise ConnectionError("guard daemon closed the connection")
            reply = json.loads(line)
            if reply == {"wait": True}:  # a heartbeat while a long request (a declaration) is judged
                continue
            if isinstance(reply, dict) and set(reply) == {"progress"}:
                if progress is not None:
                    progress(reply["progress"])
                continue
            return reply

    def close(self) -> None:
        self._rfile.close()
        self._sock.close()

    def __enter__(self) -> "DaemonClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
