"""The `guardrail` command line: the root group, and the guard's own commands.

Commands that need the benchmark (scenarios, run, bench) live in `arena` and are added here through the
`guardrail.cli` entry-point group, so the guard itself never imports `arena` and works where no arena is
installed. Exit codes: 0 success, 1 a completed run that denies or fails its gates, 2 bad input.
"""

from __future__ import annotations

import io
import os
import sys
from importlib.metadata import entry_points
from typing import NoReturn

import click

from guardrail.policy import goruntime
from verifiers.datafile import DataFileError

__all__ = ["main", "cli", "POLICY_HELP"]

# The --policy option's help, the same on every command that takes it (guardrail/policy/loader.py).
POLICY_HELP = ("A policy tree. One of your own rules (no `package guardrail`) is added to the library; a whole "
               "library (it has `package guardrail`) replaces it. The library: GUARDRAIL_POLICY_DIR when set, else "
               "the shipped policies.")


class _Group(click.Group):
    """Turns bad input anywhere below into one line on stderr and exit code 2: an InputError (`error: path:line:
    message`) and click's own usage errors (`error: --option: message`, without click's usage and hint lines).
    A closed stdout (`guardrail policy test | head -1`) ends the command quietly with 141, as a shell reports
    SIGPIPE. Commands added from the entry-point group (arena's) are below this group too."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)  # the root's own options: --help, --version
        except click.UsageError as e:
            _usage_error(ctx, e)
        except BrokenPipeError:
            _broken_pipe(ctx)
        raise AssertionError("unreachable")  # pragma: no cover

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except DataFileError as e:  # InputError, and a verifier catalogue's CatalogueError
            click.echo(f"error: {e.one_line()}", err=True)
            ctx.exit(2)
        except click.UsageError as e:  # a subcommand's parse: a bad value, a missing or unknown option
            _usage_error(ctx, e)
        except BrokenPipeError:
            if not _stdout_closed():
                raise  # a socket or a child's pipe, not our stdout: not the reader going away
            _broken_pipe(ctx)
        except KeyboardInterrupt:  # Ctrl-C wherever a command has no handler of its own: 130, as a shell says
            click.echo("interrupted", err=True)
            ctx.exit(130)


def _usage_error(ctx: click.Context, e: click.UsageError) -> NoReturn:
    if isinstance(e, getattr(click.exceptions, "NoArgsIsHelpError", ())):  # click >= 8.2
        raise e  # a bare group prints its help, as click does
    msg = e.format_message()
    if isinstance(e, click.BadParameter) and not isinstance(e, click.MissingParameter) and e.param is not None:
        # `--port: 99999 is not in the range ...` rather than `Invalid value for '--port': 99999 ...`
        name = e.param_hint or (max(e.param.opts, key=len) if e.param.param_type_name == "option"
                                else e.param.human_readable_name)
        if isinstance(name, (list, tuple)):
            name = " / ".join(name)
        msg = f"{name}: {e.message}"
    click.echo(f"error: {' '.join(msg.split())}", err=True)
    ctx.exit(e.exit_code)


def _stdout_closed() -> bool:
    """Whether stdout's reader has gone (poll reports an error on the write end); True when it cannot be told."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return True


def _broken_pipe(ctx: click.Context) -> NoReturn:
    # Whatever is still buffered for stdout goes nowhere, so the flush at exit cannot fail again.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass
    ctx.exit(141)


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


OPA_MODULE = "opa_bindings"
OPA_INSTALL = "pip install --ignore-requires-python opa-golib-python-bindings==0.4.4"

# Commands whose results go somewhere else than stdout (the agent's own output, the MCP transport).
_NO_STDOUT = {"shell", "mcp"}


def _buffered_stdout() -> None:
    """Under PYTHONUNBUFFERED (python -u) stdout writes straight to the file: when a reader goes away during a large
    write the kernel returns a short count, which that layer does not retry, so no EPIPE is seen and the command
    ends 0 with its output cut (`guardrail audit --json ... | head`). A buffered writer retries the rest and meets
    the EPIPE (141); flushing at each line keeps the output as prompt as unbuffered."""
    out = sys.stdout
    raw = getattr(out, "buffer", None)
    if not isinstance(raw, io.RawIOBase):
        return
    try:
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(raw), encoding=out.encoding, errors=out.errors,
                                      line_buffering=True)
    except (AttributeError, ValueError, OSError):
        pass


def main(argv: list[str] | None = None) -> None:
    if sys.stdout is None and goruntime.subcommand(sys.argv[1:] if argv is None else argv) not in _NO_STDOUT:
        # Python leaves sys.stdout None when fd 1 is closed, and every result would vanish with exit 0.
        sys.stderr.write("error: stdout is closed: the result has nowhere to go\n")
        sys.exit(2)
    if goruntime.subcommand(sys.argv[1:] if argv is None else argv) not in _NO_STDOUT:
        _buffered_stdout()
    try:
        try:
            if argv is None and goruntime.subcommand(sys.argv[1:]) in goruntime.LONG_LIVED:
                goruntime.reexec_tuned()  # once, before OPA's Go runtime loads (see guardrail/policy/goruntime.py)
            _register()
        except KeyboardInterrupt:  # Ctrl-C while the commands load, before the group's own handler is in place
            sys.stderr.write("interrupted\n")
            sys.exit(130)
        cli.main(args=argv, prog_name="guardrail")
    except ModuleNotFoundError as e:
        if e.name != OPA_MODULE:
            raise
        # A venv built with `pip install -e .` alone: the engine is a separate install (it declares a newer Python).
        sys.stderr.write(f"error: the OPA engine is not installed: {OPA_INSTALL} (or `make venv`)\n")
        sys.exit(3)


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
