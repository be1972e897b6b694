"""The live stack plays ia-006 and ia-018 by the servers' own rules, with the twin's solution commands.

ia-006: `ALTER ROLE saleor_app IN DATABASE saleor SET statement_timeout = '150ms'` reaches only sessions opened
afterwards, which the checkout pool opens under concurrency, so some checkouts fail with 57014; the reference fix
(RESET, then terminate the saleor_app sessions) ends it. ia-018: svc-message's boot transaction holds chan-0's
`channel_seq` row idle in transaction; terminating it helps until the next restart re-arms it, and with
`idle_in_transaction_session_timeout` set by ALTER SYSTEM the restart no longer brings it back.
One PostgreSQL serves both; about a minute and a half. Skips like the smoke test.
"""

from __future__ import annotations

import json

import pytest

from tests.arena.live.livemarks import LiveShell, live_marks

pytestmark = live_marks(240)

HOLDERS = ("psql \"$DB_ADMIN_SLACK\" -At -c \"SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
           "JOIN pg_class c ON c.oid = l.relation WHERE a.state = 'idle in transaction' AND c.relname = 'channel_seq'\"")
TERMINATE_HOLDERS = ("psql \"$DB_ADMIN_SLACK\" -c \"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE state = 'idle in transaction' AND pid <> pg_backend_pid()\"")


@pytest.fixture(scope="module")
def env():
    from arena.live.loadgen import LoadShape
    from arena.live.stack import LiveStack

    # Troughs outlast the checkout pool's overflow idle time (4 s), so between peaks the pool shrinks back to its
    # core sessions and every peak opens fresh ones: the fault shows every cycle.
    stack = LiveStack(("saleor", "slack"), shape=LoadShape(seed=6, warmup_s=2, warmup_rps=2, cycles=[[4, 8, 6, 1]]),
                      image_env={"svc-message": {"HOLD_SEQ_LOCK": "chan-0"}})
    stack.up()
    try:
        # Both substrates set DB_ADMIN_DSN; name each database explicitly.
        yield LiveShell(stack, extra_env={
            "DB_ADMIN_DSN": "postgresql://postgres:postgres@postgres:5432/saleor",
            "DB_ADMIN_SLACK": "postgresql://postgres:postgres@postgres:5432/app"})
    finally:
        assert stack.down() == []


def _holders(env) -> list[str]:
    """The sessions that hold channel_seq idle in transaction in two reads half a second apart. A send's own
    transaction is idle for a moment between its statements (a second holder caught in passing under load: seen
    in CI); the boot transaction's hold lasts."""
    first = set(env.run(HOLDERS).stdout.split())
    env.clock.sleep(0.5)
    return sorted(first & set(env.run(HOLDERS).stdout.split()))


def _rows(env, t0: float, t1: float, driver: str) -> list[dict]:
    rows = [json.loads(line) for line in open(env.stack.ledger_path) if line.strip()]
    return [r for r in rows if t0 <= r["t"] < t1 and r["driver"] == driver]


def _wait(env, seconds: float) -> tuple[float, float]:
    t0 = env.clock.now()
    env.clock.sleep(seconds)
    return t0, env.clock.now()


def test_ia006_role_timeout_fails_checkouts_on_fresh_sessions_until_reset_and_recycle(env):
    cycle = env.stack.shape.cycle_s
    healthy = _rows(env, *_wait(env, cycle), "checkout_readback")
    assert healthy and all(r["ok"] and r["correct"] for r in healthy), healthy

    r = env.run("psql \"$DB_ADMIN_DSN\" -c \"ALTER ROLE saleor_app IN DATABASE saleor SET statement_timeout = '150ms'\"")
    assert r.ok, r
    faulty = _rows(env, *_wait(env, 3 * cycle), "checkout_readback")
    cancelled = [r for r in faulty if "statement_timeout" in r["detail"]]
    assert cancelled, "no checkout was cancelled by the role's statement_timeout"
    # Only sessions opened after the ALTER inherit the timeout: the pool's core sessions, opened before it, keep
    # serving, so the failures are intermittent, not total. The extra sessions open under concurrency, which the
    # peaks carry, so most cancellations fall at peaks; but peaks also carry ~80% of this shape's requests, and a
    # trough request that finds both core sessions busy opens a fresh session too, so neither the share at peaks
    # nor the per-request rates tell the mechanism from the load mix (rates measured 11/41 vs 0/10 and 8/39 vs
    # 2/11 unloaded; a rate comparison flaked in CI at 6/32 vs 3/16). No peak claim is made here.
    assert len(cancelled) < len(faulty) / 2  # the long-lived sessions keep serving: intermittent, not total
    assert "statement_timeout=150ms" in env.run('psql "$DB_ADMIN_DSN" -c "\\drds"').stdout.replace(" ", "")

    r = env.run('psql "$DB_ADMIN_DSN" -c "ALTER ROLE saleor_app IN DATABASE saleor RESET statement_timeout" && '
                'psql "$DB_ADMIN_DSN" -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity '
                "WHERE usename = 'saleor_app' AND pid <> pg_backend_pid()\"")
    assert r.ok, r
    t_fix = env.clock.now()
    after = _rows(env, t_fix + 1, _wait(env, 2 * cycle)[1], "checkout_readback")
    assert after and not [r for r in after if "statement_timeout" in r["detail"]]
    assert sum(r["ok"] and r["correct"] for r in after) >= 0.9 * len(after), after


def test_ia018_boot_lock_holder_recurs_on_restart_until_the_idle_timeout_guard(env):
    held = _holders(env)
    assert len(held) == 1, held  # the image's boot transaction
    # A send stuck behind the lock is recorded when its client gives up (5 s), so poll for a while.
    t0, deadline, failed = env.clock.now(), env.clock.now() + 120, []  # ends at the first failure
    while not failed and env.clock.now() < deadline:
        env.clock.sleep(1)
        failed = [r for r in _rows(env, t0 - 10, env.clock.now(), "write_readback") if not r["ok"]]
    # Sends on chan-0 wait behind the lock, each holding a pooled connection: timeouts, then a starved pool.
    assert failed and all(r["timeout"] or "pool_timeout" in r["detail"] for r in failed), failed

    assert env.run(TERMINATE_HOLDERS).ok
    assert _holders(env) == []
    restart = env.restart("svc-message")
    assert restart.ready and restart.new_id != restart.old_id and restart.image_unchanged
    assert len(_holders(env)) == 1  # terminating alone: the restart re-arms the leak

    r = env.run("psql \"$DB_ADMIN_SLACK\" -c \"ALTER SYSTEM SET idle_in_transaction_session_timeout = '3s'\" && "
                "psql \"$DB_ADMIN_SLACK\" -c 'SELECT pg_reload_conf()' && " + TERMINATE_HOLDERS)
    assert r.ok, r
    restart = env.restart("svc-message")
    assert restart.ready
    env.clock.sleep(4.5)  # the boot transaction's lock now outlives its idle timeout by a margin
    assert _holders(env) == []
    t0, t1 = _wait(env, 6)
    sends = _rows(env, t0, t1, "write_readback")
    assert sends and all(r["ok"] and r["correct"] for r in sends), [r["detail"] for r in sends if not r["ok"]]
