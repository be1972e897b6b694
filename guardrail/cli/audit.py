"""`guardrail audit TRAJECTORY`: replay a recorded agent session through the guard, offline.

Attached to the root group by guardrail/cli/commands.py; the work is guardrail/audit.py. Prints each step's
decision, what would have been denied or flagged, and a summary table (or, with --json, the whole report).
Exit 0 when the audit completes, findings or not; 2 on bad input (one line naming the file and line).
"""

from __future__ import annotations

import errno
import json
import os
import re

import click

from guardrail.cli import POLICY_HELP, cli

__all__ = ["audit_cmd"]


@cli.command("audit")
@click.argument("trajectory", type=click.Path(dir_okay=False))
@click.option("--context", "context_path", type=click.Path(dir_okay=False), default=None,
              help="Public incident context the session ran under (YAML/JSON, or a scenario's public part).")
@click.option("--policy", "policy", type=click.Path(file_okay=False), default=None,
              help=POLICY_HELP)
@click.option("--format", "fmt", type=click.Choice(["auto", "journal", "commands", "openai", "claude-code", "codex"]),
              default="auto", show_default=True,
              help="auto tells them apart by the first line that is one of theirs.")
@click.option("--command-arg", default="command", show_default=True,
              help="The tool-call argument that holds the shell command (openai transcripts; an MCP exec tool's in "
                   "claude-code and codex ones).")
@click.option("--json", "as_json", is_flag=True, help="Print the machine-readable report instead of tables.")
def audit_cmd(trajectory: str, context_path: str | None, policy: str | None, fmt: str, command_arg: str,
              as_json: bool) -> None:
    """Replay TRAJECTORY (a guard journal, a command list, an OpenAI-style chat transcript, a Claude Code session
    transcript or a Codex CLI rollout) through the guard."""
    from guardrail.adapters.session import context_from, load_engine
    from guardrail.audit import audit, load_trajectory

    traj = load_trajectory(trajectory, fmt=fmt, command_arg=command_arg)  # type: ignore[arg-type]
    report = audit(traj, load_engine(policy), context_from(context_path))
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, default=str))
        return
    _print(report)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _safe(text: object) -> str:
    """Text from the recorded session, shown as text: control characters escaped (an ESC sequence in a recorded
    command could clear the screen or hide the rest of the line) and rich's markup brackets taken literally."""
    from rich.markup import escape

    return escape(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text)))


def _print(report) -> None:
    from rich.console import Console
    from rich.table import Table

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich would exit 1; the root group exits 141, quietly
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    console = _Console(soft_wrap=False)
    t = report.trajectory
    steps = Table(title=f"guardrail audit: {_safe(t.path)} ({t.format})", show_lines=False)
    for col in ("#", "line", "command", "actions", "decision", "rules / flags"):
        steps.add_column(col, overflow="fold")
    style = {"deny": "bold red", "warn": "yellow", "allow": "green", "error": "magenta"}
    for s in report.steps:
        acts = ", ".join(f"{a.tool} {a.verb}" + (f" [{a.layer.value}]" if a.layer.value != "none" else "")
                         for a in s.actions)
        notes = [f["id"] for f in s.denies + s.warns]
        notes += [f"EPHEMERAL {p.key}" + (" (in container)" if p.in_container else "") for p in s.ephemeral]
        if s.error:
            notes.append(s.error)
        cmd = s.step.command if len(s.step.command) <= 80 else s.step.command[:77] + "..."
        steps.add_row(str(s.step.index), str(s.step.line or ""), _safe(cmd), _safe(acts),
                      f"[{style.get(s.outcome, '')}]{s.outcome}[/]", _safe("; ".join(notes)))
    console.print(steps)

    denied = [s for s in report.steps if s.outcome == "deny"]
    if denied:
        console.print("[bold]Would have been denied:[/]")
        for s in denied:
            for f in s.denies:
                console.print(f"  step {s.step.index}: {_safe(f['id'])}: {_safe(f['msg'])}")
    if report.unpersisted:
        console.print("[bold]Changed only at runtime, never made durable (lost on restart):[/]")
        for p in report.unpersisted:
            console.print(f"  step {p.step}: {_safe(p.key)} = {_safe(repr(p.value))} ({p.layer}"
                          f"{', inside a container' if p.in_container else ''})")
    if t.findings:
        console.print("[bold]Findings in the input:[/]")
        for f in t.findings:
            where = f.get("where") or ""
            line = f":{f['line']}" if f.get("line") else ""
            console.print(f"  {f['kind']} {_safe(where)}{line}: {_safe(f['message'])}")

    summary = Table(title="summary")
    summary.add_column("measure")
    summary.add_column("count", justify="right")
    for k, v in report.summary().items():
        summary.add_row(k.replace("_", " "), str(v))
    console.print(summary)
