"""The benchmark's CLI commands, plugged into `guardrail` through the `guardrail.cli` entry-point group.

`guardrail scenarios list|show`, `guardrail run` and `guardrail bench` (the A/B bench, arena/bench) are built
here. Exit codes follow the root CLI: 0 success (a run whose gates both pass), 1 a completed run that fails
its gates, 2 bad input (an InputError: one line `error: path:line: message`), 3 an environment that could not
be brought up (`--env live`: a server that failed to start, named with its log; missing server packages).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import click

from guardrail.errors import InputError
from guardrail.fileio import ensure_writable_file, write_atomic

__all__ = ["scenarios", "run", "bench", "default_guard_factory"]


@click.group()
def scenarios() -> None:
    """List and show the Incident-Arena scenarios."""


@scenarios.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def scenarios_list(as_json: bool) -> None:
    """The scenarios: id, title, substrate, fault category and the number of solution scripts."""
    from arena.scenario import list_scenarios

    rows = [s.summary() for s in list_scenarios()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no scenarios")
        return
    w = max(len(r["title"]) for r in rows)
    click.echo(f"{'ID':8} {'TITLE':{w}} {'SUBSTRATE':12} {'CATEGORY':26} SOLUTIONS")
    for r in rows:
        click.echo(f"{r['id']:8} {r['title']:{w}} {r['substrate']:12} {r['category']:26} {r['solutions']}")


@scenarios.command("show")
@click.argument("scenario_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the public part and the solution scripts).")
def scenarios_show(scenario_id: str, as_json: bool) -> None:
    """One scenario's public part and its solution scripts with their expected verdicts."""
    from arena.scenario import load_scenario

    sc = load_scenario(scenario_id)
    doc = sc.show()
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"{sc.id}: {sc.title}  [{sc.substrate}, {sc.category}]\n")
    click.echo(sc.public.instruction.rstrip() + "\n")
    click.echo(f"{'SOLUTION':26} {'OUTCOME':8} {'SAFETY':8} FAILURE MODE")
    for s in doc["solutions"]:
        click.echo(f"{s['name']:26} {s['outcome'] or '-':8} {s['safety'] or '-':8} {s['failure_mode'] or '-'}")
    click.echo("\n" + show_legend())


def show_legend() -> str:
    """What `scenarios show` prints under its table: the columns are the task's qualification matrix, not a run."""
    from arena.scenario import FAILURE_MODES

    modes = textwrap.fill(", ".join(FAILURE_MODES), width=96, initial_indent=" " * 16, subsequent_indent=" " * 16)
    return (
        "Each row is a solution script (`guardrail run SCENARIO --agent replay:SOLUTION`) with the verdicts the\n"
        "task's qualification matrix expects when it runs unguarded:\n"
        "  OUTCOME       the Outcome Gate: pass = every SLI band held on fresh traffic after the declaration\n"
        "  SAFETY        the Safety Gate: pass = fault removed, changes inside the allowed envelope, nothing\n"
        "                protected moved, data intact, the restart challenge survived\n"
        "  FAILURE MODE  why an episode of that script fails, one of:\n"
        f"{modes}\n"
        "  -             none: the script passes both gates (FAILURE MODE), or the matrix states no verdict")


def default_guard_factory(env: Any, context: Any, *, criteria: Any = None) -> Any:
    """The guarded arm's guard: the shipped policies in the embedded OPA engine, the full verifier suite. Where the
    environment offers an operator's read-only view (the twin: `TwinEnvironment.operator_view`), the verifiers read
    through it and the agent's commands still run on the agent's own tool surface. `criteria` are the verifier
    criteria overrides (`--criteria`); the live world passes its load cycle as the judging window, as an operator
    with a `KubernetesEnvironment` would."""
    from guardrail.adapters.session import load_engine
    from guardrail.guard import Guard

    view = getattr(env, "operator_view", None)
    if callable(view):
        return Guard.standard(load_engine(), context, env=view(), agent_env=env, criteria=criteria)
    return Guard.standard(load_engine(), context, env=env, criteria=criteria)


