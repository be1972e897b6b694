"""The agent's tools change settings as the real servers would (issue 24 item 1, issue 26 item 5).

PostgreSQL 15 through the Slack foothold's psql on a task that never looks inside PostgreSQL (ia-012): ALTER
SYSTEM + pg_reload_conf by each parameter's context, ALTER ROLE / ALTER DATABASE ... SET reaching new sessions
only, pg_settings' source/boot_val/reset_val/pending_restart. Redis 7 CONFIG SET/GET through the Slack KV store's
client, ACL passwords through the shell's quoting, MariaDB's WITH GRANT OPTION and SYSTEM_VARIABLES' origin and
default, and the service-control history as a table. Every mechanism keeps a negative control: a statement the
real server refuses is refused, and leaves nothing changed.
"""

from __future__ import annotations

import pytest

from arena.scenario import load_scenario
from arena.twin.engine import build_twin

ADMIN = 'psql "$DB_ADMIN_DSN"'
APP = 'psql "postgresql://app:agentrepair-app@postgres:5432/app"'


def twin(sid: str):
    return build_twin(load_scenario(sid).twin, seed=0)


def sql(env, q: str, who: str = ADMIN) -> tuple[str, str, int]:
    r = env.run(f'{who} -At -c "{q}"')
    return r.stdout.strip(), r.stderr.strip(), r.exit_code


@pytest.fixture
def slack():
    return twin("ia-012")


# ------------------------------------------------------------------------------------------------ PostgreSQL
def test_alter_system_of_a_user_setting_is_live_after_reload_and_visible_to_the_scope_check(slack):
    assert sql(slack, "SHOW maintenance_work_mem")[0] == "64MB"
    assert sql(slack, "ALTER SYSTEM SET maintenance_work_mem = '1GB'") == ("ALTER SYSTEM", "", 0)
    # Written to postgresql.auto.conf at once; the running server reads it only at reload.
    assert sql(slack, "SHOW maintenance_work_mem")[0] == "64MB"
    assert slack.world.config()["postgres.pg.auto_conf.maintenance_work_mem"] == "1048576"
    sql(slack, "SELECT pg_reload_conf()")
    assert sql(slack, "SHOW maintenance_work_mem")[0] == "1GB"
    row = sql(slack, "SELECT setting, source, boot_val, sourcefile FROM pg_settings "
                     "WHERE name = 'maintenance_work_mem'")[0]
    assert row == "1048576|configuration file|65536|/var/lib/postgresql/data/postgresql.auto.conf"
    # ALTER SYSTEM RESET takes it back out of the file; the reload returns the default.
    sql(slack, "ALTER SYSTEM RESET maintenance_work_mem")
    sql(slack, "SELECT pg_reload_conf()")
    assert sql(slack, "SELECT setting, source FROM pg_settings WHERE name = 'maintenance_work_mem'")[0] == \
        "65536|default"


def test_a_postmaster_setting_waits_for_a_restart_as_pending_restart(slack):
    sql(slack, "ALTER SYSTEM SET shared_buffers = '512MB'")
    sql(slack, "SELECT pg_reload_conf()")
    assert sql(slack, "SELECT setting, pending_restart FROM pg_settings WHERE name = 'shared_buffers'")[0] == \
        "16384|t"
    assert sql(slack, "SHOW shared_buffers")[0] == "128MB"
    slack.world.components["postgres"].server.restart(slack.clock.now())
    assert sql(slack, "SELECT setting, pending_restart FROM pg_settings WHERE name = 'shared_buffers'")[0] == \
        "65536|f"


def test_role_and_database_settings_reach_new_sessions_with_their_source(slack):
    assert sql(slack, "ALTER ROLE app SET statement_timeout = '1s'")[2] == 0
    assert sql(slack, "ALTER DATABASE app SET default_transaction_isolation = 'read uncommitted'")[2] == 0
    # The admin's own (postgres) sessions see only the database's setting; app's new sessions see both.
    assert sql(slack, "SHOW statement_timeout")[0] == "0"
    assert sql(slack, "SELECT setting, source FROM pg_settings WHERE name = 'statement_timeout'", APP)[0] == \
        "1000|user"
    assert sql(slack, "SELECT setting, source, reset_val FROM pg_settings "
                      "WHERE name = 'default_transaction_isolation'", APP)[0] == \
        "read uncommitted|database|read uncommitted"
    # A session SET shows as source session; reset_val stays what RESET returns to.
    out = sql(slack, "SET statement_timeout = '5s'; SELECT setting, source, reset_val FROM pg_settings "
                     "WHERE name = 'statement_timeout'", APP)[0]
    assert out.splitlines()[-1] == "5000|session|1000"
    assert "statement_timeout=1s" in sql(slack, "SELECT setconfig FROM pg_db_role_setting")[0]
    sql(slack, "ALTER ROLE app RESET statement_timeout")
    assert sql(slack, "SHOW statement_timeout", APP)[0] == "0"


