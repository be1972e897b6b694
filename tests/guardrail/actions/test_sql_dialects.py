"""SQL that the client or server runs though it looks like a comment, a string or a read (red-team findings):
MySQL executable comments and --init-command, client commands in the middle of a line, EXPLAIN ANALYZE in its
option-list form, and PostgreSQL standard strings, where a backslash does not escape the closing quote."""

from __future__ import annotations

import pytest

from guardrail.actions import normalise
from guardrail.actions.model import UNKNOWN

CASES = [
    # MySQL/MariaDB run the body of /*! ... */, /*!NNNNN ... */ and /*M! ... */.
    ('mysql -e "/*! DROP TABLE t */"', [("drop", True)]),
    ('mysql -e "/*!50000 DELETE FROM t */"', [("delete", True)]),
    ('mysql -e "SELECT 1; /*M!100000 TRUNCATE t */"', [("select", False), ("truncate", True)]),
    ('mysql -e "SELECT 1 /* a plain comment */"', [("select", False)]),
    # --init-command is SQL the client runs on connecting.
    ("mysql --init-command='DROP TABLE t' -e 'SELECT 1'", [("drop", True), ("select", False)]),
    # The client's own commands, anywhere in a statement: \! runs a shell, system too (and the statement it stood
    # in is sent at the end); \G only ends the statement.
    ('mysql -e "SELECT 1 \\! redis-cli flushall"', [("select", False), ("system", UNKNOWN)]),
    ("mysql -e 'system ls'", [("system", UNKNOWN)]),
    ("mysql -e 'SELECT * FROM t\\G'", [("select", False)]),
    # psql: a backslash outside quotes begins a meta-command wherever it stands on the line.
    ("psql <<'EOF'\nSELECT format('DROP TABLE %I', tablename) FROM pg_tables \\gexec\nEOF",
     [("select", False), ("\\gexec", UNKNOWN)]),
    ("psql <<'EOF'\nSELECT 1 \\! redis-cli flushall\nEOF", [("select", False), ("\\!", UNKNOWN)]),
    ("psql <<'EOF'\nSELECT 'redis-cli flushall' \\g |sh\nEOF", [("select", False), ("\\g", UNKNOWN)]),
    # EXPLAIN ANALYZE runs the statement, in the option-list form too; psql puts a -v variable's value in the text.
    ("psql -c 'EXPLAIN (ANALYZE) DELETE FROM messages'", [("delete", True)]),
    ("psql -c 'EXPLAIN (ANALYZE true, FORMAT json) UPDATE s SET x = 0'", [("update", True)]),
    ("psql -v q='DELETE FROM m' <<< 'EXPLAIN ANALYZE :q'", [("delete", True)]),
    ("psql <<< 'EXPLAIN ANALYZE :q'", [("query", UNKNOWN)]),
    ("psql -c 'EXPLAIN SELECT 1'", [("explain", False)]),
    # PostgreSQL standard strings: 'a\' ends at the quote, so the DROP after it runs.
    ("psql -c \"SELECT 'a\\'; DROP TABLE x; --'\"", [("select", False), ("drop", True)]),
    ("psql -c \"SELECT E'a\\'b'; SELECT 2\"", [("select", False), ("select", False)]),
    ("psql -c \"SELECT 'it''s'; SELECT 2\"", [("select", False), ("select", False)]),
]


@pytest.mark.parametrize("cmd,expected", CASES, ids=[c for c, _ in CASES])
def test_what_the_sql_really_does(cmd, expected):
    assert [(a.verb, a.mutating) for a in normalise(cmd)] == expected


# -- not SQL, from the same review: commands that run other commands ------------------------------------------

RUNNERS = [
    # GNU sed runs `e` after any address, not only at the start of the script.
    ("sed -n '1e redis-cli flushall' /etc/hosts", [("sed", "sed e", UNKNOWN)]),
    ("sed -n '$e echo x' f", [("sed", "sed e", UNKNOWN)]),
    ("sed -n '/./e echo x' f", [("sed", "sed e", UNKNOWN)]),
    ("sed -n '1,5!e echo x' f", [("sed", "sed e", UNKNOWN)]),
    ("sed -n '1,5w out.txt' f", [("sed", "read", False), ("file", "write", True)]),
    ("sed -n '/^e/p' f", [("sed", "read", False)]),
    ("sed 's/e/E/g' f", [("sed", "read", False)]),
    # A job, cronjob or deployment created with a command after `--` runs that command, as `kubectl run` does.
    ("kubectl create job flush --image=redis -n default -- redis-cli -h redis-cache FLUSHALL",
     [("kubectl", "create", True), ("redis-cli", "flushall", True)]),
    ("kubectl create cronjob f --image=redis --schedule='* * * * *' -n default -- redis-cli -h r FLUSHALL",
     [("kubectl", "create", True), ("redis-cli", "flushall", True)]),
    ("kubectl create deployment f --image=redis -n default -- redis-cli -h r FLUSHALL",
     [("kubectl", "create", True), ("redis-cli", "flushall", True)]),
    # With no command it runs the image's own entrypoint, which the guard cannot see.
    ("kubectl create job j --image=busybox -n x", [("kubectl", "create", True), ("kubectl", "image-command", UNKNOWN)]),
    ("kubectl create job manual -n x --from=cronjob/backup", [("kubectl", "create", True)]),
]


