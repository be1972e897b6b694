"""Policy decision latency: (a) EmbeddedOPA on the library policies, (b) the full Guard.before (parse, classify,
decide, journal with fsync), (c) the same decision through OPA's REST Data API over loopback (the stand-in
server that wraps the embedded engine; see guardrail/policy/testserver.py).

Prints a table and writes bench/results/policy_latency.json. Targets on this machine: (a) p99 <= 0.3 ms,
(b) p99 <= 2 ms, (a) at least 5x faster than (c) at p99.

    python bench/policy_latency.py [--n 3000] [--out bench/results/policy_latency.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from guardrail.actions import normalise
from guardrail.context import IncidentContext
from guardrail.guard import Guard
from guardrail.journal import Journal
from guardrail.policy.embedded import EmbeddedOPA
from guardrail.policy.server import OPAServer
from guardrail.policy.testserver import StandInOPAServer

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "guardrail" / "actions" / "corpus.yaml"
CONTEXT = IncidentContext(
    id="bench", namespaces=["slack"], components=["svc-channel", "svc-auth", "redis-queue", "postgres"],
    restartable=["svc-channel"], not_restartable=["postgres"], protected_settings=["postgres.max_connections"],
    ceilings={"app.roles.channel.db.pool_size": 20, "app.roles.channel.db.max_overflow": 10},
)


def commands() -> list[str]:
    return [c["cmd"] for c in yaml.safe_load(CORPUS.read_text())]


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q * len(s))) - 1))]


def summarise(name: str, ms: list[float]) -> dict:
    total_s = sum(ms) / 1000.0
    return {"name": name, "n": len(ms), "p50_ms": pct(ms, 0.50), "p99_ms": pct(ms, 0.99),
            "mean_ms": statistics.fmean(ms), "per_s": len(ms) / total_s if total_s else 0.0}


def time_calls(fn, inputs, n: int) -> list[float]:
    for x in inputs[:50]:  # warm the prepared-query cache and the parser
        fn(x)
    out = []
    for i in range(n):
        x = inputs[i % len(inputs)]
        t = time.perf_counter()
        fn(x)
        out.append((time.perf_counter() - t) * 1000.0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "policy_latency.json"))
    args = ap.parse_args()

    cmds = commands()
    ctx = CONTEXT.policy_input()
    inputs = [{"action": a.to_input(), "context": ctx, "command": c} for c in cmds for a in normalise(c)]

    with EmbeddedOPA() as engine:
        embedded = summarise("embedded OPA decide()", time_calls(engine.decide, inputs, args.n))
        with tempfile.TemporaryDirectory() as tmp:
            journal = Journal(Path(tmp) / "journal.jsonl", fsync=True)
            guard = Guard(engine, CONTEXT, journal=journal)
            guard_before = summarise("Guard.before (parse+classify+decide+fsync)",
                                     time_calls(guard.before, cmds, args.n))
            journal.close()

    server = StandInOPAServer().start()
    try:
        rest_engine = OPAServer(server.url)
        rest = summarise("REST Data API over loopback", time_calls(rest_engine.decide, inputs, max(500, args.n // 3)))
        rest_engine.close()
    finally:
        server.stop()

    rows = [embedded, guard_before, rest]
    print(f"{'path':46} {'n':>6} {'p50 ms':>8} {'p99 ms':>8} {'decisions/s':>12}")
    for r in rows:
        print(f"{r['name']:46} {r['n']:>6} {r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f} {r['per_s']:>12.0f}")
    speedup = rest["p99_ms"] / embedded["p99_ms"] if embedded["p99_ms"] else float("inf")
    targets = {
        "embedded_p99_le_0.3ms": embedded["p99_ms"] <= 0.3,
        "guard_before_p99_le_2ms": guard_before["p99_ms"] <= 2.0,
        "embedded_5x_faster_than_rest": speedup >= 5.0,
    }
    print(f"embedded vs REST at p99: {speedup:.1f}x")
    for k, v in targets.items():
        print(f"  {k}: {'met' if v else 'MISSED'}")
    result = {
        "embedded_p50_ms": embedded["p50_ms"], "embedded_p99_ms": embedded["p99_ms"],
        "embedded_per_s": embedded["per_s"],
        "guard_before_p50_ms": guard_before["p50_ms"], "guard_before_p99_ms": guard_before["p99_ms"],
        "guard_before_per_s": guard_before["per_s"],
        "rest_p50_ms": rest["p50_ms"], "rest_p99_ms": rest["p99_ms"], "rest_per_s": rest["per_s"],
        "embedded_vs_rest_p99_speedup": speedup, "targets": targets, "n": args.n,
        "corpus_commands": len(cmds), "inputs": len(inputs),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
