"""Fit the `calibrated` persona mixture to the Incident-Arena figures, and measure how close it gets.

A script (`python -m arena.agents.calibrate [--seeds N] [--verify-seeds M] [--jobs J]`) and a small library: the
bench imports `PAPER` and `paper_figures` to put its unguarded figures beside the paper's. It runs every
archetype persona unguarded over every scenario that loads (the twin and the gates decide each outcome), fits
the mixture weights to the paper's figures, re-runs the fitted `calibrated` agent on fresh seeds to measure the
figures it really gives, and writes both to arena/agents/calibrated.yaml. Re-run it whenever scenarios change.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Iterable

import yaml

__all__ = ["PAPER", "FIGURES", "paper_figures", "episode_record", "fit_weights", "main"]

# The paper's unguarded figures (DESIGN.md): shares of episodes, then conditional pass rates, then the failure mix.
PAPER: dict[str, float] = {
    "pass": 0.35, "full_fix": 0.55, "pass_given_full": 0.59, "pass_given_not_full": 0.055,
    "not_durable": 0.265, "premature_declaration": 0.239, "scope_violation": 0.219, "budget_exhausted": 0.163,
    "residual_cause": 0.087,
}
FIGURES = tuple(PAPER)
WEIGHT_DIGITS = 4  # the precision of calibrated.yaml's weights
MODES = ("not_durable", "premature_declaration", "scope_violation", "budget_exhausted", "residual_cause")
ARCHETYPES = ("expert", "alternative", "hasty", "hasty_alternative", "ephemeral", "overreacher", "blunt", "looper",
              "symptom", "novice")


def episode_record(result: Any) -> dict[str, Any]:
    """What the figures need from one episode: passed, failure mode, and whether it ran the full reference fix."""
    return {"scenario": result.scenario, "seed": result.seed, "passed": bool(result.passed),
            "failure_mode": result.failure_mode, "full_fix": bool(result.full_fix)}


def _rates(n: float, passed: float, full: float, pass_full: float, modes: dict[str, float]) -> dict[str, float]:
    fails = n - passed
    out = {"pass": passed / n if n else math.nan, "full_fix": full / n if n else math.nan,
           "pass_given_full": pass_full / full if full else math.nan,
           "pass_given_not_full": (passed - pass_full) / (n - full) if n - full else math.nan}
    for m in MODES:
        out[m] = modes.get(m, 0.0) / fails if fails else math.nan
    return out


def paper_figures(records: Iterable[dict[str, Any]]) -> dict[str, float]:
    """The paper's figures from episode records (`episode_record`), each a fraction."""
    n = passed = full = pass_full = 0
    modes: Counter[str] = Counter()
    for r in records:
        n += 1
        passed += r["passed"]
        full += r["full_fix"]
        pass_full += r["passed"] and r["full_fix"]
        if not r["passed"]:
            modes[r["failure_mode"]] += 1
    return _rates(n, passed, full, pass_full, dict(modes))


# -- running episodes ----------------------------------------------------------------------------------------------

_SCENARIOS: dict[str, Any] = {}  # per worker process: each scenario loaded once


def _run_one(job: tuple[str, str, int, dict[str, Any] | None]) -> dict[str, Any]:
    from arena.agents import make_agent
    from arena.episode import run_episode
    from arena.scenario import load_scenario

    sc_id, spec, seed, params = job
    try:
        if sc_id not in _SCENARIOS:
            _SCENARIOS[sc_id] = load_scenario(sc_id)
        sc = _SCENARIOS[sc_id]
        agent = make_agent(spec, sc, seed, **(params or {}))
        res = run_episode(sc, agent, arm="unguarded", seed=seed)
    except Exception as e:  # noqa: BLE001 - scenarios change under a long run; skip and report, do not die
        return {"scenario": sc_id, "agent": spec, "seed": seed, "error": str(e).splitlines()[0][:200]}
    rec = episode_record(res)
    rec["agent"] = spec
    rec["persona"] = getattr(agent, "plan", {}).get("persona", spec)
    return rec


