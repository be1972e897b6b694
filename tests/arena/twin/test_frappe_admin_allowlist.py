"""frappe-admin's queue-repair allow-list, walked operation by operation against what the real sidecar does.

The real POST /admin/redis-queue-repair (SW substrates/frappe/frappe-admin-sidecar/server.py) checks the value
(400), applies it to the running broker, then rewrites that flag in the queue's start-master.sh ConfigMap, which
is rendered from the Helm `extraFlags`; a start script without exactly one entry for the flag is a 500 *after* the
runtime change landed (the change stays runtime-only). No pod roll either way. Each accepted operation is checked
at runtime and in the start script; each refused value is refused with the real message; the negative controls
are the 500s (a flag the release does not carry: ia-003 has no `--appendfsync`, as the real task.values).
"""

from __future__ import annotations

import json

import pytest

from arena.scenario import load_scenario
from arena.twin.engine import build_twin
from arena.twin.frappe.admin import queue_runtime_change, rewrite_queue_flags

# A start script in the real task.values' shape (one argv word per extraFlags item) carrying every repairable flag.
SPLIT = ["--maxmemory", "4mb", "--min-replicas-to-write", "1", "--appendonly", "no", "--appendfsync", "no",
         "--user", "default", "on", "nopass", "~*", "&*", "+@all", "-blpop", "-blmove", "-brpop"]

ACCEPTED = [  # (operation, value, runtime command, the flag's word(s) after the rewrite)
    ("maxmemory", "16mb", ["CONFIG", "SET", "maxmemory", "16mb"], ["--maxmemory", "16mb"]),
    ("maxmemory", "128mb", ["CONFIG", "SET", "maxmemory", "128mb"], ["--maxmemory", "128mb"]),
    ("min-replicas-to-write", "0", ["CONFIG", "SET", "min-replicas-to-write", "0"], ["--min-replicas-to-write", "0"]),
    ("appendonly", "yes", ["CONFIG", "SET", "appendonly", "yes"], ["--appendonly", "yes"]),
    ("appendfsync", "everysec", ["CONFIG", "SET", "appendfsync", "everysec"], ["--appendfsync", "everysec"]),
    ("appendfsync", "always", ["CONFIG", "SET", "appendfsync", "always"], ["--appendfsync", "always"]),
    ("dequeue-acl", None, ["ACL", "SETUSER", "default", "+blpop", "+blmove", "+brpop"], ["+blpop", "+blmove", "+brpop"]),
]

REFUSED = [  # (operation, value, the real sidecar's 400 message)
    ("maxmemory", "15mb", "maxmemory repair must stay between 16mb and 128mb"),
    ("maxmemory", "129mb", "maxmemory repair must stay between 16mb and 128mb"),
    ("maxmemory", "1gb", "maxmemory repair must stay between 16mb and 128mb"),
    ("maxmemory", None, "maxmemory repair requires a value"),
    ("maxmemory", "0", "maxmemory must be a positive integer with kb/mb/gb suffix"),
    ("maxmemory", "64MB", "maxmemory must be a positive integer with kb/mb/gb suffix"),
    ("min-replicas-to-write", "1", "min-replicas-to-write repair must restore standalone value 0"),
    ("appendonly", "no", "appendonly repair must enable persistence"),
    ("appendfsync", "no", "appendfsync repair must use everysec or always"),
    ("dequeue-acl", "restore", "dequeue-acl repair does not accept a value"),
    ("maxmemory-policy", "allkeys-lru", "unsupported queue repair operation 'maxmemory-policy'"),
]


@pytest.mark.parametrize("op,value,runtime,after", ACCEPTED)
def test_each_allowed_repair_has_its_runtime_command_and_rewrites_only_its_flag(op, value, runtime, after):
    assert queue_runtime_change(op, value) == runtime
    rewritten = rewrite_queue_flags(SPLIT, op, value)
    changed = [(a, b) for a, b in zip(SPLIT, rewritten) if a != b]
    assert changed and all(b in after for _, b in changed)
    # The combined spelling the twin's scenarios use (`--maxmemory 4mb` in one item) rewrites the same way.
    assert rewrite_queue_flags([" ".join(SPLIT)], op, value) == [" ".join(rewritten)]


@pytest.mark.parametrize("op,value,message", REFUSED)
def test_each_refused_value_is_refused_with_the_real_message(op, value, message):
    with pytest.raises(ValueError) as e:
        queue_runtime_change(op, value)
    assert str(e.value) == message


@pytest.mark.parametrize("op,value", [(o, v) for o, v, _, _ in ACCEPTED])
def test_a_start_script_without_the_flag_is_a_500_after_the_runtime_change(op, value):
    bare = [w for w in SPLIT if w not in ("--maxmemory", "4mb", "--min-replicas-to-write", "1", "--appendonly", "no",
                                          "--appendfsync", "-blpop", "-blmove", "-brpop")]
    with pytest.raises(RuntimeError, match="queue startup script has 0"):
        rewrite_queue_flags(bare, op, value)


def _post(env, op, value):
    admin = env.world.component("frappe-admin")
    return admin.http("POST", "/admin/redis-queue-repair", json.dumps({"operation": op, "value": value}),
                      env.clock.now())


def _values(env):
    return env.operator_view().run("helm get values frappe").stdout


def _fsync(env):
    return env.run("redis-cli -h redis-queue CONFIG GET appendfsync").stdout


def test_the_helper_applies_appendfsync_live_and_in_the_start_script_where_the_release_carries_it():
    env = build_twin(load_scenario("ia-005").twin, seed=3)
    gen = env.world.component("redis-queue").generation
    r = env.run("reconfigure-infra.sh redis-queue appendfsync always")
    assert r.exit_code == 0, r.stderr
    assert _fsync(env) == "appendfsync\nalways\n"
    assert "--appendfsync always" in _values(env) and "--appendfsync everysec" not in _values(env)
    assert env.world.component("redis-queue").generation == gen  # no pod roll
    env.world.restart("redis-queue", by="verifier")
    env.clock.sleep(30)
    assert _fsync(env) == "appendfsync\nalways\n"  # durable: the start script carries it


def test_the_helper_fails_where_the_release_has_no_flag_and_the_change_stays_runtime_only():
    # ia-003's queue, as the real task.values, has no --appendfsync: the real sidecar 500s after CONFIG SET.
    env = build_twin(load_scenario("ia-003").twin, seed=3)
    before = _values(env)
    gen = env.world.component("redis-queue").generation
    r = env.run("reconfigure-infra.sh redis-queue appendfsync always")
    assert r.exit_code == 22 and "returned error: 500" in r.stderr
    assert _fsync(env) == "appendfsync\nalways\n"
    assert _values(env) == before and env.world.component("redis-queue").generation == gen
    env.world.restart("redis-queue", by="verifier")
    env.clock.sleep(30)
    assert _fsync(env) == "appendfsync\neverysec\n"  # runtime-only: a restart reverts it


@pytest.mark.parametrize("op,value,message", REFUSED)
def test_the_twins_sidecar_answers_400_and_changes_nothing_for_a_refused_value(op, value, message):
    env = build_twin(load_scenario("ia-005").twin, seed=3)
    config = env.run("redis-cli -h redis-queue CONFIG GET *").stdout
    status, body = _post(env, op, value)
    assert status == 400 and json.loads(body)["error"] == message
    assert env.run("redis-cli -h redis-queue CONFIG GET *").stdout == config
