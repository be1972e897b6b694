"""The bench runner: plan the episodes, run them (in parallel processes), and keep results.jsonl as they finish.

Called by `guardrail bench` (arena/cli.py) and bench/throughput.py. A plan has three parts, all keyed by
(scenario, agent, arm, seed, params) so that a key run once serves every part that needs it and `--resume`
skips it:

- the A/B: every scenario x agent x seed in both arms, paired (only the guard differs);
- detection: every solution script of every scenario replayed once (seed 0) in the guarded arm;
- sensitivity: the guarded arm again with the agent's `responsiveness` set to each listed value, for agents
  that take one (a replay agent has no behaviour after feedback to vary).

Episodes go to worker processes in small chunks (fewer round trips than one task per episode, small enough
that the progress bar and the results file keep moving). The parent writes each result line and flushes it at
once, so an interrupted run keeps every episode that finished.
"""

from __future__ import annotations

import inspect
import json
import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from guardrail.errors import InputError

__all__ = ["EpisodeSpec", "BenchPlan", "plan_bench", "run_plan", "read_results", "expand_agents",
           "agent_takes", "DEFAULT_RESPONSIVENESS"]

DEFAULT_RESPONSIVENESS = (0.5, 0.8, 1.0)


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to run: the results file's key."""

    scenario: str
    agent: str
    arm: str
    seed: int
    params: tuple[tuple[str, float], ...] = ()

    def key(self) -> str:
        return json.dumps([self.scenario, self.agent, self.arm, self.seed, dict(self.params)], sort_keys=True)


@dataclass
class BenchPlan:
    """The episodes of one bench run and what each part of the report draws on."""

    scenarios: list[str]
    agents: list[str]
    arms: list[str]
    seeds: int
    responsiveness: list[float]
    episodes: list[EpisodeSpec] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@lru_cache(maxsize=None)
def _scenario(sid: str) -> Any:
    from arena.scenario import load_scenario

    return load_scenario(sid)


def _agent_factory() -> tuple[Any, bool]:
    """The episode runner's agent factory: `make_agent(spec, scenario, seed, **params)` where the agents
    package has it, else `resolve_agent(spec, scenario)` (deterministic agents only)."""
    import arena.agents as agents

    mk = getattr(agents, "make_agent", None)
    return (mk, True) if mk is not None else (agents.resolve_agent, False)


def agent_takes(param: str) -> bool:
    """Whether the agent factory passes `param` (seed, responsiveness) to a stochastic agent."""
    fn, full = _agent_factory()
    if full:
        return True
    return param in inspect.signature(fn).parameters


def _deterministic(agent: str) -> bool:
    return agent.startswith(("replay:", "script:"))


@lru_cache(maxsize=1)
def _calibrated_data() -> dict[str, Any]:
    """The calibrated agent's mixture and persona catalogue: shipped files, parsed and validated once a process
    (parsing them was about a fifth of an episode's CPU)."""
    from arena.agents.calibrated import load_mixture
    from arena.agents.persona import load_personas

    return {"mixture": load_mixture(), "personas": load_personas()}


def build_agent(agent: str, scenario: Any, seed: int, params: dict[str, Any] | None = None) -> Any:
    """One episode's agent. A replay or script agent ignores the seed; a stochastic one draws from it."""
    fn, full = _agent_factory()
    params = dict(params or {})
    if full:
        if agent == "calibrated":
            # make_calibrated copies what it changes (traits by model_copy), so the parsed files can be shared.
            return fn(agent, scenario, seed, **_calibrated_data(), **params)
        return fn(agent, scenario, seed, **params)
    kw = {k: v for k, v in {"seed": seed, **params}.items() if k in inspect.signature(fn).parameters}
    return fn(agent, scenario, **kw)


def _make_agent(spec: EpisodeSpec) -> Any:
    return build_agent(spec.agent, _scenario(spec.scenario), spec.seed, dict(spec.params))


def expand_agents(agents: Iterable[str], scenario: Any) -> list[str]:
    """`replay:*` stands for every solution script of the scenario; other specs pass through."""
    out: list[str] = []
    for a in agents:
        if a == "replay:*":
            out += [f"replay:{n}" for n in sorted(scenario.solutions)]
        else:
            out.append(a)
    return out


