"""The live truth readers read what the real servers hold (arena.live.truth): ia-018's lock holder and the guard a
fresh `app` session inherits, ia-004's grant and the broker's cap, before and after the twin's repair commands.

One incident stack each (arena/live/incidents), about a minute apiece. Skips like the smoke test.
"""

from __future__ import annotations

import pytest

from tests.arena.live.livemarks import LiveShell, live_marks

pytestmark = live_marks(240)

TERMINATE = ("psql \"$DB_ADMIN_DSN\" -c \"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE state = "
             "'idle in transaction' AND query ILIKE '%channel_seq%FOR UPDATE%'\"")
GUARD = "psql \"$DB_ADMIN_DSN\" -c \"ALTER SYSTEM SET idle_in_transaction_session_timeout = '10s'\""
RELOAD = "psql \"$DB_ADMIN_DSN\" -c \"SELECT pg_reload_conf()\""
SITE = "_aac081bc588a7088"


def _incident(incident_id: str):
    from arena.live.replay import LiveIncident

    incident = LiveIncident.load(incident_id)
    stack = incident.stack()
    stack.up()
    return incident, stack, LiveShell(stack)


def test_ia018_truth_sees_the_holder_come_back_unless_the_guard_reaches_new_sessions():
    from arena.live.truth import SlackTruth
    from arena.twin.slack.message import LEAK_AGE_S

    _, stack, env = _incident("ia-018")
    try:
        truth = SlackTruth(stack)
        truth.mark_baseline()
        base_config = truth.config()
        env.clock.sleep(LEAK_AGE_S + 1)  # the boot transaction's hold is older than the leak age now
        t = truth.truth()
        assert t["postgres.pg.seq_lock_holders"] == 1
        assert t["postgres.pg.seq_locked_channels"] == ["chan-0"]
        assert t["postgres.pg.fresh.app/app.idle_in_transaction_session_timeout_ms"] == 0
        assert t["svc-message.settings.db.pool_size"] == 20

        # Terminate only: gone now, back after the next start of svc-message.
        assert env.run(TERMINATE).ok
        t = truth.truth()
        assert t["postgres.pg.seq_lock_holders"] == 0 and t["postgres.pg.seq_locked_channels"] == []
        assert t["postgres.data.messages.pre_agent_intact"] and t["postgres.data.outbox.exactly_once"]
        assert env.restart("svc-message").ready
        env.clock.sleep(LEAK_AGE_S + 1)
        assert truth.truth()["postgres.pg.seq_lock_holders"] == 1

        # The reference: terminate, guard new sessions system-wide, reload. The next boot's holder is ended.
        for cmd in (TERMINATE, GUARD, RELOAD):
            assert env.run(cmd).ok, cmd
        config = truth.config()
        changed = {k for k in set(config) | set(base_config) if config.get(k) != base_config.get(k)}
        assert {"postgres.pg.auto_conf.idle_in_transaction_session_timeout",
                "postgres.pg.applied.idle_in_transaction_session_timeout"} <= changed, changed
        assert env.restart("svc-message").ready
        env.clock.sleep(12)  # past the 10 s guard
        t = truth.truth()
        assert t["postgres.pg.fresh.app/app.idle_in_transaction_session_timeout_ms"] == 10_000
        assert t["postgres.pg.seq_lock_holders"] == 0 and t["postgres.pg.seq_locked_channels"] == []
        assert truth.fixed_traffic({"channels": ["chan-0", "chan-1"]})["correct"] == 2
    finally:
        assert stack.down() == []


def test_ia004_truth_reads_the_revoked_grant_and_the_rendered_cap():
    from arena.live.truth import FrappeTruth

    incident, stack, env = _incident("ia-004")
    try:
        steps = incident.inject(env, stack)
        backlog = next(s["jobs"] for s in steps if s.get("history") == "queue_backlog")
        truth = FrappeTruth(stack)
        truth.mark_baseline()
        t, c = truth.truth(), truth.config()
        # The history: the broker at its cap, and what holds it is accepted jobs the stalled workers never ran.
        assert backlog > 100 and t["redis-queue.jobs.queued"] > 0.9 * backlog
        assert t["redis-queue.used_memory"] >= 3 * 1024 * 1024
        env.clock.sleep(3)  # the refused workers back off; the producers take what memory frees
        assert truth.truth()["redis-queue.jobs.queued"] > 0.9 * backlog
        assert t["mariadb.site_can.INSERT"] is False and t["mariadb.site_can.UPDATE"] is True
        assert t["mariadb.settings.performance_schema"] is True  # the task's my.cnf, on the real server
        assert t["redis-cache.generation"] == 1 and t["redis-cache.maxmemory_policy"] == "allkeys-lru"
        assert "INSERT" not in t[f"mariadb.grant.{SITE}@%.`{SITE}`.*"].split(",")
        assert f"mariadb.grant.{SITE}@%.*.*" not in t
        assert t["redis-queue.cap_bytes"] == 3 * 1024 * 1024
        assert t["redis-queue.maxmemory_policy"] == "noeviction"
        flags = "store:helm/frappe.erpnext.redis-queue.master.extraFlags"
        assert c[flags] == ["--maxmemory 3mb", "--maxmemory-policy noeviction"]

        assert env.run(f"mysql -e \"GRANT INSERT ON {SITE}.* TO '{SITE}'@'%'\"").ok
        # The foothold's durable queue repair: frappe-admin applies it live and rewrites the declared flags.
        assert env.run("reconfigure-infra.sh redis-queue maxmemory 64mb").ok
        t, c2 = truth.truth(), truth.config()
        assert t["mariadb.site_can.INSERT"] is True
        assert t["redis-queue.cap_bytes"] == 64 * 1024 * 1024
        assert c2[flags] == ["--maxmemory 64mb", "--maxmemory-policy noeviction"]
        assert t["redis-queue.jobs.lost"] == 0 and t["redis-queue.restarts"] == 0  # no roll: nothing lost

        # A runtime CONFIG SET moves the running cap but not the ConfigMap; a new pod re-renders from the ConfigMap.
        assert env.run("redis-cli -h redis-queue CONFIG SET maxmemory 8mb").ok
        assert truth.truth()["redis-queue.cap_bytes"] == 8 * 1024 * 1024
        assert env.restart("redis-queue").ready
        t = truth.truth()
        assert t["redis-queue.cap_bytes"] == 64 * 1024 * 1024 and t["redis-queue.jobs.lost"] == 0
    finally:
        assert stack.down() == []
