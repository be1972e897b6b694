"""The arena's HTTP client: a small asyncio HTTP/1.1 client for the live load generator and the challenge's traffic.

Callers get `HttpReply` values and two exception types of our own, so that the load generator can classify an
arrival (ok, error, timeout) without knowing the transport. Used by `arena.live.loadgen` and
`arena.live.world`.

It speaks just what the live stack's apps speak (`arena.live.apps.base`: HTTP/1.1, keep-alive, JSON bodies with a
Content-Length; chunked replies are read too) over asyncio streams, with a pool of keep-alive connections per
host. It replaced httpx here because the load generator is the live stack's biggest CPU user: httpx's async
stack spent about 14 ms of CPU per request on a slow 2-core machine, and twelve stacks side by side starved the
apps they were measuring (docs/live.md). A pooled connection the server closed meanwhile (an app restart) is
retried once on a fresh connection, as long as no byte of the reply had arrived.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = ["HttpReply", "HttpTimeout", "HttpConnectError", "AsyncHttp"]

# Header block and chunk-size lines longer than this are a broken reply, not something to buffer.
_MAX_HEAD = 64 * 1024


@dataclass(frozen=True)
class HttpReply:
    """A response's status and decoded JSON body (None when the body is not JSON)."""

    status: int
    body: Any


class HttpTimeout(Exception):
    """The request did not complete within its timeout."""


class HttpConnectError(Exception):
    """The connection was refused, reset or could not be made, or the reply was not HTTP."""


class _Stale(Exception):
    """A pooled connection was found closed before any byte of the reply arrived: safe to send again."""


class _Conn:
    __slots__ = ("reader", "writer", "reused")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer, self.reused = reader, writer, False

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001 - closing a broken transport may raise; it is gone either way
            pass


class AsyncHttp:
    """An async HTTP/1.1 client with a connection limit sized for open-loop load."""

    def __init__(self, *, max_connections: int = 256, timeout_s: float = 5.0, max_keepalive: int = 64):
        self._timeout_s = timeout_s
        self._max_keepalive = max_keepalive
        self._slots = asyncio.Semaphore(max(1, max_connections))
        self._idle: dict[tuple[str, int], list[_Conn]] = {}

    async def request(self, method: str, url: str, *, json_body: Any = None, timeout_s: float | None = None
                      ) -> HttpReply:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise HttpConnectError(f"unsupported URL (plain http only): {url}")
        host, port = parts.hostname, parts.port or 80
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        body = json.dumps(json_body).encode() if json_body is not None else b""
        head = [f"{method} {target} HTTP/1.1", f"Host: {host}:{port}", "Accept: application/json",
                f"Content-Length: {len(body)}"]
        if json_body is not None:
            head.append("Content-Type: application/json")
        payload = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        try:
            status, raw = await asyncio.wait_for(self._send(host, port, payload),
                                                 timeout_s if timeout_s is not None else self._timeout_s)
        except asyncio.TimeoutError as e:
            raise HttpTimeout(f"no reply from {host}:{port} within the timeout") from e
        try:
            reply_body = json.loads(raw) if raw else None
        except (ValueError, UnicodeDecodeError):
            reply_body = None
        return HttpReply(status, reply_body)

    async def get(self, url: str, **kw: Any) -> HttpReply:
        return await self.request("GET", url, **kw)

    async def post(self, url: str, json_body: Any = None, **kw: Any) -> HttpReply:
        return await self.request("POST", url, json_body=json_body if json_body is not None else {}, **kw)

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for c in conns:
                c.close()
        self._idle.clear()

    # -- the exchange --------------------------------------------------------------------------------------------

    async def _send(self, host: str, port: int, payload: bytes) -> tuple[int, bytes]:
        async with self._slots:
            for _ in range(2):
                conn = await self._connection(host, port)
                try:
                    status, body, keep = await _exchange(conn, payload)
                except _Stale:
                    conn.close()
                    continue  # the server closed it while it sat in the pool: once more, on a fresh one
                except BaseException:
                    conn.close()  # a timeout (cancellation) or an error leaves the stream mid-reply
                    raise
                if keep:
                    self._release(host, port, conn)
                else:
                    conn.close()
                return status, body
            raise HttpConnectError(f"{host}:{port} closed two connections without a reply")

    async def _connection(self, host: str, port: int) -> _Conn:
        pool = self._idle.get((host, port))
        while pool:
            conn = pool.pop()
            if not conn.reader.at_eof() and not conn.writer.is_closing():
                conn.reused = True
                return conn
            conn.close()
        try:
            reader, writer = await asyncio.open_connection(host, port, limit=_MAX_HEAD)
        except OSError as e:
            raise HttpConnectError(f"connect to {host}:{port}: {e.strerror or e}") from e
        return _Conn(reader, writer)

    def _release(self, host: str, port: int, conn: _Conn) -> None:
        pool = self._idle.setdefault((host, port), [])
        if len(pool) < self._max_keepalive:
            pool.append(conn)
        else:
            conn.close()


async def _exchange(conn: _Conn, payload: bytes) -> tuple[int, bytes, bool]:
    """Send one request and read its reply: (status, body, whether the connection may be kept)."""
    try:
        conn.writer.write(payload)
        await conn.writer.drain()
        try:
            head = await conn.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            if conn.reused and not e.partial:
                raise _Stale() from e
            raise HttpConnectError("the server closed the connection before replying") from e
    except (ConnectionResetError, BrokenPipeError) as e:
        if conn.reused:
            raise _Stale() from e
        raise HttpConnectError(f"connection reset: {e}") from e
    except asyncio.LimitOverrunError as e:
        raise HttpConnectError("reply header too long") from e
    except OSError as e:
        raise HttpConnectError(f"connection error: {e}") from e
    lines = head.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/") or not status_line[1].isdigit():
        raise HttpConnectError(f"not an HTTP reply: {lines[0][:80]!r}")
    status = int(status_line[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    keep = status_line[0] == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = await _read_chunked(conn.reader)
        elif "content-length" in headers:
            n = int(headers["content-length"])
            body = await conn.reader.readexactly(n) if n > 0 else b""
        elif status in (204, 304) or 100 <= status < 200:
            body = b""
        else:  # no length given: the body runs to the end of the connection
            body = await conn.reader.read()
            keep = False
    except ValueError as e:
        raise HttpConnectError(f"bad reply framing: {e}") from e
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError) as e:
        raise HttpConnectError(f"the reply was cut short: {type(e).__name__}") from e
    return status, body, keep


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers, then the blank line
                pass
            return bytes(out)
        out += await reader.readexactly(size)
        await reader.readexactly(2)  # the CRLF after the chunk
