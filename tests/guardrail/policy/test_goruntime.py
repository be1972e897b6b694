"""guardrail.policy.goruntime: the Go GC settings the guard's long-lived commands re-execute with."""

from __future__ import annotations

import subprocess
import sys

from guardrail.policy import goruntime


def test_tuned_environ_adds_the_settings_and_a_marker():
    env = goruntime.tuned_environ({"PATH": "/bin"})
    assert env == {"PATH": "/bin", "GOGC": "1000", "GOMEMLIMIT": "512MiB", "GUARDRAIL_GO_TUNED": "GOGC,GOMEMLIMIT"}


def test_nothing_changes_when_tuned_set_by_the_operator_or_opted_out():
    assert goruntime.tuned_environ({"GUARDRAIL_GO_TUNED": "GOGC,GOMEMLIMIT", "GOGC": "1000"}) is None
    assert goruntime.tuned_environ({"GOGC": "100"}) is None
    assert goruntime.tuned_environ({"GOMEMLIMIT": "1GiB"}) is None
    for off in ("0", "false", "off", "No"):
        assert goruntime.tuned_environ({"GUARDRAIL_GO_TUNING": off}) is None
    assert goruntime.tuned_environ({"GUARDRAIL_GO_TUNING": "1"}) is not None


def test_child_env_removes_only_what_the_guard_added():
    tuned = goruntime.tuned_environ({"PATH": "/bin", "HOME": "/h"})
    assert goruntime.child_env(tuned) == {"PATH": "/bin", "HOME": "/h"}
    # An operator's GOGC (no marker) is theirs, and is passed on.
    assert goruntime.child_env({"GOGC": "150", "PATH": "/bin"}) == {"GOGC": "150", "PATH": "/bin"}


def test_reexec_repeats_the_command_line_with_the_tuned_environment():
    calls = []
    done = goruntime.reexec_tuned(["python", "-m", "guardrail.cli", "shell", "--", "agent"], environ={"A": "1"},
                                  execve=lambda path, args, env: calls.append((path, args, env)))
    assert done is True
    (path, args, env), = calls
    assert path == sys.executable and args == [sys.executable, "-m", "guardrail.cli", "shell", "--", "agent"]
    assert env["GOGC"] == "1000" and env["A"] == "1"
    assert goruntime.reexec_tuned(["python", "x"], environ=env, execve=lambda *a: calls.append(a)) is False
    assert len(calls) == 1


def test_only_long_lived_subcommands_are_re_executed():
    assert goruntime.subcommand(["--verbose", "bench", "--seeds", "2"]) == "bench"
    assert goruntime.subcommand([]) is None
    assert {"shell", "mcp", "bench", "run"} <= goruntime.LONG_LIVED
    assert "check" not in goruntime.LONG_LIVED and "policy" not in goruntime.LONG_LIVED


def test_the_go_runtime_really_reads_the_settings_after_the_re_exec(tmp_path):
    # GODEBUG=gctrace=1 makes Go print a line per collection with its heap goal. Without the re-exec the goal
    # stays near 2x the live heap (GOGC=100); after it, near 11x (GOGC=1000), so far fewer collections run.
    script = tmp_path / "probe.py"
    script.write_text(
        "import sys\n"
        "from guardrail.policy import goruntime\n"
        "if sys.argv[1] == 'tuned':\n"
        "    goruntime.reexec_tuned()\n"
        "from opa_bindings import OpaEngine\n"
        "e = OpaEngine()\n"
        "for _ in range(2000):\n"
        "    e.eval_query('x := [y | some y in numbers.range(1, 200)]')\n")
    base = {"GODEBUG": "gctrace=1", "PATH": "/usr/bin:/bin"}

    def collections(mode: str) -> int:
        out = subprocess.run([sys.executable, str(script), mode], env=base, capture_output=True, text=True,
                             timeout=120, check=True)
        return sum(1 for line in out.stderr.splitlines() if line.startswith("gc "))

    plain, tuned = collections("plain"), collections("tuned")
    assert plain >= 10
    assert tuned * 3 < plain, (plain, tuned)