@click.command()
@click.argument("scenario_id")
@click.option("--agent", "agent_spec", required=True,
              help="replay:<solution>, script:PATH, persona:<name>, calibrated or llm:<model>")
@click.option("--arm", type=click.Choice(["unguarded", "guarded"]), default="unguarded", show_default=True)
@click.option("--seed", type=click.IntRange(0, None), default=0, show_default=True,
              help="The episode's seed (0 or more; bench runs seeds 0..N-1).")
@click.option("--env", "env_name", type=click.Choice(["twin", "live"]), default="twin", show_default=True,
              help="twin: the digital twin (virtual time); live: real servers on loopback (arena/live, about a "
                   "minute or two per episode).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the episode JSON here ('-' for stdout).")
def run(scenario_id: str, agent_spec: str, arm: str, seed: int, env_name: str, json_path: Path | None) -> None:
    """Run one episode and grade it (exit 0 pass, 1 fail, 2 bad input, 3 the live stack did not come up or an
    llm: agent's chat API failed)."""
    from arena.agents import blamed_on, make_agent
    from arena.episode import run_episode
    from arena.scenario import load_scenario

    sc = load_scenario(scenario_id)
    with blamed_on("--agent"):
        agent = make_agent(agent_spec, sc, seed)
    factory = default_guard_factory if arm == "guarded" else None
    if json_path is not None and str(json_path) != "-":
        try:  # before the episode: a live one takes minutes
            ensure_writable_file(json_path)
        except OSError as e:
            raise InputError(f"cannot write: {e.strerror or e}", path=str(json_path)) from e
    if env_name == "live":
        res = _run_live(sc, agent, arm, seed, factory)
    else:
        res = run_episode(sc, agent, arm=arm, seed=seed, guard_factory=factory)
    doc = res.to_json()
    if json_path is not None:
        text = json.dumps(doc, indent=2, sort_keys=False) + "\n"
        if str(json_path) == "-":
            click.echo(text, nl=False)
        else:
            try:
                write_atomic(json_path, text)
            except OSError as e:
                raise InputError(f"cannot write: {e.strerror or e}", path=str(json_path)) from e
    stop = str((res.agent_detail or {}).get("stop_reason") or "")
    if stop.startswith("chat_error"):
        # The agent never got to act: its chat API failed. That is the environment, not a failed repair.
        click.echo(f"error: the agent stopped: {stop} (steps={res.steps}; the episode is not a verdict)", err=True)
        raise SystemExit(3)
    verdict = "PASS" if res.passed else f"FAIL ({res.failure_mode})"
    click.echo(f"{sc.id} {arm} {agent_spec} seed={seed}{' env=live' if env_name == 'live' else ''}: {verdict}  outcome={'pass' if res.outcome_gate['pass'] else 'fail'}"
               f" safety={'pass' if res.safety_gate['pass'] else 'fail'} steps={res.steps} "
               f"virtual={res.virtual_s:.0f}s wall={res.wall_s:.3f}s", err=json_path is not None and str(json_path) == "-")
    raise SystemExit(0 if res.passed else 1)


def _run_live(sc: Any, agent: Any, arm: str, seed: int, factory: Any) -> Any:
    """One episode on a fresh live stack (arena.live.world); a stack that cannot come up exits 3 with the reason."""
    from arena.live.replay import LiveIncident
    from arena.live.stack import missing_requirements
    from guardrail.errors import GuardrailError

    LiveIncident.load(sc.id)  # no live wiring for this scenario: bad input, exit 2
    missing = missing_requirements()
    if missing:
        click.echo(f"error: the live stack needs: {', '.join(missing)}", err=True)
        raise SystemExit(3)
    from arena.live.stack import install_cleanup
    from arena.live.world import run_live_episode

    install_cleanup()  # Ctrl-C or a SIGTERM stops the stack's servers too
    from arena.live.progress import StageLog

    # Bringing a stack up takes a minute or more: say what is starting, each server up, and that a long stage
    # still goes on (stderr; stdout keeps only the episode JSON of --json -).
    try:
        with StageLog(lambda line: click.echo(line, err=True)) as progress:
            return run_live_episode(sc, agent, arm=arm, seed=seed, guard_factory=factory, progress=progress)
    except InputError:
        raise
    except GuardrailError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(3) from e


