"""`guardrail context init` (a starting ctx.yaml from a cluster namespace, guardrail.context_init) and
`guardrail context explain` (what each entry of a context protects, guardrail.context_names).

Attached to the root group by guardrail/cli/commands.py. Bad input (no such namespace, an unreadable kubeconfig,
an existing file without --force, a Prometheus URL that is not http(s)) is one line and exit 2, nothing written.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import click

from guardrail.cli import cli
from guardrail.errors import InputError

__all__ = ["context"]


@cli.group("context")
def context() -> None:
    """Write and check the public context (ctx.yaml) the guard enforces."""


@context.command("init")
@click.option("--namespace", "-n", required=True, help="The namespace whose workloads the context describes.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="The kubeconfig file (default: KUBECONFIG, ~/.kube/config, or in-cluster).")
@click.option("--context-name", default=None, help="The kubeconfig context to use.")
@click.option("--prometheus", default=None, help="The team's Prometheus URL, named in the file's SLO notes.")
@click.option("--out", "out", type=click.Path(dir_okay=False), default="ctx.yaml", show_default=True)
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def init(namespace: str, kubeconfig: str | None, context_name: str | None, prometheus: str | None, out: str,
         force: bool) -> None:
    """Read the namespace's workloads, ConfigMaps and Helm releases and write a commented starting context."""
    from guardrail.clients.kube import KubeClient, KubeError
    from guardrail.context_init import read_cluster, render_context
    from guardrail.fileio import write_atomic

    target = Path(out)
    if target.exists() and not force:
        raise InputError("exists; pass --force to overwrite it", path=str(target))
    if prometheus is not None and (urlsplit(prometheus).scheme not in ("http", "https")
                                   or not urlsplit(prometheus).netloc):
        raise InputError(f"{prometheus!r} is not an http(s) URL", path="--prometheus")
    if kubeconfig is not None and not Path(kubeconfig).is_file():
        raise InputError("no such kubeconfig file", path=kubeconfig)
    where = kubeconfig or "--kubeconfig"
    try:
        kube = KubeClient(kubeconfig=kubeconfig, context=context_name, namespace=namespace)
        if not kube.namespace_exists(namespace):
            raise InputError(f"namespace {namespace!r} does not exist in the cluster at {kube.server}",
                             path="--namespace")
        text = render_context(read_cluster(kube, namespace), prometheus)
    except KubeError as e:
        raise InputError(e.message, path=where) from e
    try:
        write_atomic(target, text)
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror or e}", path=str(target)) from e
    click.echo(f"wrote {target}: review the lines marked REVIEW before the guard uses it")


@context.command("explain")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the entries as one JSON document.")
def explain(file: str, as_json: bool) -> None:
    """Print what each entry of a context (or a scenario's public part) protects, in the guard's own terms, and
    which rule or check enforces it. An entry the guard cannot recognise is an error (exit 2), as on every load."""
    import json

    from guardrail.context import load_context
    from guardrail.context_names import explain as explain_entries
    from guardrail.context_names import iter_lines

    ctx = load_context(file)
    entries = explain_entries(ctx)
    if as_json:
        click.echo(json.dumps({"context": ctx.id, "entries": [e.to_dict() for e in entries]}, indent=2))
        return
    click.echo(f"context {ctx.id}: {len(entries)} entries")
    for line in iter_lines(entries):
        click.echo(line)
