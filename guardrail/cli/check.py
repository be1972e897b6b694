"""`guardrail check`: one command through normalisation and policy. Nothing runs.

    guardrail check [--context FILE] [--policy DIR] [--mode enforce|dry-run|warn-only] [--json] [--show-input]
                    -- COMMAND

Prints a short verdict a person reads at a glance (the outcome, then one line per rule: its id and what to do
instead, then the actions); `--json` prints the whole decision document instead (the shape scripts and tests
read), and `--show-input` adds each action's input document to it (it implies `--json`). Exit 0 when the command
would run, 1 when the guard would block it, 2 on bad input.
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING

import click

from guardrail.cli import POLICY_HELP, cli
from guardrail.context import IncidentContext, load_context
from guardrail.errors import InputError
from guardrail.policy.base import Mode, Outcome, distinct_findings

if TYPE_CHECKING:
    from guardrail.guard import Admission


@cli.command()
@click.option("--context", "context_path", type=click.Path(dir_okay=False), default=None,
              help="Public incident context (YAML/JSON; a scenario file's `public` part is read).")
@click.option("--policy", "policy_dir", type=click.Path(file_okay=False), default=None,
              help=POLICY_HELP)
@click.option("--mode", type=click.Choice([m.value for m in Mode]), default=Mode.ENFORCE.value, show_default=True)
@click.option("--json", "as_json", is_flag=True,
              help="Print the whole decision document as JSON (actions, per-action decisions, feedback).")
@click.option("--show-input", is_flag=True,
              help="Print the JSON document with `inputs`: each action's input document as the rules see it "
                   "(context inline), for writing rules and for `guardrail policy eval --input` (implies --json).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def check(context_path: str | None, policy_dir: str | None, mode: str, as_json: bool, show_input: bool,
          command: tuple[str, ...]) -> None:
    """Decide COMMAND (everything after --) without running it; print the actions and the decision."""
    from guardrail.guard import Guard
    from guardrail.ownfiles import OwnFiles
    from guardrail.policy.embedded import EmbeddedOPA

    context = load_context(context_path) if context_path else IncidentContext()
    # One word is the command as a shell reads it ('kubectl get pods | head'); several are an argv, quoted back
    # into the text a shell would run with them (a joined -p '{"spec": ...}' would split the patch).
    raw = command[0] if len(command) == 1 else shlex.join(command)
    if not raw.strip():  # nothing to decide; an "allow" here could be read as permission by a wrapper
        raise InputError("is empty: give the command after --", path="COMMAND")
    with EmbeddedOPA(policy_dir) as engine:
        adm = Guard(engine, context, mode=Mode(mode), own_files=OwnFiles().add_file(context_path)).before(raw)
    out = adm.to_dict()
    out["decision"] = {
        "outcome": adm.outcome.value,
        "runs": adm.runs,
        "deny": [f.to_dict() for f in adm.denies],
        "warn": [f.to_dict() for f in adm.warns],
        "exempted": [f.to_dict() for d in adm.decisions for f in d.exempted],
    }
    if show_input:
        observed = adm.observed or [None] * len(adm.action_inputs or [])
        out["inputs"] = [{"action": a, "context": context.policy_input(), "command": raw, **({"observed": o} if o
                                                                                                else {})}
                         for a, o in zip(adm.action_inputs or [], observed)]
    click.echo(json.dumps(out, indent=2) if as_json or show_input else verdict_text(adm))
    raise SystemExit(0 if adm.runs else 1)


def _one_line(text: str, width: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def verdict_text(adm: Admission) -> str:
    """The verdict in a few lines: outcome and whether the command runs, each rule once with what to do
    instead (its message), what an exception waived, and the actions the command was read as."""
    if adm.runs:
        runs = "runs" if adm.outcome is not Outcome.DENY else f"{adm.mode.value}: runs anyway"
    else:
        runs = "would not run"
    lines = [f"{adm.outcome.value.upper()} ({runs}): {_one_line(adm.command, 100)}"]
    exempted = distinct_findings(f for d in adm.decisions for f in d.exempted)
    for kind, findings in (("deny", adm.denies), ("warn", adm.warns), ("exempted", exempted)):
        lines += [f"  {f.id} ({kind}): {_one_line(f.msg, 400)}" for f in findings]
    errors = sorted({d.error for d in adm.decisions if d.error})
    lines += [f"  engine error: {_one_line(e)}" for e in errors]
    acts = []
    for a in adm.actions:
        what = (a.tool if a.verb in ("", a.tool) else f"{a.tool} {a.verb}") + (f" {a.target.name}" if a.target.name
                                                                             else "")
        effect = ("read-only" if a.mutating is False else
                  f"opaque: {a.opaque_reason}" if a.mutating == "unknown" and a.opaque_reason else
                  "changes" + (f" {a.layer.value} layer" if a.layer.value != "none" else ""))
        acts.append(f"{what} [{effect}]")
    lines.append("  actions: " + _one_line("; ".join(acts) or "none", 300))
    return "\n".join(lines)
