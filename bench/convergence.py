"""How fast and how safely the convergence verifier accepts a declaration: time-to-accept after the true
recovery, in load cycles, and the false-accept rate, over seeded episodes.

Run: `python bench/convergence.py [--episodes 4000] [--seed 0] [--out F]` (synthetic) or `--twin [--episodes 200]` (the
twin). Prints a table and writes bench/results/convergence[_twin].json. Targets (issue 5): accept within 2 cycles
of the true recovery (the median); <= 1% false accepts.

Each figure is an estimate from a sample, so the bench prints its 95% interval beside it: a bootstrap interval
(seeded, 2,000 resamples) for the median, a Wilson interval for the false-accept rate. The verdict on each target
is on the estimate, and says whether the whole interval is on the same side. The median sits near the design's
floor of two cycles (below), so a few hundred episodes cannot tell which side of 2 it is on: at 400 episodes the
interval is about 0.08 cycles wide; at the default 4,000 (about a minute), about 0.025.

The episodes are synthetic, generated here from a seed, and judged by the real `ConvergenceCheck` through the
`Environment` seam in virtual time: open-loop load in peak/trough cycles (the spec's dev shape, 50/10 rps, and
Saleor's bursty 6/1.4 rps), request outcomes drawn per segment from a binomial, so small segments are noisy.
The agent declares right after its fix. Kinds:
  recovers  the SLIs return to health at a random moment 0-4 cycles after the fix (some with a draining backlog)
  residual  a fault remains at peak, just outside the band (error ratio 1.2x-1.8x the SLO): any accept is false
  relapse   recovers, then regresses 3-5 cycles later with no change (a symptom-only repair; the watchdog's case)
"True recovery" is the moment the error probability drops (a segment is healthy when its midpoint is after it);
"healthy cycle start" is the first generator cycle boundary after it. The verifier counts the last two peaks and
two troughs, paired back from the latest finished segment (verifiers.convergence.load_cycles), so its floor is
two cycles after the first healthy segment begins: about 2.0 cycles after the true recovery, before any wait
for statistical confidence on low-traffic segments.

`--twin` runs guarded episodes of ia-001/006/011 (references and premature variants, declared at once, over
seeds) with the guard wired as verifiers/README.md says; true recovery is read afterwards from the twin's ledger
with the task's own outcome gate, one cycle at a time (the bench may read the grader; the guard never does).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from verifiers.convergence import ConvergenceCheck
from verifiers.protocols import EnvironmentDescription, Sample, VerdictStatus

OUT = Path(__file__).resolve().parent / "results" / "convergence.json"
TWIN_OUT = OUT.with_name("convergence_twin.json")
# Guarded twin episodes are about half a second each: 200 (40 seeds x 5 cases) take a few minutes on 2 cores.
TWIN_DEFAULT_EPISODES = 200
SLO_ERR, SLO_GOOD = 0.05, 0.90
CONTEXT = {"id": "bench", "slos": [{"sli": "error_ratio", "op": "<=", "value": SLO_ERR},
                                   {"sli": "goodput", "op": ">=", "value": SLO_GOOD}]}
SHAPES = {"dev": (20.0, 50.0, 40.0, 10.0), "saleor": (14.0, 6.0, 34.0, 1.4)}


class Clock:
    def __init__(self, t: float):
        self.t = t

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += max(0.0, s)


@dataclass
class Episode:
    seed: int
    kind: str
    shape: str
    t_fix: float
    t_recover: float | None  # None: never
    t_relapse: float | None
    p_bad_peak: float
    p_bad_trough: float
    p_good: float
    backlog0: float
    drain_per_s: float


class SyntheticEnvironment:
    """The Environment seam over one synthetic episode: per-segment samples with binomial outcome noise."""

    def __init__(self, ep: Episode):
        self.ep = ep
        self.peak_s, self.peak_rps, self.trough_s, self.trough_rps = SHAPES[ep.shape]
        self.cycle_s = self.peak_s + self.trough_s
        self._clock = Clock(ep.t_fix)
        self._cache: dict[tuple[int, str], tuple[int, int]] = {}

    @property
    def clock(self) -> Clock:
        return self._clock

    def p_error(self, t: float, phase: str) -> float:
        e = self.ep
        healthy = e.t_recover is not None and t >= e.t_recover and (e.t_relapse is None or t < e.t_relapse)
        if healthy:
            return e.p_good
        return e.p_bad_peak if phase == "peak" else e.p_bad_trough

    def _segment(self, c: int, phase: str) -> tuple[float, float]:
        a = c * self.cycle_s + (0.0 if phase == "peak" else self.peak_s)
        return a, a + (self.peak_s if phase == "peak" else self.trough_s)

    def _outcomes(self, c: int, phase: str) -> tuple[int, int]:
        key = (c, phase)
        if key not in self._cache:
            a, b = self._segment(c, phase)
            rng = random.Random(f"{self.ep.seed}:{c}:{phase}")  # str seeds are stable across processes
            n = max(0, round(rng.gauss(1.0, 0.1) * (self.peak_rps if phase == "peak" else self.trough_rps) * (b - a)))
            p = self.p_error(0.5 * (a + b), phase)
            errors = sum(1 for _ in range(n) if rng.random() < p)
            self._cache[key] = (n, errors)
        return self._cache[key]

    def sli(self, query: str, window: float, *, labels: Mapping[str, str] | None = None,
            step: float | None = None) -> list[Sample]:
        now = self._clock.now()
        out = []
        c = max(0, math.floor((now - window) / self.cycle_s))
        while c * self.cycle_s < now:
            for phase in ("peak", "trough"):
                a, b = self._segment(c, phase)
                if b <= now - window or a >= now:
                    continue
                b2 = min(b, now)
                lab = {**(labels or {}), "phase": phase, "cycle": str(c)}
                if query == "backlog":
                    out.append(Sample(a, b2, self.backlog(b2), lab, 0))
                    continue
                n, errors = self._outcomes(c, phase) if b2 >= b else (0, 0)
                if query in ("error_ratio", "goodput"):
                    v = None if n == 0 else (errors / n if query == "error_ratio" else 1 - errors / n)
                    out.append(Sample(a, b2, v, lab, n))
                else:
                    raise ValueError(f"unknown SLI {query}")
            c += 1
        return out

    def backlog(self, t: float) -> float:
        e = self.ep
        if e.backlog0 <= 0:
            return 0.0
        return max(0.0, e.backlog0 - e.drain_per_s * max(0.0, t - e.t_fix))

    def describe(self) -> EnvironmentDescription:
        return EnvironmentDescription("synthetic", (), cycle_s=self.cycle_s)

    def run(self, command: str):  # pragma: no cover - convergence never runs commands
        raise NotImplementedError

    def restart(self, target: str):  # pragma: no cover
        raise NotImplementedError


class Journal:
    """The agent's one change, at the fix time."""

    def __init__(self, t: float):
        self.t = t

    def executed(self) -> list[dict[str, Any]]:
        return [{"seq": 1, "t": self.t, "command": "fix", "exit_code": 0,
                 "actions": [{"tool": "x", "verb": "set", "mutating": True, "keys": []}]}]

    def records(self) -> list[dict[str, Any]]:
        return [{"seq": 1, "kind": "command", "t": self.t}]


