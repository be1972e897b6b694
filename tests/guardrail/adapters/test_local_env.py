"""The local environment (a real shell, a real clock) and environment resolution by entry point."""

from __future__ import annotations

import pytest

from guardrail.envs import resolve_environment, split_spec
from guardrail.envs.local import TIMEOUT_EXIT_CODE, LocalEnvironment
from guardrail.errors import EnvironmentError_, InputError
from verifiers.protocols import Environment


def test_runs_with_the_real_shell_in_its_directory(tmp_path):
    env = LocalEnvironment(cwd=tmp_path)
    r = env.run("pwd; echo err >&2; exit 3")
    assert (r.stdout.strip(), r.stderr.strip(), r.exit_code) == (str(tmp_path), "err", 3)
    assert isinstance(env, Environment)


def test_timeout_is_reported_not_raised(tmp_path):
    r = LocalEnvironment(cwd=tmp_path, timeout_s=0.2).run("echo started; sleep 5")
    assert r.exit_code == TIMEOUT_EXIT_CODE and "timed out after 0.2s" in r.stderr and r.duration_s < 3


def test_restart_is_unsupported_with_a_clear_error():
    with pytest.raises(EnvironmentError_, match="cannot restart 'redis'"):
        LocalEnvironment().restart("redis")


def test_resolution_through_the_entry_point_group(tmp_path):
    env = resolve_environment(f"local:{tmp_path}")
    assert isinstance(env, LocalEnvironment) and env.cwd == str(tmp_path)
    assert split_spec("twin:ia-006") == ("twin", "ia-006")
    with pytest.raises(InputError, match="unknown environment 'nosuch'"):
        resolve_environment("nosuch")


def test_a_working_directory_that_is_not_there_is_bad_input_at_start(tmp_path):
    from guardrail.envs.local import make

    with pytest.raises(InputError, match="no such directory"):
        make(str(tmp_path / "nowhere"))


def test_a_shell_that_cannot_start_is_an_answer_not_an_exception(tmp_path):
    env = LocalEnvironment(cwd=tmp_path)
    gone = tmp_path / "gone"
    gone.mkdir()
    env.cwd = str(gone)
    gone.rmdir()  # the directory went away after the session began
    r = env.run("echo hi")
    assert r.exit_code == 126 and "cannot start" in r.stderr and str(gone) in r.stderr
