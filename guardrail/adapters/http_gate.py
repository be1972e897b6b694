"""The gate in front of `guardrail mcp --transport http`: bearer tokens, credential-bound sessions, a body limit.

Built by guardrail/cli/mcp.py around the MCP SDK's Starlette app (guardrail/adapters/mcp_server.py); the tools
read the credential the gate admitted through `principal_of`. Every HTTP request passes, in this order:

    no or wrong `Authorization: Bearer TOKEN`           -> 401, before the body is read or anything else runs
    an `mcp-session-id` another credential opened        -> 403
    a body over MAX_REQUEST_BYTES (declared or streamed) -> 413, before the body is parsed
    else the SDK's app, with scope["guardrail.principal"] = the credential's name

Tokens are compared in constant time against every configured token, so the time a refusal takes says nothing
about how much of a token was right.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
import secrets
import stat
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable

from guardrail.errors import InputError

__all__ = ["Credentials", "HttpGate", "load_token_file", "write_token_file", "principal_of", "is_loopback",
           "MAX_REQUEST_BYTES", "PRINCIPAL_KEY", "NAME_PATTERN"]

# One MCP request: a tool call with its command. The SDK's own default (4 MiB) is more than any command the guard
# will judge (the command bound sits far below); 1 MiB leaves room for JSON framing.
MAX_REQUEST_BYTES = 1024 * 1024
PRINCIPAL_KEY = "guardrail.principal"
# A credential's name is part of its sessions' keys and journal names: a safe file name without '.', so that the
# first '.' after it separates it from the session name the client chose.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MIN_TOKEN = 16
_MAX_TOKEN_FILE = 64 * 1024

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class Credentials:
    """The bearer tokens a server accepts, each under the name its sessions are filed under."""

    tokens: tuple[tuple[str, bytes], ...]  # (name, token)

    def match(self, presented: bytes) -> str | None:
        """The name of the token `presented` equals, or None; every token is compared, each in constant time."""
        found = None
        for name, token in self.tokens:
            if hmac.compare_digest(presented, token):
                found = name
        return found


def _bare_name(token: str) -> str:
    import hashlib

    return "token-" + hashlib.sha256(token.encode()).hexdigest()[:8]


def load_token_file(path: str | Path) -> Credentials:
    """Tokens from FILE: one a line, `TOKEN` or `NAME:TOKEN` (per-agent credentials), `#` comments.

    The file must be a regular file of this user that no one else can read (mode 0600 or stricter): a token
    anyone on the machine can read authenticates anyone."""
    p = Path(path)
    where = str(path)
    try:
        st = os.stat(p)
    except OSError as e:
        raise InputError(f"cannot read token file: {e.strerror or e}", path=where) from e
    if not stat.S_ISREG(st.st_mode):
        raise InputError("a token file must be a regular file", path=where)
    if st.st_mode & 0o077:
        raise InputError(f"token file is open to other users (mode {stat.S_IMODE(st.st_mode):04o}): "
                         f"`chmod 600 {path}`", path=where)
    if st.st_uid != os.geteuid():
        raise InputError("token file belongs to another user", path=where)
    if st.st_size > _MAX_TOKEN_FILE:
        raise InputError(f"token file over {_MAX_TOKEN_FILE} bytes", path=where)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read token file: {getattr(e, 'strerror', None) or e}", path=where) from e
    tokens: list[tuple[str, bytes]] = []
    names: set[str] = set()
    seen: set[str] = set()
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, token = line.partition(":")
        if not sep:
            name, token = _bare_name(line), line
        if not NAME_PATTERN.match(name):
            raise InputError("a credential's name is 1-64 letters, digits, '_' or '-'", path=where, line=n)
        if len(token) < _MIN_TOKEN or any(c.isspace() for c in token):
            raise InputError(f"a token is at least {_MIN_TOKEN} characters without spaces", path=where, line=n)
        if name in names or token in seen:
            raise InputError(f"credential {name!r} or its token is given twice", path=where, line=n)
        names.add(name)
        seen.add(token)
        tokens.append((name, token.encode()))
    if not tokens:
        raise InputError("token file holds no token", path=where)
    return Credentials(tuple(tokens))


def write_token_file(directory: str | Path, name: str = "operator") -> tuple[Path, Credentials]:
    """A fresh random token under `name`, written to DIRECTORY/token with mode 0600 (created, never reused)."""
    token = secrets.token_urlsafe(32)
    path = Path(directory) / "token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return path, Credentials(((name, token.encode()),))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def principal_of(request: Any) -> str | None:
    """The credential name the gate admitted this request under (None when the app runs without the gate)."""
    scope = getattr(request, "scope", None)
    return scope.get(PRINCIPAL_KEY) if isinstance(scope, dict) else None


class HttpGate:
    """ASGI middleware: authenticate, bind transport sessions to their credential, bound the body."""

    def __init__(self, app: ASGIApp, credentials: Credentials | None, *, max_body_bytes: int = MAX_REQUEST_BYTES,
                 anonymous_name: str = "noauth", max_bound_sessions: int = 100_000):
        from mcp.server.transport_security import RequestBodyLimitMiddleware

        self.app = app
        self.credentials = credentials
        self.anonymous_name = anonymous_name
        self.max_body_bytes = max_body_bytes
        self._limited = RequestBodyLimitMiddleware(app, max_body_bytes)
        # mcp-session-id -> the credential that opened it; the oldest let go past the bound (the SDK caps its own
        # open sessions far below it, so a live session is never forgotten).
        self._owners: OrderedDict[str, str] = OrderedDict()
        self._max_bound = max_bound_sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        if self.credentials is None:
            principal = self.anonymous_name
        else:
            auth = headers.get(b"authorization", b"")
            kind, _, presented = auth.partition(b" ")
            principal = self.credentials.match(presented.strip()) if kind.lower() == b"bearer" else None
            if principal is None:
                await _plain(send, 401, "missing or wrong bearer token (Authorization: Bearer TOKEN)",
                             [(b"www-authenticate", b'Bearer realm="guardrail"')])
                return
        sid = headers.get(b"mcp-session-id")
        if sid is not None:
            owner = self._owners.get(sid.decode("latin-1"))
            if owner is not None and owner != principal:
                await _plain(send, 403, "this MCP session belongs to another credential")
                return
        scope = dict(scope)
        scope[PRINCIPAL_KEY] = principal

        async def bind(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                for k, v in message.get("headers", ()):
                    if k.lower() == b"mcp-session-id":
                        self._owners[v.decode("latin-1")] = principal
                        while len(self._owners) > self._max_bound:
                            self._owners.popitem(last=False)
            await send(message)

        await self._limited(scope, receive, bind)


def _headers(scope: Scope) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for k, v in scope.get("headers", ()):
        out.setdefault(k.lower(), v)
    return out


async def _plain(send: Send, status: int, text: str, extra: Iterable[tuple[bytes, bytes]] = ()) -> None:
    body = (text + "\n").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), *extra]})
    await send({"type": "http.response.body", "body": body})