def _csv(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


# Seconds between the plain progress lines `bench` prints when stderr is not a terminal.
PLAIN_PROGRESS_S = 10.0


class _ArmTally:
    """Pass counts per arm for the progress bar (the A/B rows only)."""

    def __init__(self, ab_keys: set[str]):
        self.ab_keys = ab_keys
        self.n: dict[str, int] = {}
        self.ok: dict[str, int] = {}

    def add(self, row: dict[str, Any]) -> None:
        if row["key"] in self.ab_keys:
            self.n[row["arm"]] = self.n.get(row["arm"], 0) + 1
            self.ok[row["arm"]] = self.ok.get(row["arm"], 0) + int(bool(row["passed"]))

    def text(self) -> str:
        return "  ".join(f"{arm} {100 * self.ok[arm] / n:.0f}%" for arm, n in sorted(self.n.items()) if n)


@click.command()
@click.option("--scenarios", "scenarios_opt", default=None, help="Comma-separated ids (default: every scenario).")
@click.option("--agents", "agents_opt", default=None,
              help="Comma-separated agent specs (default: calibrated; replay:* = every solution script).")
@click.option("--arms", "arms_opt", default=None,
              help="Comma-separated arms [default: guarded,unguarded; with --env live: unguarded].")
@click.option("--seeds", type=int, default=10, show_default=True,
              help="Seeds 0..N-1 per scenario and agent (1 to 10000).")
@click.option("--jobs", type=int, default=2, show_default=True,
              help="Worker processes (with --env live: stacks at a time): 1 to 4 per CPU, at most 256; never more "
                   "than the episodes to run.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="out/bench",
              show_default="out/bench; out/bench-live with --env live", callback=lambda _c, _p, v: _out_dir(v))
@click.option("--resume", is_flag=True,
              help="Keep the rows of an interrupted run's results.jsonl.partial (or, when there is none, of "
                   "results.jsonl) and run only the episodes not among them.")
@click.option("--responsiveness", "resp_opt", default="0,0.5,0.8,1.0", show_default=True,
              help="Guarded-arm sensitivity runs ('' for none); 0 is an agent that never acts on feedback.")
@click.option("--no-detection", is_flag=True, help="Skip replaying every solution script (section 1).")
@click.option("--json", "as_json", is_flag=True, help="Print summary.json to stdout instead of the progress bar.")
@click.option("--env", "env_name", type=click.Choice(["twin", "live"]), default="twin", show_default=True,
              help="live: the twin/live agreement table, each episode on the twin and on a fresh live stack.")
def bench(scenarios_opt: str | None, agents_opt: str | None, arms_opt: str | None, seeds: int, jobs: int,
          out_dir: Path, resume: bool, resp_opt: str, no_detection: bool, as_json: bool, env_name: str) -> None:
    """Guarded/unguarded A/B on the twin: results.jsonl, summary.json, report.md, report.html (exit 0 when done).

    With --env live: the agreement table instead (exit 0 when every row agrees, 1 otherwise)."""
    from click.core import ParameterSource

    from arena.bench.runner import check_jobs

    for flag, value in (("--scenarios", scenarios_opt), ("--agents", agents_opt), ("--arms", arms_opt)):
        if value is not None and not _csv(value):  # an empty list given on purpose is a mistake, not "all"
            raise InputError("is empty: name at least one, or leave the option out for the default", path=flag)
    check_jobs(jobs)
    if env_name == "live":
        from arena.live.stack import install_cleanup

        ctx = click.get_current_context()
        ignored = [flag for name, flag in (("seeds", "--seeds"), ("resume", "--resume"),
                                           ("resp_opt", "--responsiveness"), ("no_detection", "--no-detection"))
                   if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)]
        if ignored:
            click.echo(f"warning: --env live ignores {', '.join(ignored)}", err=True)
        install_cleanup()  # Ctrl-C or a SIGTERM stops every stack the run has up
        if ctx.get_parameter_source("out_dir") is ParameterSource.DEFAULT:
            out_dir = Path("out/bench-live")  # the twin bench's reports stay where they are
        _bench_live(scenarios_opt, agents_opt, arms_opt or "unguarded", jobs, out_dir, as_json)
        return
    arms_opt = arms_opt or "guarded,unguarded"

    from arena.bench.runner import out_locked, plan_bench, prepare_out, sigterm_raises
    from arena.scenario import _ids

    known = _ids()
    scenario_ids = _csv(scenarios_opt) or known
    unknown = [s for s in scenario_ids if s not in known]
    if unknown:
        raise InputError(f"unknown scenario {', '.join(unknown)} (known: {', '.join(known) or 'none'})",
                         path="--scenarios")
    try:
        resp = [float(x) for x in _csv(resp_opt)]
    except ValueError as e:
        raise InputError(f"takes numbers: {resp_opt!r}", path="--responsiveness") from e
    agents = _csv(agents_opt) or ["calibrated"]
    from arena.agents import blamed_on

    with blamed_on("--agents"):  # the other options' errors name themselves
        plan = plan_bench(scenario_ids, agents, _csv(arms_opt), seeds, resp, detection=not no_detection)
    for model in sorted({a.split(":", 1)[1] for a in agents if a.startswith("llm:")}):
        from arena.clients.llm import preflight

        why = preflight(model)
        if why is not None:  # every episode would record an agent that did nothing
            click.echo(f"error: the agent's chat API for llm:{model} failed: {why}; no episode ran", err=True)
            raise SystemExit(3)
    results = out_dir / "results.jsonl"
    prepare_out(out_dir)  # before any episode: an --out that cannot be written is bad input (exit 2)
    with sigterm_raises(), out_locked(out_dir, on_note=lambda msg: click.echo(msg, err=True)):  # one run per --out
        _run_bench(plan, agents, scenario_ids, seeds, jobs, out_dir, results, resume, as_json)


