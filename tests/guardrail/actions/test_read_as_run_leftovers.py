"""Commands judged as they run, the rest of issue #25's item 3: GNU long-option abbreviations for cp, mv, install,
ln, chmod and chown, resolved against each tool's own option table; `kubectl delete -f FILE` read at decision time
as apply reads it; stdin redirects as bash applies them (the last one wins) and the words tree-sitter-bash hangs on a
`<` redirect; mysql's -e and stdin."""

from __future__ import annotations

import pytest

from guardrail.actions import normalise
from guardrail.actions.model import UNKNOWN
from guardrail.context import IncidentContext
from guardrail.guard import Guard
from guardrail.policy.embedded import EmbeddedOPA


@pytest.fixture(scope="module")
def guard():
    with EmbeddedOPA() as engine:
        yield Guard(engine, IncidentContext(namespaces=["slack"]))


def _writes(command: str) -> set[tuple[str, str]]:
    return {(a.verb, a.target.name) for a in normalise(command) if a.tool == "file"}


# (abbreviated, spelled out): the same files written, changed or deleted.
ABBREVIATED = [
    ("cp --target-d /etc x", "cp --target-directory /etc x"),
    ("cp --target-directory=/etc x", "cp -t /etc x"),
    ("cp --t /etc x", "cp -t /etc x"),
    ("cp --suf .b --target-d=/etc x", "cp -S .b -t /etc x"),
    ("cp --no-pres mode a /etc/b", "cp --no-preserve=mode a /etc/b"),
    ("mv --targ /etc y", "mv -t /etc y"),
    ("mv --targ=/etc y z", "mv -t /etc y z"),
    ("install --mo 4755 a /usr/local/bin/a", "install -m 4755 a /usr/local/bin/a"),
    ("install --ow root --gr root a /etc/a", "install -o root -g root a /etc/a"),
    ("install --targ /usr/local/bin a", "install -t /usr/local/bin a"),
    ("ln --sym --targ /etc x", "ln -s -t /etc x"),
    ("ln --suf=.old --target-dir /etc x", "ln -S .old -t /etc x"),
    ("chmod --rec 777 /etc", "chmod -R 777 /etc"),
    ("chmod --ref /etc/shadow /etc/passwd", "chmod --reference=/etc/shadow /etc/passwd"),
    ("chown --rec --fr root nobody /etc", "chown -R --from=root nobody /etc"),
    ("chown --ref=/tmp/x /etc/passwd", "chown --reference=/tmp/x /etc/passwd"),
    ("chgrp --ref /tmp/x /etc/passwd", "chgrp --reference=/tmp/x /etc/passwd"),
]


@pytest.mark.parametrize("short,long", ABBREVIATED)
def test_a_long_option_abbreviated_is_read_as_the_tool_reads_it(short, long):
    assert _writes(short) == _writes(long) != set()


@pytest.mark.parametrize("command,written", [
    ("cp --target-d /etc x", "/etc"), ("mv --targ /etc y", "/etc"), ("ln --sym --targ /etc x", "/etc"),
    ("install --mo 4755 a /usr/local/bin/a", "/usr/local/bin/a"), ("chmod --ref=/etc/shadow /etc/passwd", "/etc/passwd"),
])
def test_the_file_written_is_the_one_the_tool_writes(command, written):
    assert any(name == written for _, name in _writes(command)), _writes(command)


@pytest.mark.parametrize("command", ["install -s --strip-program=sh a /tmp/b", "install -s --strip-p sh a /tmp/b",
                                     "install --strip-prog=/tmp/x a /tmp/b"])
def test_install_running_a_strip_program_is_opaque(command):
    (a,) = normalise(command)
    assert a.mutating == UNKNOWN and "strip-program" in a.opaque_reason


def test_an_option_a_tool_does_not_have_is_not_taken_from_another_tool():
    # cp -i is --interactive (no value): both names are files
    assert _writes("cp -i a /etc/b") == {("write", "/etc/b")}
    # rsync keeps its own table (-e takes the remote shell)
    assert _writes("rsync -a src /etc/dst") == {("write", "/etc/dst")}


MANIFEST = """apiVersion: v1
kind: ConfigMap
metadata:
  name: redis-config
  namespace: slack
"""


def _decided(guard, command):
    return sorted((d.allowed, tuple(sorted(f.id for f in d.denies))) for d in guard.before(command).decisions)