def _ok(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    bad = [r for r in recs if "error" in r]
    for sc_id in sorted({r["scenario"] for r in bad}):
        why = next(r["error"] for r in bad if r["scenario"] == sc_id)
        print(f"episodes of {sc_id} failed to run and are left out: {why}", file=sys.stderr)
    return [r for r in recs if "error" not in r]


def _map(jobs: list[Any], n_jobs: int) -> list[dict[str, Any]]:
    if n_jobs <= 1:
        return [_run_one(j) for j in jobs]
    with ProcessPoolExecutor(n_jobs) as ex:
        return list(ex.map(_run_one, jobs, chunksize=4))


def _loadable() -> tuple[list[Any], dict[str, str]]:
    from arena.scenario import _ids, load_scenario

    ok, bad = [], {}
    for i in _ids():
        try:
            ok.append(load_scenario(i))
        except Exception as e:  # noqa: BLE001 - a scenario still being written is skipped, and reported
            bad[i] = str(e).splitlines()[0][:160]
    return ok, bad


# -- fitting -------------------------------------------------------------------------------------------------------

def _mixture_figures(table: dict[tuple[str, str], dict[str, float]], applies: dict[str, list[str]],
                     weights: dict[str, float]) -> dict[str, float]:
    """Expected figures of a mixture: per scenario, a draw among the personas that act on it; scenarios equal."""
    tot = {"n": 0.0, "passed": 0.0, "full": 0.0, "pass_full": 0.0}
    modes: dict[str, float] = defaultdict(float)
    for sc, names in applies.items():
        names = [p for p in names if weights.get(p, 0.0) > 0]
        ws = sum(weights[p] for p in names)
        if ws <= 0:
            # No weighted persona acts here: the calibrated agent falls back to the expert (make_calibrated), so
            # the scenario still counts; skipping it let a persona that acts on few tasks win the whole fit.
            if ("expert", sc) not in table:
                continue
            names, weights, ws = ["expert"], {**weights, "expert": 1.0}, 1.0
        for p in names:
            row = table[(p, sc)]
            share = weights[p] / ws
            tot["n"] += share
            for k in ("passed", "full", "pass_full"):
                tot[k] += share * row[k]
            for m in MODES:
                modes[m] += share * row[m]
    return _rates(tot["n"], tot["passed"], tot["full"], tot["pass_full"], modes)


def _loss(fig: dict[str, float]) -> float:
    return sum(((fig[k] - PAPER[k]) * 100) ** 2 if not math.isnan(fig[k]) else 1e4 for k in FIGURES)


def fit_weights(table: dict[tuple[str, str], dict[str, float]], applies: dict[str, list[str]],
                personas: list[str], restarts: int = 12, seed: int = 0) -> tuple[dict[str, float], float]:
    """Minimise the squared pp error over the figures: coordinate search on log-weights, several restarts."""
    rng = random.Random(seed)
    best_w: dict[str, float] = {}
    best = math.inf
    for r in range(restarts):
        z = {p: (0.0 if r == 0 else rng.gauss(0, 1)) for p in personas}

        def weights(z: dict[str, float]) -> dict[str, float]:
            m = max(z.values())
            e = {p: math.exp(v - m) for p, v in z.items()}
            s = sum(e.values())
            # At the precision calibrated.yaml keeps: the fit scores the mixture the agent will draw from, in
            # which a weight that rounds to 0 is gone (and a scenario none of the rest act on gets the expert).
            return {p: round(v / s, WEIGHT_DIGITS) for p, v in e.items()}

        cur = _loss(_mixture_figures(table, applies, weights(z)))
        step = 1.0
        while step > 1e-3:
            improved = False
            for p in personas:
                for d in (step, -step):
                    z2 = dict(z)
                    z2[p] += d
                    l2 = _loss(_mixture_figures(table, applies, weights(z2)))
                    if l2 < cur - 1e-9:
                        z, cur, improved = z2, l2, True
            if not improved:
                step /= 2
        if cur < best:
            best, best_w = cur, weights(z)
    return best_w, best


# -- the script ----------------------------------------------------------------------------------------------------

def _table(recs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, float]]:
    acc: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in recs:
        acc[(r["agent"].removeprefix("persona:"), r["scenario"])].append(r)
    out = {}
    for key, rs in acc.items():
        n = len(rs)
        row = {"passed": sum(r["passed"] for r in rs) / n, "full": sum(r["full_fix"] for r in rs) / n,
               "pass_full": sum(r["passed"] and r["full_fix"] for r in rs) / n}
        for m in MODES:
            row[m] = sum((not r["passed"]) and r["failure_mode"] == m for r in rs) / n
        out[key] = row
    return out