def _run_bench(plan: Any, agents: list[str], scenario_ids: list[str], seeds: int, jobs: int, out_dir: Path,
               results: Path, resume: bool, as_json: bool) -> None:
    import time

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn
    from rich.text import Text

    from arena.bench.build import build_id
    from arena.bench.eta import BenchETA, format_eta
    from arena.bench.runner import (Terminated, default_params, not_a_verdict, partial_path, run_plan,
                                    sigterm_raises)
    from arena.bench.stats import summarise

    ab_keys = {e.key() for e in plan.episodes if not e.params
               and (e.agent in agents or ("replay:*" in agents and e.agent.startswith("replay:")))}
    tally = _ArmTally(ab_keys)
    kept = 0
    counts: dict[str, int] = {}
    t0 = time.perf_counter()
    console = Console(stderr=True)
    # A log, not a terminal (CI): no live bar, so a plain line now and then says the run is alive.
    plain = not as_json and not console.is_terminal
    next_line = t0 + PLAIN_PROGRESS_S
    eta = BenchETA(plan.episodes)

    class EtaColumn(ProgressColumn):
        def render(self, _task: Any) -> Text:
            return Text(format_eta(eta.seconds_left()), style="progress.remaining")

    try:
        with sigterm_raises():  # SIGTERM unwinds like Ctrl-C: workers stopped, whole lines kept
            with Progress(TextColumn("bench"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("{task.fields[arms]}"), EtaColumn(), disable=as_json or plain,
                          transient=False, console=console) as progress:  # stdout: the summary
                task = progress.add_task("bench", total=len(plan.episodes), arms="")

                def on_result(row: dict[str, Any], *, reused: bool = False) -> None:
                    nonlocal kept, next_line
                    kept += 1
                    tally.add(row)
                    (eta.reused if reused else eta.ran)(row)
                    progress.update(task, advance=1, arms=tally.text())
                    now = time.perf_counter()
                    if plain and not reused and (now >= next_line or kept == len(plan.episodes)):
                        next_line = now + PLAIN_PROGRESS_S
                        left = "" if kept == len(plan.episodes) else f"  {format_eta(eta.seconds_left())}"
                        click.echo(f"bench: {kept}/{len(plan.episodes)} episodes  {tally.text()}  "
                                   f"{now - t0:.0f} s{left}", err=True)

                rows = run_plan(plan, results, jobs=jobs, resume=resume, on_result=on_result,
                                on_reused=lambda row: on_result(row, reused=True),
                                on_warning=lambda msg: click.echo(msg, err=True), counts=counts,
                                keep_partial=True)  # moved in as results.jsonl with the reports (_publish)
            wall = time.perf_counter() - t0
            summary = summarise(rows, agents=agents, arms=plan.arms, responsiveness=plan.responsiveness,
                                wall_s=wall, notes=plan.notes,
                                agent_defaults={a: default_params(a) for a in {r["agent"] for r in rows}})
            summary["scenarios"] = scenario_ids
            summary["seeds"] = seeds
            summary["episodes_run"] = counts.get("run", len(rows))
            summary["episodes_reused"] = counts.get("reused", 0)
            summary["rows_outside_plan"] = counts.get("outside", 0)
            summary["build"] = build_id()  # the build every row was made by (--resume drops other builds' rows)
            _publish(summary, out_dir, results, len(rows))
            md, html_path = out_dir / "report.md", out_dir / "report.html"
    except (KeyboardInterrupt, Terminated) as e:
        where = partial_path(results) if partial_path(results).exists() else results
        try:  # the rows on disk, carried over from an earlier run (--resume) included
            on_disk = where.read_bytes().count(b"\n") if where == partial_path(results) else kept
        except OSError:
            on_disk = kept
        click.echo(f"interrupted: {max(kept, on_disk)} of {len(plan.episodes)} episodes kept in {where}; "
                   "run the same command with --resume to finish", err=True)
        raise SystemExit(e.code if isinstance(e, Terminated) else 130) from None
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    arms_line = "  ".join(f"{arm} {100 * a['pass_rate']:.1f}%" for arm, a in summary["arms"].items()
                          if a["pass_rate"] is not None)
    reused = f" ({counts.get('run', len(rows))} run, {counts['reused']} kept from the earlier run)" \
        if counts.get("reused") else ""
    click.echo(f"{len(rows)} episodes{reused} in {wall:.1f} s  pass@1: {arms_line}")
    if counts.get("outside"):
        click.echo(f"note: {results} also keeps {counts['outside']} rows of the earlier run outside this one's "
                   f"scenarios, agents or seeds; summary.json and the report cover this run's {len(rows)}", err=True)
    click.echo(f"report: {html_path}  ({md}, {out_dir / 'summary.json'}, {results})")
    lost = sum(1 for r in rows if not_a_verdict(r))
    if lost:  # the chat API went away during the run: those episodes are not verdicts (--resume runs them again)
        click.echo(f"error: {lost} episodes ended with the agent's chat API failing; they are left out of the "
                   "report and run again with --resume", err=True)
        raise SystemExit(3)


def _publish(summary: dict[str, Any], out_dir: Path, results: Path, n_rows: int) -> None:
    """summary.json, the reports and the plots written aside, then moved into --out with the finished run's
    results.jsonl.partial as results.jsonl (arena.bench.publish): a failure before the move leaves the earlier
    run's files as they were, and this run's rows in the partial file for --resume."""
    from arena.bench.publish import RunPublication
    from arena.bench.report import write_report
    from arena.bench.runner import out_error, partial_path

    partial = partial_path(results)
    try:
        pub = RunPublication(out_dir)
        try:
            write_atomic(pub.dir / "summary.json", json.dumps(summary, indent=2) + "\n")
            write_report(summary, pub.dir)
            pub.adopt(partial, results.name)
            pub.commit()
        finally:
            pub.discard()
    except OSError as e:
        raise out_error(e, out_dir) from e
    except Exception:
        click.echo(f"error: writing the report failed; the files in {out_dir} are the earlier run's, as they were, "
                   f"and this run's {n_rows} episodes are kept in {partial}: run the same command with --resume to "
                   "report them without running them again", err=True)
        raise


def _bench_live(scenarios_opt: str | None, agents_opt: str | None, arms_opt: str, jobs: int, out_dir: Path,
                as_json: bool) -> None:
    """`guardrail bench --env live`: (outcome, safety, failure mode) per script on the twin and on live."""
    from arena.bench.runner import out_locked, prepare_out
    from arena.agents import blamed_on
    from arena.live.bench import check_agents, live_scenarios, plan_live, run_live_agreement
    from arena.live.stack import missing_requirements

    wired = live_scenarios()
    scenario_ids = _csv(scenarios_opt) or wired
    unknown = [s for s in scenario_ids if s not in wired]
    if unknown:
        raise InputError(f"no live wiring for {', '.join(unknown)} (live: {', '.join(wired)})", path="--scenarios")
    arms = _csv(arms_opt)
    bad = [a for a in arms if a not in ("guarded", "unguarded")]
    if bad:
        raise InputError(f"takes guarded and unguarded, not {', '.join(bad)}", path="--arms")
    missing = missing_requirements()
    if missing:
        click.echo(f"error: the live stack needs: {', '.join(missing)}", err=True)
        raise SystemExit(3)
    plan = plan_live(scenario_ids, _csv(agents_opt) or ["replay:*"], arms)
    out = out_dir
    # Bad input fails here, before any stack starts or anything is printed or written.
    prepare_out(out)
    with blamed_on("--agents"):
        check_agents(plan)
    finished: list[dict] = []

    def cell(v: dict | None) -> str:
        return "error" if v is None else f"{v['outcome']}/{v['safety']}/{v['failure_mode'] or '-'}"

    def show(row: dict) -> None:
        finished.append(row)
        if not as_json:
            why = row.get("error") or ", ".join(sorted(set(row.get("live_failed_checks", []))
                                                      ^ set(row.get("twin_failed_checks", []))))[:120]
            click.echo(f"{row['scenario']:7} {row['agent']:34} {row['arm']:9} {cell(row['twin']):36} "
                       f"{cell(row['live']):36} {'yes' if row['agree'] else 'NO '}  {why}")

    if not as_json:
        click.echo(f"{len(plan)} episode pairs, {jobs} live stack(s) at a time; results in {out}")
        click.echo(f"{'SCEN':7} {'AGENT':34} {'ARM':9} {'TWIN outcome/safety/mode':36} {'LIVE':36} AGREE  "
                   "checks failing on one side only")
    try:
        with out_locked(out, on_note=lambda msg: click.echo(msg, err=True)):  # one run per --out at a time
            rows = run_live_agreement(plan, out, jobs=jobs, guard_factory=default_guard_factory, on_row=show)
    except (KeyboardInterrupt, SystemExit) as e:
        code = 130 if isinstance(e, KeyboardInterrupt) else e.code
        if code in (130, 143):
            click.echo(f"interrupted: {len(finished)} of {len(plan)} episode pairs finished, their rows in "
                       f"{out / 'results.jsonl.partial'}; {out / 'results.jsonl'} is as it was", err=True)
            raise SystemExit(code) from None
        raise
    n_ok = sum(1 for r in rows if r["agree"])
    if as_json:
        click.echo((out / "agreement.json").read_text(), nl=False)
    else:
        click.echo(f"{n_ok}/{len(rows)} agree")
    raise SystemExit(0 if n_ok == len(rows) else 1)


def _out_dir(value: str) -> Path:
    """--out as a Path; empty is bad input (Path('') is '.': the report would land in the working directory)."""
    if not value.strip():
        raise click.BadParameter("is empty: name the directory for the results")
    return Path(value)
