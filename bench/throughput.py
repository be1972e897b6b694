"""Bench throughput: the full A/B (every scenario x 2 arms x 10 seeds of `calibrated`, --jobs 2) in wall seconds
and peak RSS, and how wall time grows from about 100 to 400 to 1,600 episodes.

Run: `python bench/throughput.py [--agent calibrated] [--jobs 2] [--sizes 100,400,1600] [--profile N]`.
Prints a table and writes bench/results/throughput.json. Targets (issue 8): the 400-episode run in <= 60 s wall
and <= 500 MB peak RSS (the parent and its workers together, sampled from /proc), growth linear in episodes.
`--profile N` also runs N guarded episodes in this process under cProfile and prints where the time goes.
The runs go through arena.bench.runner (the same path as `guardrail bench`), without detection or sensitivity.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import resource
import tempfile
import threading
import time
from pathlib import Path

from arena.bench.runner import plan_bench, run_one, run_plan
from arena.scenario import _ids

OUT = Path(__file__).resolve().parent / "results" / "throughput.json"


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree(pid: int) -> list[int]:
    out = [pid]
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            kids = (task / "children").read_text().split()
            for k in kids:
                out += _tree(int(k))
    except OSError:
        pass
    return out


class PeakRSS:
    """Samples the RSS of this process and all its descendants every 100 ms; keeps the largest sum."""

    def __init__(self) -> None:
        self.peak_kb = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kb = max(self.peak_kb, sum(_rss_kb(p) for p in _tree(os.getpid())))
            self._stop.wait(0.1)

    def __enter__(self) -> "PeakRSS":
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def _cpu_s() -> float:
    """CPU seconds of this process and its reaped children: unlike wall time, not inflated by other load."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run_size(target: int, agent: str, jobs: int, scenarios: list[str]) -> dict:
    seeds = max(1, round(target / (2 * len(scenarios))))
    plan = plan_bench(scenarios, [agent], ["guarded", "unguarded"], seeds, [], detection=False)
    with tempfile.TemporaryDirectory() as d, PeakRSS() as rss:
        c0 = _cpu_s()
        t0 = time.perf_counter()
        rows = run_plan(plan, Path(d) / "results.jsonl", jobs=jobs)
        wall = time.perf_counter() - t0
        cpu = _cpu_s() - c0  # the workers have exited (the pool shut down), so RUSAGE_CHILDREN includes them
    arm_wall = {arm: round(sum(r["wall_s"] for r in rows if r["arm"] == arm), 3) for arm in ("guarded", "unguarded")}
    return {"target": target, "episodes": len(rows), "seeds": seeds, "wall_s": round(wall, 3),
            "episodes_per_s": round(len(rows) / wall, 2), "cpu_s": round(cpu, 2),
            "cpu_s_per_episode": round(cpu / max(1, len(rows)), 4), "peak_rss_mb": round(rss.peak_kb / 1024, 1),
            "episode_wall_s_by_arm": arm_wall,
            "pass_rate": {arm: round(sum(r["passed"] for r in rows if r["arm"] == arm)
                                     / max(1, sum(r["arm"] == arm for r in rows)), 3)
                          for arm in ("guarded", "unguarded")}}


def profile(n: int, agent: str, scenarios: list[str]) -> str:
    plan = plan_bench(scenarios, [agent], ["guarded"], max(1, n // len(scenarios)), [], detection=False)
    specs = plan.episodes[:n]
    run_one(specs[0])  # engine compile and catalogue load happen once per process; keep them out of the profile
    pr = cProfile.Profile()
    pr.enable()
    for s in specs:
        run_one(s)
    pr.disable()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("cumulative").print_stats(30)
    return buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agent", default="calibrated")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--sizes", default="100,400,1600")
    ap.add_argument("--profile", type=int, default=0, help="also cProfile N guarded episodes in-process")
    a = ap.parse_args()
    scenarios = _ids()
    sizes = [int(x) for x in a.sizes.split(",") if x.strip()]
    runs = []
    print(f"{len(scenarios)} scenarios, agent {a.agent}, --jobs {a.jobs}")
    print(f"{'target':>7} {'episodes':>8} {'wall s':>8} {'ep/s':>7} {'cpu s/ep':>9} {'peak MB':>8} "
          f"{'s/ep guarded':>13} {'s/ep unguarded':>15}")
    for n in sizes:
        r = run_size(n, a.agent, a.jobs, scenarios)
        runs.append(r)
        half = r["episodes"] / 2
        print(f"{r['target']:>7} {r['episodes']:>8} {r['wall_s']:>8.1f} {r['episodes_per_s']:>7.2f} "
              f"{r['cpu_s_per_episode']:>9.3f} {r['peak_rss_mb']:>8.1f} {r['episode_wall_s_by_arm']['guarded'] / half:>13.3f} "
              f"{r['episode_wall_s_by_arm']['unguarded'] / half:>15.3f}")
    base = runs[0]
    for r in runs:
        r["wall_per_episode_vs_smallest"] = round((r["wall_s"] / r["episodes"]) / (base["wall_s"] / base["episodes"]), 3)
        r["cpu_per_episode_vs_smallest"] = round(r["cpu_s_per_episode"] / base["cpu_s_per_episode"], 3)
    doc = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                       "loadavg_1m_at_end": round(os.getloadavg()[0], 2)}, "agent": a.agent,
           "jobs": a.jobs, "scenarios": len(scenarios), "runs": runs,
           "targets": {"wall_s_400": 60, "peak_rss_mb": 500}}
    if a.profile:
        text = profile(a.profile, a.agent, scenarios)
        doc["profile_top"] = text.splitlines()[:60]
        print(text)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=2) + "\n")
    print("linear check (per episode, relative to the smallest run; 1.0 = linear): "
          + ", ".join(f"{r['episodes']}: wall {r['wall_per_episode_vs_smallest']} cpu {r['cpu_per_episode_vs_smallest']}"
                      for r in runs))
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus (wall time includes others' load)")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
