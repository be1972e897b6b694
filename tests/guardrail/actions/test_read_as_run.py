"""Commands judged as they run (issue #25): text rules read the parsed, unquoted words; paths are cleaned before
matching; a glob is judged as what it could match; wrappers hand over what follows `--`; GNU long options may be
abbreviated; stdin that psql reads is judged. Each case beside its plain form (the control), decided by the
shipped library through the real normaliser."""

from __future__ import annotations

import os

import pytest

from guardrail.actions import normalise
from guardrail.context import IncidentContext
from guardrail.guard import Guard
from guardrail.policy.embedded import EmbeddedOPA


@pytest.fixture(scope="module")
def guard():
    with EmbeddedOPA() as engine:
        yield Guard(engine, IncidentContext(namespaces=["slack"]))


def rules(guard, command: str) -> set[str]:
    return {f.id for d in guard.before(command).decisions for f in d.denies + d.warns}


# (the plain command, the rule it is denied by, variants written differently that run the same)
SAME_AS_RUN = [
    ("redis-cli SHUTDOWN NOSAVE", "SRE-RESTART-004",
     ["redis-cli SHUTDOWN 'NOSAVE'", 'redis-cli shutdown "nosave"', "redis-cli SHUTDOWN NOS\\AVE",
      "redis-cli SHUTDOWN NO''SAVE", "sh -c 'redis-cli shutdown \"NOSAVE\"'"]),
    ("kubectl delete pods --all-namespaces -l app=x", "SRE-SCOPE-004",
     ["kubectl delete pods '--all-namespaces' -l app=x", 'kubectl delete pods "-A" -l app=x',
      "kubectl delete pods -\\A -l app=x"]),
    ("kubectl set image deploy/x x=img:2", "SRE-WORKLOAD-005",
     ["kubectl set 'image' deploy/x x=img:2", 'kubectl "set" image deploy/x x=img:2']),
    ("psql -c 'GRANT ALL ON t TO bob WITH GRANT OPTION'", "SRE-PRIV-005",
     ["psql -c 'GRANT ALL ON t TO bob WITH/**/GRANT OPTION'", "psql -c 'GRANT ALL ON t TO bob WITH -- x\n GRANT OPTION'"]),
    ("rm -rf /etc", "SRE-DATA-011",
     ["rm -rf /tmp/../etc", "rm -rf //etc/.", "rm -rf /e?c", "rm -rf /[e]tc", "rm -rf /e*c/*",
      "rm --recursive --force /etc", "rm --rec /etc", "rm --recur -f /etc", "rm --r /etc", "command -- rm -rf /etc",
      "exec -- rm -rf /etc", "builtin -- rm -rf /etc", "nohup -- rm -rf /etc", "env -- rm -rf /etc",
      "nice -n 5 -- rm -rf /etc", "setsid -- rm -rf /etc", "stdbuf -o0 -- rm -rf /etc", "sudo -- rm -rf /etc",
      "timeout -- 5 rm -rf /etc", "echo /etc | xargs -- rm -rf", "rm -r\\\n -f /etc", "r\\\nm -rf /etc",
      "rm -r\\\nf /etc", "rm -rf /e\\\ntc", "echo `echo \\`rm -rf /etc\\``", "x=`echo \\`rm -rf /etc\\``"]),
    ("rm -rf /var/lib/postgresql/data", "SRE-DATA-006",
     ["rm -rf /var/lib/p*ostgresql/data", "rm -rf /var/lib/postgres?l/data", "rm -rf /var/lib/[p]ostgresql/data",
      "rm -rf /var/*/postgresql", "rm -rf /tmp/../var/lib/postgresql/data", "rm -rf /var/lib/./postgresql//data"]),
]


@pytest.mark.parametrize("plain,rule,variant", [(p, r, v) for p, r, vs in SAME_AS_RUN for v in vs])
def test_a_command_written_another_way_is_decided_as_it_runs(guard, plain, rule, variant):
    assert rule in rules(guard, plain)  # the control
    assert rule in rules(guard, variant), [a.to_input() for a in normalise(variant)][:2]


@pytest.mark.parametrize("command", ["rm -rf /tmp/scratch/*", "rm -rf /tmp/../tmp/x", "rm -rf /var/tmp/p*",
                                     "redis-cli SHUTDOWN SAVE", "kubectl delete pods -l app=x -n slack",
                                     "sort --compress-level=1 /tmp/x", "rm --verbose /tmp/x"])
def test_what_does_not_match_stays_allowed_by_those_rules(guard, command):
    """The other side: cleaning and glob matching do not make every path a protected one."""
    assert not rules(guard, command) & {"SRE-DATA-006", "SRE-DATA-011", "SRE-RESTART-004", "SRE-SCOPE-004"}


@pytest.mark.parametrize("command", ["sort --compress-program=sh /tmp/x", "sort --compress-prog=sh /tmp/x",
                                     "sort --compress-program sh /tmp/x", "sed 'e id' /tmp/x",
                                     "sed -e '1e rm -rf /' /tmp/x"])
def test_sort_and_sed_running_a_program_are_opaque(command):
    assert any(a.mutating == "unknown" for a in normalise(command)), [a.to_input() for a in normalise(command)]


@pytest.mark.parametrize("command", ["sed -n 'w /etc/cron.d/x' /tmp/x", "sed 's/a/b/w /etc/cron.d/x' /tmp/x"])
def test_sed_w_writes_its_file(command):
    assert any(a.tool == "file" and a.target.name == "/etc/cron.d/x" for a in normalise(command))


@pytest.mark.parametrize("command", [
    "psql -c 'SELECT 1' -f - <<'EOF'\nDROP TABLE users;\nEOF",
    "psql -f - -c 'SELECT 1' <<'EOF'\nDROP TABLE users;\nEOF",
    "psql -c 'SELECT 1' -f /dev/stdin <<'EOF'\nDROP TABLE users;\nEOF",
    "psql -c 'SELECT 1' <<'EOF'\nDROP TABLE users;\nEOF",
    "echo 'DROP TABLE users;' | psql -c 'SELECT 1' -f -",
])
def test_the_sql_psql_reads_from_stdin_is_judged(command):
    verbs = [(a.verb, a.mutating) for a in normalise(command)]
    assert ("drop table", True) in verbs or any(m is True and "drop" in v for v, m in verbs), verbs


def test_stdin_psql_reads_but_the_guard_cannot_see_is_opaque():
    actions = normalise("cat /tmp/x.sql | psql -c 'SELECT 1' -f -")
    assert any(a.tool == "psql" and a.mutating == "unknown" for a in actions), [a.to_input() for a in actions]


def test_the_words_rules_read_are_the_words_the_program_gets():
    (a,) = normalise("redis-cli SHUTDOWN 'NO''SAVE'")
    assert a.words == ["redis-cli", "SHUTDOWN", "NOSAVE"]
    (a,) = normalise("rm -rf /tmp/../etc")
    assert a.target.name == "/etc" and a.details["written_as"] == "/tmp/../etc"


DENIED_MANIFEST = """apiVersion: v1
kind: ConfigMap
metadata: {name: redis-config, namespace: slack}
data:
  maxmemory-policy: allkeys-lru
"""
VALUES = "maintenanceController:\n  enabled: false\n"


def _decided(guard, command):
    adm = guard.before(command)
    return adm.runs, sorted({f.id for d in adm.decisions for f in d.denies + d.warns})


@pytest.mark.parametrize("verb", ["apply", "create", "replace"])
def test_kubectl_reads_the_manifest_file_as_it_reads_a_heredoc(guard, tmp_path, verb):
    """`kubectl apply -f FILE` was allowed unread while the same manifest from a heredoc was denied."""
    f = tmp_path / "m.yaml"
    f.write_text(DENIED_MANIFEST)
    heredoc = _decided(guard, f"kubectl {verb} -f - <<'EOF'\n{DENIED_MANIFEST}EOF")
    assert _decided(guard, f"kubectl {verb} -f {f}") == heredoc
    (a,) = normalise(f"kubectl {verb} -f {f}")
    assert (a.target.kind, a.target.name) == ("configmap", "redis-config") and a.mutating is True


def test_helm_reads_the_values_file_as_it_reads_a_heredoc(tmp_path):
    f = tmp_path / "values.yaml"
    f.write_text(VALUES)
    from_file = normalise(f"helm upgrade slack ./chart -n slack -f {f}")[0]
    from_heredoc = normalise(f"helm upgrade slack ./chart -n slack -f - <<'EOF'\n{VALUES}EOF")[0]
    assert [(k.key, k.value) for k in from_file.keys] == [(k.key, k.value) for k in from_heredoc.keys] != []


def _unreadable(kind, tmp):
    if kind == "missing":
        return str(tmp / "nope.yaml")
    if kind == "directory":
        return str(tmp)
    if kind == "fifo":
        os.mkfifo(tmp / "f.yaml")
        return str(tmp / "f.yaml")
    if kind == "device":
        return "/dev/zero"
    if kind == "too-large":
        (tmp / "big.yaml").write_text("a: " + "x" * (2 * 1024 * 1024) + "\n")
        return str(tmp / "big.yaml")
    if kind == "binary":
        (tmp / "bin.yaml").write_bytes(b"\xff\xfe" * 100)
        return str(tmp / "bin.yaml")
    return "https://example.com/m.yaml"


@pytest.mark.parametrize("kind", ["missing", "directory", "fifo", "device", "too-large", "binary", "remote"])
@pytest.mark.parametrize("template", ["kubectl apply -f {}", "kubectl create -f {}", "kubectl replace -f {}",
                                      "helm upgrade slack ./chart -f {}", "helm install slack ./chart --values {}"])
def test_a_file_that_cannot_be_read_now_is_opaque(tmp_path, kind, template):
    (a,) = normalise(template.format(_unreadable(kind, tmp_path)))
    assert a.mutating == "unknown" and a.opaque_reason, a.to_input()


def test_a_continuation_inside_single_quotes_is_kept_as_bash_keeps_it():
    (a,) = normalise("echo 'a\\\nb'")
    assert a.words == ["echo", "a\\\nb"]
    (a,) = normalise('echo "a\\\nb"')
    assert a.words == ["echo", "ab"]


@pytest.mark.parametrize("template", ["kubectl apply -f - < {}", "helm upgrade slack ./chart -f - < {}"])
def test_a_file_redirected_into_stdin_is_read_as_the_file(tmp_path, template):
    f = tmp_path / "m.yaml"
    f.write_text(DENIED_MANIFEST)
    (a,) = normalise(template.format(f))
    assert a.mutating is True and (a.target.kind == "configmap" or a.keys)
    (a,) = normalise(template.format(tmp_path / "missing.yaml"))
    assert a.mutating == "unknown"


@pytest.mark.parametrize("command,verb,path", [
    ("sed --in-pl s/a/b/ /etc/x", "edit", "/etc/x"),
    ("sed --in s/a/b/ /etc/x", "edit", "/etc/x"),
    ("sed --in-place=.bak s/a/b/ /etc/x", "edit", "/etc/x"),
    ("tee --app /etc/x", "append", "/etc/x"),
    ("rm --rec --f /etc/x", "delete", "/etc/x"),
    ("sed --expr=w/etc/y /tmp/x", "write", "/etc/y"),
    ("sed '1w/etc/y' /tmp/x", "write", "/etc/y"),
])
def test_gnu_long_options_are_read_abbreviated_as_the_tool_reads_them(command, verb, path):
    assert any(a.tool == "file" and a.verb == verb and a.target.name == path for a in normalise(command)), \
        [a.to_input() for a in normalise(command)]


def test_an_abbreviation_that_names_no_option_or_two_is_left_as_written():
    from guardrail.actions.classifiers.base import resolve_long

    assert resolve_long("--in-pl=.bak", {"--in-place", "--expression"}) == "--in-place=.bak"
    assert resolve_long("--e", {"--expression", "--exclude"}) == "--e"  # ambiguous: the tool refuses it
    assert resolve_long("--all", {"--all", "--all-namespaces"}) == "--all"  # an exact name wins
    assert [a.verb for a in normalise("sed -n p /tmp/x")] == ["read"]  # the control
