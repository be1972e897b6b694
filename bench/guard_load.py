"""Load test of the guard's two wire adapters: the shell daemon's unix socket and the MCP streamable HTTP server.

    python bench/guard_load.py [--sessions 16] [--rate 1000] [--duration 30] [--transports socket,http]
                               [--engines 2] [--server-per-session] [--targets 16] [--go-defaults] [--out F]

For each transport a guard server runs in its own process (this script with --serve), hosting one guard session
per simulated agent with the real normaliser, the embedded OPA engine over the shipped policies/ and fsync'd
journals. The load generator paces `rate` decisions per second in total across the sessions, open loop (each
request has a scheduled send time; latency is measured from that time, so a stall is not hidden by the client
waiting; a request whose time comes after the run's end is not sent, so a saturated server shows as
sent < scheduled). The service time (send to reply) is reported beside it. Allowed commands are reported back with `after` (socket) as a shim does; over MCP, `exec` runs in a
no-op environment so the figures measure the guard and the transport, not bash. Afterwards every session's
journal is read back: each request carries a unique marker, which must appear exactly once (no drops, no
duplicates), and each journal's seq must run 1..N without gaps. The server's RSS is sampled once a second, and its
CPU time per decision and the load average are reported beside the latencies: on a shared machine a p99 well above
the CPU cost is time spent waiting for a core.

Prints a table and writes bench/results/guard_load.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from guardrail import pygc
from guardrail.policy import goruntime

HERE = Path(__file__).resolve().parent
# A realistic mix of operator commands; the marker {m} makes every request unique in the journal. {t} names the
# component a redis command goes to: one of --targets per session (an incident has a bounded set of components),
# or with --targets 0 a new one for every request, the worst case for the guard's memory, which keeps the latest
# change of every (component, key) the session changed so that the persistence check can read it back.
COMMANDS = [
    "redis-cli -h redis-queue -p 6379 GET bench:{m}",
    "kubectl get pods -n saleor -l app=bench-{m}",
    "psql -h postgres -U saleor -c \"SELECT count(*) FROM jobs WHERE id = '{m}'\"",
    "redis-cli -h redis-queue-{t} -p 6379 --user bench-{m} CONFIG SET maxmemory 64mb",
    "kubectl logs deploy/svc-channel -n chat --tail=50 -l run={m}",
    "redis-cli -h redis-queue-{t} --user bench-{m} FLUSHALL",
    "curl -s http://svc-channel:8080/admin/config?m={m}",
    "kubectl delete pvc data-{m} -n saleor",
]
ARGV = [shlex.split(c) for c in COMMANDS]


def target_of(i: int, marker: str, targets: int) -> str:
    """The component request i of a session goes to: t0..t{targets-1} in turn, or the request's own marker."""
    return f"t{(i // len(COMMANDS)) % targets}" if targets > 0 else marker


# -- the server side (a child process) ----------------------------------------------------------------------


class NoopEnvironment:
    """Answers every command with exit 0 without running it: the bench measures the guard, not bash."""

    def __init__(self) -> None:
        from guardrail.envs.local import WallClock

        self.clock = WallClock()

    def run(self, command: str):
        from verifiers.protocols import CommandResult

        return CommandResult(command=command, stdout="", exit_code=0)

    def sli(self, *a: Any, **k: Any) -> list:
        return []

    def restart(self, target: str):
        raise NotImplementedError

    def describe(self):
        from verifiers.protocols import EnvironmentDescription

        return EnvironmentDescription(name="bench-noop", components=())


