"""The README's tour, run as written: every command of its code block, from a directory laid out like a clone
(the shipped examples/ beside it), with the exit code its comment states (`# exit N: ...`; 0 when none).

Only the commands that need the live stack (real servers installed as root by `make live-stack`) are skipped,
with that reason; a command added to the tour is run here without any change to this file.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NEEDS_LIVE_STACK = re.compile(r"^make live-stack\b|--env live\b")


def tour() -> list[tuple[str, int]]:
    """(command, expected exit code) for each line of the code block under `## A tour`."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## A tour\n", 1)[1]
    block = section.split("```\n", 2)[1]
    out = []
    for line in block.splitlines():
        if not line.strip():
            continue
        parts = re.split(r"\s{2,}#\s", line, maxsplit=1)
        command, comment = parts[0].strip(), (parts[1] if len(parts) > 1 else "")
        code = re.search(r"\bexit (\d+)\b", comment)
        out.append((command, int(code.group(1)) if code else 0))
    return out


TOUR = tour()


def test_the_tour_is_there_and_names_only_files_the_repository_ships():
    assert len(TOUR) >= 15
    for command, _ in TOUR:
        for path in re.findall(r"(?:\./)?examples/[\w./-]+", command):
            assert (ROOT / path).is_file(), f"{command}: {path} is not in the repository"


@pytest.fixture
def clone(tmp_path):
    """A working directory like a fresh clone's root: the shipped examples, nothing else from this checkout."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    return tmp_path


@pytest.mark.slow
@pytest.mark.timeout(960)  # the tour's bench line runs a whole (one-seed) bench; each command is bounded at 900 s
@pytest.mark.parametrize("command,expected", TOUR, ids=[c for c, _ in TOUR])
def test_each_tour_command_runs_as_written_with_its_documented_exit_code(clone, command, expected):
    if NEEDS_LIVE_STACK.search(command):
        pytest.skip("needs the live stack: real servers `make live-stack` installs as root")
    env = {k: v for k, v in os.environ.items() if k not in ("GUARDRAIL_POLICY_DIR", "GUARDRAIL_SCENARIO_DIR")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    # The shell line's agent runs the real kubectl: no cluster of this machine's user is ever its target here.
    env["KUBECONFIG"] = str(clone / "no-kubeconfig")
    p = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=900)
    assert p.returncode == expected, f"{command}\nexit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    assert (p.stdout + p.stderr).strip() or command.startswith("guardrail mcp"), f"{command} printed nothing"
