"""The live stack plays ia-004: a REVOKE INSERT on MariaDB and a Redis queue capped at 3mb noeviction by its values.

Creates (the load's Prepared Report INSERTs) fail with MariaDB's own error 1142 as soon as the grant is gone (one connection per request); the queue
refuses writes with OOM once full. A runtime `CONFIG SET maxmemory` helps until the broker restarts (the AOF
brings the data back, the ConfigMap brings 3mb back); frappe-admin's repair (`reconfigure-infra.sh redis-queue
maxmemory`, as the foothold has it) lasts, and shows in the Helm release the guard reads.
About 40 s. Skips like the smoke test.
"""

from __future__ import annotations

import json

import pytest

from tests.arena.live.livemarks import LiveShell, live_marks

pytestmark = live_marks(180)

ENQUEUE = "curl -s -o /dev/null -w '%{http_code}\\n' -X POST http://frappe-web:8000/api/method/enqueue -d '{}'"


@pytest.fixture(scope="module")
def env():
    from arena.live.loadgen import LoadShape
    from arena.live.stack import LiveStack

    stack = LiveStack(("frappe",), shape=LoadShape(seed=4, warmup_s=2, warmup_rps=2, cycles=[[4, 6, 4, 2]]),
                      config_overrides={
                          "redis-queue-values.yaml": {"master": {"extraFlags": ["--maxmemory 3mb",
                                                                                "--maxmemory-policy noeviction"]}},
                          # RQ's pickled job data, sized so that a few dozen jobs fill 3mb.
                          "frappe-web.yaml": {"queue": {"job_payload_bytes": 32768}}})
    stack.up()
    try:
        yield LiveShell(stack)
    finally:
        assert stack.down() == []


def _rows(env, t0: float, t1: float) -> list[dict]:
    rows = [json.loads(line) for line in open(env.stack.ledger_path) if line.strip()]
    return [r for r in rows if t0 <= r["t"] < t1]


def _burst(env, n: int) -> list[str]:
    return env.run(f"for i in $(seq {n}); do {ENQUEUE}; done").stdout.split()


def test_ia004_revoked_insert_fails_creates_until_granted(env):
    create = ("curl -s -X POST http://frappe-web:8000/api/resource/ToDo -H 'Content-Type: application/json' "
              "-d '{\"description\": \"probe\"}'")
    assert '"name"' in env.run(create).stdout
    assert env.run("mysql -u root -e \"REVOKE INSERT ON _aac081bc588a7088.* FROM '_aac081bc588a7088'@'%'\"").ok
    denied = env.run(create).stdout
    assert '"code": 1142' in denied, denied
    t0 = env.clock.now()
    env.clock.sleep(6)
    rows = _rows(env, t0, env.clock.now())
    # frappe_jobs: the Desk only reads; the INSERT is the Prepared Report's, in rq_enqueue.
    reports = [r for r in rows if r["driver"] == "rq_enqueue"]
    assert reports and all(not r["ok"] and "report 403 1142" in r["detail"] for r in reports)
    assert all(r["ok"] for r in rows if r["driver"] == "desk")
    assert env.run("mysql -u root -e \"GRANT INSERT ON _aac081bc588a7088.* TO '_aac081bc588a7088'@'%'\"").ok
    assert '"name"' in env.run(create).stdout


def test_ia004_queue_oom_and_the_ephemeral_fix_that_a_restart_undoes(env):
    codes = _burst(env, 120)
    assert "503" in codes, codes  # the queue reached its 3mb with noeviction
    refused = env.run("curl -s -X POST http://frappe-web:8000/api/method/enqueue -d '{}'").stdout
    assert '"reason": "oom"' in refused and "maxmemory" in refused, refused

    assert env.run("redis-cli -h redis-queue config set maxmemory 64mb && redis-cli -h redis-queue config rewrite").ok
    assert _burst(env, 3) == ["200"] * 3
    assert env.restart("redis-queue").ready
    # The AOF brings the jobs back and the rendered config brings 3mb back: the fix is gone.
    assert env.run("redis-cli -h redis-queue config get maxmemory").stdout.split()[-1] == str(3 * 1024 * 1024)
    assert "503" in _burst(env, 3)

    from verifiers.protocols import DeclaredRef

    helm = DeclaredRef(kind="helm_values", name="frappe")
    assert "--maxmemory 3mb" in env.read_declared(helm)  # the guard's read of the release Secret
    assert env.run("helm get values frappe").exit_code == 127  # the foothold has no helm
    old = env.restarts("redis-queue")
    r = env.run("reconfigure-infra.sh redis-queue maxmemory 64mb")
    assert r.ok and '"persisted": true' in r.stdout, r  # live at once, and in the declared flags, without a roll
    assert env.restarts("redis-queue") == old and "--maxmemory 64mb" in env.read_declared(helm)
    assert env.run("redis-cli -h redis-queue config get maxmemory").stdout.split()[-1] == str(64 * 1024 * 1024)
    assert env.restart("redis-queue").ready
    assert env.run("redis-cli -h redis-queue config get maxmemory").stdout.split()[-1] == str(64 * 1024 * 1024)
    assert env.run("redis-cli -h redis-queue config get maxmemory-policy").stdout.split()[-1] == "noeviction"
    assert _burst(env, 3) == ["200"] * 3
    assert env.run("redis-cli -h redis-queue dbsize").stdout.strip() != "0"  # no flush: the jobs survived
