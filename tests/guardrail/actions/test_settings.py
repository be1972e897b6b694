"""One meaning per write: every spelling of a catalogued setting comes to one key, scope and layer.

Walks the `settings:` table of guardrail/actions/catalogue.yaml: each write's example command, normalised, must
carry the setting's expected key, scope and value in the layer the table gives that write; and the spellings that
make the same write (the helper and the admin API it calls) must agree on the layer too. And every channel a
write's body can arrive by (an argument, stdin in each of its spellings, a file read at decision time, the payload
the shim or daemon forwards) must come to that same action, while a body the guard cannot see is opaque.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from guardrail.actions import normalise
from guardrail.actions.catalogue import catalogue
from guardrail.actions.settings import component_of
from guardrail.actions.model import UNKNOWN, Target
from guardrail.adapters.shell.daemon import command_text
from verifiers.catalogue import load_catalogue, normalize

SETTINGS = catalogue().settings
WRITES = [(s, w) for s in SETTINGS for w in s.writes]


def _canonical_keys(raw: str, key: str):
    return [(a, k) for a in normalise(raw) if a.is_mutating for k in a.keys if k.key == key]


@pytest.mark.parametrize("setting,write", WRITES, ids=[f"{s.id}:{w.via[:50]}" for s, w in WRITES])
def test_each_write_path_of_a_setting_is_the_same_key_scope_and_value(setting, write):
    hits = _canonical_keys(write.example, setting.expect.key)
    assert hits, f"{write.example!r} did not come to {setting.expect.key}"
    for action, k in hits:
        assert k.scope == setting.expect.scope, (write.example, k.scope)
        assert normalize(k.value, "auto") == normalize(setting.expect.value, "auto"), (write.example, k.value)
        if write.layer is not None:
            assert action.layer == write.layer, (write.example, action.layer)
        assert setting.id in action.details.get("settings", []), action.details


def _write_of(raw: str, key: str, stdin: str | None = None) -> set[tuple]:
    """The (key, scope, value, layer) of every mutating action's change of `key`: the write as the guard reads it."""
    return {(k.key, tuple(sorted(k.scope.items())), json.dumps(normalize(k.value, "auto"), default=str), a.layer)
            for a in normalise(raw, stdin=stdin) if a.is_mutating for k in a.keys if k.key == key}


def _stdin_form(example: str) -> tuple[str, str] | None:
    """(the command reading its body on stdin, the body), when the write's tool can take its body there: a helper's
    JSON, curl's `-d @-`, a client's statements (`mysql -e`, `redis-cli CMD ...`, inside `kubectl exec -i`)."""
    m = re.fullmatch(r"echo '([^']*)' \| (.+)", example)
    if m:
        return m.group(2), m.group(1)
    argv = shlex.split(example)
    if argv[0] == "curl" and "-d" in argv:
        i = argv.index("-d")
        return shlex.join(argv[:i] + ["-d", "@-"] + argv[i + 2:]), argv[i + 1]
    pre: list[str] = []
    if argv[:2] == ["kubectl", "exec"] and "--" in argv:
        cut = argv.index("--") + 1
        pre, argv = ["kubectl", "exec", "-i", *argv[2:cut]], argv[cut:]
    if argv[0] == "mysql" and "-e" in argv:
        i = argv.index("-e")
        return shlex.join(pre + argv[:i] + argv[i + 2:]), argv[i + 1]
    if argv[0] == "redis-cli":
        i = 1
        while i < len(argv) and argv[i] in ("-h", "-p", "-n"):
            i += 2
        return shlex.join(pre + argv[:i]), " ".join(argv[i:])
    return None


def _channels(example: str, files: Path) -> list[tuple[str, str, str | None]]:
    """(channel, command, forwarded stdin) for every way the example's body can reach its tool."""
    out: list[tuple[str, str, str | None]] = []
    body_file = files / "body"
    argv = shlex.split(example)
    if argv[0] == "curl" and "-d" in argv:
        i = argv.index("-d")
        body = argv[i + 1]
        out += [(f"curl {' '.join(opt)}", shlex.join(argv[:i] + opt + argv[i + 2:]), None) for opt in [
            ["--json", body], ["--data-raw", body], ["-d", f"@{body_file}"], ["--data-binary", f"@{body_file}"],
            ["--json", f"@{body_file}"]]]
    if argv[:2] == ["kubectl", "patch"] and "-p" in argv:
        i = argv.index("-p")
        body_file.write_text(argv[i + 1])
        out.append(("--patch-file", shlex.join(argv[:i] + ["--patch-file", str(body_file)] + argv[i + 2:]), None))
    form = _stdin_form(example)
    if form is None:
        return out
    cmd, body = form
    body_file.write_text(body + "\n")
    q = shlex.quote(body)
    return out + [
        ("heredoc", f"{cmd} <<'EOF'\n{body}\nEOF", None),
        ("here-string", f"{cmd} <<< {q}", None),
        ("echo pipe", f"echo {q} | {cmd}", None),
        ("printf pipe", f"printf '%s\\n' {q} | {cmd}", None),
        ("cat heredoc pipe", f"cat <<'EOF' | {cmd}\n{body}\nEOF", None),
        ("< file", f"{cmd} < {body_file}", None),
        ("cat file pipe", f"cat {body_file} | {cmd}", None),
        ("forwarded stdin (Guard.before/execute)", cmd, body),
        ("daemon payload (shim)", command_text(shlex.split(cmd), body), None),
    ]


@pytest.mark.parametrize("setting,write", WRITES, ids=[f"{s.id}:{w.via[:50]}" for s, w in WRITES])
def test_every_body_channel_of_a_write_path_is_the_same_action(setting, write, tmp_path):
    want = _write_of(write.example, setting.expect.key)
    assert want, write.example
    for channel, text, stdin in _channels(write.example, tmp_path):
        assert _write_of(text, setting.expect.key, stdin) == want, (channel, text)
    form = _stdin_form(write.example)
    if form is not None:
        # Negative controls: a stdin the guard was not given, and a file it cannot read, are opaque, never an empty
        # body (which would let the write through unkeyed).
        for text in (form[0], f"{form[0]} < {tmp_path / 'missing.json'}"):
            actions = normalise(text)
            assert not any(k.key == setting.expect.key for a in actions for k in a.keys), text
            assert any(a.mutating is UNKNOWN and a.opaque_reason for a in actions), text


def test_a_helper_with_a_known_empty_stdin_only_reloads_and_one_with_its_body_as_an_argument_is_opaque():
    for text, stdin in (("restart-svc.sh channel", ""), ("restart-svc.sh channel < /dev/null", None)):
        (a,) = normalise(text, stdin=stdin)
        assert a.mutating is True and a.keys == [] and a.details["body"] == {}, text
    (b,) = normalise("""restart-svc.sh channel '{"db":{"pool_size":40}}'""", stdin="")
    assert b.mutating is UNKNOWN and "reads the" in b.opaque_reason


@pytest.mark.parametrize("setting", SETTINGS, ids=[s.id for s in SETTINGS])
def test_every_setting_has_a_persistence_entry_for_its_canonical_key(setting):
    cat = load_catalogue()
    scope = dict(setting.expect.scope)
    key = setting.expect.key
    if key == "k8s.replicas":  # the persistence entry names the workload in the key
        key = f"k8s.replicas.{scope.pop('name')}"
    assert cat.lookup(key, scope) is not None, key


def test_the_helper_and_the_admin_api_it_calls_are_one_write():
    helper = normalise("""echo '{"db":{"pool_size":40}}' | restart-svc.sh channel""")[-1]
    api = normalise("""curl -s -X PUT svc-channel:8000/admin/config -d '{"db":{"pool_size":40}}'""")[0]
    assert [(k.key, k.scope, k.value) for k in helper.keys] == [(k.key, k.scope, k.value) for k in api.keys]
    assert helper.layer == api.layer


@pytest.mark.parametrize("operation,value", [("maxmemory", "64mb"), ("dequeue-acl", "restore"),
                                             ("appendfsync", "always")])
def test_the_infra_helper_and_frappe_admins_repair_route_are_one_write(operation, value):
    helper = normalise(f"reconfigure-infra.sh redis-queue {operation} {value}")[0]
    body = json.dumps({"operation": operation, "value": value})
    api = normalise(f"curl -fsS -X POST frappe-admin:8000/admin/redis-queue-repair -d '{body}'")[0]
    assert [(k.key, k.scope, k.value) for k in helper.keys] == [(k.key, k.scope, k.value) for k in api.keys]
    assert helper.layer == api.layer and helper.target.name == api.target.name == "redis-queue"
    # Negative control: the same body to another route is not the queue's write.
    other = normalise(f"curl -fsS -X POST frappe-admin:8000/admin/something-else -d '{body}'")[0]
    assert not other.keys and other.target.name == "frappe-admin"


def test_frappe_admins_restart_route_restarts_the_component_it_names():
    a = normalise("curl -fsS -X POST frappe-admin:8000/admin/redis-queue-restart")[0]
    assert a.details.get("restart") is True and a.target.name == "redis-queue"


def test_a_raw_key_that_is_a_setting_of_its_own_stays_beside_the_canonical_one():
    a = normalise("helm upgrade frappe frappe/erpnext --reuse-values --set erpnext.worker.long.replicaCount=3")[0]
    assert {k.key for k in a.keys} == {"helm.erpnext.worker.long.replicaCount", "k8s.replicas"}


def test_a_charts_second_statefulset_is_not_read_as_a_workload_named_replica():
    a = normalise("helm upgrade frappe c --reuse-values --set erpnext.redis-queue.replica.replicaCount=0")[0]
    assert [k.key for k in a.keys] == ["helm.erpnext.redis-queue.replica.replicaCount"]


def test_a_write_that_does_not_say_which_one_is_left_as_classified():
    # PUT /admin/config on a host that is no role's, with no roles in the body: no role to key it by.
    a = normalise("""curl -s -X PUT api-gateway:8000/admin/config -d '{"db":{"pool_size":40}}'""")[0]
    assert [k.key for k in a.keys] == ["app.db.pool_size"] and "settings" not in a.details
    # A ConfigMap's app.yaml that sets no role's keys has no canonical key beside it.
    b = normalise("""kubectl patch configmap app-config --type merge -p '{"data":{"app.yaml":"logging: debug\\n"}}'""")[0]
    assert [k.key for k in b.keys] == ["k8s.data.app.yaml"]


def test_an_other_components_setting_keeps_its_own_component():
    a = normalise("redis-cli -h redis-queue CONFIG SET maxmemory 64mb")[0]
    b = normalise("reconfigure-infra.sh redis-cache maxmemory 64mb")[0]
    assert a.keys[0].key == b.keys[0].key == "redis.maxmemory"
    assert a.keys[0].scope == {"component": "redis-queue"} and b.keys[0].scope == {"component": "redis-cache"}


@pytest.mark.parametrize("kind,name,component", [
    ("pod", "redis-cache-0", "redis-cache"),
    ("pod", "svc-channel-7d9f8c6b5-x2x9q", "svc-channel"),
    ("pod", "redis-master-cache", "redis-master-cache"),  # a word is not a pod hash
    ("component", "svc-channel", "svc-channel"),
    ("file", "/etc/x", ""),
])
def test_component_of_a_target(kind, name, component):
    assert component_of(Target(kind=kind, name=name)) == component


def test_a_bad_settings_table_is_refused_on_load(tmp_path):
    from guardrail.actions.catalogue import Catalogue
    from guardrail.yamlio import load_model
    from guardrail.errors import InputError

    p = tmp_path / "catalogue.yaml"
    p.write_text("read_only: []\nkubectl: {verbs: {}, rollout: {}, kinds: {}}\n"
                 "redis: {read: [], destructive: [], server: [], data: [], opaque: []}\n"
                 "settings:\n  - id: x\n    key: 'a.{path}'\n    scope: []\n    expect: {key: a.b}\n"
                 "    writes:\n      - {via: v, tool: [curl], key: 'a\\.b', example: 'true'}\n")
    with pytest.raises(InputError) as e:
        load_model(Catalogue, p)
    assert "catalogue.yaml" in str(e.value)


def test_keys_derived_beside_a_raw_one_are_for_the_rules_and_the_raw_key_is_read_back():
    from verifiers.persistence import changes_of

    a = normalise("helm upgrade frappe frappe/erpnext --reuse-values --set erpnext.worker.long.replicaCount=3")[0]
    assert a.details["derived_keys"] == ["k8s.replicas"]
    changed = changes_of({"seq": 1, "command": a.raw, "actions": [a.to_input()]}, 0)
    assert [c.key for c in changed] == ["helm.erpnext.worker.long.replicaCount"]
    # A canonical key that replaced the raw one is what the command wrote: it is read back.
    b = normalise("""curl -s -X PUT svc-channel:8000/admin/config -d '{"db":{"pool_size":20}}'""")[0]
    assert "derived_keys" not in b.details
    assert [c.key for c in changes_of({"seq": 2, "actions": [b.to_input()]}, 0)] == ["app.roles.channel.db.pool_size"]