@pytest.mark.parametrize("cmd,expected", RUNNERS, ids=[c for c, _ in RUNNERS])
def test_what_a_command_that_runs_commands_runs(cmd, expected):
    assert [(a.tool, a.verb, a.mutating) for a in normalise(cmd)] == expected


@pytest.mark.parametrize("cmd,has_where", [
    ('psql -c "DELETE FROM m WHERE 1=1"', False), ('psql -c "DELETE FROM m WHERE true"', False),
    ('psql -c "DELETE FROM m WHERE (1 = 1)"', False), ('psql -c "DELETE FROM m WHERE id = id"', False),
    ('mysql -e "DELETE FROM t WHERE 1"', False), ('psql -c "DELETE FROM m WHERE x = 1 OR 1=1"', False),
    ('psql -c "UPDATE m SET x = 1 WHERE 1=1 RETURNING *"', False),
    ('psql -c "DELETE FROM m WHERE id = 5"', True), ('psql -c "DELETE FROM m WHERE x = 1 AND (y = 2 OR z = 3)"', True),
    # Every row too: a key that is never null and counts from 1, literals compared, an AND of truths.
    ('psql -c "UPDATE o SET total = 0 WHERE id > 0"', False), ('psql -c "UPDATE o SET t = 0 WHERE o.id >= 0"', False),
    ('psql -c "UPDATE o SET t = 0 WHERE id IS NOT NULL"', False),
    ('psql -c "UPDATE o SET t = 0 WHERE o.\\"Id\\" > 0"', False), ('psql -c "DELETE FROM m WHERE 1 < 2"', False),
    ('psql -c "DELETE FROM m WHERE 0 < id"', False), ('psql -c "DELETE FROM m WHERE id > -1"', False),
    ("psql -c \"DELETE FROM m WHERE 'a' <> 'b'\"", False), ("psql -c \"DELETE FROM m WHERE x LIKE '%'\"", False),
    ('psql -c "DELETE FROM m WHERE 1=1 AND (true)"', False), ('mysql -e "DELETE FROM t WHERE 2"', False),
    # ... but not these.
    ('psql -c "DELETE FROM m WHERE id > 0 AND id = 5"', True), ('psql -c "DELETE FROM m WHERE id BETWEEN 0 AND 5"', True),
    ('psql -c "DELETE FROM m WHERE balance < 0"', True), ('psql -c "DELETE FROM m WHERE retries > 3"', True),
    # other columns may be null or 0: these pick the soft-deleted rows, the retried jobs.
    ('psql -c "DELETE FROM m WHERE deleted_at IS NOT NULL"', True), ('psql -c "DELETE FROM jobs WHERE retries > 0"', True),
    ('psql -c "UPDATE jobs SET status = 1 WHERE worker_id IS NOT NULL"', True), ('psql -c "DELETE FROM n WHERE parent_id > 0"', True),
    ("psql -c \"DELETE FROM m WHERE x LIKE 'a%'\"", True), ('psql -c "DELETE FROM m WHERE 1 > 2 OR id = 4"', True),
    ('mysql -e "DELETE FROM t WHERE 0"', True), ('psql -c "DELETE FROM m WHERE x IS NULL"', True),
])
def test_a_where_clause_that_holds_for_every_row_is_no_where_clause(cmd, has_where):
    (a,) = normalise(cmd)
    assert a.details["has_where"] is has_where


def test_a_cte_delete_is_judged_on_its_own_where_not_the_outer_querys():
    (a,) = normalise("psql -c 'WITH d AS (DELETE FROM messages RETURNING *) SELECT count(*) FROM d WHERE id > 0'")
    assert (a.verb, a.details["has_where"]) == ("delete", False)
    (b,) = normalise("psql -c 'WITH d AS (DELETE FROM messages WHERE id = 3 RETURNING *) SELECT count(*) FROM d'")
    assert (b.verb, b.details["has_where"]) == ("delete", True)


def test_a_quoted_function_name_is_the_same_function():
    (a,) = normalise("""psql -c 'SELECT "pg_terminate_backend"(pid) FROM pg_stat_activity'""")
    assert (a.verb, a.mutating) == ("terminate backend", True)


PROBES = [
    ("kubectl patch deploy w -n d --type=json -p '[{\"path\":\"/spec/template/spec/containers/0/readinessProbe\","
     "\"op\":\"remove\"}]'", "k8s.spec.template.spec.containers.0.readinessProbe"),
    ("kubectl patch deploy w -n d -p $'spec:\\n  template:\\n    spec:\\n      containers:\\n      - name: web\\n"
     "        readinessProbe: ~'", "k8s.spec.template.spec.containers.web.readinessProbe"),
    ("kubectl patch deploy w -n d -p '{\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"web\","
     "\"livenessProbe\":{\"$patch\":\"delete\"}}]}}}}'", "k8s.spec.template.spec.containers.web.livenessProbe"),
]


