"""`kubectl exec` on the emulated API server: the pods/exec subresource over WebSocket, as a kubelet streams it.

Called by `arena.live.kubeapi.server.ApiHandler` for `GET|POST .../namespaces/NS/pods/NAME/exec`. The real kubectl
(1.30 and later) opens exec as a WebSocket with the subprotocol `v5.channel.k8s.io` (falling back to SPDY only when
the WebSocket upgrade itself fails); the kubernetes Python client's `stream()` asks for `v4.channel.k8s.io`. Both are
served: every binary message starts with its channel (0 stdin, 1 stdout, 2 stderr, 3 the final `Status`, 4
resize), and v5 adds the client's close signal (`255, 0`: stdin is finished). SPDY is refused with 400, which
tells the client no upgrade was made.

A pod here is a real process on this host (`arena.live.kubeapi.processes`), so the command runs in that process's
environment: its environment variables and working directory, read from /proc, as a `kubectl exec` into its
container would. A pod that runs no process (an inert pod) has nothing to exec into and says so on the error
channel. The command's exit code travels in the `Status`, as the kubelet sends it: kubectl then prints
`command terminated with exit code N` and exits N. Output is streamed, never buffered whole; a command that runs
longer than MAX_EXEC_S is killed. No TTY (`-t`): there is no terminal to give it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import struct
import subprocess
import threading
from pathlib import Path
from typing import Any, BinaryIO, Callable

__all__ = ["PROTOCOLS", "MAX_EXEC_S", "ExecRequest", "PodProcess", "accept_key", "serve_exec", "exec_environment"]

# The subprotocols served, in the order of preference (the client lists what it speaks).
PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
MAX_EXEC_S = 600.0
MAX_FRAME = 1024 * 1024
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

# (pod, container) -> the pid of the process that is that container on this host, or None (an inert pod)
PodProcess = Callable[[dict[str, Any], str], "int | None"]


class ExecError(Exception):
    """The exec cannot start (no process, bad request): the message goes to the client on the error channel."""


def accept_key(key: str) -> str:
    """RFC 6455's Sec-WebSocket-Accept for a client's Sec-WebSocket-Key."""
    return base64.b64encode(hashlib.sha1(key.strip().encode() + _GUID).digest()).decode()


def choose_protocol(offered: str) -> str | None:
    names = {p.strip() for p in offered.split(",") if p.strip()}
    return next((p for p in PROTOCOLS if p in names), None)


class ExecRequest:
    """What the client asked for in the query: the command, the container, which streams."""

    def __init__(self, query: dict[str, list[str]]):
        self.command = query.get("command") or []
        self.container = (query.get("container") or [""])[-1]
        flag = lambda name: (query.get(name) or ["false"])[-1].lower() in ("true", "1")  # noqa: E731
        self.stdin, self.stdout, self.stderr, self.tty = flag("stdin"), flag("stdout"), flag("stderr"), flag("tty")


def exec_environment(pid: int) -> tuple[dict[str, str], str]:
    """A running process's environment variables and working directory, as a new process in its container gets
    them (Linux /proc)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return ({k.decode(errors="replace"): v.decode(errors="replace") for k, v in env.items()},
            os.readlink(f"/proc/{pid}/cwd"))


def status(code: int | None, message: str = "") -> dict[str, Any]:
    """The Status the kubelet sends on the error channel when the command ends (or could not start)."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    if code is None:
        return {"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError",
                "details": {"causes": [{"message": message}]}, "code": 500}
    return {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "message": f"command terminated with non-zero exit code: error executing command, exit code {code}",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


class _Socket:
    """RFC 6455 framing over the handler's streams: unmasked frames out, masked frames in."""

    def __init__(self, rfile: BinaryIO, wfile: BinaryIO):
        self.rfile, self.wfile = rfile, wfile
        self.lock = threading.Lock()

    def send(self, payload: bytes, opcode: int = 0x2) -> None:
        n = len(payload)
        head = bytes([0x80 | opcode])
        head += bytes([n]) if n < 126 else (struct.pack("!BH", 126, n) if n < 65536 else struct.pack("!BQ", 127, n))
        with self.lock:
            self.wfile.write(head + payload)
            self.wfile.flush()

    def channel(self, ch: int, data: bytes) -> None:
        self.send(bytes([ch]) + data)

    def _read(self, n: int) -> bytes:
        data = self.rfile.read(n)
        if len(data) < n:
            raise EOFError("the client closed the connection")
        return data

    def receive(self) -> tuple[int, bytes]:
        """(opcode, payload) of the next whole message; pings are answered here."""
        parts: list[bytes] = []
        first = None
        while True:
            b0, b1 = self._read(2)
            opcode, fin = b0 & 0x0F, b0 & 0x80
            n = b1 & 0x7F
            if n == 126:
                (n,) = struct.unpack("!H", self._read(2))
            elif n == 127:
                (n,) = struct.unpack("!Q", self._read(8))
            if n > MAX_FRAME:
                raise EOFError(f"a frame of {n} bytes is over the limit")
            mask = self._read(4) if b1 & 0x80 else b""
            data = self._read(n)
            if mask:
                data = bytes(c ^ mask[i % 4] for i, c in enumerate(data))
            if opcode == 0x9:
                self.send(data, 0xA)
                continue
            if opcode == 0xA:
                continue
            if opcode >= 0x8:
                return opcode, data
            first = opcode if first is None else first
            parts.append(data)
            if sum(map(len, parts)) > MAX_FRAME:
                raise EOFError(f"a message over {MAX_FRAME} bytes is over the limit")
            if fin:
                return first, b"".join(parts)


