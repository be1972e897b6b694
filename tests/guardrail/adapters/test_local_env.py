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
    r = LocalEnvironment(cwd=tmp_path, timeout_s=0.2).run("echo started; sleep 300")
    # Stopped at its timeout, not run to its end: the bound is generous, for a busy machine.
    assert r.exit_code == TIMEOUT_EXIT_CODE and "timed out after 0.2s" in r.stderr and r.duration_s < 120


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


def test_persistence_reads_a_local_redis_the_way_the_agent_reached_it(redis_server, tmp_path):
    # A real redis-server on a loopback port: the catalogue's default read (`redis-cli -h <component>`) cannot
    # reach it; the agent's own options (-h 127.0.0.1 -p PORT) can, and are what the read uses.
    from guardrail.actions import normalise
    from verifiers.persistence import PersistenceReader, changes_of

    env = LocalEnvironment(cwd=tmp_path, timeout_s=60)
    reader = PersistenceReader(read_attempts=1, retry_wait_s=0)
    cmd = f"redis-cli -h 127.0.0.1 -p {redis_server.port} CONFIG SET maxmemory 64mb"
    (action,) = [a.model_dump(mode="json") for a in normalise(cmd)]
    before = reader.capture(env, action)
    assert [(r["key"], r["before"]) for r in before] == [("redis.maxmemory", 0)]
    assert env.run(cmd).ok
    (ck,) = changes_of({"command": cmd, "seq": 1, "actions": [action]}, 0)
    assert reader.read_effective(env, ck) == 64 * 1024 * 1024
    # Through kubectl exec the agent's options were for a client in the pod: the read borrows them only through
    # that same pod, never from here.
    (_, inner) = [a.model_dump(mode="json") for a in normalise(f"kubectl exec redis-0 -- {cmd}")]
    (ck_exec,) = changes_of({"command": cmd, "seq": 2, "actions": [inner]}, 0)
    vs = reader.variables(*reader.entry_for(ck_exec), ck_exec)
    assert vs["through"] == "kubectl exec redis-0 --"
    assert vs["agent"]["redis_cli"] == f"-h 127.0.0.1 -p {redis_server.port}"


def test_redis_connection_options_are_read_from_the_agents_command():
    from verifiers.persistence import redis_connection_args

    assert redis_connection_args("redis-cli -h 127.0.0.1 -p 6380 -n 2 CONFIG SET x 1") == \
        ["-h", "127.0.0.1", "-p", "6380", "-n", "2"]
    assert redis_connection_args("redis-cli -s '/run/redis sock' --no-auth-warning -a 'p w' GET k") == \
        ["-s", "'/run/redis sock'", "-a", "'p w'"]
    assert redis_connection_args("redis-cli CONFIG SET x 1") == []
    # Options that take a value are skipped with it; the program is found by its base name.
    assert redis_connection_args("redis-cli -r 1 -h 127.0.0.1 -p 6380 CONFIG SET x 1") == \
        ["-h", "127.0.0.1", "-p", "6380"]
    assert redis_connection_args("redis-cli --tls --cacert /c.pem -h h -p 6380 PING") == ["-h", "h", "-p", "6380"]
    assert redis_connection_args("/usr/bin/redis-cli -p 6380 PING") == ["-p", "6380"]
    assert redis_connection_args("psql -h db") is None
    assert redis_connection_args("redis-cli 'unclosed") is None
