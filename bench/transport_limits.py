"""The transports under abuse: session-name floods, oversized requests and stdin payloads against the real MCP HTTP
server (`guardrail mcp --transport http`, a subprocess measured through /proc/PID) and the shell daemon (in this
process, measured through /proc/self), with the limits docs/security.md gives.

Run: `python bench/transport_limits.py [--names 10000] [--connections 10000] [--body-mb 100] [--max-sessions 256]`.
Prints a table and writes bench/results/transport_limits.json. What to look for: every flood and oversized input
refused with the stated status or message, the server still up, and fds / RSS growth flat (not in proportion to
the flood). tests/guardrail/adapters/test_mcp_limits.py and test_shell_transport.py hold the same at test size.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx2

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "transport_limits.json"
GUARDRAIL = str(Path(sys.executable).parent / "guardrail")
TOKEN = "bench-token-0123456789abcdef"
PROTOCOL = "2026-07-28"


def proc_status(pid: int | str) -> dict[str, int]:
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    kv = dict(ln.split(":", 1) for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in ln)
    return {"fds": fds, "rss_kb": int(kv["VmRSS"].split()[0]), "threads": int(kv["Threads"])}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(session: str, tool: str = "guard_status", arguments: dict | None = None) -> tuple[dict, dict]:
    meta = {"io.modelcontextprotocol/protocolVersion": PROTOCOL,
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments or {}, "_meta": meta}}
    headers = {"authorization": f"Bearer {TOKEN}", "accept": "application/json, text/event-stream",
               "content-type": "application/json", "mcp-protocol-version": PROTOCOL, "mcp-method": "tools/call",
               "mcp-name": tool, "guardrail-session": session}
    return body, headers


def is_error(r) -> bool:
    text = r.text
    if "data:" in text:
        text = next(ln[5:] for ln in text.splitlines() if ln.startswith("data:"))
    return bool(json.loads(text)["result"].get("isError"))


def mcp_rows(args: argparse.Namespace, work: Path) -> list[dict]:
    tokens = work / "tokens"
    tokens.write_text(f"bench:{TOKEN}\n")
    tokens.chmod(0o600)
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    proc = subprocess.Popen([GUARDRAIL, "mcp", "--transport", "http", "--port", str(port), "--env", "local",
                             "--journal-dir", str(work / "journals"), "--token-file", str(tokens),
                             "--max-sessions", str(args.max_sessions)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    rows = []
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the MCP server did not start")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        start = proc_status(proc.pid)
        with httpx2.Client(timeout=120) as http:
            t0 = time.perf_counter()
            for i in range(args.max_sessions):
                body, h = call(f"open-{i}")
                assert not is_error(http.post(url, json=body, headers=h))
            open_s = time.perf_counter() - t0
            full = proc_status(proc.pid)
            refused = [0]
            lock = threading.Lock()

            def flood(k: int) -> None:
                with httpx2.Client(timeout=120) as h2:
                    for i in range(k, args.names, args.threads):
                        b, hh = call(f"flood-{i}")
                        if is_error(h2.post(url, json=b, headers=hh)):
                            with lock:
                                refused[0] += 1

            t0 = time.perf_counter()
            threads = [threading.Thread(target=flood, args=(k,)) for k in range(args.threads)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            flood_s = time.perf_counter() - t0
            after = proc_status(proc.pid)
            rows.append({"case": f"MCP: {args.max_sessions} sessions opened", "outcome": "served",
                         "fds": f"{start['fds']} -> {full['fds']}",
                         "rss_mb": f"{start['rss_kb'] / 1024:.0f} -> {full['rss_kb'] / 1024:.0f}",
                         "per_request_ms": round(1000 * open_s / args.max_sessions, 1)})
            rows.append({"case": f"MCP: {args.names:,} more session names", "outcome": f"{refused[0]:,} refused",
                         "fds": f"{full['fds']} -> {after['fds']}",
                         "rss_mb": f"{full['rss_kb'] / 1024:.0f} -> {after['rss_kb'] / 1024:.0f}",
                         "per_request_ms": round(1000 * flood_s / args.names, 2)})

            chunk = b"x" * (1024 * 1024)

            def big():
                yield b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"exec","arguments":' \
                      b'{"command":"'
                for _ in range(args.body_mb):
                    yield chunk
                yield b'"}}}'

            for label, content, hdr in (("declared length", b"".join(big()), call("x", "exec")[1]),
                                        ("chunked", big(), call("x", "exec")[1]),
                                        ("no token", b"".join(big()), {"content-type": "application/json"})):
                before = proc_status(proc.pid)
                t0 = time.perf_counter()
                r = http.post(url, content=content, headers=hdr)
                dt = time.perf_counter() - t0
                now = proc_status(proc.pid)
                rows.append({"case": f"MCP: {args.body_mb} MB request, {label}", "outcome": f"HTTP {r.status_code}",
                             "fds": f"{before['fds']} -> {now['fds']}",
                             "rss_mb": f"{before['rss_kb'] / 1024:.0f} -> {now['rss_kb'] / 1024:.0f}",
                             "per_request_ms": round(1000 * dt, 1)})
        rows.append({"case": "MCP: server still up", "outcome": "yes" if proc.poll() is None else "NO",
                     "fds": "", "rss_mb": "", "per_request_ms": ""})
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    return rows


PEAK_RSS = """import resource, subprocess, sys
code = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)
"""


def daemon_rows(args: argparse.Namespace, work: Path) -> list[dict]:
    from guardrail.actions.model import Action
    from guardrail.adapters.session import GuardSessions, load_engine
    from guardrail.adapters.shell import GuardDaemon, shim
    from guardrail.adapters.shell.protocol import MAX_LINE_BYTES, MAX_STDIN_BYTES, DaemonClient
    from guardrail.context import IncidentContext

    secret = os.urandom(32).hex().encode()
    secret_file = work / "secret"
    secret_file.write_bytes(secret)
    secret_file.chmod(0o600)
    sessions = GuardSessions(load_engine(), IncidentContext(), journal_dir=work / "sj",
                             normaliser=lambda c: [Action(tool="shell", verb="x", raw=c, mutating=False)],
                             declaration_checks=[])
    rows = []
    with GuardDaemon(sessions.get("bench"), work / "g.sock", secret=secret) as daemon:
        start = proc_status("self")
        errors = [0]

        def flood(k: int) -> None:
            for _ in range(k, args.connections, args.threads):
                try:
                    with DaemonClient(daemon.socket_path, secret=secret) as c:
                        c.request({"op": "status"})
                except (OSError, ConnectionError):
                    errors[0] += 1

        t0 = time.perf_counter()
        threads = [threading.Thread(target=flood, args=(k,)) for k in range(args.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        dt = time.perf_counter() - t0
        time.sleep(0.5)  # the handlers of the last connections finish after their clients
        after = proc_status("self")
        rows.append({"case": f"daemon: {args.connections:,} authenticated connections",
                     "outcome": f"{args.connections - errors[0]:,} served, {errors[0]} refused",
                     "fds": f"{start['fds']} -> {after['fds']}",
                     "rss_mb": f"{start['rss_kb'] / 1024:.0f} -> {after['rss_kb'] / 1024:.0f}",
                     "per_request_ms": round(1000 * dt / args.connections, 2)})

        before = proc_status("self")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c, c.makefile("rwb") as f:
            c.connect(daemon.socket_path)
            f.write(b'{"op":"before","argv":["psql"],"stdin":"')
            for _ in range(MAX_LINE_BYTES // (1024 * 1024) + 8):
                f.write(b"x" * (1024 * 1024))
            f.write(b'"}\n')
            f.flush()
            reply = json.loads(f.readline())
        now = proc_status("self")
        rows.append({"case": f"daemon: a {MAX_LINE_BYTES // (1024 * 1024) + 8} MB request line",
                     "outcome": reply.get("error", "ANSWERED"), "fds": f"{before['fds']} -> {now['fds']}",
                     "rss_mb": f"{before['rss_kb'] / 1024:.0f} -> {now['rss_kb'] / 1024:.0f}", "per_request_ms": ""})

        big = work / "big.sql"
        with open(big, "wb") as fh:
            line = b"INSERT INTO t VALUES (1);\n" * 4096
            for _ in range(args.body_mb * 1024 * 1024 // len(line)):
                fh.write(line)
        env = dict(os.environ, GUARDRAIL_SOCKET=daemon.socket_path, GUARDRAIL_SECRET_FILE=str(secret_file))
        peak = work / "peak"
        t0 = time.perf_counter()
        with open(big, "rb") as stdin:
            p = subprocess.run([sys.executable, "-c", PEAK_RSS, str(peak), sys.executable, "-S", shim.__file__,
                                "psql", "-h", "db"], env=env, stdin=stdin, capture_output=True, text=True)
        dt = time.perf_counter() - t0
        rows.append({"case": f"shim: psql < {args.body_mb} MB.sql (limit {MAX_STDIN_BYTES // 1024} KiB)",
                     "outcome": f"exit {p.returncode}", "fds": "",
                     "rss_mb": f"shim peak {int(peak.read_text()) / 1024:.0f}",
                     "per_request_ms": round(1000 * dt, 1)})
    sessions.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--names", type=int, default=10_000)
    ap.add_argument("--connections", type=int, default=10_000)
    ap.add_argument("--body-mb", type=int, default=100)
    ap.add_argument("--max-sessions", type=int, default=256)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gr-limits-", dir="/tmp") as d:
        rows = mcp_rows(args, Path(d)) + daemon_rows(args, Path(d))
    width = max(len(r["case"]) for r in rows)
    print(f"{'case':<{width}}  {'outcome':<40} {'fds':<12} {'RSS MB':<16} ms/request")
    for r in rows:
        print(f"{r['case']:<{width}}  {str(r['outcome'])[:40]:<40} {r['fds']:<12} {r['rss_mb']:<16} "
              f"{r['per_request_ms']}")
    doc = {"params": vars(args) | {"out": str(args.out)}, "rows": rows, "load_average": os.getloadavg(),
           "self_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
