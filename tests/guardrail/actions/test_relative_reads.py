"""Files read at decision time are the files the command will open (issue #25, "read commands as they run").

`mysql d < f.sql`, `mysql -e 'source f.sql'`, `kubectl apply -f m.yaml` and `helm -f v.yaml` have their file read
when the guard decides (guardrail.actions.invocation.read_at_decision). A relative path names a file in the
directory the command runs in: the shell shim's working directory (the daemon hears it), the local environment's,
or one the text itself moves to (`cd d && mysql < f.sql`). Each directory here holds a file of the same name with
other SQL, so that reading the guard's own directory instead would allow what bash then runs as a write.
"""

from __future__ import annotations

import pytest

from guardrail.actions import normalise
from guardrail.actions.invocation import commands_run_in

READS = "SELECT 1;\n"
WRITES = "DELETE FROM t;\n"
MANIFEST = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: default}\ndata: {a: b}\n"


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """The guard's own directory holds harmless files; `there` holds the same names with writes."""
    here, there = tmp_path / "here", tmp_path / "there"
    for d, sql in ((here, READS), (there, WRITES)):
        d.mkdir()
        (d / "f.sql").write_text(sql)
    monkeypatch.chdir(here)
    return here, there


def read_only(cmd: str) -> bool:
    acts = normalise(cmd)
    return bool(acts) and all(a.mutating is False for a in acts)


@pytest.mark.parametrize("form", [
    "cd {there} && mysql d < f.sql", "cd {there}; mysql d -e 'source f.sql'", "pushd {there}; mysql d < f.sql",
    "(cd {there} && mysql d <<< 'source f.sql')", "env -C {there} mysql d -e 'source f.sql'",
    "sh -c 'cd {there} && mysql d < f.sql'", "cd {there} && kubectl apply -f m.yaml",
])
def test_a_relative_path_after_a_change_of_directory_is_not_read_from_the_guards_directory(dirs, form):
    here, there = dirs
    (here / "m.yaml").write_text(MANIFEST % "harmless")
    (there / "m.yaml").write_text(MANIFEST % "other")
    cmd = form.format(there=there)
    assert not read_only(cmd), normalise(cmd)
    assert any(a.opaque_reason and "relative" in a.opaque_reason for a in normalise(cmd)), normalise(cmd)


def test_negative_controls_an_absolute_path_or_no_change_of_directory_is_read(dirs):
    here, there = dirs
    (there / "r.sql").write_text(READS)
    assert read_only(f"cd {there} && mysql d < {there / 'r.sql'}")
    assert not read_only(f"cd {here} && mysql d < {there / 'f.sql'}")  # the writes, by absolute path
    assert read_only("mysql d < f.sql")  # no cd: the guard's directory is the command's
    assert read_only("mysql d -e 'source f.sql'")


def test_the_directory_the_adapter_runs_the_command_in_is_where_a_relative_path_is_read(dirs):
    here, there = dirs
    with commands_run_in(str(there)):
        assert not read_only("mysql d < f.sql")
        assert not read_only("mysql d -e 'source f.sql'")
    with commands_run_in(str(here)):
        assert read_only("mysql d < f.sql")
    with commands_run_in("relative/dir"):  # not an absolute path: the guard's own directory
        assert read_only("mysql d < f.sql")


def test_the_shell_daemon_reads_relative_paths_in_the_shims_working_directory(dirs, tmp_path):
    from guardrail.adapters.session import GuardSessions, load_engine
    from guardrail.adapters.shell import GuardDaemon
    from guardrail.context import IncidentContext

    here, there = dirs
    sessions = GuardSessions(load_engine(), IncidentContext(), journal_dir=tmp_path / "j")
    daemon = GuardDaemon(sessions.get("rel"), tmp_path / "g.sock")
    ask = {"op": "before", "argv": ["mysql", "d", "-e", "source f.sql"]}
    there_reply = daemon.handle({**ask, "cwd": str(there)}, {})
    here_reply = daemon.handle({**ask, "cwd": str(here)}, {})
    assert not there_reply["runs"], there_reply
    assert here_reply["runs"], here_reply  # the negative control: the same command where f.sql reads


def test_guard_execute_reads_relative_paths_where_the_local_environment_runs(dirs, tmp_path):
    from guardrail.adapters.session import load_engine
    from guardrail.context import IncidentContext
    from guardrail.envs.local import LocalEnvironment
    from guardrail.guard import DENIED_EXIT_CODE, Guard
    from guardrail.journal import Journal

    here, there = dirs
    # `cat f.sql | wc -l` would not do: the file must be read by a tool the guard reads it for. mysql runs (and
    # fails to connect: no server on its default socket) only where f.sql reads.
    cmd = "mysql --connect-timeout=1 -S /nonexistent.sock d -e 'source f.sql'"
    for cwd, denied in ((there, True), (here, False)):
        guard = Guard(load_engine(), IncidentContext(), journal=Journal(tmp_path / f"{cwd.name}.jsonl"),
                      env=LocalEnvironment(cwd=cwd, timeout_s=30))
        result = guard.execute(cmd)
        assert (result.exit_code == DENIED_EXIT_CODE) is denied, (cwd, result)
