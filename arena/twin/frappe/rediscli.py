"""`redis-cli` of the Frappe operator shell, over the twin's `RedisServer`s (redis-queue, redis-cache).

Registered by `arena.twin.frappe.substrate.FrappeSubstrate.commands()`, and reached through
`kubectl exec redis-queue-master-0 -- redis-cli ...` too. Like the real client when stdout is not a terminal, it
prints raw replies (one line per element, no quotes or "(integer)"), unless `--no-raw` is given; an error reply
goes to stderr and exits 1. With no command words it reads commands from stdin, one per line.
"""

from __future__ import annotations

import shlex
from typing import Any, Callable

from arena.twin.frappe.redis import RedisError, RedisServer

__all__ = ["redis_cli", "format_reply"]


def format_reply(r: Any, raw: bool, indent: int = 0) -> str:
    if raw:
        if r is None:
            return "\n"
        if isinstance(r, list):
            return "".join(format_reply(x, True) for x in r) if r else ""
        return f"{r}\n"
    pad = " " * indent
    if r is None:
        return "(nil)\n"
    if isinstance(r, bool):
        return f"(integer) {int(r)}\n"
    if isinstance(r, int):
        return f"(integer) {r}\n"
    if isinstance(r, list):
        if not r:
            return "(empty array)\n"
        w = len(str(len(r)))
        out = []
        for i, x in enumerate(r, 1):
            body = format_reply(x, False, indent + w + 2)
            out.append(f"{pad if i > 1 else ''}{str(i).rjust(w)}) {body}")
        return "".join(out)
    s = str(r)
    if s == "OK" or s == "PONG":
        return f"{s}\n"
    if "\n" in s:
        return s if s.endswith("\n") else s + "\n"
    return '"' + s.replace('"', '\\"') + '"\n'


def redis_cli(argv: list[str], stdin: str, resolve: Callable[[str], RedisServer | None], now: float,
              default_host: str = "127.0.0.1") -> tuple[str, str, int, float]:
    host, port = default_host, "6379"
    raw = True
    user = "default"
    words: list[str] = []
    args = argv[1:]
    i = 0
    while i < len(args):
        a = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else None
        if words:
            words.append(a)
        elif a == "-h" and nxt is not None:
            host, i = nxt, i + 2
            continue
        elif a == "-p" and nxt is not None:
            port, i = nxt, i + 2
            continue
        elif a in ("-a", "--pass", "--askpass") and nxt is not None:
            i += 2
            continue
        elif a == "--user" and nxt is not None:
            user, i = nxt, i + 2
            continue
        elif a == "-n" and nxt is not None:
            i += 2
            continue
        elif a == "-u" and nxt is not None:
            url = nxt.split("://", 1)[-1].split("@")[-1]
            host, _, port = url.partition(":")
            port = (port or "6379").split("/")[0]
            i += 2
            continue
        elif a == "--raw":
            raw = True
        elif a == "--no-raw":
            raw = False
        elif a in ("-c", "--no-auth-warning", "-e", "--tls"):
            pass
        elif a.startswith("-") and not words:
            return "", f"Unrecognized option or bad number of args for: '{a}'\n", 1, 0.0
        else:
            words.append(a)
        i += 1
    server = resolve(host)
    if server is None:
        return "", f"Could not connect to Redis at {host}:{port}: Name or service not known\n", 1, 0.05
    if port != "6379" or not server.ready(now):
        return "", f"Could not connect to Redis at {host}:{port}: Connection refused\n", 1, 0.05
    if user not in server.acl:
        return "", "AUTH failed: WRONGPASS invalid username-password pair or user is disabled.\n", 1, 0.05
    batches = [words] if words else [shlex.split(ln) for ln in stdin.splitlines() if ln.strip()]
    out, err, code = [], [], 0
    for cmd in batches:
        try:
            out.append(format_reply(server.command(cmd, now, user), raw))
        except RedisError as e:
            code = 1
            if raw:
                err.append(f"{e}\n")
            else:
                out.append(f"(error) {e}\n")
    return "".join(out), "".join(err), code, 0.03 * max(1, len(batches))