def make_episode(seed: int) -> Episode:
    rng = random.Random(seed)
    shape = "dev" if seed % 2 == 0 else "saleor"
    cycle_s = sum(SHAPES[shape][0::2])
    t_fix = rng.uniform(10, 20) * cycle_s
    kind = rng.choices(["recovers", "residual", "relapse"], [0.6, 0.25, 0.15])[0]
    p_good = rng.uniform(0.0, 0.02)
    p_bad_peak = rng.uniform(0.08, 0.5)
    p_bad_trough = rng.choice([p_good, rng.uniform(0.06, 0.3)])  # half the faults show at peak only
    t_recover = t_fix + rng.uniform(0, 4) * cycle_s
    t_relapse = None
    backlog0, drain = 0.0, 0.0
    if kind == "residual":
        t_recover = None
        p_bad_peak = SLO_ERR * rng.uniform(1.2, 1.8)
        p_bad_trough = p_good
    elif kind == "relapse":
        t_relapse = t_recover + rng.uniform(3, 5) * cycle_s
    if kind == "recovers" and rng.random() < 0.3:
        backlog0 = rng.uniform(100, 2000)
        drain = backlog0 / max(1.0, t_recover - t_fix)  # drained exactly when the SLIs recover
    return Episode(seed, kind, shape, t_fix, t_recover, t_relapse, p_bad_peak, p_bad_trough, p_good, backlog0, drain)


