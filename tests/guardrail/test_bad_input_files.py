"""Bad input files of any size or kind, through every CLI option that reads one: exit 2 with one line naming the
file, before anything is parsed into memory or served. A device (/dev/zero grew past 6 GB), a FIFO (blocked for
ever), a directory, a huge file, binary bytes, a YAML alias bomb (spun for a minute), numbers that are not finite.
The real CLI in a subprocess: a regression that hangs fails at the subprocess's timeout instead of holding the
suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from guardrail.adapters.session import load_criteria
from guardrail.audit import MAX_TRAJECTORY_BYTES
from guardrail.journal import MAX_JOURNAL_BYTES
from guardrail.errors import InputError
from verifiers.datafile import MAX_DATA_BYTES, read_data

GUARDRAIL = str(Path(sys.executable).parent / "guardrail")

BOMB = "".join(f"{k}: &{k} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['lol'] * 9)}]\n"
               for p, k in zip([None, *"abcdefgh"], "abcdefghi"))


def _bad(kind: str, tmp: Path) -> str:
    """A path of the given bad kind (made under `tmp`)."""
    if kind == "device":
        return "/dev/zero"
    if kind == "fifo":
        os.mkfifo(tmp / "fifo")
        return str(tmp / "fifo")
    if kind == "directory":
        (tmp / "dir").mkdir()
        return str(tmp / "dir")
    if kind == "huge":
        with open(tmp / "huge.yaml", "wb") as fh:  # sparse: no disk, past every reader's limit
            fh.truncate(max(MAX_DATA_BYTES, MAX_TRAJECTORY_BYTES, MAX_JOURNAL_BYTES) + 1)
        return str(tmp / "huge.yaml")
    if kind == "binary":
        (tmp / "bin.yaml").write_bytes(bytes(range(256)) * 4)
        return str(tmp / "bin.yaml")
    if kind == "alias-bomb":
        (tmp / "bomb.yaml").write_text(BOMB)
        return str(tmp / "bomb.yaml")
    if kind == "recursive-alias":
        (tmp / "rec.yaml").write_text("a: &a [1, *a]\n")
        return str(tmp / "rec.yaml")
    if kind == "infinity":
        (tmp / "inf.yaml").write_text("id: x\nceilings: {a: .inf}\n")
        return str(tmp / "inf.yaml")
    if kind == "json-infinity":
        (tmp / "inf.json").write_text('{"id": "x", "ceilings": {"a": 1e999}}')
        return str(tmp / "inf.json")
    raise AssertionError(kind)


KINDS = ["device", "fifo", "directory", "huge", "binary", "alias-bomb", "recursive-alias", "infinity",
         "json-infinity"]
# Each option that reads a file, as argv with {} for the path. shell and mcp stop at the bad file, before their
# agent or server starts (`false` would fail if it ran; mcp's stdio is /dev/null).
OPTIONS = {
    "check --context": ["check", "--context", "{}", "--", "kubectl get pods"],
    "audit --context": ["audit", "--context", "{}", "{trajectory}"],
    "audit TRAJECTORY": ["audit", "{}"],
    "policy eval --input": ["policy", "eval", "--input", "{}"],
    "shell --context": ["shell", "--journal", "{tmp}/j.jsonl", "--context", "{}", "--", "false"],
    "shell --criteria": ["shell", "--journal", "{tmp}/j.jsonl", "--criteria", "{}", "--", "false"],
    "mcp --context": ["mcp", "--journal-dir", "{tmp}/journals", "--context", "{}"],
    "mcp --criteria": ["mcp", "--journal-dir", "{tmp}/journals", "--criteria", "{}"],
}
# Kinds a reader that is not YAML/JSON reads as something else (a trajectory is a command list): the device,
# FIFO, directory, huge and binary cases still apply to it.
NOT_DATA = {"audit TRAJECTORY"}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_a_bad_file_is_one_line_exit_2(tmp_path, option, kind):
    if option in NOT_DATA and kind in ("alias-bomb", "recursive-alias", "infinity", "json-infinity"):
        pytest.skip("a trajectory is not a YAML document")
    bad = _bad(kind, tmp_path)
    (tmp_path / "t.txt").write_text("kubectl get pods\n")
    argv = [a.replace("{}", bad).replace("{tmp}", str(tmp_path)).replace("{trajectory}", str(tmp_path / "t.txt"))
            for a in OPTIONS[option]]
    p = subprocess.run([GUARDRAIL, *argv], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr[-2000:]
    assert lines[0].startswith("error: ") and (bad in lines[0] or option.split()[-1] in lines[0]), lines[0]
    assert not (tmp_path / "j.jsonl").exists() or (tmp_path / "j.jsonl").stat().st_size == 0


@pytest.mark.parametrize("kind", ["device", "fifo", "directory", "huge", "binary", "alias-bomb"])
def test_the_shared_reader_refuses_each_kind_naming_the_file(tmp_path, kind):
    """Refused before parsing (numbers that are not finite, and a value that holds itself, are the models' to
    refuse with the field's name: the cases above cover them through the options)."""
    bad = _bad(kind, tmp_path)
    with pytest.raises(InputError) as e:
        from guardrail.yamlio import read_data as guard_read

        guard_read(bad)
    assert e.value.path == bad


@pytest.mark.parametrize("text", [
    "a: 1\nb: [1, 2, 3]\n",
    "x: &x {k: v}\ny: *x\nz: *x\n",  # a few aliases are fine
    "base: &b {" + ", ".join(f"k{i}: {i}" for i in range(20_000)) + "}\nc: [" + ", ".join(["*b"] * 4) + "]\n",
    "n: 1e300\n",  # finite
    '{"a": [1.5, 2e10]}',
])
def test_ordinary_files_still_read(tmp_path, text):
    """The control: the limits leave every ordinary file alone."""
    f = tmp_path / "ok.yaml"
    f.write_text(text)
    data, _, _ = read_data(f)
    assert isinstance(data, dict) and data


@pytest.mark.parametrize("body,field", [
    ("convergence:\n  default_cycle_s: 1e308\n", "convergence.default_cycle_s"),
    ("convergence:\n  max_wait_cycles: 1e12\n", "convergence.max_wait_cycles"),
    ("convergence:\n  interval_s: 9.9e300\n", "convergence.interval_s"),
    ("restart:\n  ready_timeout_s: 1e100\n", "restart.ready_timeout_s"),
    ("watchdog:\n  window_steps: 100000000000\n", "watchdog.window_steps"),
    ("convergence:\n  default_cycle_s: .inf\n", None),
])
def test_criteria_numbers_must_be_finite_and_sane(tmp_path, body, field):
    f = tmp_path / "c.yaml"
    f.write_text(body)
    with pytest.raises(InputError) as e:
        load_criteria(f)
    assert e.value.path == str(f) and e.value.line == 2 and (field is None or field in e.value.message)
    f.write_text("convergence:\n  default_cycle_s: 600\n")  # the control: a sane value loads
    assert load_criteria(f) == {"convergence": {"default_cycle_s": 600.0}}


def test_a_fifo_in_the_policy_tree_does_not_hold_the_load(tmp_path):
    os.mkfifo(tmp_path / "team.rego")
    p = subprocess.run([GUARDRAIL, "check", "--policy", str(tmp_path), "--", "true"], capture_output=True,
                       text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and "is a FIFO" in p.stderr and str(tmp_path / "team.rego") in p.stderr
