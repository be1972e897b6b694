"""kill as bash reads it, and PID 1 of a container as its restart."""

import pytest

from guardrail.actions import normalise
from guardrail.actions.classifiers.staples import kill_args


@pytest.mark.parametrize("args,sig,targets", [
    ([], "TERM", []), (["1"], "TERM", ["1"]), (["-9", "1"], "9", ["1"]), (["-KILL", "1"], "KILL", ["1"]),
    (["-SIGINT", "1"], "INT", ["1"]), (["-s", "term", "1"], "TERM", ["1"]), (["-n", "2", "1"], "2", ["1"]),
    (["--signal=HUP", "1"], "HUP", ["1"]), (["-9", "-1"], "9", ["-1"]), (["--", "-1"], "TERM", ["-1"]),
    (["-s", "KILL", "--", "1", "2"], "KILL", ["1", "2"]),
])
def test_kill_reads_its_signal_and_targets_as_bash_does(args, sig, targets):
    assert kill_args(args) == (sig, targets)


@pytest.mark.parametrize("cmd", [
    "kubectl exec -n slack postgres-0 -- kill 1",
    "kubectl exec postgres-0 -- kill -s INT 1",
    "kubectl exec postgres-0 -- sh -c 'kill -TERM 1 2'",
    "kubectl exec postgres-0 -- kill 01",  # the same pid
])
def test_a_signal_to_pid_1_inside_a_pod_is_a_restart_of_that_pod(cmd):
    kill = normalise(cmd)[-1]
    assert kill.details.get("restart") is True
    assert (kill.target.kind, kill.target.name) == ("pod", "postgres-0")


@pytest.mark.parametrize("cmd", [
    "kubectl exec postgres-0 -- kill -HUP 1",  # a reload
    "kubectl exec postgres-0 -- kill -0 1",  # only checks that it exists
    "kubectl exec postgres-0 -- kill 1234",  # not the container's main process
    "kill 1234",
    "kill $!",  # on the agent's own machine a computed pid is its own job, not known to be a server
])
def test_other_signals_and_processes_are_not_restarts(cmd):
    kill = normalise(cmd)[-1]
    assert kill.verb == "kill" and kill.mutating is True
    assert "restart" not in kill.details


@pytest.mark.parametrize("cmd,restart", [
    ("kubectl exec postgres-0 -- pkill postgres", True),
    ("kubectl exec redis-0 -- killall -9 redis-server", True),
    ("kubectl exec redis-0 -- pkill /usr/bin/redis-server", True),
    ("kubectl exec postgres-0 -- pkill -HUP postgres", False),  # a reload
    ("kubectl exec postgres-0 -- pkill --signal=USR1 postgres", False),
    ("kubectl exec postgres-0 -- pkill --signal HUP postgres", False),
    ("kubectl exec redis-0 -- killall -s HUP redis-server", False),
    ("kubectl exec postgres-0 -- pkill -f 'postgres: autovacuum'", False),  # a worker, not the server
    ("pkill -f celery", False),
    ("kubectl exec redis-0 -- pkill redis", True),  # pkill matches part of the name: redis-server
    ("kubectl exec redis-0 -- pkill -f 'redis-server *:6379'", True),
    ("kubectl exec postgres-0 -- pkill 'postgre[s]'", True),
    ("kubectl exec pgbouncer-0 -- pkill pgbouncer", True),
    ("kubectl exec redis-0 -- killall redis", False),  # killall's name is exact: no program is called redis
    ("kubectl exec mariadb-0 -- pkill -P 1", True),  # every child of PID 1
])
def test_pkill_of_the_server_program_in_a_pod_is_a_restart(cmd, restart):
    kill = normalise(cmd)[-1]
    assert kill.mutating is True
    assert kill.details.get("restart", False) is restart


@pytest.mark.parametrize("cmd,restart", [
    # A pid looked up by the server program's name as the kill runs: the server.
    ("kubectl exec mariadb-0 -- sh -c 'kill -9 $(pgrep mysqld)'", True),
    ("kubectl exec mariadb-0 -- sh -c 'kill `pidof mysqld`'", True),
    ("kubectl exec redis-0 -- sh -c 'kill $(pgrep -f redis)'", True),
    # Looked up by another program's name: not the server.
    ("kubectl exec worker-0 -- sh -c 'kill $(pgrep -f celery)'", False),
    ("kubectl exec redis-0 -- sh -c 'kill $(pidof redis)'", False),  # pidof's name is exact
    # Any other pid computed as the command runs may be the server's: a pid file, a variable.
    ("kubectl exec mariadb-0 -- sh -c 'kill -TERM `cat /var/run/mysqld/mysqld.pid`'", True),
    ("kubectl exec mariadb-0 -- sh -c 'p=$(pidof mysqld); kill $p'", True),
    # -1: every process the signal can reach.
    ("kubectl exec mariadb-0 -- kill -9 -1", True),
    ("kubectl exec mariadb-0 -- kill -- -1", True),
    # A reload by a computed pid stays a reload; `kill -1` alone is signal 1 (HUP) with no target.
    ("kubectl exec mariadb-0 -- sh -c 'kill -HUP $(pidof mysqld)'", False),
    ("kubectl exec mariadb-0 -- kill -1", False),
])
def test_a_kill_by_a_pid_computed_in_the_pod_is_judged_by_what_it_may_reach(cmd, restart):
    kill = normalise(cmd)[-1]
    assert kill.verb == "kill" and kill.mutating is True
    assert kill.details.get("restart", False) is restart
    if restart:
        assert kill.target.kind == "pod"