def serve_exec(handler: Any, pod: dict[str, Any], request: ExecRequest, pod_process: PodProcess | None) -> None:
    """Answer one exec request on `handler` (a BaseHTTPRequestHandler whose request line and headers are read)."""
    upgrade = (handler.headers.get("Upgrade") or "").lower()
    if upgrade != "websocket":
        body = json.dumps(status(None, "this emulated API server serves exec over WebSocket (v5.channel.k8s.io, "
                                      f"v4.channel.k8s.io) only, not {upgrade or 'a plain request'}")
                          | {"kind": "Status", "apiVersion": "v1", "reason": "BadRequest", "code": 400}).encode()
        handler.send_response(400)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        return
    protocol = choose_protocol(handler.headers.get("Sec-WebSocket-Protocol") or "")
    key = handler.headers.get("Sec-WebSocket-Key")
    if protocol is None or not key:
        handler.send_response(400)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return
    handler.send_response(101, "Switching Protocols")
    handler.send_header("Upgrade", "websocket")
    handler.send_header("Connection", "Upgrade")
    handler.send_header("Sec-WebSocket-Accept", accept_key(key))
    handler.send_header("Sec-WebSocket-Protocol", protocol)
    handler.end_headers()
    handler.wfile.flush()
    handler.close_connection = True
    ws = _Socket(handler.rfile, handler.wfile)
    try:
        ws.channel(ERROR, json.dumps(_run(ws, pod, request, pod_process, protocol)).encode())
        ws.send(struct.pack("!H", 1000), 0x8)
    except (BrokenPipeError, ConnectionResetError, OSError, EOFError):
        pass


def _run(ws: _Socket, pod: dict[str, Any], request: ExecRequest, pod_process: PodProcess | None,
         protocol: str) -> dict[str, Any]:
    containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or ()]
    container = request.container or (containers[0] if containers else "")
    name = pod["metadata"]["name"]
    if container not in containers:
        return status(None, f"container {container} is not valid for pod {name}")
    if not request.command:
        return status(None, "you must specify at least one command for the container")
    if request.tty:
        return status(None, "this emulated API server gives exec no TTY: run it without -t")
    pid = pod_process(pod, container) if pod_process is not None else None
    if pid is None:
        return status(None, f"pod {name} runs no process on this host (an inert pod of the emulator): there is no "
                            f"container {container} to exec into")
    try:
        env, cwd = exec_environment(pid)
    except OSError as e:
        return status(None, f"container {container} of pod {name} is not running: {e}")
    try:
        proc = subprocess.Popen(request.command, env=env, cwd=cwd, stdin=subprocess.PIPE if request.stdin
                                else subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as e:
        return status(None, f"OCI runtime exec failed: exec failed: unable to start container process: exec: "
                            f"{request.command[0]!r}: {e.strerror or e}: unknown")
    pumps = [threading.Thread(target=_pump, args=(stream, ws, ch if wanted else None), daemon=True)
             for stream, ch, wanted in ((proc.stdout, STDOUT, request.stdout), (proc.stderr, STDERR, request.stderr))]
    for t in pumps:
        t.start()
    if request.stdin:
        threading.Thread(target=_feed_stdin, args=(ws, proc, protocol), daemon=True).start()
    try:
        code = proc.wait(timeout=MAX_EXEC_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return status(None, f"the command ran longer than {MAX_EXEC_S:g} s and was killed")
    for t in pumps:
        t.join(timeout=30)
    return status(code)


def _pump(stream: BinaryIO, ws: _Socket, channel: int | None) -> None:
    try:
        while chunk := stream.read1(65536):  # type: ignore[attr-defined]
            if channel is not None:
                ws.channel(channel, chunk)
    except (OSError, ValueError):
        pass  # the client went away: the process still runs to its end, its output dropped


def _feed_stdin(ws: _Socket, proc: subprocess.Popen, protocol: str) -> None:
    """The client's stdin channel into the process, until v5's close signal, a close frame or the end."""
    assert proc.stdin is not None
    try:
        while True:
            opcode, data = ws.receive()
            if opcode == 0x8:
                break
            if not data:
                continue
            if data[0] == STDIN and len(data) > 1:
                proc.stdin.write(data[1:])
                proc.stdin.flush()
            elif protocol.startswith("v5") and data[0] == CLOSE and data[1:2] == bytes([STDIN]):
                break
    except (EOFError, OSError, ValueError, socket.timeout):
        pass
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass
