"""One meaning per write: every spelling of a catalogued setting comes to one key, scope and layer.

Walks the `settings:` table of guardrail/actions/catalogue.yaml: each write's example command, normalised, must
carry the setting's expected key, scope and value in the layer the table gives that write; and the spellings that
make the same write (the helper and the admin API it calls) must agree on the layer too.
"""

from __future__ import annotations

import json

import pytest

from guardrail.actions import normalise
from guardrail.actions.catalogue import catalogue
from guardrail.actions.settings import component_of
from guardrail.actions.model import Target
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
