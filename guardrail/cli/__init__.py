"""The `guardrail` command line: the root group, and the guard's own commands.

Commands that need the benchmark (scenarios, run, bench) live in `arena` and are added here through the
`guardrail.cli` entry-point group, so the guard itself never imports `arena` and works where no arena is
installed. Exit codes: 0 success, 1 a completed run that denies or fails its gates, 2 bad input.
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points

import click

from guardrail.policy import goruntime
from verifiers.datafile import DataFileError

__all__ = ["main", "cli"]


class _Group(click.Group):
    """Turns an InputError anywhere below into one line on stderr and exit code 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except DataFileError as e:  # InputError, and a verifier catalogue's CatalogueError
            click.echo(f"error: {e.one_line()}", err=True)
            ctx.exit(2)


@click.group(cls=_Group)
@click.version_option(package_name="sre-guardrail")
def cli() -> None:
    """sre-guardrail: a guard between autonomous SRE agents and the systems they operate."""


def _register() -> None:
    from guardrail.cli import commands  # noqa: F401  (registers the guard's commands on `cli`)

    for ep in entry_points(group="guardrail.cli"):
        cmd = ep.load()
        if cmd.name not in cli.commands:
            cli.add_command(cmd)


def main(argv: list[str] | None = None) -> None:
    if argv is None and goruntime.subcommand(sys.argv[1:]) in goruntime.LONG_LIVED:
        goruntime.reexec_tuned()  # once, before OPA's Go runtime loads (see guardrail/policy/goruntime.py)
    _register()
    cli.main(args=argv, prog_name="guardrail")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
