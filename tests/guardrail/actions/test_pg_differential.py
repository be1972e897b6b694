"""Differential check of the PostgreSQL reading on a real PostgreSQL 15 server (the Debian package, on loopback).

Every command of pg_adversarial.yaml that the guard reads as read-only runs twice through the real psql in bash:
first with `default_transaction_read_only` on, where the server's own error ("cannot execute ... in a read-only
transaction") says it is not a read; then for real, with a fingerprint of the server's state (catalog objects,
roles, settings, large objects, prepared transactions, replication slots, sequences, the test tables' rows and
another session that must survive) taken before and after. A read that changes any of it fails the test. A
negative control shows the fingerprint sees a real write. Also checks that every volatile function of this server's
pg_catalog is in pg_functions.yaml. Skips where the server binaries are missing or the test cannot run them (root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from guardrail.actions.classifiers.pgsql import FUNCTIONS
from guardrail.actions.normalise import normalise
from tests.ports import free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")
CORPUS = yaml.safe_load((Path(__file__).with_name("pg_adversarial.yaml")).read_text(encoding="utf-8"))
MARK = Path("/tmp/guardrail-pg-diff-mark")

pytestmark = [
    pytest.mark.skipif(not (PG_BIN / "postgres").exists(), reason="PostgreSQL 15 is not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="starting the server as the postgres user needs root"),
]

SETUP = """
CREATE SCHEMA guard;
CREATE TABLE guard.accounts (id serial PRIMARY KEY, name text, balance int);
INSERT INTO guard.accounts (name, balance) SELECT 'n' || g, g * 10 FROM generate_series(1, 5) g;
CREATE TABLE guard.audit (id int);
INSERT INTO guard.audit VALUES (1), (2);
CREATE SEQUENCE guard.s;
SELECT nextval('guard.s');
"""

FINGERPRINT = """
SELECT md5(string_agg(x, '|' ORDER BY x)) FROM (
  SELECT 'rel:' || oid || ':' || relname || ':' || relkind::text FROM pg_class
  UNION ALL SELECT 'proc:' || oid FROM pg_proc
  UNION ALL SELECT 'role:' || rolname || rolsuper || rolcanlogin || coalesce(rolpassword, '') FROM pg_authid
  UNION ALL SELECT 'db:' || datname || datallowconn || datconnlimit FROM pg_database
  UNION ALL SELECT 'cfg:' || coalesce(array_to_string(setconfig, ','), '') FROM pg_db_role_setting
  UNION ALL SELECT 'file:' || coalesce(name, '') || '=' || coalesce(setting, '') FROM pg_file_settings
  UNION ALL SELECT 'lo:' || oid FROM pg_largeobject_metadata
  UNION ALL SELECT 'px:' || gid FROM pg_prepared_xacts
  UNION ALL SELECT 'slot:' || slot_name || coalesce(confirmed_flush_lsn::text, '') FROM pg_replication_slots
  UNION ALL SELECT 'seq:' || last_value || ':' || is_called FROM guard.s
  UNION ALL SELECT 'acct:' || md5(a::text) FROM guard.accounts a
  UNION ALL SELECT 'audit:' || md5(t::text) FROM guard.audit t
  UNION ALL SELECT 'stats:' || coalesce(stats_reset::text, '') FROM pg_stat_database WHERE datname = 'postgres'
  UNION ALL SELECT 'victim:' || count(*) FROM pg_stat_activity WHERE application_name = 'victim'
  UNION ALL SELECT 'adv:' || count(*) FROM pg_locks WHERE locktype = 'advisory'
) s(x)
"""


@pytest.fixture(scope="module")
def server():
    from arena.live.names import Endpoint
    from arena.live.servers import PostgresServer

    base = Path(tempfile.mkdtemp(prefix="guardrail-pgdiff-"))
    port = free_port()
    srv = PostgresServer(Endpoint("postgres", "127.0.0.1", port), base, settings={"max_prepared_transactions": 5,
                                                                             "wal_level": "logical"})
    srv.start()
    env = {**os.environ, "PGHOST": "127.0.0.1", "PGPORT": str(port), "PGUSER": "postgres", "PGDATABASE": "postgres",
           "PSQLRC": "/dev/null"}
    env.pop("PGOPTIONS", None)
    srv.psql(SETUP)
    # A session the reads must leave alone (pg_terminate_backend, pg_cancel_backend).
    victim = subprocess.Popen(["psql", "-X", "-c", "SELECT pg_sleep(3600)"], env={**env, "PGAPPNAME": "victim"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield env
    finally:
        victim.kill()
        victim.wait()
        srv.stop()
        shutil.rmtree(base, ignore_errors=True)


def _psql(env: dict[str, str], sql: str) -> str:
    return subprocess.run(["psql", "-X", "-At", "-c", sql], env=env, capture_output=True, text=True,
                          timeout=60).stdout.strip()


def _fingerprint(env: dict[str, str]) -> str:
    return _psql(env, FINGERPRINT)


def _bash(cmd: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", cmd], env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, cwd=tempfile.gettempdir())


def _wait_for_victim(env: dict[str, str]) -> None:
    """The victim session connects in the background: wait for it (bounded) so the fingerprint counts it."""
    for _ in range(600):
        if _psql(env, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'victim'") == "1":
            return
        time.sleep(0.05)
    pytest.fail("the victim session never connected")


def _read_only(cmd: str) -> bool:
    actions = normalise(cmd)
    return bool(actions) and all(a.mutating is False for a in actions)


READS = [c["cmd"] for c in CORPUS if _read_only(c["cmd"])]


def test_the_fingerprint_sees_a_write(server):
    """Negative control: a real write changes the fingerprint (so an unchanged one means something)."""
    _wait_for_victim(server)
    before = _fingerprint(server)
    assert before
    _bash("psql -X -c 'UPDATE guard.audit SET id = id + 10 WHERE id = 1'", server)
    after = _fingerprint(server)
    _bash("psql -X -c 'UPDATE guard.audit SET id = id - 10 WHERE id = 11'", server)
    assert after != before and _fingerprint(server) == before


def test_enough_of_the_corpus_is_read_only_to_run():
    assert len(READS) >= 35


@pytest.mark.parametrize("cmd", READS, ids=[c[:70] for c in READS])
def test_what_the_guard_reads_as_read_only_changes_nothing_on_the_server(server, cmd):
    _wait_for_victim(server)
    MARK.unlink(missing_ok=True)
    ro = _bash(cmd, {**server, "PGOPTIONS": "-c default_transaction_read_only=on"})
    assert "read-only transaction" not in ro.stderr, ro.stderr
    before = _fingerprint(server)
    done = _bash(cmd, server)
    assert _fingerprint(server) == before, (cmd, done.stdout[-300:], done.stderr[-300:])
    assert not MARK.exists(), f"{cmd} ran a shell command"


def test_every_volatile_function_of_the_server_is_listed(server):
    names = set(_psql(server, "SELECT DISTINCT proname FROM pg_proc WHERE provolatile = 'v' "
                              "AND pronamespace = 'pg_catalog'::regnamespace").split())
    assert len(names) > 150
    assert names - (FUNCTIONS.reads_only | FUNCTIONS.changes_state) == set()