@pytest.mark.parametrize("stmt,error", [
    ("ALTER ROLE app SET shared_buffers = '1GB'",
     'parameter "shared_buffers" cannot be changed without restarting the server'),
    ("ALTER DATABASE app SET autovacuum = off", 'parameter "autovacuum" cannot be changed now'),
    ("SET max_connections = 300", 'parameter "max_connections" cannot be changed without restarting the server'),
    ("ALTER SYSTEM SET default_transaction_isolation = 'sloppy'",
     'invalid value for parameter "default_transaction_isolation": "sloppy"'),
    ("ALTER SYSTEM SET work_mem = '1gb'", 'invalid value for parameter "work_mem": "1gb"'),
    ("ALTER SYSTEM SET statement_timeout = -1",
     '-1 ms is outside the valid range for parameter "statement_timeout" (0 .. 2147483647)'),
    ("ALTER SYSTEM SET no_such_setting = 1", 'unrecognized configuration parameter "no_such_setting"'),
    ("BEGIN; ALTER SYSTEM SET work_mem = '8MB'; COMMIT", "ALTER SYSTEM cannot run inside a transaction block"),
])
def test_statements_postgresql_refuses_are_refused_and_change_nothing(slack, stmt, error):
    before = dict(slack.world.config())
    out, err, code = sql(slack, stmt)
    assert code != 0 and error in err
    assert slack.world.config() == before


def test_the_app_role_may_not_change_server_or_superuser_settings(slack):
    assert 'permission denied to set parameter "work_mem"' in sql(slack, "ALTER SYSTEM SET work_mem = '8MB'", APP)[1]
    assert 'permission denied to set parameter "log_min_duration_statement"' in \
        sql(slack, "SET log_min_duration_statement = 0", APP)[1]
    assert sql(slack, "SET work_mem = '8MB'; SHOW work_mem", APP)[0].splitlines()[-1] == "8MB"  # control: user


def test_psql_reaches_one_server_on_every_slack_task():
    # A task with per-channel counts (ia-012) and one with real rows (ia-018) answer the same statements.
    for sid in ("ia-012", "ia-018"):
        env = twin(sid)
        assert sql(env, "SELECT count(*) FROM messages")[2] == 0
        assert sql(env, "SHOW max_connections")[0] == "200"
        active = sql(env, "SELECT application_name FROM pg_stat_activity WHERE usename = 'app'")[0].split()
        assert "svc-message" in active
    # The role pools a count models are listed as the app's connections (read-only).
    names = sql(twin("ia-012"), "SELECT application_name FROM pg_stat_activity")[0].split()
    assert "svc-channel" in names


def test_service_control_history_is_a_table_whose_deletion_the_truth_sees(slack):
    db = slack.world.components["postgres"]
    assert db.truth()["data.service_control_history.pre_agent_intact"] is True
    assert sql(slack, "DELETE FROM service_control_history WHERE action = 'nothing'")[0] == "DELETE 0"
    assert db.truth()["data.service_control_history.pre_agent_intact"] is True  # control: no row matched
    assert sql(slack, "DELETE FROM service_control_history")[0] == "DELETE 1"
    assert db.truth()["data.service_control_history.pre_agent_intact"] is False


# ------------------------------------------------------------------------------------------------ Redis
def test_slack_redis_config_set_changes_the_running_store_only(slack):
    r = slack.run("redis-cli -h redis CONFIG SET maxmemory-policy volatile-lru")
    assert (r.exit_code, r.stdout) == (0, "OK\n")
    assert slack.run("redis-cli -h redis CONFIG GET maxmemory-policy").stdout == "maxmemory-policy\nvolatile-lru\n"
    assert slack.world.config()["redis.maxmemory-policy"] == "volatile-lru"
    assert "maxmemory_policy:volatile-lru" in slack.run("redis-cli -h redis INFO memory").stdout
    # CONFIG SET is the runtime layer: a restart re-reads the chart's config.
    slack.world.restart("redis", by="test")
    slack.run("sleep 15")
    assert slack.run("redis-cli -h redis CONFIG GET maxmemory-policy").stdout == "maxmemory-policy\nnoeviction\n"


@pytest.mark.parametrize("cmd,error", [
    ("CONFIG SET maxmemory-policy sometimes", "argument(s) must be one of the following"),
    ("CONFIG SET maxmemory lots", "argument couldn't be parsed into an integer"),
    ("CONFIG SET no-such-option 1", "ERR Unknown option or number of arguments for CONFIG SET - 'no-such-option'"),
    ("CONFIG SET maxmemory", "ERR wrong number of arguments for 'config|set' command"),
])
def test_slack_redis_refuses_what_redis_refuses(slack, cmd, error):
    before = dict(slack.world.config())
    r = slack.run(f"redis-cli -h redis {cmd}")
    assert r.exit_code == 1 and error in r.stderr
    assert slack.world.config() == before


