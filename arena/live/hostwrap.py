"""Make the stack's service names work for the real shell clients, without root and without /etc/hosts.

The stack's bin directory holds one tiny wrapper per client (psql, pg_isready, redis-cli, mariadb, mysql, curl)
that runs `python -m arena.live.hostwrap <client> ARGS...`. We rewrite host names in host positions only, from
the stack's hosts file (LIVE_HOSTS_FILE), and exec the real binary (found on PATH after the wrapper's own dir):

  -h NAME, -hNAME, --host NAME, --host=NAME      -> the address
  scheme://[user[:pw]@]NAME[:port]/...            -> the address in the URI (DSNs, redis://, http://)
  host=NAME inside a libpq conninfo string        -> the address (psql, pg_isready)
  curl                                            -> `--connect-to NAME::ADDR:` per service, so the URL and the
                                                     Host header keep the name
  PGHOST / MYSQL_HOST in the environment          -> PGHOSTADDR (unless the command names a host) / the address

SQL text, JSON bodies and other arguments are never touched. Generated and put on PATH by `arena.live.stack`.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from typing import Mapping, Sequence

from arena.live.names import HostsFile

__all__ = ["rewrite_args", "rewrite_env", "names_a_host", "WRAPPED", "main"]

WRAPPED = ("psql", "pg_isready", "redis-cli", "mariadb", "mysql", "mariadb-admin", "mysqladmin", "curl")
_URI = re.compile(r"^([A-Za-z][\w+.-]*://(?:[^@/\s]*@)?)([A-Za-z0-9_.-]+)")
_CONNINFO_HOST = re.compile(r"(^|\s)host=([A-Za-z0-9_.-]+)")
_HOST_FLAGS = ("-h", "--host")


def _is_conninfo(a: str) -> bool:
    """`host=... dbname=...`: every word a key=value, as libpq's connection strings are (SQL text is not)."""
    words = a.split()
    return bool(words) and all(re.match(r"^[a-z_]+=\S*$", w) for w in words)


def rewrite_args(tool: str, args: Sequence[str], table: Mapping[str, str]) -> list[str]:
    """The argument list with stack host names replaced by their addresses, in host positions only."""
    if tool == "curl":
        # curl has a native mapping that keeps URL and Host header intact.
        return [a for name, addr in table.items() for a in ("--connect-to", f"{name}::{addr}:")] + list(args)
    out: list[str] = []
    expect_host = False
    for a in args:
        if expect_host:
            out.append(table.get(a, a))
            expect_host = False
            continue
        if a in _HOST_FLAGS:
            out.append(a)
            expect_host = True
            continue
        if a.startswith("--host="):
            out.append("--host=" + table.get(a[7:], a[7:]))
            continue
        if a.startswith("-h") and not a.startswith("--") and a[2:] in table:
            out.append("-h" + table[a[2:]])
            continue
        m = _URI.match(a)
        if m and m.group(2) in table:
            out.append(m.group(1) + table[m.group(2)] + a[m.end():])
            continue
        if tool in ("psql", "pg_isready") and _is_conninfo(a):
            a = _CONNINFO_HOST.sub(lambda mm: mm.group(1) + "host=" + table.get(mm.group(2), mm.group(2)), a)
        out.append(a)
    return out


def names_a_host(args: Sequence[str]) -> bool:
    """Whether the command line itself says which host to reach (then PGHOST in the environment does not apply)."""
    for a in args:
        if a in _HOST_FLAGS or a.startswith("--host=") or (a.startswith("-h") and not a.startswith("--") and a[2:]):
            return True
        if _URI.match(a) or (_is_conninfo(a) and _CONNINFO_HOST.search(a)):
            return True
    return False


def rewrite_env(env: Mapping[str, str], table: Mapping[str, str], *, host_in_args: bool = False) -> dict[str, str]:
    out = dict(env)
    if out.get("PGHOST") in table and "PGHOSTADDR" not in out and not host_in_args:
        out["PGHOSTADDR"] = table[out["PGHOST"]]
    if out.get("MYSQL_HOST") in table:
        out["MYSQL_HOST"] = table[out["MYSQL_HOST"]]
    return out


def _real_binary(tool: str) -> str | None:
    """The first `tool` on PATH that is not in this wrapper's own directory, nor the guard shim that started this
    wrapper (under `guardrail shell` the shim has judged the command and runs us; running it again would loop)."""
    own = os.environ.get("LIVE_BIN_DIR", "")
    judged = None
    # Only under a shim (its ACTIVE_ENV is set) is the guard's module loaded: it costs a tenth of a second a call.
    if os.environ.get("GUARDRAIL_SHIM_ACTIVE"):
        from guardrail.adapters.shell.shimdir import judged_by_active_shim as judged
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not d or d == own:
            continue
        found = shutil.which(tool, path=d)
        if found is not None and not (judged is not None and judged(found, tool, os.environ)):
            return found
    return None


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        sys.exit("usage: python -m arena.live.hostwrap TOOL [ARGS...]")
    tool, args = argv[0], argv[1:]
    real = _real_binary(tool)
    if real is None:
        print(f"{tool}: command not found", file=sys.stderr)
        sys.exit(127)
    hosts = os.environ.get("LIVE_HOSTS_FILE")
    table = HostsFile(hosts).table() if hosts and os.path.exists(hosts) else {}
    os.execve(real, [tool, *rewrite_args(tool, args, table)],
              rewrite_env(os.environ, table, host_in_args=names_a_host(args)))


if __name__ == "__main__":
    main()
