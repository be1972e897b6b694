"""How fast the twin simulates: virtual seconds per wall second for a one-hour episode, per scenario, and the
wall time to replay every solution script of every scenario once (unguarded).

Run: `python bench/twin_speed.py [--repeat N]`. Prints a table and writes bench/results/twin_speed.json.
Targets (issue 3/4): >= 20,000x for a one-hour episode; all solution replays < 30 s.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from arena.agents import resolve_agent
from arena.episode import run_episode
from arena.scenario import list_scenarios
from arena.twin.engine import build_twin

OUT = Path(__file__).resolve().parent / "results" / "twin_speed.json"
HOUR = 3600.0


def one_hour(sc, seed: int) -> dict:
    """Build the twin (with its pre-incident history) and simulate the whole agent window with no agent."""
    t0 = time.perf_counter()
    env = build_twin(sc.twin, seed)
    t1 = time.perf_counter()
    env.clock.sleep(HOUR)
    t2 = time.perf_counter()
    return {"build_s": t1 - t0, "hour_s": t2 - t1, "total_s": t2 - t0,
            "segments": len(env.world.ledger.records) // max(1, len(env.world.profile.drivers))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    scenarios = list_scenarios()
    rows = []
    for sc in scenarios:
        one_hour(sc, 0)  # warm imports and caches
        runs = [one_hour(sc, seed) for seed in range(args.repeat)]
        med = statistics.median(r["total_s"] for r in runs)
        rows.append({"scenario": sc.id, "substrate": sc.substrate, "virtual_s": HOUR,
                     "wall_s_median": round(med, 6),
                     "wall_s_max": round(max(r["total_s"] for r in runs), 6),
                     "build_s_median": round(statistics.median(r["build_s"] for r in runs), 6),
                     "hour_only_s_median": round(statistics.median(r["hour_s"] for r in runs), 6),
                     "segments": runs[0]["segments"],
                     "speedup_x": round(HOUR / med), "target_x": 20000, "meets_target": HOUR / med >= 20000})
    t0 = time.perf_counter()
    replays = []
    for sc in scenarios:
        for name in sorted(sc.solutions):
            t = time.perf_counter()
            res = run_episode(sc, resolve_agent(f"replay:{name}", sc), seed=0)
            replays.append({"scenario": sc.id, "solution": name, "wall_s": round(time.perf_counter() - t, 6),
                            "virtual_s": res.virtual_s})
    replay_total = time.perf_counter() - t0
    doc = {"machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine()},
           "repeat": args.repeat, "one_hour_episode": rows,
           "replay_all_solutions": {"scripts": len(replays), "wall_s": round(replay_total, 6), "target_s": 30,
                                    "meets_target": replay_total < 30,
                                    "virtual_s": round(sum(r["virtual_s"] for r in replays), 3),
                                    "slowest": sorted(replays, key=lambda r: -r["wall_s"])[:3]}}
    print("speed-up = 3600 virtual s / wall (build with pre-incident history + one hour), median of --repeat")
    print(f"{'scenario':10} {'substrate':12} {'segments':>8} {'build ms':>9} {'1h sim ms':>10} {'total ms':>9} "
          f"{'speed-up':>10}  target")
    for r in rows:
        print(f"{r['scenario']:10} {r['substrate']:12} {r['segments']:>8} {r['build_s_median'] * 1000:>9.1f} "
              f"{r['hour_only_s_median'] * 1000:>10.1f} {r['wall_s_median'] * 1000:>9.1f} {r['speedup_x']:>9,}x  {'ok' if r['meets_target'] else 'MISSED'}"
              " (>= 20,000x)")
    rep = doc["replay_all_solutions"]
    print(f"\nreplay of all {rep['scripts']} solution scripts: {rep['wall_s']:.2f} s wall for "
          f"{rep['virtual_s']:.0f} virtual s  ({'ok' if rep['meets_target'] else 'MISSED'}, target < 30 s)")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
