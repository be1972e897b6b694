"""The twin's PostgreSQL types pg_locks.relation as an oid, as the real server does: a relation name compares with
it only through `::regclass`, so ia-018's lock query works the same on the twin and on live PostgreSQL."""

from __future__ import annotations

from arena.scenario import load_scenario
from arena.twin import build_twin


def _env():
    env = build_twin(load_scenario("ia-018").twin, 0)
    env.clock.sleep(40)  # past the boot: svc-message's boot transaction holds chan-0's row
    return env


def _psql(env, sql: str):
    return env.run(f'psql "$DB_ADMIN_DSN" -c "{sql}"')


def test_regclass_resolves_the_relation_and_prints_its_name():
    env = _env()
    r = _psql(env, "SELECT relation::regclass AS relation, mode FROM pg_locks WHERE relation = 'channel_seq'::regclass")
    assert r.exit_code == 0, r.stderr
    assert "channel_seq | RowShareLock" in r.stdout


def test_a_bare_name_against_the_oid_column_is_refused_as_postgres_refuses_it():
    r = _psql(_env(), "SELECT pid FROM pg_locks WHERE relation = 'channel_seq'")
    assert r.exit_code == 1
    assert 'invalid input syntax for type oid: "channel_seq"' in r.stderr


def test_an_unknown_relation_name_does_not_resolve():
    r = _psql(_env(), "SELECT 'no_such_table'::regclass")
    assert r.exit_code == 1
    assert 'relation "no_such_table" does not exist' in r.stderr


def test_the_oid_is_stable_and_numeric():
    env = _env()
    a = _psql(env, "SELECT 'channel_seq'::regclass::oid::int AS oid").stdout
    b = _psql(env, "SELECT relation FROM pg_locks WHERE relation = 'channel_seq'::regclass LIMIT 1").stdout
    oid = int(a.split()[2])
    assert oid > 16384 and str(oid) in b
