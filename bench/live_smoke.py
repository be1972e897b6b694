"""How long the live CI smoke takes: the twelve episodes of tests/arena/live/test_live_episodes.py (ia-006, ia-004
and ia-018; the reference and one ephemeral variant; both arms), side by side as the test runs them, start to last
stop. The test checks their verdicts; this script measures their wall time, which a busy machine stretches and a
test must not assert.

Run: `python bench/live_smoke.py [--workers N]` (needs the live servers: `make live-stack` installs them). Prints a
table and writes bench/results/live_smoke.json. Target (issue 7): the twelve episodes in at most 8 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results" / "live_smoke.json"
TARGET_S = 8 * 60
EPHEMERAL = {"ia-006": "session_only_set", "ia-004": "config-rewrite", "ia-018": "terminate-without-guard"}
CASES = [(sid, sol, arm) for sid, eph in EPHEMERAL.items() for sol in ("reference", eph)
         for arm in ("unguarded", "guarded")]


def one(case: tuple[str, str, str]) -> dict:
    from arena.agents import make_agent
    from arena.cli import default_guard_factory
    from arena.live.world import run_live_episode
    from arena.scenario import load_scenario

    sid, sol, arm = case
    sc = load_scenario(sid)
    t0 = time.monotonic()
    res = run_live_episode(sc, make_agent(f"replay:{sol}", sc, 0), arm=arm,
                           guard_factory=default_guard_factory if arm == "guarded" else None)
    return {"scenario": sid, "solution": sol, "arm": arm, "passed": res.passed, "wall_s": time.monotonic() - t0,
            "ended": time.monotonic()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=3 * (os.cpu_count() or 1))
    args = ap.parse_args()
    from arena.live.stack import install_cleanup, missing_requirements

    missing = missing_requirements()
    if missing:
        raise SystemExit(f"the live stack needs: {', '.join(missing)}")
    install_cleanup()
    order = sorted(CASES, key=lambda c: c[2] != "guarded")  # the longer guarded episodes first, as the test
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, min(len(CASES), args.workers))) as pool:
        rows = list(pool.map(one, order))
    total = max(r.pop("ended") for r in rows) - start
    print(f"{'scenario':9} {'solution':26} {'arm':10} {'passed':7} wall s")
    for r in rows:
        print(f"{r['scenario']:9} {r['solution']:26} {r['arm']:10} {str(r['passed']):7} {r['wall_s']:.0f}")
    print(f"total {total:.0f} s with {args.workers} at a time (target <= {TARGET_S} s: "
          f"{'met' if total <= TARGET_S else 'MISSED'}); load average {os.getloadavg()[0]:.1f}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"total_s": total, "target_s": TARGET_S, "workers": args.workers,
                               "cpus": os.cpu_count(), "platform": platform.platform(), "episodes": rows},
                              indent=2) + "\n")


if __name__ == "__main__":
    main()
