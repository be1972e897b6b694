"""The Frappe foothold's infrastructure helper and frappe-admin's queue repairs, as pure functions.

`reconfigure-infra.sh <mariadb|redis-cache|redis-queue> <key> <value>` is the only durable queue repair the real
Incident-Arena agent has (SW yuekai/sre-world substrates/frappe/main/reconfigure-infra.sh): the script checks its
arguments (exit 2), then mariadb runs SET GLOBAL, redis-cache a CONFIG SET, and redis-queue POSTs one operation to
frappe-admin's /admin/redis-queue-repair (substrates/frappe/frappe-admin-sidecar/server.py), which applies it to the
running broker and then rewrites that flag in the broker's start script, without restarting it.

Used by the twin (`arena.twin.frappe.substrate`) and the live stack's frappe-admin (`arena.live.frappeadmin`), so
both answer the same grammar with the same refusals.
"""

from __future__ import annotations

import fnmatch
import re

__all__ = ["helper_refuses", "queue_runtime_change", "rewrite_queue_flags", "split_dsn", "USAGE",
           "MIN_QUEUE_MEMORY", "MAX_QUEUE_MEMORY"]

USAGE = "usage: reconfigure-infra.sh <mariadb|redis-cache|redis-queue> <key> <value>"

MIN_QUEUE_MEMORY = 16 * 1024 * 1024
MAX_QUEUE_MEMORY = 128 * 1024 * 1024
_DEQUEUE = ("blpop", "blmove", "brpop")


def helper_refuses(kind: str, key: str, value: str) -> str | None:
    """The script's own argument checks (bash `case` globs), before it calls anything: the message, or None."""
    if kind == "mariadb":
        if not value.isdigit():
            return "value must be a positive integer"
        return None if int(value) > 0 else "value must be positive"
    if not key or any(c not in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in key):
        return "redis key must be lowercase [a-z0-9-]"
    if key == "dequeue-acl":
        return None if value == "restore" else "dequeue-acl accepts only value restore"
    sized = ("0", "[1-9]*[0-9]", "[1-9]", "[1-9]*[0-9]kb", "[1-9]*[0-9]mb", "[1-9]*[0-9]gb", "[1-9]kb", "[1-9]mb",
             "[1-9]gb")
    if any(fnmatch.fnmatchcase(value, g) for g in sized):
        return None
    if not fnmatch.fnmatchcase(value, "*[!a-z-]*") and (fnmatch.fnmatchcase(value, "[a-z]")
                                                        or fnmatch.fnmatchcase(value, "[a-z]*[a-z]")):
        return None
    return "redis value must be an integer with optional kb/mb/gb suffix, or a lowercase word"


def queue_runtime_change(operation: str, value: str | None) -> list[str]:
    """frappe-admin's allowlist: the Redis command for an accepted repair; ValueError (HTTP 400) otherwise."""
    if operation == "maxmemory":
        if value is None:
            raise ValueError("maxmemory repair requires a value")
        m = re.fullmatch(r"([1-9][0-9]*)(kb|mb|gb)", value or "")
        if m is None:
            raise ValueError("maxmemory must be a positive integer with kb/mb/gb suffix")
        size = int(m.group(1)) * {"kb": 1024, "mb": 1024 ** 2, "gb": 1024 ** 3}[m.group(2)]
        if not MIN_QUEUE_MEMORY <= size <= MAX_QUEUE_MEMORY:
            raise ValueError("maxmemory repair must stay between 16mb and 128mb")
        return ["CONFIG", "SET", "maxmemory", str(value)]
    if operation == "min-replicas-to-write":
        if value != "0":
            raise ValueError("min-replicas-to-write repair must restore standalone value 0")
        return ["CONFIG", "SET", operation, "0"]
    if operation == "appendonly":
        if value != "yes":
            raise ValueError("appendonly repair must enable persistence")
        return ["CONFIG", "SET", "appendonly", "yes"]
    if operation == "appendfsync":
        if value not in ("everysec", "always"):
            raise ValueError("appendfsync repair must use everysec or always")
        return ["CONFIG", "SET", "appendfsync", str(value)]
    if operation == "dequeue-acl":
        if value is not None:
            raise ValueError("dequeue-acl repair does not accept a value")
        return ["ACL", "SETUSER", "default", *(f"+{c}" for c in _DEQUEUE)]
    raise ValueError(f"unsupported queue repair operation {operation!r}")


def rewrite_queue_flags(flags: list[str], operation: str, value: str | None) -> list[str]:
    """Rewrite one flag in the queue's start arguments, as frappe-admin rewrites start-master.sh: the argument
    after `--<flag>` for a setting (exactly one such entry), or each `-blpop`/`-blmove`/`-brpop` deny into its
    `+` grant (exactly one each). RuntimeError (HTTP 500) when the script does not have exactly one."""
    words = [f.split() for f in flags]
    where = [(i, j) for i, w in enumerate(words) for j in range(len(w))]
    if operation == "dequeue-acl":
        for cmd in _DEQUEUE:
            hits = [(i, j) for i, j in where if words[i][j] == f"-{cmd}"]
            if len(hits) != 1:
                raise RuntimeError(f"queue startup script has {len(hits)} deny entries for {cmd}")
            i, j = hits[0]
            words[i][j] = f"+{cmd}"
    else:
        flag = f"--{operation}"
        hits = [(i, j) for i, j in where if words[i][j] == flag]
        if len(hits) != 1:
            raise RuntimeError(f"queue startup script has {len(hits)} value entries for {flag}")
        i, j = hits[0]
        if j + 1 < len(words[i]):
            words[i][j + 1] = str(value)
        elif i + 1 < len(words) and words[i + 1]:
            words[i + 1][0] = str(value)
        else:
            raise RuntimeError(f"queue startup script has 0 value entries for {flag}")
    return [" ".join(w) for w in words]


def split_dsn(dsn: str) -> tuple[str, str, str, str, str]:
    """mysql://user:pw@host:port/db -> its parts, as the helper splits DB_ADMIN_DSN."""
    rest = dsn.removeprefix("mysql://")
    creds, _, hostport_db = rest.partition("@")
    user, _, pw = creds.partition(":")
    hostport, _, db = hostport_db.partition("/")
    host, _, port = hostport.partition(":")
    return user, pw, host, port or "3306", db