@pytest.mark.parametrize("cmd,kind,name", [
    # On the agent's own machine (guardrail shell --env local, or inside the container it runs in).
    ("pkill -9 postgres", "component", "postgres"),
    ("killall redis-server", "component", "redis-server"),
    ("kill -9 $(pgrep mysqld)", "component", "mysqld"),
    ("kill 1", "process", ""),  # the container's main process when the agent runs in one
    ("kill -9 -1", "process", ""),
])
def test_a_server_stopped_on_the_agents_own_machine_is_a_restart(cmd, kind, name):
    kill = normalise(cmd)[-1]
    assert kill.details.get("restart") is True
    assert (kill.target.kind, kill.target.name) == (kind, name)


@pytest.mark.parametrize("cmd,restart,name", [
    ("pkill -9 -f 'postgres -D /var/lib/postgresql/data'", True, "postgres"),  # the server, not "data"
    ("kill -9 $(pgrep -f 'postgres -D /data')", True, "postgres"),
    ("pkill node", False, ""),  # on the agent's own machine an app runtime is as likely its own tool
    ("killall java", False, ""),
    ("pkill -f 'node server.js'", False, ""),
    ("pkill -u postgres -f backup.sh", False, ""),  # -u's value is a user, not a process name
])
def test_on_the_agents_machine_only_a_datastores_server_is_restarted(cmd, restart, name):
    kill = normalise(cmd)[-1]
    assert kill.details.get("restart", False) is restart
    if restart:
        assert (kill.target.kind, kill.target.name) == ("component", name)


@pytest.mark.parametrize("cmd,restart", [
    ("kubectl exec postgres-0 -- sh -c 'pgrep postgres | xargs kill'", True),  # pids read as it runs: maybe PID 1
    ("kubectl exec postgres-0 -- sh -c 'pgrep postgres | xargs kill -HUP'", False),  # a reload
    # On the agent's own machine the pids are those of the program the lookup names, as in `kill $(pgrep ...)`.
    ("pgrep postgres | xargs kill", True),
    ("pidof mysqld | xargs -r kill -9", True),
    ("pgrep postgres | xargs kill -HUP", False),
    ("pgrep -f backup.sh | xargs kill", False),  # not a server
    ("cat /tmp/pids | xargs kill", False),  # pids from a file: not known to reach a server
])
def test_a_kill_fed_its_pids_by_xargs_is_a_kill_not_a_signal_listing(cmd, restart):
    """`... | xargs kill` was read as `kill -l` (no arguments): a read-only listing of signal names."""
    kill = normalise(cmd)[-1]
    assert (kill.verb, kill.mutating) == ("kill", True)
    assert kill.details.get("restart", False) is restart


@pytest.mark.parametrize("cmd,restart", [
    ("kubectl exec redis-0 -- kill -USR1 1", True),  # redis-server dies of SIGUSR1: it does not handle it
    ("kubectl exec redis-0 -- killall -s USR1 redis-server", True),
    ("kubectl exec redis-0 -- kill -USR2 $(pidof redis-server)", True),
    ("kubectl exec pgbouncer-0 -- pkill -SIGUSR1 pgbouncer", True),  # PAUSE, not harmless
    ("kubectl exec web-0 -- pkill -USR1 nginx", False),  # nginx reopens its logs
    ("kubectl exec pg-0 -- kill -USR1 $(pgrep postgres)", False),
    ("kubectl exec redis-0 -- kill -HUP 1", False),
])
def test_usr_signals_end_a_server_unless_it_handles_them(cmd, restart):
    kill = normalise(cmd)[-1]
    assert kill.details.get("restart", False) is restart


@pytest.mark.parametrize("cmd,restart,target", [
    # Every process of the datastore's own user: its server.
    ("pkill -u postgres", True, ("component", "postgres")),
    ("killall -u mysql", True, ("component", "mysqld")),
    ("pkill --euid=redis", True, ("component", "redis-server")),
    ("kubectl exec svc-auth-0 -- pkill -u app", True, ("pod", "svc-auth-0")),  # in a pod the server may be one
    ("pkill -u app", False, None),  # on the agent's own machine: not a datastore's user
    ("pkill -HUP -u postgres", False, None),  # a reload
    ("pkill -u postgres -f backup.sh", False, None),  # a pattern narrows it
    # A postgres child that dies of a crash signal: the postmaster ends every backend and recovers.
    ("pkill -9 -f 'postgres: '", True, ("component", "postgres")),
    ("kubectl exec postgres-0 -- pkill -KILL -f 'postgres: autovacuum launcher'", True, ("pod", "postgres-0")),
    ("kubectl exec postgres-0 -- pkill -f 'postgres: saleor'", False, None),  # TERM ends that backend only
    # 0: every process of the kill's own process group.
    ("kill -9 0", True, ("process", "")),
    ("kubectl exec postgres-0 -- kill -9 0", True, ("pod", "postgres-0")),
])
def test_a_kill_by_user_group_or_child_title_reaches_the_server(cmd, restart, target):
    kill = normalise(cmd)[-1]
    assert kill.mutating is True
    assert kill.details.get("restart", False) is restart
    if target:
        assert (kill.target.kind, kill.target.name) == target