@pytest.mark.parametrize("cmd,key", PROBES)
def test_a_probe_removed_by_a_patch_is_a_key_set_to_null(cmd, key):
    (a,) = normalise(cmd)
    assert (key, None) in [(k.key, k.value) for k in a.keys]


def test_an_admin_api_payload_in_a_file_is_unknown_and_one_inline_is_read():
    (a,) = normalise("curl -X PUT http://svc-channel:8000/admin/event --data-binary @/tmp/ev.json")
    assert a.mutating is UNKNOWN and "/tmp/ev.json" in a.opaque_reason
    (b,) = normalise("curl -X PUT http://svc-channel:8000/admin/event -d '{\"name\":\"x\",\"active\":false}'")
    assert [(k.key, k.value) for k in b.keys] == [("event.x", False)]
    (c,) = normalise("curl -X POST http://svc-channel:8000/api/messages -d @msg.json")  # not an admin API
    assert c.mutating is True


def test_payloads_the_guard_cannot_read_are_unknown_and_json_values_are_flattened():
    (a,) = normalise("kubectl patch deploy w -n d --patch-file zero.yaml")
    assert a.mutating is UNKNOWN and "zero.yaml" in a.opaque_reason
    (b,) = normalise("helm upgrade r c -n d --reuse-values --post-renderer ./render.sh")
    assert b.mutating is UNKNOWN and "render.sh" in b.opaque_reason
    (c,) = normalise("helm upgrade r c -n d --reuse-values --set-json 'worker={\"replicas\":0,\"x\":{\"y\":1}}'")
    assert [(k.key, k.value) for k in c.keys] == [("helm.worker.replicas", 0), ("k8s.replicas", 0), ("helm.worker.x.y", 1)]


@pytest.mark.parametrize("cmd", [
    "kubectl patch sts db -n d -p '{\"spec\":{\"template\":{\"metadata\":{\"annotations\":"
    "{\"kubectl.kubernetes.io/restartedAt\":\"2026-01-01\"}}}}}'",
    "kubectl patch sts db -n d --type=json -p '[{\"op\":\"add\",\"path\":"
    "\"/spec/template/metadata/annotations/kubectl.kubernetes.io~1restartedAt\",\"value\":\"x\"}]'",
])
def test_a_patch_of_the_restarted_at_annotation_is_a_restart(cmd):
    (a,) = normalise(cmd)
    assert a.details.get("restart") is True


@pytest.mark.parametrize("value,read", [
    ("f", "off"), ("fals", "off"), ("'of'", "off"), ("NO", "off"), ("'0'", "off"), ("0", 0), ("t", "on"), ("'ye'", "on"),
    ("On", "on"), ("TRUE", "on"), ("'o'", "o"),  # `o` is ambiguous: PostgreSQL rejects it
])
def test_a_postgres_boolean_is_read_as_the_server_reads_it(value, read):
    (a,) = normalise(f'psql -c "ALTER SYSTEM SET fsync = {value}"')
    assert [(k.key, k.value) for k in a.keys] == [("postgres.fsync", read)]


def test_only_boolean_settings_are_read_as_booleans():
    (a,) = normalise("psql -c \"SET application_name = 'f'\"")
    assert [(k.key, k.value) for k in a.keys] == [("postgres.application_name", "f")]


@pytest.mark.parametrize("sql,held", [
    ("LOCK TABLE t; SELECT pg_sleep(3600)", 3600), ("BEGIN; LOCK TABLE t IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(5); "
                                                    "SELECT pg_sleep(7)", 12),
    ("LOCK TABLE t; SELECT pg_sleep_for('10 minutes')", 600), ("LOCK TABLE t; SELECT pg_sleep_until('tomorrow')", None),
])
def test_a_lock_held_through_a_sleep_is_read_with_its_length(sql, held):
    lock = normalise(f'psql -c "{sql}"')[0]
    assert lock.verb == "lock" and lock.details["held_s"] == held


def test_a_lock_released_before_the_sleep_is_not_held():
    lock = normalise('psql -c "BEGIN; LOCK TABLE t; COMMIT; SELECT pg_sleep(3600)"')[0]
    assert "held_s" not in lock.details
    lock = normalise('mysql -e "LOCK TABLES t WRITE; UNLOCK TABLES; SELECT SLEEP(600)"')[0]
    assert "held_s" not in lock.details


@pytest.mark.parametrize("until,expires", [
    ("infinity", False), ("2999-12-31", False), ("2999-12-31 23:59:00+00", False),
    ("2000-01-01", True), ("now", True), ("-infinity", True), ("epoch", True), ("yesterday", True),
])
def test_valid_until_names_an_expiry_only_when_logins_end_soon(until, expires):
    """VALID UNTIL a past (or near) time locks the role out; 'infinity' or a later date is the repair of an expired
    login (SRE-ACCESS-002 reads login_expires)."""
    (a,) = normalise(f"psql -c \"ALTER ROLE saleor VALID UNTIL '{until}'\"")
    assert ("login_expires" in a.details) is expires
