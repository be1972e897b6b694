"""The shared PostgreSQL model (arena/twin/pg): row locks, the idle-in-transaction timer and how settings reach it."""

from __future__ import annotations

import pytest

from arena.twin.pg.postgres import PostgresServer
from arena.twin.pg.psql import run_psql

ADMIN = "postgresql://postgres:pw@postgres:5432/app"


@pytest.fixture
def server() -> PostgresServer:
    s = PostgresServer(app_database="app", table_owner="app")
    s.add_role("postgres", superuser=True, password="pw")
    s.add_role("app", password="a")
    s.add_role("svc_admin", password="s")
    s.add_database("app")
    s.views = {"channel_seq": lambda: (["channel_id", "last_seq"], [["chan-0", 5], ["chan-1", 7]])}
    return s


def holder(server: PostgresServer, now: float = 0.0, role: str = "app"):
    b = server.connect(role, "app", now=now, application_name="svc-message")
    assert server.lock_row(b, "channel_seq", "chan-0", now) is None
    server.idle_in_transaction(b, now, "SELECT last_seq FROM channel_seq WHERE channel_id = 'chan-0' FOR UPDATE")
    return b


def psql(server, sql: str, now: float = 100.0):
    return run_psql([ADMIN, "-c", sql], server, now=lambda: now)


def test_a_second_backend_waits_on_the_held_row_and_sees_its_blocker(server):
    h = holder(server)
    w = server.connect("app", "app", now=1.0)
    assert server.lock_row(w, "channel_seq", "chan-0", 1.0) == h.pid
    other = server.connect("app", "app", now=1.0)
    assert server.lock_row(other, "channel_seq", "chan-1", 1.0) is None  # other rows are free
    out = psql(server, f"SELECT pg_blocking_pids({w.pid})")
    assert out.exit_code == 0 and "{" + str(h.pid) + "}" in out.stdout
    locks = psql(server, "SELECT pid, mode, granted FROM pg_locks WHERE locktype = 'transactionid'").stdout
    assert f"{w.pid} | ShareLock     | f" in locks


def test_terminate_releases_the_row_lock(server):
    h = holder(server)
    out = psql(server, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE state = 'idle in transaction'")
    assert out.exit_code == 0 and " t" in out.stdout
    assert server.lock_holder("channel_seq", "chan-0") is None and not h.alive


def test_the_timer_is_armed_when_the_backend_goes_idle_not_by_a_later_reload(server):
    old = holder(server, now=0.0)  # idle with the guard off
    server.alter_system("idle_in_transaction_session_timeout", "10s")
    server.reload(5.0)
    assert server.expire_idle(1000.0) == []  # the already idle backend keeps its unarmed timer
    assert old.alive
    server.terminate(old.pid, 1000.0)
    new = holder(server, now=1000.0)
    assert server.next_idle_deadline(1000.0) == pytest.approx(1010.0)
    assert server.expire_idle(1009.0) == [] and server.expire_idle(1010.0) == [new.pid]
    assert server.lock_holder("channel_seq", "chan-0") is None


def test_alter_system_without_reload_does_not_guard_new_sessions(server):
    server.alter_system("idle_in_transaction_session_timeout", "10s")
    b = holder(server, now=0.0)
    assert b.idle_tx_deadline is None
    assert server.expire_idle(100.0) == []


@pytest.mark.parametrize("role,guarded", [("app", True), ("svc_admin", False)])
def test_a_role_in_database_guard_reaches_only_that_roles_new_sessions(server, role, guarded):
    out = psql(server, "ALTER ROLE app IN DATABASE app SET idle_in_transaction_session_timeout = '15s'")
    assert out.exit_code == 0, out.stderr
    b = holder(server, now=0.0, role=role)
    assert (b.idle_tx_deadline == 15.0) is guarded


def test_alter_system_must_be_its_own_statement(server):
    out = psql(server, "ALTER SYSTEM SET idle_in_transaction_session_timeout = '10s'; SELECT pg_reload_conf()")
    assert out.exit_code == 1 and "cannot run inside a transaction block" in out.stderr
    assert "idle_in_transaction_session_timeout" not in server.auto_conf


def test_pg_stat_activity_shows_the_holder_with_its_transaction_start(server):
    holder(server, now=3.0)
    out = psql(server, "SELECT state, xact_start IS NOT NULL AS in_xact, query FROM pg_stat_activity "
                       "WHERE usename = 'app'").stdout
    assert "idle in transaction | t" in out and "FOR UPDATE" in out


def test_substrate_views_are_relations_of_the_app_database_only(server):
    assert "chan-1     |        7" in psql(server, "TABLE channel_seq").stdout
    server.add_database("postgres")
    other = run_psql(["postgresql://postgres:pw@postgres:5432/postgres", "-c", "TABLE channel_seq"], server,
                     now=lambda: 0.0)
    assert other.exit_code == 1 and 'relation "channel_seq" does not exist' in other.stderr