def serve(args: argparse.Namespace) -> None:
    from guardrail.adapters.session import GuardSessions, load_engine
    from guardrail.context import IncidentContext

    sessions = GuardSessions([load_engine() for _ in range(args.engines)], IncidentContext(id="bench"), journal_dir=Path(args.dir) / "journals",
                             env_factory=lambda ctx: NoopEnvironment())
    pygc.settle()  # as `guardrail shell` and `guardrail mcp` do once their sessions are built
    if args.serve == "socket":
        from guardrail.adapters.shell import GuardDaemon

        first = args.first
        daemons = [GuardDaemon(sessions.get(f"sock-{i:02d}"), Path(args.dir) / f"s{i:02d}.sock").start()
                   for i in range(first, first + args.sessions)]
        print("ready", flush=True)
        sys.stdin.read()  # until the parent closes our stdin
        for d in daemons:
            d.stop()
    else:
        import uvicorn

        from guardrail.adapters.mcp_server import build_server

        app = build_server(sessions).streamable_http_app()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning"))
        threading.Thread(target=lambda: (sys.stdin.read(), setattr(server, "should_exit", True)),
                         daemon=True).start()
        server.run()
    sessions.close()


# -- the load generator -------------------------------------------------------------------------------------


def cpu_s(pid: int) -> float:
    """The process's CPU time so far (user + system), from /proc: the server's work, apart from waiting."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# Decision counts at which the server's RSS is reported: memory must not grow with the commands served.
RSS_MILESTONES = (1000, 10000, 50000)


class RssSampler(threading.Thread):
    """The server's RSS once a second, with how many decisions the clients had received by then."""

    def __init__(self, pid: int | list[int], progress: list[int] | None = None):
        super().__init__(daemon=True)
        # Several servers (one per session) are sampled together: the RSS is their sum.
        self.pids = pid if isinstance(pid, list) else [pid]
        self.samples, self._halt = [], threading.Event()
        self.progress = progress if progress is not None else []
        self.at_decisions: list[tuple[int, int]] = []  # (decisions so far, RSS kB)

    def run(self) -> None:
        t0 = time.monotonic()
        while not self._halt.is_set():
            try:
                kb = sum(rss_kb(p) for p in self.pids)
            except OSError:
                return
            self.samples.append((round(time.monotonic() - t0, 2), kb))
            self.at_decisions.append((sum(self.progress), kb))
            self._halt.wait(1.0)

    def milestones(self) -> dict[str, float | None]:
        """RSS (MB) at the first sample on or after each milestone's decision count, or None when not reached."""
        out: dict[str, float | None] = {}
        for m in RSS_MILESTONES:
            hit = next((kb for n, kb in self.at_decisions if n >= m), None)
            out[str(m)] = round(hit / 1024, 1) if hit is not None else None
        return out

    def stop(self) -> None:
        self._halt.set()
        self.join()


def start_server(kind: str, workdir: Path, sessions: int, port: int, engines: int, first: int = 0,
                 wait: bool = True) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--dir", str(workdir), "--sessions",
                             str(sessions), "--port", str(port), "--engines", str(engines), "--first", str(first)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if wait:
        wait_ready(proc, kind, port)
    return proc


def wait_ready(proc: subprocess.Popen, kind: str, port: int = 0) -> None:
    if kind == "socket":
        line = proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"socket server failed: {proc.stderr.read()[-2000:]}")
    else:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"http server failed: {proc.stderr.read()[-2000:]}")
            time.sleep(0.1)


