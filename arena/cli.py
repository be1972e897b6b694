"""The benchmark's CLI commands, plugged into `guardrail` through the `guardrail.cli` entry-point group."""

from __future__ import annotations

import click


@click.group()
def scenarios() -> None:
    """List and show the Incident-Arena scenarios."""


@click.command()
def run() -> None:
    """Run one episode (built in the twin issue)."""
    raise click.ClickException("not built yet")


@click.command()
def bench() -> None:
    """Guarded/unguarded A/B benchmark (built in the bench issue)."""
    raise click.ClickException("not built yet")