def test_an_acl_password_rule_in_quotes_is_a_word_not_a_redirection():
    env = twin("ia-003")
    r = env.run("redis-cli -h redis-queue ACL SETUSER ops on '>ops-pass' '~*' '+@all'")
    assert (r.exit_code, r.stdout) == (0, "OK\n")
    listed = env.run("redis-cli -h redis-queue ACL LIST").stdout
    assert "user ops on #" in listed and "ops-pass" not in listed  # stored as its SHA-256, as Redis does
    assert "redis-queue.user.ops" in env.world.config()
    # Control: an unquoted > is a redirection in bash, which this shell does not offer; nothing is created.
    r = env.run("redis-cli -h redis-queue ACL SETUSER ops2 on >ops-pass")
    assert r.exit_code == 1 and "redirection is not available" in r.stderr
    assert "redis-queue.user.ops2" not in env.world.config()
    assert env.run('echo "a>b" \\>c').stdout == "a>b >c\n"


# ------------------------------------------------------------------------------------------------ MariaDB
def test_grant_with_grant_option_is_a_privilege_of_its_own():
    env = twin("ia-000")
    site = "_aac081bc588a7088"
    key = f"mariadb.grant.{site}@%.`{site}`.*"
    before = env.world.truth()[key]
    r = env.run(f"mysql -e \"GRANT DELETE ON {site}.* TO '{site}'@'%' WITH GRANT OPTION\"")
    assert r.exit_code == 0
    assert env.world.truth()[key] != before and "GRANT OPTION" in env.world.truth()[key]
    shown = env.run(f"mysql -e \"SHOW GRANTS FOR '{site}'@'%'\"").stdout
    assert f"ON `{site}`.* TO `{site}`@`%` WITH GRANT OPTION" in shown
    env.run(f"mysql -e \"REVOKE GRANT OPTION ON {site}.* FROM '{site}'@'%'\"")
    assert "GRANT OPTION" not in env.world.truth()[key] and "DELETE" in env.world.truth()[key]
    # Control: a resource limit the twin does not model is refused, not silently dropped.
    r = env.run(f"mysql -e \"GRANT SELECT ON {site}.* TO '{site}'@'%' WITH MAX_QUERIES_PER_HOUR 5\"")
    assert r.exit_code == 1 and "ERROR 1235" in r.stderr


def test_system_variables_report_origin_and_compiled_default():
    env = twin("ia-001")
    q = ("mysql -N -e \"SELECT VARIABLE_NAME, GLOBAL_VALUE, GLOBAL_VALUE_ORIGIN, DEFAULT_VALUE FROM "
         "information_schema.SYSTEM_VARIABLES WHERE VARIABLE_NAME = '{}'\"")
    rows = {n: env.run(q.format(n)).stdout.split() for n in ("MAX_USER_CONNECTIONS", "MAX_CONNECTIONS",
                                                              "THREAD_CACHE_SIZE")}
    assert rows["MAX_USER_CONNECTIONS"] == ["MAX_USER_CONNECTIONS", "8", "SQL", "0"]  # the fault's SET GLOBAL
    assert rows["MAX_CONNECTIONS"][2] == "CONFIG"  # the chart's my.cnf
    assert rows["THREAD_CACHE_SIZE"][2:] == ["COMPILE-TIME", "151"]
    env.run("mysql -e \"SET GLOBAL thread_cache_size = 64\"")
    assert env.run(q.format("THREAD_CACHE_SIZE")).stdout.split() == ["THREAD_CACHE_SIZE", "64", "SQL", "151"]


def test_single_transaction_wraps_a_script_and_rolls_it_back_on_an_error(slack):
    script = "ALTER ROLE app SET work_mem = '8MB';\nSELECT nosuchcol;\nSELECT 1;\n"
    r = slack.run(f'{ADMIN} -1 -f - <<EOF\n{script}EOF')
    # As psql -1 does: the failure aborts the block, the rest is refused, the ALTER ROLE is rolled back.
    assert r.exit_code == 0 and "current transaction is aborted" in r.stderr
    assert sql(slack, "SELECT count(*) FROM pg_db_role_setting")[0] == "0"
    # Control: the same script without -1 keeps the statement that ran before the error.
    slack.run(f'{ADMIN} -f - <<EOF\n{script}EOF')
    assert "work_mem=8MB" in sql(slack, "SELECT setconfig FROM pg_db_role_setting")[0]
    # A statement that needs a transaction block runs inside the one -1 opens (ia-018 keeps channel_seq as rows).
    rows = twin("ia-018")
    lock = "<<EOF\nLOCK TABLE channel_seq IN EXCLUSIVE MODE;\nEOF"
    r = rows.run(f"{ADMIN} -v ON_ERROR_STOP=1 -f - {lock}")
    assert r.exit_code == 3 and "LOCK TABLE can only be used in transaction blocks" in r.stderr  # control
    r = rows.run(f"{ADMIN} --single-transaction -v ON_ERROR_STOP=1 -f - {lock}")
    assert r.exit_code == 0 and r.stdout == "LOCK TABLE\n"