def stop_server(proc: subprocess.Popen) -> None:
    try:
        proc.stdin.close()
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def socket_session(idx: int, n: int, path: str, interval: float, window: list[float], out: dict,
                   progress: list[int], targets: int = 0, connected: threading.Barrier | None = None) -> None:
    from guardrail.adapters.shell.protocol import DaemonClient

    lat, service, markers, errors, late, scheduled = [], [], [], 0, 0, 0
    with DaemonClient(path) as c:
        if connected is not None:
            connected.wait()  # the run's clock starts once every session is connected (`window` is set then)
        t0, t_end = window
        i = 0
        while True:
            due = t0 + idx * interval / n + i * interval
            now = time.perf_counter()
            if due >= t_end or now >= t_end:
                scheduled = int((t_end - t0 - idx * interval / n) // interval) + 1
                break
            if due > now:
                time.sleep(due - now)
            elif now - due > interval:
                late += 1
            m = f"s{idx}-{i}"
            # A shim has its argv from exec; the client only fills the marker into the pre-split words, so its
            # own CPU (it shares the machine with the server) stays small.
            t = target_of(i, m, targets)
            argv = [w.replace("{m}", m).replace("{t}", t) for w in ARGV[i % len(ARGV)]]
            try:
                sent = time.perf_counter()
                r = c.request({"op": "before", "argv": argv, "cwd": "/"})
                done = time.perf_counter()
                lat.append(done - due)
                service.append(done - sent)
                markers.append(m)
                progress[idx] += 1
                if r.get("runs"):
                    c.request({"op": "after", "id": r["id"], "exit_code": 0, "duration_s": 0.0})
            except (OSError, ValueError, ConnectionError):
                errors += 1
            i += 1
    out[idx] = {"latencies": lat, "service": service, "markers": markers, "errors": errors, "late": late,
                "scheduled": scheduled}


def run_socket(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    if args.server_per_session:
        # As `guardrail shell` deploys: one guard process (one engine, one daemon) per agent.
        procs = [start_server("socket", workdir, 1, 0, 1, first=i, wait=False) for i in range(args.sessions)]
        for p in procs:
            wait_ready(p, "socket")
    else:
        procs = [start_server("socket", workdir, args.sessions, 0, args.engines)]
    pids = [p.pid for p in procs]
    progress = [0] * args.sessions
    sampler = RssSampler(pids, progress)
    sampler.start()
    cpu0, load0 = sum(cpu_s(p) for p in pids), os.getloadavg()
    interval = args.sessions / args.rate
    out: dict[int, Any] = {}
    window = [0.0, 0.0]

    def start_clock() -> None:
        window[0] = time.perf_counter() + 0.5
        window[1] = window[0] + args.duration

    connected = threading.Barrier(args.sessions, action=start_clock)
    threads = [threading.Thread(target=socket_session, args=(i, args.sessions, str(workdir / f"s{i:02d}.sock"), interval,
                                                             window, out, progress, args.targets, connected))
               for i in range(args.sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - window[0]
    cpu = sum(cpu_s(p) for p in pids) - cpu0
    sampler.stop()
    for p in procs:
        stop_server(p)
    name = "socket, a server per session" if args.server_per_session else "socket"
    return summarise(name, out, wall, sampler.samples, workdir / "journals", cpu, load0,
                     rss_at=sampler.milestones())


def run_http(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import anyio
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    port = _free_port()
    proc = start_server("http", workdir, args.sessions, port, args.engines)
    sampler = RssSampler(proc.pid)
    sampler.start()
    cpu0, load0 = cpu_s(proc.pid), os.getloadavg()
    interval = args.sessions / args.rate
    url = f"http://127.0.0.1:{port}/mcp"
    out: dict[int, Any] = {}

    async def session(idx: int, t0: float, t_end: float) -> None:
        lat, service, markers, errors, late, scheduled = [], [], [], 0, 0, 0
        async with Client(streamable_http_client(url), mode="legacy") as c:
            i = 0
            while True:
                due = t0 + idx * interval / args.sessions + i * interval
                now = time.perf_counter()
                if due >= t_end or now >= t_end:
                    scheduled = int((t_end - t0 - idx * interval / args.sessions) // interval) + 1
                    break
                if due > now:
                    await anyio.sleep(due - now)
                elif now - due > interval:
                    late += 1
                m = f"h{idx}-{i}"
                try:
                    sent = time.perf_counter()
                    r = await c.call_tool("exec", {"command": COMMANDS[i % len(COMMANDS)].format(
                        m=m, t=target_of(i, m, args.targets))})
                    if r.is_error:
                        errors += 1
                    else:
                        done = time.perf_counter()
                        lat.append(done - due)
                        service.append(done - sent)
                        markers.append(m)
                except Exception:  # noqa: BLE001 - count it, keep loading
                    errors += 1
                i += 1
        out[idx] = {"latencies": lat, "service": service, "markers": markers, "errors": errors, "late": late,
                    "scheduled": scheduled}

    async def main() -> float:
        t0 = time.perf_counter() + 2.0  # the sessions connect first
        async with anyio.create_task_group() as tg:
            for i in range(args.sessions):
                tg.start_soon(session, i, t0, t0 + args.duration)
        return time.perf_counter() - t0

    wall = anyio.run(main)
    cpu = cpu_s(proc.pid) - cpu0
    sampler.stop()
    stop_server(proc)
    return summarise("mcp-http", out, wall, sampler.samples, workdir / "journals", cpu, load0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_journals(jdir: Path, sent_markers: list[str]) -> dict[str, Any]:
    from guardrail.journal import read_journal

    counts: dict[str, int] = {}
    gaps = torn = 0
    per_session = {}
    for f in sorted(jdir.glob("*.jsonl")):
        recs = read_journal(f)
        torn += int(recs.torn)
        seqs = [r["seq"] for r in recs]
        if seqs != list(range(1, len(seqs) + 1)):
            gaps += 1
        per_session[f.name] = len(recs)
        for r in recs:
            if r["kind"] == "command":
                m = _marker(r["command"])
                counts[m] = counts.get(m, 0) + 1
    sent = set(sent_markers)
    return {
        "journals": len(per_session),
        "records": sum(per_session.values()),
        "commands_journalled": sum(counts.values()),
        "dropped": len(sent - set(counts)),
        "duplicated": sum(n - 1 for n in counts.values() if n > 1),
        "sessions_with_seq_gaps": gaps,
        "torn": torn,
    }


def _marker(command: str) -> str:
    import re

    m = re.search(r"([sh]\d+-\d+)", command)
    return m.group(1) if m else command


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summarise(name: str, out: dict[int, Any], wall: float, rss: list, jdir: Path, server_cpu_s: float = 0.0,
              load_before: tuple = (), rss_at: dict[str, Any] | None = None) -> dict[str, Any]:
    lat = [x for o in out.values() for x in o["latencies"]]
    svc = [x for o in out.values() for x in o["service"]]
    markers = [m for o in out.values() for m in o["markers"]]
    kb = [k for _, k in rss]
    head = kb[: max(1, min(5, len(kb) // 4))]
    tail = kb[-max(1, min(5, len(kb) // 4)):]
    return {
        "transport": name,
        "sessions": len(out),
        "scheduled": sum(o["scheduled"] for o in out.values()),
        "decisions": len(lat),
        "errors": sum(o["errors"] for o in out.values()),
        "late_sends": sum(o["late"] for o in out.values()),
        "achieved_rate": round(len(lat) / wall, 1) if wall else 0.0,
        "p50_ms": round(pct(lat, 50) * 1000, 3),
        "p90_ms": round(pct(lat, 90) * 1000, 3),
        "p99_ms": round(pct(lat, 99) * 1000, 3),
        "max_ms": round(max(lat) * 1000, 3) if lat else None,
        "mean_ms": round(statistics.fmean(lat) * 1000, 3) if lat else None,
        # From the actual send, not the schedule: the server's own time per request, queueing excluded.
        "service_p50_ms": round(pct(svc, 50) * 1000, 3),
        "service_p99_ms": round(pct(svc, 99) * 1000, 3),
        # The guard server's CPU per decision (all its threads): work, as opposed to time spent waiting for a core.
        "server_cpu_ms_per_decision": round(server_cpu_s * 1000 / len(lat), 3) if lat else None,
        "server_cpu_share": round(server_cpu_s / wall, 3) if wall else None,
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "rss_mb": {"first": round(kb[0] / 1024, 1) if kb else None, "last": round(kb[-1] / 1024, 1) if kb else None,
                   "max": round(max(kb) / 1024, 1) if kb else None,
                   "early_mean": round(statistics.fmean(head) / 1024, 1) if kb else None,
                   "late_mean": round(statistics.fmean(tail) / 1024, 1) if kb else None,
                   "at_decisions": rss_at or {},
                   "samples": [(t, round(k / 1024, 1)) for t, k in rss]},
        "journal": check_journals(jdir, markers),
    }


def print_table(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"guard load: {args.sessions} sessions, {args.rate}/s total, {args.duration}s")
    cols = ["transport", "sent/scheduled", "rate/s", "err", "p50 ms", "p99 ms", "svc p50/p99 ms", "server cpu ms",
            "dropped", "dup", "seq gaps", "RSS MB early→late (max)", "load avg"]
    for c in cols:
        t.add_column(c, justify="right")
    for r in results:
        j, m = r["journal"], r["rss_mb"]
        t.add_row(r["transport"], f"{r['decisions']}/{r['scheduled']}", str(r["achieved_rate"]), str(r["errors"]),
                  str(r["p50_ms"]), str(r["p99_ms"]), f"{r['service_p50_ms']}/{r['service_p99_ms']}",
                  str(r["server_cpu_ms_per_decision"]), str(j["dropped"]), str(j["duplicated"]),
                  str(j["sessions_with_seq_gaps"]), f"{m['early_mean']}→{m['late_mean']} ({m['max']})",
                  f"{r['load_average']['before'][0]:.1f}→{r['load_average']['after'][0]:.1f}")
    Console(width=160).print(t)
    for r in results:
        at = r["rss_mb"].get("at_decisions") or {}
        if at:
            print(f"{r['transport']}: server RSS MB at " + ", ".join(f"{k} decisions: {v}" for k, v in at.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--rate", type=float, default=1000.0, help="decisions per second, all sessions together")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of load per transport")
    ap.add_argument("--transports", default="socket,http")
    ap.add_argument("--engines", type=int, default=2, help="embedded OPA engines in the server's pool")
    ap.add_argument("--server-per-session", action="store_true",
                    help="socket: one guard process per session, as `guardrail shell` runs (RSS and CPU summed)")
    ap.add_argument("--targets", type=int, default=16,
                    help="redis components each session's mutating commands go to in turn (0: a new one per request)")
    ap.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(HERE / "results" / "guard_load.json"))
    ap.add_argument("--go-defaults", action="store_true",
                    help="run the servers with Go's default GC (GOGC=100) instead of the guard's settings")
    ap.add_argument("--serve", choices=["socket", "http"], help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.targets < 0:
        ap.error("--targets must be 0 or more")
    if args.serve:
        serve(args)
        return
    if not args.go_defaults:
        # As `guardrail shell`/`mcp` start: re-executed once with the guard's Go GC settings, which the servers
        # this starts inherit (guardrail/policy/goruntime.py).
        goruntime.reexec_tuned()
    results = []
    for kind in [k.strip() for k in args.transports.split(",") if k.strip()]:
        with tempfile.TemporaryDirectory(prefix=f"guard-load-{kind}-") as d:
            run = run_socket if kind == "socket" else run_http
            results.append(run(args, Path(d)))
    print_table(results, args)
    target = next((r for r in results if r["transport"].startswith("socket")), None)
    doc = {
        "bench": "guard_load", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "params": {"sessions": args.sessions, "rate": args.rate, "duration_s": args.duration,
                   "engines": args.engines, "server_per_session": args.server_per_session,
                   "targets": args.targets},
        "go_runtime": goruntime.describe(),
        "load_average_at_end": os.getloadavg(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "target": {"socket_p99_ms_max": 5.0, "met": bool(target and target["p99_ms"] <= 5.0)},
        "results": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
