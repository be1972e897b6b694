"""Benchmark: normalise() latency over the corpus. Prints a table and writes JSON (never a timed test).

    python tests/guardrail/actions/bench_normalise.py [--rounds N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import yaml

from guardrail.actions import normalise


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    corpus = [e["cmd"] for e in yaml.safe_load(Path(__file__).with_name("corpus.yaml").read_text())]
    for cmd in corpus:  # warm up: imports, catalogue, parser
        normalise(cmd)
    samples: list[float] = []
    cpu: list[float] = []
    per_cmd: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for cmd in corpus:
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            normalise(cmd)
            c1, t1 = time.thread_time_ns(), time.perf_counter_ns()
            dt = (t1 - t0) / 1e6
            samples.append(dt)
            cpu.append((c1 - c0) / 1e6)
            per_cmd.setdefault(cmd, []).append(dt)
    samples.sort()
    cpu.sort()

    def pct(p: float, xs: list[float] | None = None) -> float:
        xs = samples if xs is None else xs
        return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]

    medians = sorted(((statistics.median(v), k) for k, v in per_cmd.items()), reverse=True)
    result = {"commands": len(corpus), "calls": len(samples), "p50_ms": round(pct(50), 4),
              "p90_ms": round(pct(90), 4), "p99_ms": round(pct(99), 4), "max_ms": round(samples[-1], 4),
              # Thread CPU time leaves out the time the OS gave the core to other processes (a shared machine).
              "cpu_p50_ms": round(pct(50, cpu), 4), "cpu_p99_ms": round(pct(99, cpu), 4),
              "slowest_median_ms": [{"cmd": k[:80], "ms": round(m, 4)} for m, k in medians[:5]]}
    print(f"{'metric':<10} {'ms':>8}")
    for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms", "cpu_p50_ms", "cpu_p99_ms"):
        print(f"{k:<10} {result[k]:>8.4f}")
    print("slowest commands (median ms):")
    for row in result["slowest_median_ms"]:
        print(f"  {row['ms']:>7.4f}  {row['cmd']}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
