"""The guard daemon's wire protocol: line-delimited JSON over a unix stream socket, one reply per request.

    {"op":"before","argv":[...],"cwd":"...","stdin":"..."?}  -> {"id":N,"runs":bool,"outcome":..,"rules":[..],
                                                                 "message":"..."}
    {"op":"after","id":N,"exit_code":int,"duration_s":f}     -> {"ok":true,"feedback":[..]}
    {"op":"declare","summary":"..."}                          -> {"progress":{..}} lines while the guard holds it,
                                                                 then {"accepted":bool,"verdict":..,"codes":[..],
                                                                 "feedback":[..],"checks":[..],"message":".."}
    {"op":"status"}                                           -> the session's counters
    anything malformed                                        -> {"error":"..."}

A shim keeps its connection open from `before` to `after`; if it vanishes in between, the daemon journals the
command's result as lost. shim.py speaks this protocol with the standard library alone (it starts with
`python -S`); DaemonClient below is the same protocol for Python callers (tests, bench/guard_load.py).
"""

from __future__ import annotations

import json
import socket
from typing import Any

__all__ = ["DaemonClient", "encode", "SOCKET_ENV", "SHIM_DIR_ENV"]

SOCKET_ENV = "GUARDRAIL_SOCKET"
SHIM_DIR_ENV = "GUARDRAIL_SHIM_DIR"


def encode(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


class DaemonClient:
    """One connection to a guard daemon."""

    def __init__(self, path: str, *, timeout_s: float | None = 30.0):
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout_s)
        self._sock.connect(path)
        self._rfile = self._sock.makefile("rb")

    def request(self, msg: dict[str, Any], progress: Any = None) -> dict[str, Any]:
        """Send one request and return its reply; `progress` (when given) hears each progress line before it."""
        self._sock.sendall(encode(msg))
        while True:
            line = self._rfile.readline()
            if not line:
                raise ConnectionError("guard daemon closed the connection")
            reply = json.loads(line)
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
