"""`guardrail shell --confine`: the agent runs as its own user and cannot execute the real clients except through
the guard, whose daemon runs them for its shims. Needs root (it creates the system user `guardrail-test-agent`
once, and leaves it for the next run); the real redis-cli and psql binaries, never a server."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from guardrail.errors import InputError
from guardrail.journal import read_journal

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("useradd"),
                                reason="--confine needs root, unshare and useradd")

USER = "guardrail-test-agent"


def _confined(guardrail_cmd, tmp_path, script: str):
    # cwd "/": the agent's user cannot enter pytest's root-only temporary directories.
    return subprocess.run([guardrail_cmd, "shell", "--confine", "--confine-user", USER, "--journal",
                           str(tmp_path / "j.jsonl"), "--", "bash", "-c", script], cwd="/", capture_output=True,
                          text=True, timeout=180)


@pytest.mark.skipif(not shutil.which("redis-cli"), reason="redis-cli is not installed")
def test_the_confined_agent_runs_redis_cli_only_through_the_guard(guardrail_cmd, tmp_path):
    real = os.path.realpath(shutil.which("redis-cli"))
    proc = _confined(guardrail_cmd, tmp_path, f"""
        echo "uid=$(id -u)"
        {real} --version; echo "direct=$?"
        echo "bytes=$(cat {real} 2>/dev/null | wc -c)"
        redis-cli --version; echo "shim=$?"
        redis-cli -p 1 FLUSHALL; echo "flush=$?"
        """)
    out = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    assert proc.returncode == 0, proc.stderr
    assert out["uid"] != "0"
    assert out["direct"] == "126" and "Permission denied" in proc.stderr  # the real client: not for this user
    assert out["bytes"] == "0"  # nor read (and so copied out of the way)
    assert out["shim"] == "0" and "redis-cli 7" in proc.stdout  # through the guard: it runs, output streamed back
    assert out["flush"] == "126" and "SRE-DATA-001" in proc.stderr  # and the guard still decides
    records = read_journal(tmp_path / "j.jsonl")
    assert [r["command"] for r in records if r["kind"] == "command"] == ["redis-cli --version",
                                                                        "redis-cli -p 1 FLUSHALL"]
    (shims,) = [r for r in records if r["kind"] == "shims"]
    assert shims["confined"] is True


@pytest.mark.skipif(not shutil.which("psql"), reason="psql is not installed")
def test_the_confined_agent_cannot_reach_psql_by_any_path_but_the_shim(guardrail_cmd, tmp_path):
    import glob

    versioned = sorted(glob.glob("/usr/lib/postgresql/*/bin/psql"))
    direct = " ".join(f'{p} --version; echo "direct=$?";' for p in [shutil.which("psql"), *versioned])
    # No server listens on port 1: the real psql's own connection error shows it ran (through the guard).
    proc = _confined(guardrail_cmd, tmp_path, f'{direct} psql -h 127.0.0.1 -p 1 -c "select 1"; echo "shim=$?"')
    lines = proc.stdout.splitlines()
    assert [ln for ln in lines if ln.startswith("direct=")] == ["direct=126"] * (1 + len(versioned)), proc.stderr
    assert "shim=2" in lines and "psql: error: connection to server" in proc.stderr


def test_confine_without_root_is_bad_input(monkeypatch):
    from guardrail.cli import shell

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(InputError, match="--confine needs root"):
        shell.confined_user(USER)


@pytest.mark.skipif(not shutil.which("redis-cli"), reason="redis-cli is not installed")
def test_command_p_and_hash_p_do_not_reach_the_real_client(guardrail_cmd, tmp_path):
    real = os.path.realpath(shutil.which("redis-cli"))
    proc = _confined(guardrail_cmd, tmp_path, f"""
        command -p redis-cli --version; echo "command_p=$?"
        hash -p {real} r; r --version; echo "hash_p=$?"
        PATH=/usr/bin:/bin redis-cli --version; echo "own_path=$?"
        """)
    lines = proc.stdout.splitlines()
    assert {"command_p=126", "hash_p=126", "own_path=126"} <= set(lines), (proc.stdout, proc.stderr)
    assert "redis-cli 7" not in proc.stdout


def test_the_clients_on_the_standard_path_are_hidden_whatever_path_the_agent_was_given():
    from guardrail.cli.shell import hidden_clients

    tool = next((t for t in ("redis-cli", "psql", "mysql") if os.path.isfile(f"/usr/bin/{t}")), None)
    if tool is None:
        pytest.skip("no client in /usr/bin")
    hidden = hidden_clients({tool: None}, "/nonexistent")  # `command -p` searches /usr/bin:/bin all the same
    assert os.path.realpath(f"/usr/bin/{tool}") in hidden and f"/usr/bin/{tool}" in hidden
    assert hidden_clients({"no-such-tool-here": None}, "/nonexistent") == []