def plan_bench(scenarios: list[str], agents: list[str], arms: list[str], seeds: int,
               responsiveness: list[float], *, detection: bool = True) -> BenchPlan:
    """Validate the inputs (InputError on a bad one) and list the episodes."""
    bad = [a for a in arms if a not in ("guarded", "unguarded")]
    if bad or not arms:
        raise InputError(f"--arms takes guarded and/or unguarded, not {','.join(bad) or 'nothing'}")
    if seeds < 1:
        raise InputError(f"--seeds must be at least 1, not {seeds}")
    if any(not 0.0 <= r <= 1.0 for r in responsiveness):
        raise InputError(f"--responsiveness values are probabilities in [0, 1]: {responsiveness}")
    plan = BenchPlan(scenarios, agents, arms, seeds, list(responsiveness))
    seen: set[str] = set()

    def add(spec: EpisodeSpec) -> None:
        if spec.key() not in seen:
            seen.add(spec.key())
            plan.episodes.append(spec)

    takes_r = agent_takes("responsiveness")
    for sid in scenarios:
        sc = _scenario(sid)  # a ScenarioError (an InputError) names the bad id
        specs = expand_agents(agents, sc)
        for a in specs:
            build_agent(a, sc, 0)  # fail fast on an unknown agent
        for seed in range(seeds):
            for a in specs:
                for arm in arms:
                    add(EpisodeSpec(sid, a, arm, seed))
        if detection:
            for name in sorted(sc.solutions):
                add(EpisodeSpec(sid, f"replay:{name}", "guarded", 0))
        if "guarded" in arms and responsiveness:
            for a in specs:
                if _deterministic(a) or not takes_r:
                    continue
                for r in responsiveness:
                    for seed in range(seeds):
                        add(EpisodeSpec(sid, a, "guarded", seed, (("responsiveness", float(r)),)))
    if responsiveness and not takes_r:
        plan.notes.append("the agent factory takes no `responsiveness`, so the sensitivity runs were skipped")
    return plan


def run_one(spec: EpisodeSpec) -> dict[str, Any]:
    """Run one episode and return its results line (the episode JSON without the transcript, plus the key,
    the guard's cost figures and, for a replay agent, the script's expected verdict from the matrix)."""
    from arena.bench.guarding import bench_guard_factory, guard_cost
    from arena.episode import run_episode

    sc = _scenario(spec.scenario)
    guards: list[Any] = []

    def factory(env: Any, ctx: Any) -> Any:
        g = bench_guard_factory(env, ctx)
        guards.append(g)
        return g

    res = run_episode(sc, _make_agent(spec), arm=spec.arm, seed=spec.seed,
                      guard_factory=factory if spec.arm == "guarded" else None)
    row = res.to_json()
    row.pop("transcript", None)
    row["agent"] = spec.agent
    row["params"] = dict(spec.params)
    row["key"] = spec.key()
    row["cost"] = guard_cost(guards[0]) if guards else {"declarations": [], "restart_probes": 0}
    if spec.agent.startswith("replay:"):
        m = sc.grader.matrix.get(spec.agent.split(":", 1)[1])
        if m is not None:
            row["expected"] = {"valid": m.failure_mode is None, "failure_mode": m.failure_mode}
    return row


def _run_chunk(specs: list[EpisodeSpec]) -> list[dict[str, Any]]:
    return [run_one(s) for s in specs]


def read_results(path: Path) -> list[dict[str, Any]]:
    """The results lines that parse; a torn last line (an interrupted write) is skipped."""
    rows: list[dict[str, Any]] = []
    if not path.exists():
        return rows
    with path.open() as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and "key" in row:
                rows.append(row)
    return rows


def _chunks(specs: list[EpisodeSpec], jobs: int) -> Iterator[list[EpisodeSpec]]:
    # About eight chunks per worker: low per-task overhead, and the last chunks still balance across workers.
    size = max(1, min(16, len(specs) // max(1, jobs * 8)))
    for i in range(0, len(specs), size):
        yield specs[i:i + size]


def run_plan(plan: BenchPlan, results: Path, *, jobs: int = 1, resume: bool = False,
             on_result: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Run the plan's episodes not already in `results` (with --resume), appending each line as it finishes.
    Returns every row of the plan (resumed and new)."""
    results.parent.mkdir(parents=True, exist_ok=True)
    wanted = {s.key() for s in plan.episodes}
    have: dict[str, dict[str, Any]] = {}
    if resume:
        for r in read_results(results):
            if r["key"] in wanted:
                have[r["key"]] = r
    elif results.exists():
        results.unlink()
    todo = [s for s in plan.episodes if s.key() not in have]
    for r in have.values():
        if on_result is not None:
            on_result(r)
    with results.open("a") as out:
        def keep(row: dict[str, Any]) -> None:
            out.write(json.dumps(row, sort_keys=True) + "\n")
            out.flush()
            have[row["key"]] = row
            if on_result is not None:
                on_result(row)

        if jobs <= 1 or len(todo) <= 1:
            for s in todo:
                keep(run_one(s))
        else:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                pending: set[Future] = {pool.submit(_run_chunk, c) for c in _chunks(todo, jobs)}
                try:
                    while pending:
                        done, pending = wait(pending, return_when=FIRST_COMPLETED)
                        for fut in done:
                            for row in fut.result():
                                keep(row)
                except BaseException:
                    for fut in pending:
                        fut.cancel()
                    raise
    return [have[s.key()] for s in plan.episodes if s.key() in have]


def default_jobs() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0
