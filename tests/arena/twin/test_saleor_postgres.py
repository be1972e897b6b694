"""The Saleor twin's PostgreSQL: settings layers, connect-time inheritance, and psql's output and errors."""

from __future__ import annotations

import pytest

from arena.twin.saleor.postgres import PostgresServer
from arena.twin.saleor.psql import run_psql

ADMIN = "postgresql://postgres:pw@postgres:5432/saleor"
APP = "postgresql://saleor_app:agentrepair-app@postgres:5432/saleor"


@pytest.fixture
def server() -> PostgresServer:
    s = PostgresServer()
    s.add_role("postgres", superuser=True, password="pw")
    s.add_role("saleor_app", password="agentrepair-app", connlimit=5)
    s.add_role("saleor_worker_db", password="w")
    s.add_database("postgres")
    s.add_database("saleor")
    return s


def psql(server, *argv, stdin=""):
    return run_psql(list(argv), server, now=lambda: 10.0, stdin=stdin)


def test_catalog_precedence_role_in_database_beats_role_database_and_files(server):
    server.set_catalog("saleor", "saleor_app", "statement_timeout", "150ms")
    server.set_catalog("", "saleor_app", "statement_timeout", "0")
    server.set_catalog("saleor", "", "statement_timeout", "0")
    server.alter_system("statement_timeout", "5s")
    server.reload(0.0)
    b = server.connect("saleor_app", "saleor", now=0.0)
    assert server.effective(b, "statement_timeout") == ("150", "database user")
    other = server.connect("saleor_worker_db", "saleor", now=0.0)
    assert server.effective(other, "statement_timeout") == ("0", "database")


def test_sessions_keep_what_they_inherited_at_connect_time(server):
    old = server.connect("saleor_app", "saleor", now=0.0)
    server.set_catalog("saleor", "saleor_app", "statement_timeout", "150ms")
    new = server.connect("saleor_app", "saleor", now=1.0)
    assert server.statement_timeout_ms(old) == 0
    assert server.statement_timeout_ms(new) == 150
    server.set_catalog("saleor", "saleor_app", "statement_timeout", None)
    assert server.statement_timeout_ms(new) == 150  # until it reconnects
    assert server.statement_timeout_ms(server.connect("saleor_app", "saleor", now=2.0)) == 0


def test_alter_system_takes_effect_on_reload_for_sessions_without_a_catalog_value(server):
    b = server.connect("saleor_worker_db", "saleor", now=0.0)
    server.alter_system("statement_timeout", "5s")
    assert server.statement_timeout_ms(b) == 0
    server.reload(1.0)
    assert server.statement_timeout_ms(b) == 5000
    server.alter_system("max_connections", "300")
    server.reload(2.0)
    assert server.applied["max_connections"][0] == "100" and "max_connections" in server.pending_restart


def test_psql_table_rows_footer_and_command_tags(server):
    server.connect("saleor_app", "saleor", now=0.0, application_name="saleor-api")
    out = psql(server, ADMIN, "-c", "SELECT usename, application_name FROM pg_stat_activity WHERE usename = 'saleor_app'")
    assert out.exit_code == 0
    lines = out.stdout.splitlines()
    assert lines[0].split("|")[0].strip() == "usename" and set(lines[1]) <= {"-", "+"}
    assert "saleor_app | saleor-api" in out.stdout and "(1 row)" in out.stdout
    tag = psql(server, ADMIN, "-c", "ALTER ROLE saleor_app IN DATABASE saleor SET statement_timeout = '150ms'")
    assert tag.stdout == "ALTER ROLE\n"
    drds = psql(server, ADMIN, "-c", "\\drds")
    assert "saleor_app | saleor   | statement_timeout=150ms" in drds.stdout
    at = psql(server, ADMIN, "-At", "-c", "SELECT setconfig FROM pg_db_role_setting")
    assert at.stdout == "{statement_timeout=150ms}\n"


def test_psql_errors_look_like_postgres(server):
    bad = psql(server, ADMIN, "-c", "SELEC 1")
    assert bad.exit_code == 1 and bad.stderr.startswith('ERROR:  syntax error at or near "SELEC"')
    tx = psql(server, ADMIN, "-c", "ALTER SYSTEM SET statement_timeout = '1s'; SELECT pg_reload_conf()")
    assert "ALTER SYSTEM cannot run inside a transaction block" in tx.stderr
    assert server.auto_conf == {}
    unknown = psql(server, ADMIN, "-c", "SET statment_timeout = 0")
    assert 'unrecognized configuration parameter "statment_timeout"' in unknown.stderr
    denied = psql(server, APP, "-c", "ALTER ROLE saleor_app SET statement_timeout = 0")
    assert "permission denied" in denied.stderr
    wrongpw = psql(server, "postgresql://saleor_app:nope@postgres:5432/saleor", "-c", "SELECT 1")
    assert wrongpw.exit_code == 2 and "password authentication failed" in wrongpw.stderr


def test_statement_timeout_cancels_with_57014_and_costs_its_time(server):
    server.set_catalog("saleor", "saleor_app", "statement_timeout", "150ms")
    out = psql(server, APP, "-c", "SELECT pg_sleep(0.75)")
    assert "canceling statement due to statement timeout" in out.stderr and out.duration_s == pytest.approx(0.15)
    ok = psql(server, ADMIN, "-c", "SELECT pg_sleep(0.75)")
    assert ok.exit_code == 0 and ok.duration_s == pytest.approx(0.75)


def test_terminate_backends_of_the_app_role_only(server):
    pids = [server.connect("saleor_app", "saleor", now=0.0).pid for _ in range(3)]
    worker = server.connect("saleor_worker_db", "saleor", now=0.0).pid
    out = psql(server, ADMIN, "-c", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                    "WHERE usename='saleor_app' AND pid <> pg_backend_pid()")
    assert out.stdout.count(" t\n") == 3 and "(3 rows)" in out.stdout
    assert not any(p in server.backends for p in pids) and worker in server.backends


def test_session_set_is_gone_with_the_session(server):
    server.set_catalog("saleor", "saleor_app", "statement_timeout", "150ms")
    out = psql(server, APP, "-c", "SET statement_timeout = 0", "-c", "SHOW statement_timeout")
    assert "\n 0\n" in out.stdout
    assert psql(server, APP, "-At", "-c", "SHOW statement_timeout").stdout == "150ms\n"


def test_connection_limits_refuse_like_postgres(server):
    for _ in range(5):
        server.connect("saleor_app", "saleor", now=0.0)
    out = psql(server, APP, "-c", "SELECT 1")
    assert out.exit_code == 2 and 'too many connections for role "saleor_app"' in out.stderr