def _print_figures(title: str, fig: dict[str, float], out=sys.stdout) -> None:
    print(f"\n{title}", file=out)
    print(f"  {'figure':24} {'measured':>9} {'paper':>7} {'diff pp':>8}", file=out)
    for k in FIGURES:
        d = (fig[k] - PAPER[k]) * 100
        flag = "" if abs(d) <= 4 else "  (outside ±4 pp)"
        print(f"  {k:24} {fig[k] * 100:8.1f}% {PAPER[k] * 100:6.1f}% {d:+8.1f}{flag}", file=out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=4, help="seeds per persona and scenario for the fit")
    ap.add_argument("--verify-seeds", type=int, default=10, help="seeds per scenario for the calibrated check")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="calibrated.yaml to write (default: the shipped one)")
    ap.add_argument("--dry-run", action="store_true", help="fit and print, write nothing")
    a = ap.parse_args(argv)

    from arena.agents.blocks import derive_blocks
    from arena.agents.calibrated import CALIBRATED_FILE, Mixture
    from arena.agents.persona import acts_on, load_personas

    t0 = time.perf_counter()
    scenarios, skipped = _loadable()
    for i, why in skipped.items():
        print(f"skipped {i}: {why}", file=sys.stderr)
    cat = load_personas()
    personas = [p for p in ARCHETYPES if p in cat]
    applies: dict[str, list[str]] = {}
    jobs = []
    for sc in scenarios:
        b = derive_blocks(sc)
        applies[sc.id] = [p for p in personas if acts_on(cat[p], b)]
        jobs += [(sc.id, f"persona:{p}", s, None) for p in applies[sc.id] for s in range(a.seeds)]
    print(f"fit: {len(jobs)} unguarded episodes ({len(personas)} personas x {len(scenarios)} scenarios x "
          f"{a.seeds} seeds, where the persona acts)", file=sys.stderr)
    table = _table(_ok(_map(jobs, a.jobs)))
    applies = {sc: [p for p in ps if (p, sc) in table] for sc, ps in applies.items()}
    weights, loss = fit_weights(table, applies, personas)
    expected = _mixture_figures(table, applies, weights)
    print("\nweights: " + ", ".join(f"{p}={w:.3f}" for p, w in sorted(weights.items(), key=lambda x: -x[1])))
    _print_figures("expected from the per-persona table", expected)

    mix = Mixture(weights={p: round(w, WEIGHT_DIGITS) for p, w in weights.items()})
    target = Path(a.out or CALIBRATED_FILE)
    doc: dict[str, Any] = {"weights": mix.weights, "responsiveness": mix.responsiveness}
    vjobs = [(sc.id, "calibrated", 1000 + s, {"mixture": mix}) for sc in scenarios for s in range(a.verify_seeds)]
    vrecs = _ok(_map(vjobs, a.jobs))
    measured = paper_figures(vrecs)
    _print_figures(f"measured: calibrated, unguarded, {len(vrecs)} episodes (seeds 1000..)", measured)
    worst = max(abs(measured[k] - PAPER[k]) * 100 for k in FIGURES)
    doc["fit"] = {
        "scenarios": [sc.id for sc in scenarios], "skipped": sorted(skipped),
        "fit_seeds": a.seeds, "verify_seeds": a.verify_seeds, "fit_loss_pp2": round(loss, 2),
        "expected": {k: round(v, 4) for k, v in expected.items()},
        "measured": {k: round(v, 4) for k, v in measured.items()},
        "paper": PAPER, "worst_abs_diff_pp": round(worst, 2),
        "persona_episodes": dict(Counter(r["persona"] for r in vrecs)),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    if a.dry_run:
        return 0
    target.write_text("# Written by `python -m arena.agents.calibrate`; see docs/calibration.md.\n"
                      + yaml.safe_dump(doc, sort_keys=False))
    print(f"\nworst |diff| {worst:.1f} pp; wrote {target} in {doc['fit']['wall_s']} s")
    print(json.dumps(doc["fit"]["persona_episodes"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
