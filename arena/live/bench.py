"""Twin/live agreement per solution script: `guardrail bench --env live`.

For every scenario with live wiring (`arena/live/incidents/<id>.yaml`) and every agent asked for (by default
each solution script, `replay:*`), it runs the episode on the twin and on a fresh live stack
(`arena.live.world.run_live_episode`) in the same arm, and compares (outcome, safety, failure mode). Any
disagreement is a finding about the twin or the live wiring, to be fixed there, never in the table. Live
episodes run `jobs` at a time, each on its own stack. Writes `results.jsonl` (one row per episode pair, both
episodes' JSON) and `agreement.json` in the out directory. Called by `arena.cli.bench`; outside CI (about two
minutes per live episode).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from arena.live.replay import INCIDENTS_DIR
from guardrail.fileio import write_atomic

__all__ = ["live_scenarios", "plan_live", "run_live_agreement", "check_agents", "verdict_of"]


def live_scenarios() -> list[str]:
    """The scenarios with live wiring."""
    return sorted(p.stem for p in INCIDENTS_DIR.glob("*.yaml"))


def verdict_of(episode: dict[str, Any]) -> dict[str, Any]:
    return {"outcome": "pass" if episode["outcome_gate"]["pass"] else "fail",
            "safety": "pass" if episode["safety_gate"]["pass"] else "fail",
            "failure_mode": episode["failure_mode"]}


def plan_live(scenario_ids: list[str], agents: list[str], arms: list[str]) -> list[tuple[str, str, str]]:
    from arena.scenario import load_scenario

    plan = []
    for sid in scenario_ids:
        sc = load_scenario(sid)
        for spec in agents:
            specs = [f"replay:{n}" for n in sorted(sc.solutions)] if spec == "replay:*" else [spec]
            plan += [(sid, s, arm) for s in specs for arm in arms]
    return plan


def _pair(sid: str, spec: str, arm: str, seed: int, guard_factory: Callable | None) -> dict[str, Any]:
    from arena.agents import make_agent
    from arena.episode import run_episode
    from arena.live.world import run_live_episode
    from arena.scenario import load_scenario

    sc = load_scenario(sid)
    factory = guard_factory if arm == "guarded" else None
    twin = run_episode(sc, make_agent(spec, sc, seed), arm=arm, seed=seed, guard_factory=factory).to_json()
    row: dict[str, Any] = {"scenario": sid, "agent": spec, "arm": arm, "seed": seed, "twin": verdict_of(twin)}
    try:
        live = run_live_episode(sc, make_agent(spec, sc, seed), arm=arm, seed=seed, guard_factory=factory).to_json()
    except Exception as e:  # noqa: BLE001 - one stack that does not come up is a row, not the end of the table
        row.update(live=None, agree=False, error=f"{type(e).__name__}: {e}"[:500])
        return row
    row["live"] = verdict_of(live)
    row["agree"] = row["live"] == row["twin"]
    row["live_failed_checks"] = [c["id"] for g in ("outcome_gate", "safety_gate") for c in live[g]["checks"]
                                 if not c["pass"]]
    row["twin_failed_checks"] = [c["id"] for g in ("outcome_gate", "safety_gate") for c in twin[g]["checks"]
                                 if not c["pass"]]
    row["episodes"] = {"twin": twin, "live": live}
    return row


def run_live_agreement(plan: list[tuple[str, str, str]], out_dir: Path, *, seed: int = 0, jobs: int = 1,
                       guard_factory: Callable | None = None,
                       on_row: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Run every pair, `jobs` live stacks at a time. Rows go to `results.jsonl.partial` as they finish and become
    `results.jsonl` (with `agreement.json`) only when every pair has: an earlier run's results stay until then.
    On an interrupt (or any error) no queued pair starts, the running stacks stop, and the exception propagates
    with the finished rows kept in the .partial file."""
    from arena.live.stack import STOPPING, stop_running_stacks

    out_dir.mkdir(parents=True, exist_ok=True)
    partial = out_dir / "results.jsonl.partial"
    rows: list[dict[str, Any]] = []
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        with open(partial, "w") as f:
            futures = [pool.submit(_pair, sid, spec, arm, seed, guard_factory) for sid, spec, arm in plan]
            for fut in futures:
                row = fut.result()
                rows.append(row)
                f.write(json.dumps(row) + "\n")
                f.flush()
                if on_row is not None:
                    on_row(row)
    except BaseException:
        STOPPING.set()
        pool.shutdown(wait=False, cancel_futures=True)
        stop_running_stacks()
        raise
    pool.shutdown(wait=True)
    summary = {"episodes": len(rows), "agree": sum(1 for r in rows if r["agree"]),
               "rows": [{k: v for k, v in r.items() if k != "episodes"} for r in rows]}
    from arena.bench.publish import RunPublication

    pub = RunPublication(out_dir)  # agreement.json and results.jsonl move in together
    try:
        write_atomic(pub.dir / "agreement.json", json.dumps(summary, indent=2) + "\n")
        pub.adopt(partial, "results.jsonl")
        pub.commit()
    finally:
        pub.discard()
    return rows


def check_agents(plan: list[tuple[str, str, str]]) -> None:
    """Every agent spec of the plan resolves for its scenario (InputError otherwise), before any stack starts."""
    from arena.agents import make_agent
    from arena.scenario import load_scenario

    for sid, spec in sorted({(sid, spec) for sid, spec, _ in plan}):
        make_agent(spec, load_scenario(sid), 0)
