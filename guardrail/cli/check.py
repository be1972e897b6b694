"""`guardrail check`: one command through normalisation and policy, printed as JSON. Nothing runs.

    guardrail check [--context FILE] [--policy DIR] [--mode enforce|dry-run|warn-only] [--show-input] -- COMMAND

Exit 0 when the command would run, 1 when the guard would block it, 2 on bad input.
"""

from __future__ import annotations

import json
import shlex

import click

from guardrail.cli import POLICY_HELP, cli
from guardrail.context import IncidentContext, load_context
from guardrail.errors import InputError
from guardrail.policy.base import Mode


@cli.command()
@click.option("--context", "context_path", type=click.Path(dir_okay=False), default=None,
              help="Public incident context (YAML/JSON; a scenario file's `public` part is read).")
@click.option("--policy", "policy_dir", type=click.Path(file_okay=False), default=None,
              help=POLICY_HELP)
@click.option("--mode", type=click.Choice([m.value for m in Mode]), default=Mode.ENFORCE.value, show_default=True)
@click.option("--show-input", is_flag=True,
              help="Also print `inputs`: each action's input document as the rules see it (context inline), for "
                   "writing rules and for `guardrail policy eval --input`.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def check(context_path: str | None, policy_dir: str | None, mode: str, show_input: bool,
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
    click.echo(json.dumps(out, indent=2))
    raise SystemExit(0 if adm.runs else 1)