def run_one(ep: Episode, criteria: dict[str, Any]) -> dict[str, Any]:
    env = SyntheticEnvironment(ep)
    v = ConvergenceCheck(CONTEXT).check(env, Journal(ep.t_fix), criteria)
    cyc = env.cycle_s
    accepted = v.status is VerdictStatus.PASS
    t_acc = env.clock.now() if accepted else None
    row: dict[str, Any] = {"seed": ep.seed, "kind": ep.kind, "shape": ep.shape, "backlog": ep.backlog0 > 0,
                           "status": v.status.value,
                           "accepted": accepted, "waited_cycles": round((env.clock.now() - ep.t_fix) / cyc, 3)}
    if ep.t_recover is not None and accepted:
        healthy_start = math.ceil(ep.t_recover / cyc) * cyc
        row["after_recovery_cycles"] = round((t_acc - ep.t_recover) / cyc, 3)
        row["after_healthy_cycle_start_cycles"] = round((t_acc - healthy_start) / cyc, 3)
    # False accept: accepted while the SLIs were not in fact healthy: before the true recovery, never recovered,
    # or after a relapse had shown in a finished load segment (a peak-only relapse shows at the next peak).
    relapse_seen = None
    if ep.t_relapse is not None:
        c = math.floor(ep.t_relapse / cyc)
        while relapse_seen is None:
            for phase in ("peak", "trough"):
                a, b = env._segment(c, phase)
                if relapse_seen is None and 0.5 * (a + b) >= ep.t_relapse and env.p_error(0.5 * (a + b), phase) \
                        != ep.p_good:
                    relapse_seen = b
            c += 1
    healthy_at_accept = accepted and ep.t_recover is not None and t_acc >= ep.t_recover and (
        relapse_seen is None or t_acc < relapse_seen)
    row["false_accept"] = accepted and not healthy_at_accept
    row["accepted_before_relapse"] = accepted and ep.kind == "relapse" and healthy_at_accept
    return row


def median_interval(xs: list[float], *, resamples: int = 2000, seed: int = 1) -> tuple[float, float]:
    """A 95% bootstrap interval for the median of xs (percentile method, seeded: the same sample gives the same
    interval)."""
    if not xs:
        return float("nan"), float("nan")
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(resamples))
    return meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1]


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """A 95% Wilson interval for a rate of k in n."""
    if n == 0:
        return float("nan"), float("nan")
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def target_verdict(estimate: float, interval: tuple[float, float], limit: float) -> str:
    """`met` / `missed` on the estimate against an upper limit, and whether the whole interval agrees."""
    lo, hi = interval
    if estimate <= limit:
        return "met" if hi <= limit else "met by the estimate; its 95% interval reaches past the target"
    return "missed" if lo > limit else "missed by the estimate; its 95% interval reaches below the target"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))] if xs else float("nan")


# -- on the twin ---------------------------------------------------------------------------------------------------

TWIN_CASES = (("ia-001", "reference"), ("ia-001", "premature"), ("ia-006", "reference"),
              ("ia-011", "reference"), ("ia-011", "premature"))
MUTATING_WORDS = ("SET", "PUT", "upgrade", "ALTER", "restart-svc", "RESET")


def _at_once(sid: str, name: str, tmp: Path) -> Path:
    """The solution with every wait after its first change removed: declared at once."""
    import yaml

    from guardrail.resources import scenario_dir

    doc = yaml.safe_load((scenario_dir() / "incident-arena" / sid / "solutions" / f"{name}.yaml").read_text())
    steps = doc["script"]
    first = next((i for i, st in enumerate(steps) if "run" in st and any(w in st["run"] for w in MUTATING_WORDS)),
                 0)
    doc["script"] = steps[:first] + [st for st in steps[first:] if "sleep" not in st]
    out = tmp / f"{sid}-{name}-at-once.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


