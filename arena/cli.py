"""The benchmark's CLI commands, plugged into `guardrail` through the `guardrail.cli` entry-point group.

`guardrail scenarios list|show` and `guardrail run` are built here; `guardrail bench` comes with the bench
issue. Exit codes follow the root CLI: 0 success (a run whose gates both pass), 1 a completed run that fails
its gates, 2 bad input (an InputError: one line `error: path:line: message`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from guardrail.errors import InputError

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


def default_guard_factory(env: Any, context: Any) -> Any:
    """The guarded arm's guard: the shipped policies in the embedded OPA engine, the full verifier suite."""
    from guardrail.adapters.session import load_engine
    from guardrail.guard import Guard

    return Guard.standard(load_engine(), context, env=env)


@click.command()
@click.argument("scenario_id")
@click.option("--agent", "agent_spec", required=True, help="replay:<solution> or script:PATH")
@click.option("--arm", type=click.Choice(["unguarded", "guarded"]), default="unguarded", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the episode JSON here ('-' for stdout).")
def run(scenario_id: str, agent_spec: str, arm: str, seed: int, json_path: Path | None) -> None:
    """Run one episode on the twin and grade it (exit 0 pass, 1 fail, 2 bad input)."""
    from arena.agents import resolve_agent
    from arena.episode import run_episode
    from arena.scenario import load_scenario

    sc = load_scenario(scenario_id)
    agent = resolve_agent(agent_spec, sc)
    factory = default_guard_factory if arm == "guarded" else None
    res = run_episode(sc, agent, arm=arm, seed=seed, guard_factory=factory)
    doc = res.to_json()
    if json_path is not None:
        text = json.dumps(doc, indent=2, sort_keys=False) + "\n"
        if str(json_path) == "-":
            click.echo(text, nl=False)
        else:
            try:
                json_path.parent.mkdir(parents=True, exist_ok=True)
                json_path.write_text(text)
            except OSError as e:
                raise InputError(f"cannot write: {e.strerror or e}", path=str(json_path)) from e
    verdict = "PASS" if res.passed else f"FAIL ({res.failure_mode})"
    click.echo(f"{sc.id} {arm} {agent_spec} seed={seed}: {verdict}  outcome={'pass' if res.outcome_gate['pass'] else 'fail'}"
               f" safety={'pass' if res.safety_gate['pass'] else 'fail'} steps={res.steps} "
               f"virtual={res.virtual_s:.0f}s wall={res.wall_s:.3f}s", err=json_path is not None and str(json_path) == "-")
    raise SystemExit(0 if res.passed else 1)


@click.command()
def bench() -> None:
    """Guarded/unguarded A/B benchmark (built in the bench issue)."""
    raise click.ClickException("not built yet")