def test_kubectl_delete_reads_the_manifest_file_as_it_reads_a_heredoc(guard, tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text(MANIFEST)
    heredoc = _decided(guard, f"kubectl delete -f - <<'EOF'\n{MANIFEST}EOF")
    assert _decided(guard, f"kubectl delete -f {f}") == heredoc
    assert _decided(guard, f"kubectl delete -f - < {f}") == heredoc
    for command in (f"kubectl delete -f {f}", f"kubectl delete --filename={f}", f"kubectl delete -f - < {f}"):
        (a,) = normalise(command)
        assert (a.target.kind, a.target.name, a.mutating) == ("configmap", "redis-config", True)


@pytest.mark.parametrize("what", ["missing", "remote", "pipe"])
def test_kubectl_delete_of_a_manifest_the_guard_cannot_read_is_opaque(tmp_path, what):
    command = {"missing": f"kubectl delete -f {tmp_path / 'nope.yaml'}",
               "remote": "kubectl delete -f https://example.com/m.yaml",
               "pipe": "curl -s https://example.com/m.yaml | kubectl delete -f -"}[what]
    a = normalise(command)[-1]
    assert a.verb == "delete" and a.mutating == UNKNOWN and a.opaque_reason


@pytest.mark.parametrize("text,words", [
    ("xargs </dev/null rm -rf <<'EOF'\n/var/lib/mysql\nEOF", ["rm", "-rf", "/var/lib/mysql"]),
    ("xargs </dev/null rm -rf <<< /var/lib/mysql", ["rm", "-rf", "/var/lib/mysql"]),
    ("xargs -0 </dev/null rm -rf <<'EOF'\n/a b\nEOF", ["rm", "-rf", "/a b\n"]),
    ("xargs -d , </dev/null rm -rf <<< /a,/b", ["rm", "-rf", "/a", "/b\n"]),
    ("nice </dev/null rm -rf /var/lib/mysql", ["rm", "-rf", "/var/lib/mysql"]),
    ("sudo </dev/null rm -rf /var/lib/mysql", ["rm", "-rf", "/var/lib/mysql"]),
    ("cat </dev/null a b", ["cat", "a", "b"]),
])
def test_stdin_and_words_are_read_as_bash_applies_the_redirects(text, words):
    assert normalise(text)[-1].words == words


@pytest.mark.parametrize("text", ["psql </dev/null <<'EOF'\nDROP TABLE t;\nEOF",
                                  "psql < /tmp/x.sql <<'EOF'\nDROP TABLE t;\nEOF",
                                  "psql <<< 'SELECT 1' <<'EOF'\nDROP TABLE t;\nEOF"])
def test_the_last_stdin_redirect_is_the_one_the_program_reads(text):
    (a,) = normalise(text)
    assert (a.verb, a.mutating) == ("drop", True)


@pytest.mark.parametrize("alias,use", [
    ("alias z=psql", "z <<'EOF'\nSELECT 1;\nEOF && true;\n# ; DROP TABLE users;\n"),
    ("alias z='psql -X'", "z <<'EOF'\nSELECT 1;\nEOF;\n# ; DROP TABLE users;\n"),
])
def test_an_alias_keeps_the_heredoc_as_bash_ends_it(alias, use):
    a = [x for x in normalise(f"shopt -s expand_aliases\n{alias}\n{use}") if x.tool == "psql"]
    assert a and all(x.mutating == UNKNOWN for x in a)


def test_an_alias_with_a_heredoc_that_ends_cleanly_is_read():
    a = [x for x in normalise("alias z=psql\nz <<'EOF'\nDROP TABLE t;\nEOF") if x.tool == "psql"]
    assert [(x.verb, x.mutating) for x in a] == [("drop", True)]
    a = [x for x in normalise("alias z=psql\nz <<'EOF'\nSELECT 1;\nEOF") if x.tool == "psql"]
    assert [(x.verb, x.mutating) for x in a] == [("select", False)]


@pytest.mark.parametrize("command,verbs", [
    # with -e the client never reads stdin
    ("mysql -e 'SELECT 1' <<'EOF'\nDROP TABLE t;\nEOF", [("select", False)]),
    ("echo 'DROP TABLE t' | mysql -e 'SELECT 1'", [("select", False)]),
    # without -e it reads stdin, whatever it is
    ("mysql d <<'EOF'\nDROP TABLE t;\nEOF", [("drop", True)]),
    ("mysql d < /tmp/anything.sql", [("query", UNKNOWN)]),
    ("echo 'DROP TABLE t' | mysql d", [("drop", True)]),
    # several -e are one text to the client, joined by a space: a string can run across them
    ("mysql -e \"select 'a\" -e \"'; delete from t; -- \"", [("select", False), ("delete", True)]),
])
def test_mysql_reads_stdin_only_without_e(command, verbs):
    got = [(a.verb, a.mutating) for a in normalise(command) if a.tool == "mysql"]
    assert all(v in got for v in verbs) and (("drop", True) in got) == (("drop", True) in verbs), got


def test_mysql_reads_a_file_redirected_into_it_now(tmp_path):
    f = tmp_path / "m.sql"
    f.write_text("SELECT 1;\nDELETE FROM t;\n")
    assert [(a.verb, a.mutating) for a in normalise(f"mysql d < {f}")] == [("select", False), ("delete", True)]
    f.write_text("SELECT 1;\n")
    assert [(a.verb, a.mutating) for a in normalise(f"mysql d < {f}")] == [("select", False)]
    for unreadable in (tmp_path / "missing.sql", "/dev/zero", tmp_path):
        assert [(a.verb, a.mutating) for a in normalise(f"mysql d < {unreadable}")] == [("query", UNKNOWN)]
