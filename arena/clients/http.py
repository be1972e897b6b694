"""The arena's HTTP client: a thin wrapper over httpx for the live load generator and the live stack's probes.

Only this module touches httpx; callers get `HttpReply` values and two exception types of our own, so that the
load generator can classify an arrival (ok, error, timeout) without knowing the transport. Used by
`arena.live.loadgen`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["HttpReply", "HttpTimeout", "HttpConnectError", "AsyncHttp"]


@dataclass(frozen=True)
class HttpReply:
    """A response's status and decoded JSON body (None when the body is not JSON)."""

    status: int
    body: Any


class HttpTimeout(Exception):
    """The request did not complete within its timeout."""


class HttpConnectError(Exception):
    """The connection was refused, reset or could not be made."""


class AsyncHttp:
    """An async HTTP/1.1 client with a connection limit sized for open-loop load."""

    def __init__(self, *, max_connections: int = 256, timeout_s: float = 5.0):
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=64),
            trust_env=False,
        )

    async def request(self, method: str, url: str, *, json_body: Any = None, timeout_s: float | None = None
                      ) -> HttpReply:
        try:
            kw: dict[str, Any] = {"json": json_body} if json_body is not None else {}
            if timeout_s is not None:
                kw["timeout"] = httpx.Timeout(timeout_s)
            r = await self._client.request(method, url, **kw)
        except httpx.TimeoutException as e:
            raise HttpTimeout(str(e) or type(e).__name__) from e
        except (httpx.TransportError, OSError) as e:
            raise HttpConnectError(str(e) or type(e).__name__) from e
        try:
            body = r.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        return HttpReply(r.status_code, body)

    async def get(self, url: str, **kw: Any) -> HttpReply:
        return await self.request("GET", url, **kw)

    async def post(self, url: str, json_body: Any = None, **kw: Any) -> HttpReply:
        return await self.request("POST", url, json_body=json_body if json_body is not None else {}, **kw)

    async def aclose(self) -> None:
        await self._client.aclose()
