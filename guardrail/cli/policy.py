"""`guardrail policy test [DIR]` and `guardrail policy eval --input FILE [--query Q] [--policy DIR]`.

Attached to the root group by guardrail/cli/commands.py. Bad input (a missing file, a Rego error, bad JSON)
raises InputError, which the root group prints as one line `error: path:line: message` with exit code 2.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import click
from opa_bindings import OpaError

from guardrail.cli import POLICY_HELP, cli
from guardrail.errors import InputError
from guardrail.policy.decisions import MalformedDecision, from_document
from guardrail.policy.embedded import EmbeddedOPA
from guardrail.policy.inputdoc import read_policy_input
from guardrail.policy.loader import load_error, opa_error_location
from guardrail.policy.testing import run_rego_tests
from guardrail.resources import policy_dir
from verifiers.datafile import decode_text, read_input_bytes

__all__ = ["policy"]

# A plain reference such as data.guardrail.decision: printed as its value, like the REST Data API's result.
_REF = re.compile(r"^\s*data(\.[A-Za-z_]\w*)*\s*$")
# A query that reads the guard's own rules (data.guardrail...), which read the guard's input document.
_GUARD_QUERY = re.compile(r"\bdata\.guardrail\b")
# A reference that iterates, such as data.guardrail.decision.deny[_].id: printed as the list of its values.
_ITER_REF = re.compile(r"^\s*data(\.[A-Za-z_]\w*|\[(_|\d+|\"[^\"\]]*\")\])*\s*$")


@cli.group("policy")
def policy() -> None:
    """Test and evaluate the Rego policies (default: the shipped policies/ tree)."""


@policy.command("test")
@click.argument("directory", required=False, type=click.Path(path_type=Path))
@click.option("-v", "--verbose", is_flag=True, help="Also print each test's duration.")
@click.option("-r", "--run", "run", metavar="REGEX", default=None,
              help="Only the tests whose full name (data.<package>.<test_name>) this regular expression matches.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON document.")
def test_cmd(directory: Path | None, verbose: bool, run: str | None, as_json: bool) -> None:
    """Run every test_ rule of the *_test.rego files, like `opa test`. Exits 1 when any test fails, 2 when
    there is none (or none --run selects). A DIRECTORY of your own rules (no `package guardrail`) is tested on
    the library (GUARDRAIL_POLICY_DIR when set, else the shipped policies): its tests can import
    data.guardrail.lib, and only its own tests run."""
    try:
        pattern = None if run is None else re.compile(run)
    except re.error as e:
        raise click.BadParameter(f"{run!r} is not a regular expression: {e}", param_hint="--run") from None
    report = run_rego_tests(directory, run=pattern)
    if not report.results:
        # Like `opa test` run on a tree with no tests: nothing was tested, which is not a pass. Tests are the
        # test_ rules of *_test.rego files (guardrail/policy/loader.py); rules in other files are not run.
        what = "no test_ rules found in *_test.rego files"
        raise InputError(what if pattern is None else f"{what} match --run {run!r}",
                         path=str(directory or policy_dir()))
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
        if report.failed:
            raise SystemExit(1)
        return
    for r in report.results:
        line = f"{r.status} {r.where}: data.{r.package}.{r.name}"
        if r.message:
            line += f" ({r.message})"
        if verbose:
            line += f" [{r.duration_ms:.2f} ms]"
        click.echo(line)
    click.echo(report.summary())
    if report.failed:
        raise SystemExit(1)


@policy.command("eval")
@click.option("--input", "input_file", required=True, type=click.Path(path_type=Path),
              help="A JSON file: one input document ({action, context, command}), as `guardrail check --show-input "
                   "--json` prints each under `inputs`. Checked against that shape when the query reads data.guardrail.")
@click.option("--query", "query", default="data.guardrail.decision", show_default=True,
              help="A Rego query; a plain data reference prints {\"result\": value}, one that iterates "
                   "(data.guardrail.decision.deny[_].id) {\"result\": [values]}, other queries their bindings.")
@click.option("--policy", "policy_dir", type=click.Path(path_type=Path), default=None,
              help=POLICY_HELP)
def eval_cmd(input_file: Path, query: str, policy_dir: Path | None) -> None:
    """Evaluate a query against an input file and print the JSON result."""
    doc, text = _read_json(input_file)
    if _GUARD_QUERY.search(query):
        # The guard's rules read {action, context, command}: another shape would be decided on nothing (`{}` is an
        # empty, allowed-looking decision), so it is bad input naming the field, and the document the rules get is
        # the one the guard would send (defaults filled in, as `check --show-input` prints them).
        doc = read_policy_input(doc, path=input_file, text=text)
    elif not isinstance(doc, dict):
        raise InputError("the input must be a JSON object ({\"action\": ..., \"context\": ..., \"command\": ...})",
                         path=str(input_file), line=1)
    with EmbeddedOPA(policy_dir) as engine:
        ref = _REF.match(query) is not None
        values = not ref and _ITER_REF.match(query) is not None
        try:
            rows = engine.query(f"result := {query.strip()}" if ref or values else query, doc)
        except OpaError as e:
            where, _, _ = opa_error_location(e.message or "")
            if e.code.startswith("eval") and where is not None and engine.tree.by_path(where) is not None:
                raise load_error(e.message, engine.tree) from e  # a rule's own error, at its file and line
            raise InputError(f"bad query: {e.message.splitlines()[0] if e.message else e.code}",
                             path="--query") from e
    if ref:
        out = {"result": rows[0]["result"]} if rows else {}
    elif values:
        out = {"result": [r["result"] for r in rows]}
    else:
        out = {"result": rows}
    click.echo(json.dumps(out, indent=2, sort_keys=True))
    if query.strip() == "data.guardrail.decision":
        # What the guard makes of it: a decision it cannot read fails closed at run time, whatever it says here.
        try:
            from_document(out.get("result"), decision_id="eval", engine="eval", duration_ms=0.0)
        except MalformedDecision as e:
            click.echo(f"error: the guard cannot read this decision ({e}): it would fail closed (a change is "
                       "denied) and decide each rules package alone", err=True)
            raise SystemExit(1) from e


class _BadConstant(ValueError):
    pass


def _no_constant(name: str) -> object:
    """NaN, Infinity, -Infinity: Python reads them, JSON (and OPA) does not."""
    raise _BadConstant(name)


def _finite_float(text: str) -> float:
    """1e999 reads as an infinity in Python, and has no JSON form for OPA."""
    value = float(text)
    if not math.isfinite(value):
        raise _BadConstant(text)
    return value


def _read_json(path: Path) -> tuple[object, str]:
    raw = read_input_bytes(path, error=InputError)  # a regular file, bounded: not /dev/zero, not a FIFO
    text = decode_text(raw, path=path, error=InputError)  # undecodable bytes: one line naming file:line
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float), text
    except _BadConstant as e:
        line = text.count("\n", 0, max(0, text.find(e.args[0]))) + 1
        raise InputError(f"bad JSON: {e.args[0]} is not a JSON number", path=str(path), line=line) from None
    except json.JSONDecodeError as e:
        raise InputError(f"bad JSON: {e.msg}", path=str(path), line=e.lineno) from e
    except RecursionError as e:
        raise InputError("nested too deeply to read", path=str(path)) from e
