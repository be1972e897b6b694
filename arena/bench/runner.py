"""The bench runner: plan the episodes, run them (in parallel processes), and keep results.jsonl as they finish.

Called by `guardrail bench` (arena/cli.py) and bench/throughput.py. A plan has three parts, all keyed by
(scenario, agent, arm, seed, params) so that a key run once serves every part that needs it and `--resume`
skips it:

- the A/B: every scenario x agent x seed in both arms, paired (only the guard differs);
- detection: every solution script of every scenario replayed once (seed 0) in the guarded arm;
- sensitivity: the guarded arm again with the agent's `responsiveness` set to each listed value, for agents
  that take one (a replay agent has no behaviour after feedback to vary).

Episodes go to worker processes in small chunks (fewer round trips than one task per episode, small enough
that the progress bar and the results file keep moving). The parent writes each result line to
`results.jsonl.partial` and flushes it at once, so an interrupted run keeps every episode that finished; the
partial file replaces `results.jsonl` only when the run completes, so an earlier run's results are never lost to
a run that did not finish. `--resume` reads the partial file, or `results.jsonl` when there is none
(docs/bench.md). SIGINT and SIGTERM stop the workers (a
worker also dies with its parent: PR_SET_PDEATHSIG) and leave only whole lines behind.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from guardrail.errors import InputError
from guardrail.fileio import ensure_writable_dir, write_atomic

__all__ = ["EpisodeSpec", "BenchPlan", "plan_bench", "run_plan", "read_results", "expand_agents",
           "agent_takes", "DEFAULT_RESPONSIVENESS", "FEEDBACK_ONLY", "MAX_SEEDS", "max_jobs", "check_jobs",
           "partial_path", "prepare_out", "Terminated", "sigterm_raises"]

# 0 is the row that assumes nothing about the agent: it never acts on feedback (the guard still holds, denies and
# rejects). Above 0, a persona that acts on a repair code makes the reference fix's missing changes: the model knows
# the fix once told something is wrong, which the feedback itself does not say (see docs/bench.md).
DEFAULT_RESPONSIVENESS = (0.0, 0.5, 0.8, 1.0)
# One more sensitivity row: an agent that always acts on feedback but knows only what the feedback says (the missing
# changes of keys a message names), not the rest of the reference fix.
FEEDBACK_ONLY = (("fix_from_feedback", 0.0), ("responsiveness", 1.0))
MAX_SEEDS = 10_000  # 20 scenarios x 10,000 seeds is already a million episodes; more is a typo
MAX_JOBS = 256


def max_jobs() -> int:
    """The most worker processes `--jobs` takes: four per CPU, at most 256."""
    return min(MAX_JOBS, 4 * (os.cpu_count() or 1))


def check_jobs(jobs: int) -> None:
    if not 1 <= jobs <= max_jobs():
        raise InputError(f"takes 1 to {max_jobs()} (4 per CPU, at most {MAX_JOBS}), not {jobs}", path="--jobs")


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


def default_params(agent: str) -> dict[str, float]:
    """The parameters an agent runs with when the bench sets none (the calibrated agent's responsiveness): a
    sensitivity run at these values is the A/B guarded episode itself, and is not run twice."""
    if agent == "calibrated" and _agent_factory()[1]:
        return {"responsiveness": float(_calibrated_data()["mixture"].responsiveness)}
    return {}


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
        raise InputError(f"takes guarded and/or unguarded, not {','.join(bad) or 'nothing'}", path="--arms")
    if not 1 <= seeds <= MAX_SEEDS:
        raise InputError(f"takes 1 to {MAX_SEEDS} seeds, not {seeds}", path="--seeds")
    if any(not 0.0 <= r <= 1.0 for r in responsiveness):
        raise InputError(f"values are probabilities in [0, 1]: {responsiveness}", path="--responsiveness")
    plan = BenchPlan(scenarios, agents, arms, seeds, list(responsiveness))
    seen: set[str] = set()

    def add(spec: EpisodeSpec) -> None:
        if spec.key() not in seen:
            seen.add(spec.key())
            plan.episodes.append(spec)

    takes_r = agent_takes("responsiveness")
    takes_ff = takes_r and agent_takes("fix_from_feedback")
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
                    if default_params(a).get("responsiveness") == float(r):
                        continue  # the A/B guarded episodes above are this row (summarise reads them for it)
                    for seed in range(seeds):
                        add(EpisodeSpec(sid, a, "guarded", seed, (("responsiveness", float(r)),)))
                if takes_ff:
                    for seed in range(seeds):
                        add(EpisodeSpec(sid, a, "guarded", seed, FEEDBACK_ONLY))
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


class ResultRows(list):
    """read_results' rows, plus what it skipped: `bad` (line number, why) and `torn` (bytes of a last line cut
    off mid-write)."""

    def __init__(self) -> None:
        super().__init__()
        self.bad: list[tuple[int, str]] = []
        self.torn = 0


def read_results(path: Path) -> ResultRows:
    """The results lines that parse. A torn last line (an interrupted write: no newline, not JSON) is skipped and
    counted in `.torn`; any other line that is not UTF-8 JSON with a `key` is skipped and listed in `.bad`."""
    rows = ResultRows()
    seen: dict[str, int] = {}
    if not path.exists():
        return rows
    with path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                if not raw.endswith(b"\n"):
                    rows.torn = len(raw)
                else:
                    rows.bad.append((n, "not UTF-8" if isinstance(e, UnicodeDecodeError) else "not JSON"))
                continue
            problem = _row_problem(row)
            if problem is None and row["key"] in seen:
                problem = f"a second row for the key of line {seen[row['key']]}"
            if problem is None:
                seen[row["key"]] = n
                rows.append(row)
            else:
                rows.bad.append((n, problem))
    return rows


def not_a_verdict(row: Mapping[str, Any]) -> str | None:
    """Why an episode's row is no verdict on the agent or the guard (its chat API failed), or None."""
    detail = row.get("agent_detail")
    stop = str(detail.get("stop_reason") or "") if isinstance(detail, Mapping) else ""
    return stop if stop.startswith("chat_error") else None