def twin_episode(sid: str, name: str, script: Path, seed: int) -> dict[str, Any]:
    """One guarded episode; the true recovery read afterwards from the twin's ledger with the task's own gate."""
    from arena.agents import resolve_agent
    from arena.episode import run_episode
    from arena.gates import Grading
    from arena.world import TwinWorld
    from arena.scenario import load_scenario
    from guardrail.adapters.session import load_engine
    from guardrail.guard import Guard
    from verifiers.suite import build_suite

    sc = load_scenario(sid)
    held: dict[str, Any] = {}

    def factory(env, ctx):
        suite = build_suite(ctx.model_dump(mode="json"))
        conv = suite.declare[2]
        check = conv.check

        def recorded(e, j, c=None):
            v = check(e, j, c)
            held.setdefault("verdicts", []).append((v.status.value, e.clock.now()))
            return v

        conv.check = recorded
        g = Guard(_engine(load_engine), ctx, env=env, suite=suite)
        held["env"], held["guard"] = env, g
        return g

    res = run_episode(sc, resolve_agent(f"script:{script}", sc), arm="guarded", seed=seed, guard_factory=factory)
    res = res.to_json()
    env, g = held["env"], held["guard"]
    cyc = env.world.profile.cycle_s
    accepts = [t for st, t in held.get("verdicts", []) if st == "PASS"]
    muts = [float(e["t"]) for e in g.journal.executed()
            if any(a.get("mutating") is not False for a in e.get("actions") or ())]
    row: dict[str, Any] = {"scenario": sid, "variant": name, "seed": seed, "accepted": bool(accepts),
                           "outcome_pass": res["outcome_gate"]["pass"], "passed": res["passed"],
                           "failure_mode": res["failure_mode"]}
    if accepts and muts:
        t_acc, t_fix = accepts[0], max(m for m in muts if m <= accepts[0])
        grading = Grading(sc.grader, TwinWorld(env))
        # Each window is one load cycle after the gate's latency settle, so every phase has latency samples.
        span = cyc + sc.grader.latency_settle_s
        windows = []
        t = t_fix
        while t + span <= t_acc + 1e-6:
            windows.append((t, grading.outcome_gate((t, t + span)).passed))
            t += cyc
        # True recovery: the start of the run of gate-passing cycles that reaches the acceptance.
        t_true = None
        for start, ok in reversed(windows):
            if not ok:
                break
            t_true = start
        row["accept_after_fix_cycles"] = round((t_acc - t_fix) / cyc, 3)
        if t_true is not None:
            row["accept_after_recovery_cycles"] = round((t_acc - t_true) / cyc, 3)
    row["false_accept"] = bool(accepts) and not res["outcome_gate"]["pass"]
    return row


_ENGINE: list = []


def _engine(load):
    if not _ENGINE:
        _ENGINE.append(load())
    return _ENGINE[0]


