"""`reconfigure-infra.sh <mariadb|redis-cache|redis-queue> <key> <value>` on the live shell.

Put on PATH by `arena.live.stack`; the Incident-Arena Frappe foothold's helper with its grammar, checks and
output (SW yuekai/sre-world substrates/frappe/main/reconfigure-infra.sh): mariadb runs SET GLOBAL with the
DB_ADMIN_DSN through the stack's `mysql`, redis-cache a CONFIG SET through `redis-cli`, and redis-queue POSTs the
operation to frappe-admin (`arena.live.frappeadmin`, at FRAPPE_ADMIN_URL).
A refused repair ends as the real script's `curl -fsS` does: exit 22.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Sequence

from arena.twin.frappe.admin import USAGE, helper_refuses, split_dsn

__all__ = ["run", "main"]


def run(argv: Sequence[str]) -> tuple[str, str, int]:
    kind, key, value = (list(argv) + ["", "", ""])[:3]
    if kind not in ("mariadb", "redis-cache", "redis-queue"):
        return "", USAGE + "\n", 2
    if not key:
        return "", "key required\n", 2
    if not value:
        return "", "value required\n", 2
    refused = helper_refuses(kind, key, value)
    if refused:
        return "", refused + "\n", 2
    done = f"{kind} reconfigured: {key}={value}\n"
    if kind == "mariadb":
        dsn = os.environ.get("DB_ADMIN_DSN", "")
        if not dsn:
            return "", "DB_ADMIN_DSN not set (should be exported by the chart)\n", 2
        user, pw, host, port, db = split_dsn(dsn)
        p = subprocess.run(["mysql", "--protocol=TCP", "-h", host, "-u", user, f"-p{pw}", "-D", db,
                            "-e", f"SET GLOBAL {key} = {value};"], capture_output=True, text=True)
        return (p.stdout + done, p.stderr, 0) if p.returncode == 0 else (p.stdout, p.stderr, p.returncode)
    if kind == "redis-cache":
        p = subprocess.run(["redis-cli", "-h", "redis-cache", "CONFIG", "SET", key, value], capture_output=True,
                           text=True)
        if p.returncode != 0 or not p.stdout.startswith("OK"):
            return "", f"CONFIG SET {key} {value} refused: {(p.stdout + p.stderr).strip()!r}\n", 1
        got = subprocess.run(["redis-cli", "-h", "redis-cache", "CONFIG", "GET", key], capture_output=True,
                             text=True).stdout
        return f"CONFIG GET {key} -> {' '.join(got.split())}\n" + done, "", 0
    body = {"operation": key} if key == "dequeue-acl" else {"operation": key, "value": value}
    url = os.environ.get("FRAPPE_ADMIN_URL", "http://frappe-admin:8000").rstrip("/") + "/admin/redis-queue-repair"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=150) as resp:
            return resp.read().decode() + "\n" + done, "", 0
    except urllib.error.HTTPError as e:
        return "", f"curl: (22) The requested URL returned error: {e.code}\n", 22
    except OSError as e:
        return "", f"curl: (7) Failed to connect to frappe-admin port 8000: {e}\n", 7


def main(argv: Sequence[str] | None = None) -> int:
    out, err, code = run(sys.argv[1:] if argv is None else argv)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