def _row_problem(row: Any) -> str | None:
    """Why a parsed line is not a results row the report can use (None: it is one): a row whose key does not
    parse or disagrees with its own scenario/agent/arm/seed, or whose `passed` is not true or false, would be
    reused for the wrong episode or break the statistics."""
    if not isinstance(row, dict) or not isinstance(row.get("key"), str):
        return "not a results row (no string key)"
    try:
        scenario, agent, arm, seed, _params = json.loads(row["key"])
    except (ValueError, TypeError):
        pass  # a key this build does not make: no episode of this plan will reuse the row
    else:
        for name, want in (("scenario", scenario), ("agent", agent), ("arm", arm), ("seed", seed)):
            if name in row and row[name] != want:
                return f"its {name} {row[name]!r} disagrees with its key ({want!r})"
    if not isinstance(row.get("passed"), bool):
        return f"passed is {row.get('passed')!r}, not true or false"
    if not_a_verdict(row):
        return "the agent's chat API failed in it (not a verdict)"
    return None


def partial_path(results: Path) -> Path:
    """Where a run writes its rows until it completes: `results.jsonl.partial` beside `results.jsonl`."""
    return results.with_name(results.name + ".partial")


def out_error(e: OSError, out_dir: Path) -> InputError:
    """An OSError on the output directory as the CLI's one line: `--out: <path>: <reason>`."""
    return InputError(e.strerror or str(e), path=f"--out: {e.filename or out_dir}")


# What a run writes in --out, and whether each is a file (False: a directory). One of them in the way (a directory
# where a file goes) would fail the run only after every episode, with the results already replaced.
OUT_ENTRIES = {"results.jsonl": True, "results.jsonl.partial": True, "summary.json": True, "report.md": True,
               "report.html": True, "agreement.json": True, "plots": False}