def twin_main(episodes: int, out: Path) -> None:
    import tempfile

    t0 = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        scripts = {(sid, name): _at_once(sid, name, Path(tmp)) for sid, name in TWIN_CASES}
        per_case = max(1, math.ceil(episodes / len(TWIN_CASES)))
        for (sid, name), script in scripts.items():
            for seed in range(per_case):
                rows.append(twin_episode(sid, name, script, seed))
    wall = time.perf_counter() - t0
    print(f"convergence bench on the twin: {len(rows)} guarded episodes, declared at once, {wall:.1f} s wall\n")
    print(f"{'case':24} {'n':>4} {'accepted':>9} {'after recovery med/p95':>24} {'false accepts':>14} {'passed':>7}")
    summary = {}
    for sid, name in TWIN_CASES + (("all", "all"),):
        rs = [r for r in rows if sid == "all" or (r["scenario"], r["variant"]) == (sid, name)]
        after = [r["accept_after_recovery_cycles"] for r in rs if "accept_after_recovery_cycles" in r]
        fa = sum(r["false_accept"] for r in rs)
        summary[f"{sid}/{name}"] = {"episodes": len(rs), "accepted": sum(r["accepted"] for r in rs),
                                    "after_recovery_median_cycles": statistics.median(after) if after else None,
                                    "after_recovery_p95_cycles": pct(after, 0.95) if after else None,
                                    "false_accepts": fa, "false_accept_rate": fa / len(rs) if rs else None,
                                    "passed": sum(r["passed"] for r in rs)}
        m = summary[f"{sid}/{name}"]
        print(f"{sid + '/' + name:24} {len(rs):>4} {m['accepted']:>9} "
              f"{(m['after_recovery_median_cycles'] or float('nan')):>11.2f}/"
              f"{(m['after_recovery_p95_cycles'] or float('nan')):<12.2f} {fa:>5} ({100 * fa / len(rs):.1f}%) "
              f"{m['passed']:>7}")
    print("\ntrue recovery: the start of the run of windows (settle + one cycle, stepping a cycle from the last change) "
          "in which the task's own outcome gate passes, up to the acceptance; a false accept is an accepted declaration "
          "whose soak fails the outcome gate. The guard holds public SLOs without the gate's 1.2/0.8 tolerance and "
          "waits for a backlog to settle, so it is deliberately slower than the gate's notion of recovery.")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"episodes": len(rows), "wall_s": wall, "summary": summary, "rows": rows}, indent=1))
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=None,
                    help="synthetic episodes (default 4,000, about a minute: enough to place the median against the "
                         f"target), or twin episodes with --twin (default {TWIN_DEFAULT_EPISODES})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--twin", action="store_true", help="guarded twin episodes (ia-001/006/011) instead")
    ap.add_argument("--confidence-z", type=float, default=None,
                    help="the pooled check's z at every look after the first (default: the verifier's, 1.64): "
                         "lower accepts sooner, more falsely")
    ap.add_argument("--first-look-z", type=float, default=None,
                    help="the pooled check's z at a run's first look (default: the verifier's, 1.28; 0: as the "
                         "later looks)")
    ap.add_argument("--noise-z", type=float, default=None, help="the per-segment noise allowance's z (default 1.0)")
    ap.add_argument("--out", default=None, help=f"where the JSON goes (default {OUT}, with --twin {TWIN_OUT})")
    args = ap.parse_args(argv)
    if args.twin:
        synthetic_only = [f for f, v in (("--seed", args.seed != 0), ("--confidence-z", args.confidence_z),
                                         ("--first-look-z", args.first_look_z), ("--noise-z", args.noise_z)) if v]
        if synthetic_only:
            ap.error(f"{', '.join(synthetic_only)} apply to the synthetic run, not --twin")
        twin_main(args.episodes or TWIN_DEFAULT_EPISODES, Path(args.out or TWIN_OUT))
        return
    args.episodes = args.episodes or 4000
    args.out = args.out or str(OUT)
    criteria: dict[str, Any] = {"convergence": {"max_wait_cycles": 8}}
    if args.confidence_z is not None:
        criteria["convergence"]["confidence_z"] = args.confidence_z
    if args.first_look_z is not None:
        criteria["convergence"]["first_look_z"] = args.first_look_z
    if args.noise_z is not None:
        criteria["convergence"]["noise_z"] = args.noise_z
    t0 = time.perf_counter()
    rows = [run_one(make_episode(args.seed * 100_000 + i), criteria) for i in range(args.episodes)]
    wall = time.perf_counter() - t0
    summary: dict[str, Any] = {}
    for shape in ("all", "dev", "saleor"):
        rs = [r for r in rows if shape == "all" or r["shape"] == shape]
        rec = [r for r in rs if r["kind"] == "recovers"]
        after = [r["after_recovery_cycles"] for r in rec if "after_recovery_cycles" in r]
        after_h = [r["after_healthy_cycle_start_cycles"] for r in rec if "after_healthy_cycle_start_cycles" in r]
        residual = [r for r in rs if r["kind"] == "residual"]
        summary[shape] = {
            "episodes": len(rs),
            "recovering": len(rec),
            "accepted_of_recovering": sum(r["accepted"] for r in rec),
            "after_recovery_median_cycles": statistics.median(after) if after else None,
            "after_recovery_median_cycles_95ci": list(median_interval(after)),
            "after_recovery_p95_cycles": pct(after, 0.95),
            "after_recovery_within_2_cycles": sum(a <= 2.0 for a in after) / len(after) if after else None,
            # Split by whether a backlog drained until the recovery: a cycle that begins before the drain ends shows
            # the backlog moving and cannot count as settled (verifiers/README.md).
            **{f"after_recovery_median_cycles_{part}": statistics.median(xs) if xs else None
               for part, flag in (("no_backlog", False), ("backlog", True))
               for xs in [[r["after_recovery_cycles"] for r in rec
                           if "after_recovery_cycles" in r and r["backlog"] == flag]]},
            "after_healthy_start_median_cycles": statistics.median(after_h) if after_h else None,
            "after_healthy_start_p95_cycles": pct(after_h, 0.95),
            "false_accepts": sum(r["false_accept"] for r in rs),
            "false_accept_rate": sum(r["false_accept"] for r in rs) / len(rs) if rs else None,
            "false_accept_rate_95ci": list(wilson_interval(sum(r["false_accept"] for r in rs), len(rs))),
            "residual_accepted": sum(r["accepted"] for r in residual),
            "residual": len(residual),
            "relapse_accepted_before_relapse": sum(r["accepted_before_relapse"] for r in rs),
            "relapse": sum(r["kind"] == "relapse" for r in rs),
        }
    print(f"convergence bench: {args.episodes} seeded episodes, {wall:.1f} s wall\n")
    hdr = f"{'shape':8} {'n':>4} {'accepted/recovering':>20} {'after recovery med/p95':>24} " \
          f"{'after healthy start med/p95':>28} {'false accepts':>14} {'relapse accepted':>17}"
    print(hdr)
    for shape, s in summary.items():
        print(f"{shape:8} {s['episodes']:>4} {s['accepted_of_recovering']:>9}/{s['recovering']:<10} "
              f"{s['after_recovery_median_cycles'] or float('nan'):>11.2f}/{s['after_recovery_p95_cycles']:<12.2f} "
              f"{s['after_healthy_start_median_cycles'] or float('nan'):>13.2f}/{s['after_healthy_start_p95_cycles']:<14.2f} "
              f"{s['false_accepts']:>5} ({100 * (s['false_accept_rate'] or 0):.1f}%)  "
              f"{s['relapse_accepted_before_relapse']:>7}/{s['relapse']}")
    print("\nafter recovery, median cycles, episodes without / with a backlog draining until the recovery: "
          + "; ".join(f"{shape} {s['after_recovery_median_cycles_no_backlog'] or float('nan'):.2f} / "
                      f"{s['after_recovery_median_cycles_backlog'] or float('nan'):.2f}" for shape, s in summary.items()))
    print("\n95% intervals (bootstrap for the median, Wilson for the rate): "
          + "; ".join(f"{shape} median {s['after_recovery_median_cycles_95ci'][0]:.3f}-"
                      f"{s['after_recovery_median_cycles_95ci'][1]:.3f}, false accepts "
                      f"{100 * s['false_accept_rate_95ci'][0]:.2f}-{100 * s['false_accept_rate_95ci'][1]:.2f}%"
                      for shape, s in summary.items()))
    a = summary["all"]
    targets = {
        "after_recovery_median_le_2_cycles": target_verdict(a["after_recovery_median_cycles"],
                                                            tuple(a["after_recovery_median_cycles_95ci"]), 2.0),
        "false_accepts_le_1pct": target_verdict(a["false_accept_rate"], tuple(a["false_accept_rate_95ci"]), 0.01),
    }
    print(f"\ntargets (all episodes): median after recovery {a['after_recovery_median_cycles']:.4f} <= 2 cycles: "
          f"{targets['after_recovery_median_le_2_cycles']}; false accepts {100 * a['false_accept_rate']:.2f}% <= 1%: "
          f"{targets['false_accepts_le_1pct']}. Relapses accepted before they relapse are the watchdog's case "
          "(RESIDUAL_CAUSE), not counted as false accepts.")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"episodes": args.episodes, "seed": args.seed, "criteria": criteria,
                               "wall_s": wall, "summary": summary, "targets": targets, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