def prepare_out(out_dir: Path) -> None:
    """Create the output directory and check a file can be created in it and that nothing a run writes there is
    in the way, before any episode runs (InputError naming --out otherwise)."""
    try:
        ensure_writable_dir(out_dir)
    except OSError as e:
        raise out_error(e, out_dir) from e
    for name, is_file in OUT_ENTRIES.items():
        p = out_dir / name
        if p.exists() and p.is_dir() == is_file:
            raise InputError("is a directory" if is_file else "is not a directory", path=f"--out: {p}")


# Held (flock) by the run that writes an --out directory: two runs into one directory replaced each other's
# results.jsonl.partial, and the first lost every episode when it came to finish. The run removes it when it ends.
LOCK_NAME = ".guardrail-bench.lock"


@contextlib.contextmanager
def out_locked(out_dir: Path, *, on_note: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold --out for this run; InputError naming --out (and the other run's pid) when another run holds it.

    The lock is an flock on `.guardrail-bench.lock`, which the run removes when it ends, however it ends (a
    SIGTERM must have been made an exception: sigterm_raises). A file a killed run left holds no lock (the
    kernel drops a dead process's flock): the next run takes it over and `on_note` says so."""
    import fcntl

    path = out_dir / LOCK_NAME
    while True:
        try:
            f = open(path, "a+")
        except OSError as e:
            raise out_error(e, out_dir) from e
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            holder = f.read().strip() or "?"
            f.close()
            raise InputError(f"is in use by another run (pid {holder}); give this one another --out, or wait",
                             path=f"--out: {out_dir}") from None
        # The run that held it may have removed the file between our open and our flock (and a third run made a
        # new one): a lock on a file no longer at the path protects nothing, so take the one that is there.
        try:
            if os.stat(path).st_ino == os.fstat(f.fileno()).st_ino:
                break
        except FileNotFoundError:
            pass
        f.close()
    with f:
        f.seek(0)
        left_by = f.read().strip()
        if left_by and on_note is not None:
            on_note(f"note: --out {out_dir}: taking over the lock file left by run pid {left_by}, which is no "
                    "longer running (it was killed, or made by a version that kept the file)")
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                if os.stat(path).st_ino == os.fstat(f.fileno()).st_ino:
                    os.unlink(path)  # still holding the lock: no other run can be using this file


class Terminated(SystemExit):
    """SIGTERM, raised in the main thread so the pool is shut down and `finally` blocks run; uncaught it exits
    128 + the signal number (143), like the signal itself."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(128 + signum)
        self.signum = signum


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """While inside: SIGTERM raises Terminated in the main thread (elsewhere it does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: Any) -> None:
        raise Terminated(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _worker_init(parent: int, forked: bool) -> None:
    """In each worker: Ctrl-C is the parent's to handle (it terminates the pool), SIGTERM kills at once (not the
    parent's handler, inherited by fork), and the worker gets SIGKILL when the parent dies, however it dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    if forked and os.getppid() != parent:  # the parent died before the line above (forkserver: not our parent)
        os._exit(1)


def _interleaved(specs: list[EpisodeSpec]) -> list[EpisodeSpec]:
    """The episodes taken in turn from each (scenario, agent, arm), in the plan's order within each: an episode of
    every kind finishes early, so the time estimate (arena.bench.eta) knows each kind's cost from the start rather
    than meeting a slow scenario's at the end. The results do not depend on the order (each episode is seeded)."""
    groups: dict[tuple[str, str, str], list[EpisodeSpec]] = {}
    for spec in specs:
        groups.setdefault((spec.scenario, spec.agent, spec.arm), []).append(spec)
    queues = [iter(g) for g in groups.values()]
    out: list[EpisodeSpec] = []
    while queues:
        alive = []
        for q in queues:
            spec = next(q, None)
            if spec is not None:
                out.append(spec)
                alive.append(q)
        queues = alive
    return out


def _chunks(specs: list[EpisodeSpec], jobs: int) -> Iterator[list[EpisodeSpec]]:
    # About eight chunks per worker: low per-task overhead, and the last chunks still balance across workers.
    size = max(1, min(16, len(specs) // max(1, jobs * 8)))
    for i in range(0, len(specs), size):
        yield specs[i:i + size]


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and terminate the workers (shutdown alone waits for running chunks)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        with contextlib.suppress(Exception):
            p.terminate()
    deadline = time.monotonic() + 5
    for p in procs:
        with contextlib.suppress(Exception):
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(1)


def _run_parallel(todo: list[EpisodeSpec], workers: int, keep: Callable[[dict[str, Any]], None]) -> None:
    import multiprocessing

    forked = multiprocessing.get_start_method() == "fork"  # 3.14 defaults to forkserver on Linux
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_worker_init, initargs=(os.getpid(), forked))
    try:
        pending: set[Future] = {pool.submit(_run_chunk, c) for c in _chunks(todo, workers)}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                for row in fut.result():
                    keep(row)
    except BaseException:
        _stop_pool(pool)
        raise
    pool.shutdown(wait=True)


def run_plan(plan: BenchPlan, results: Path, *, jobs: int = 1, resume: bool = False,
             on_result: Callable[[dict[str, Any]], None] | None = None,
             on_warning: Callable[[str], None] | None = None,
             counts: dict[str, int] | None = None,
             on_reused: Callable[[dict[str, Any]], None] | None = None,
             keep_partial: bool = False) -> list[dict[str, Any]]:
    """Run the plan's episodes and return every row of the plan (resumed and new). `counts`, when given, is
    filled with how many episodes were `run`, how many `reused` from the earlier file, and how many rows it carries
    from `outside` the plan (an earlier run's other scenarios or seeds, kept in results.jsonl).

    Rows go to `results.jsonl.partial` as they finish; it replaces `results` when the run completes. Without
    `resume` the run starts afresh (an earlier `results` stays until then). With `resume` the rows of the partial
    file an interrupted run left (or, when there is none, of `results`) are carried into the new file and only the
    missing episodes run; rows stamped with another `build` (arena.bench.build.build_id) are not carried, with a
    warning: the plan's episodes among them run again. At most min(jobs, episodes to run) worker processes.
    SIGTERM raises Terminated (see sigterm_raises); on it or on KeyboardInterrupt the workers are terminated, the
    partial file is left holding whole lines, and the exception propagates. An OSError on the files is an
    InputError naming --out. `on_result` gets every row of the plan as it is kept, the resumed ones first;
    `on_reused`, when given, gets the resumed ones instead (they took no time in this run). With `keep_partial` a
    completed run leaves its rows in the partial file (fsynced), for the caller to move in with the run's other
    files (arena.bench.publish), instead of replacing `results`."""
    from arena.bench.build import build_id

    warn = on_warning or (lambda msg: print(msg, file=sys.stderr))
    prepare_out(results.parent)
    partial = partial_path(results)
    wanted = {s.key() for s in plan.episodes}
    carried: dict[str, dict[str, Any]] = {}
    build = build_id()
    if resume:
        # An interrupted run's partial file holds everything that run had: the rows it carried (if it was itself
        # a --resume) and the ones it finished. Only without one does results.jsonl, a finished run, count: a
        # fresh run that was interrupted must not be topped up with the rows of the run it was replacing.
        for src in ((partial,) if partial.exists() else (results,)):
            try:
                rows = read_results(src)
            except OSError as e:
                raise out_error(e, results.parent) from e
            for n, why in rows.bad:
                warn(f"warning: {src}:{n}: {why}; skipped, its episode runs again")
            if rows.torn:
                try:
                    last = src.read_bytes().count(b"\n") + 1
                except OSError:
                    last = None
                where = f"{src}:{last}" if last else str(src)
                warn(f"warning: {where}: a torn last line ({rows.torn} bytes) from an interrupted write; skipped")
            # A row another build made (the guard, the twin, the policies or the scenarios have changed since) is
            # not carried: its episode runs again, so one report never mixes the verdicts of two versions.
            stale = [r for r in rows if r.get("build") != build]
            if stale:
                others = sorted({str(r.get("build") or "none recorded") for r in stale})
                rerun = sum(r["key"] in wanted for r in stale)
                dropped = len(stale) - rerun
                if not rerun:
                    fate = f"none is in this run, so {'it is' if dropped == 1 else 'all are'} dropped from the file"
                else:
                    fate = (f"the {rerun} of this run's episodes among them "
                            f"{'runs' if rerun == 1 else 'run'} again")
                    if dropped:
                        fate += f", the other {dropped} {'is' if dropped == 1 else 'are'} dropped from the file"
                warn(f"warning: {src}: {len(stale)} of {len(rows)} rows were made by another build of the guard, "
                     f"twin, policies or scenarios (build {', '.join(others[:3])}{', ...' if len(others) > 3 else ''}"
                     f"; this is {build}): {fate}")
            for r in rows:
                if r.get("build") == build:
                    carried[r["key"]] = r
    have = {k: r for k, r in carried.items() if k in wanted}
    todo = _interleaved([s for s in plan.episodes if s.key() not in have])
    if counts is not None:
        counts.update(run=len(todo), reused=len(have), outside=len(carried) - len(have))
    with sigterm_raises():
        try:
            # The new partial file starts with the carried rows (every earlier row, the plan's or not), in one
            # rename: an interruption here leaves the old partial file as it was.
            write_atomic(partial, "".join(json.dumps(r, sort_keys=True) + "\n" for r in carried.values()))
            out = partial.open("ab", buffering=0)  # unbuffered: a line is in the file when keep() returns
            whole = os.fstat(out.fileno()).st_size  # bytes of whole lines: what an interruption leaves
        except OSError as e:
            raise out_error(e, results.parent) from e

        def keep(row: dict[str, Any]) -> None:
            nonlocal whole
            row["build"] = build
            line = (json.dumps(row, sort_keys=True) + "\n").encode()
            try:
                view = memoryview(line)
                while view:
                    view = view[out.write(view) or 0:]
            except OSError as e:
                raise out_error(e, results.parent) from e
            whole += len(line)
            have[row["key"]] = row
            if on_result is not None:
                on_result(row)

        try:
            reused = on_reused or on_result
            for s in plan.episodes:
                if reused is not None and s.key() in have:
                    reused(have[s.key()])
            workers = min(jobs, len(todo))
            if workers <= 1:
                for s in todo:
                    keep(run_one(s))
            else:
                _run_parallel(todo, workers, keep)
        except BaseException:
            with contextlib.suppress(OSError):
                _truncate_to_whole_lines(out, whole)  # a line a signal cut off mid-write
            out.close()
            raise
        try:
            with out:
                os.fsync(out.fileno())
            if not keep_partial:
                os.replace(partial, results)
        except OSError as e:
            raise out_error(e, results.parent) from e
    return [have[s.key()] for s in plan.episodes if s.key() in have]


def _truncate_to_whole_lines(out: Any, whole: int) -> None:
    """Cut the file after its last newline: `whole` (the bytes keep() counted) is where to look from, but a signal
    can land after a line is written and before it is counted, so a newline further on still ends a whole line."""
    size = os.fstat(out.fileno()).st_size
    with open(out.fileno(), "rb", closefd=False) as f:
        f.seek(whole)
        tail = f.read(size - whole)
    out.truncate(whole + tail.rfind(b"\n") + 1)


def default_jobs() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0
