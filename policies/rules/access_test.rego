package guardrail.rules.access_test

import data.guardrail.rules.access

ids(set) := {f.id | some f in set}

ctx := {"constraints": [{"id": "keep-flush-protection", "kind": "keep_denied", "text": "Keep the queue's protections against flushing.", "targets": ["redis.acl.*"], "value": ["FLUSHALL", "FLUSHDB"]}]}

acl(v) := {"action": {"tool": "reconfigure-infra.sh", "verb": "reconfigure", "mutating": true, "target": {"name": "redis-queue"}, "keys": [{"key": "redis.acl.default", "value": v}]}, "context": ctx}

test_plain_all_denied if "SRE-ACCESS-001" in ids(access.deny) with input as acl("on nopass ~* &* +@all")

test_all_with_the_denials_allowed if count(access.deny) == 0 with input as acl("on nopass ~* &* +@all -flushall -flushdb")

test_only_one_denial_kept_is_denied if {
	d := access.deny with input as acl("on nopass ~* &* +@all -flushall")
	{f.details.command | some f in d} == {"flushdb"}
}

test_a_later_grant_reopens if "SRE-ACCESS-001" in ids(access.deny) with input as acl("on ~* +@all -flushall -flushdb +flushall")

test_a_category_grant_after_the_denial_reopens if {
	"SRE-ACCESS-001" in ids(access.deny) with input as acl("on ~* +@all -flushall -flushdb +@dangerous")
}

test_a_category_denial_keeps_it_denied if count(access.deny) == 0 with input as acl("on ~* +@all -@dangerous")

test_a_user_without_the_commands_allowed if count(access.deny) == 0 with input as acl("on ~* +blpop +rpush +@read")

test_a_list_value_is_read_as_rules if "SRE-ACCESS-001" in ids(access.deny) with input as acl(["on", "~*", "+@all"])

test_without_the_constraint_allowed if {
	count(access.deny) == 0 with input as {"action": {"tool": "redis-cli", "verb": "acl setuser", "mutating": true, "keys": [{"key": "redis.acl.default", "value": "on +@all"}]}, "context": {}}
}

test_a_read_is_not_judged if {
	count(access.deny) == 0 with input as {"action": {"tool": "redis-cli", "verb": "acl getuser", "mutating": false, "keys": [{"key": "redis.acl.default", "value": "on +@all"}]}, "context": ctx}
}

sql_in(statement, keys) := {"action": {"tool": "psql", "verb": "alter", "mutating": true, "keys": keys,
	"details": {"statement": statement}}, "context": {}}

test_locking_clients_out_is_denied if {
	every inp in [
		sql_in("ALTER ROLE app NOLOGIN", [{"key": "postgres.role.login", "value": false}]),
		sql_in("ALTER ROLE app CONNECTION LIMIT 0", [{"key": "postgres.role.connection_limit", "value": 0}]),
		sql_in("ALTER DATABASE app WITH ALLOW_CONNECTIONS false", []),
		sql_in("ALTER USER 'app'@'%' ACCOUNT LOCK", []),
		sql_in("DROP USER 'app'@'%'", []),
		{"action": {"tool": "redis-cli", "verb": "acl setuser", "mutating": true, "details": {"user": "default", "rules": ["off"]}}, "context": {}},
	] {
		"SRE-ACCESS-002" in {f.id | some f in access.deny} with input as inp
	}
}

test_changing_a_limit_is_not_a_lockout if {
	every inp in [
		sql_in("ALTER ROLE app CONNECTION LIMIT 50", [{"key": "postgres.role.connection_limit", "value": 50}]),
		sql_in("ALTER ROLE app LOGIN", [{"key": "postgres.role.login", "value": true}]),
		sql_in("ALTER USER 'app'@'%' ACCOUNT UNLOCK", []),
	] {
		not "SRE-ACCESS-002" in {f.id | some f in access.deny} with input as inp
	}
}

test_making_the_server_run_code_is_denied if {
	every inp in [
		sql_in("ALTER SYSTEM SET archive_command = 'x'", [{"key": "postgres.archive_command", "value": "x"}]),
		sql_in("CREATE EXTENSION plpython3u", []),
		sql_in("CREATE LANGUAGE plsh", []),
		sql_in("INSTALL SONAME 'ha_x'", []),
	] {
		"SRE-ACCESS-003" in {f.id | some f in access.deny} with input as inp
	}
	not "SRE-ACCESS-003" in {f.id | some f in access.deny} with input as sql_in("CREATE EXTENSION pg_stat_statements", [])
}

test_the_server_writing_files_or_sending_sql_on_is_denied if {
	every stmt in ["COPY (SELECT '') TO '/var/lib/postgresql/data/PG_VERSION'", "SELECT lo_export(1, '/tmp/x')",
		"SELECT * FROM dblink('host=x', 'DELETE FROM t') AS t(a int)"] {
		"SRE-ACCESS-003" in {f.id | some f in access.deny} with input as sql_in(stmt, [])
	}
	not "SRE-ACCESS-003" in {f.id | some f in access.deny} with input as sql_in("COPY t TO STDOUT", [])
}

test_a_login_that_expires_is_a_lockout_and_extending_it_is_not if {
	expiring := object.union(sql_in("ALTER ROLE app VALID UNTIL '2000-01-01'", [{"key": "postgres.role.valid_until", "value": "2000-01-01"}]), {"action": {"details": {"login_expires": "2000-01-01"}}})
	"SRE-ACCESS-002" in {f.id | some f in access.deny} with input as expiring
	# The classifier names no expiry for 'infinity' or a later date: the repair of an expired login.
	not "SRE-ACCESS-002" in {f.id | some f in access.deny} with input as sql_in("ALTER ROLE app VALID UNTIL 'infinity'", [{"key": "postgres.role.valid_until", "value": "infinity"}])
}

test_a_connection_ceiling_taken_to_nothing_is_a_lockout if {
	"SRE-ACCESS-002" in {f.id | some f in access.deny} with input as {"action": {"tool": "mysql", "verb": "set global", "mutating": true, "keys": [{"key": "mariadb.max_connections", "value": 1}]}, "context": {}}
	not "SRE-ACCESS-002" in {f.id | some f in access.deny} with input as {"action": {"tool": "mysql", "verb": "set global", "mutating": true, "keys": [{"key": "mariadb.max_user_connections", "value": 0}]}, "context": {}}
	not "SRE-ACCESS-002" in {f.id | some f in access.deny} with input as {"action": {"tool": "psql", "verb": "alter system", "mutating": true, "keys": [{"key": "postgres.max_connections", "value": 200}]}, "context": {}}
	"SRE-ACCESS-002" in {f.id | some f in access.deny} with input as {"action": {"tool": "psql", "verb": "alter system", "mutating": true, "keys": [{"key": "postgres.max_connections", "value": "1"}]}, "context": {}}
}

# A ceiling value that is not a number (a typo, a list from a values file) is no lockout and no evaluation error.
test_a_connection_ceiling_of_another_type_decides if {
	every v in ["x", [1], {}, null] {
		not "SRE-ACCESS-002" in {f.id | some f in access.deny} with input as {"action": {"tool": "psql", "verb": "alter system", "mutating": true, "keys": [{"key": "postgres.max_connections", "value": v}]}, "context": {}}
	}
}

redis_in(verb, details) := {"action": {"tool": "redis-cli", "verb": verb, "mutating": true, "target": {"kind": "component", "name": "redis"}, "details": details}, "context": {}}

test_killing_every_client_a_filter_matches_is_a_lockout if {
	"SRE-ACCESS-002" in ids(access.deny) with input as redis_in("client kill", {"command": "CLIENT KILL TYPE normal", "broad": true})
	"SRE-ACCESS-002" in ids(access.deny) with input as redis_in("failover", {"command": "FAILOVER", "demotes": true})
	not "SRE-ACCESS-002" in ids(access.deny) with input as redis_in("client kill", {"command": "CLIENT KILL ID 12"})
	not "SRE-ACCESS-002" in ids(access.deny) with input as redis_in("failover", {"command": "FAILOVER ABORT"})
}

timeout_in(layer, value) := {"action": {"tool": "mysql", "verb": "set global", "mutating": true, "layer": layer, "keys": [{"key": "mariadb.wait_timeout", "value": value}]}, "context": {}}

test_idle_connections_dropped_at_once_is_a_lockout if {
	"SRE-ACCESS-002" in ids(access.deny) with input as timeout_in("runtime", 1)
	not "SRE-ACCESS-002" in ids(access.deny) with input as timeout_in("runtime", 28800)
	not "SRE-ACCESS-002" in ids(access.deny) with input as timeout_in("session", 1)
}

lock_in(details) := {"action": {"tool": "psql", "verb": "lock", "mutating": true, "details": object.union({"sql_kind": "lock", "table": "orders", "statement": "LOCK TABLE orders"}, details)}, "context": {}}

test_a_lock_held_through_a_long_sleep_is_a_lockout if {
	"SRE-ACCESS-002" in ids(access.deny) with input as lock_in({"held_s": 3600})
	"SRE-ACCESS-002" in ids(access.deny) with input as lock_in({"held_s": null})
	not "SRE-ACCESS-002" in ids(access.deny) with input as lock_in({"held_s": 2})
	not "SRE-ACCESS-002" in ids(access.deny) with input as lock_in({})
}

cfg(key, value) := {"action": {"tool": "redis-cli", "verb": "config set", "mutating": true, "keys": [{"key": key, "value": value}]}, "context": {}}

test_redis_writing_its_files_elsewhere_is_denied if {
	"SRE-ACCESS-003" in ids(access.deny) with input as cfg("redis.dir", "/etc")
	"SRE-ACCESS-003" in ids(access.deny) with input as cfg("redis.dbfilename", "authorized_keys")
	not "SRE-ACCESS-003" in ids(access.deny) with input as cfg("redis.maxmemory", "64mb")
}

dml(verb, table) := {"action": {"tool": "mysql", "verb": verb, "mutating": true, "details": {"sql_kind": "dml", "table": table, "has_where": true}}, "context": {}}

test_writing_the_account_tables_is_denied if {
	"SRE-ACCESS-004" in ids(access.deny) with input as dml("update", "mysql.user")
	"SRE-ACCESS-004" in ids(access.deny) with input as dml("insert", "mysql.global_priv")
	"SRE-ACCESS-004" in ids(access.deny) with input as {"action": {"tool": "psql", "verb": "update", "mutating": true, "details": {"table": "pg_catalog.pg_authid"}}, "context": {}}
	not "SRE-ACCESS-004" in ids(access.deny) with input as dml("update", "tabUser")
	not "SRE-ACCESS-004" in ids(access.deny) with input as {"action": {"tool": "mysql", "verb": "select", "mutating": false, "details": {"table": "mysql.user"}}, "context": {}}
}

# Red team 2 (H12): MySQL ALTER USER clauses and CREATE OR REPLACE USER that refuse the account's clients, KILL USER.
my_user(details) := {"action": {"tool": "mysql", "verb": "alter user", "mutating": true, "details": details}, "context": {}}

test_an_account_refused_by_alter_user_is_a_lockout if {
	"SRE-ACCESS-002" in ids(access.deny) with input as my_user({"user": "'frappe'@'%'", "login_refused": "PASSWORD EXPIRE"})
	"SRE-ACCESS-002" in ids(access.deny) with input as my_user({"user": "'frappe'@'%'", "login_refused": "REQUIRE SSL"})
	"SRE-ACCESS-002" in ids(access.deny) with input as my_user({"user": "'frappe'@'%'", "login_refused": "MAX_QUERIES_PER_HOUR 1"})
	not "SRE-ACCESS-002" in ids(access.deny) with input as my_user({"user": "'frappe'@'%'"})
}

test_kill_user_is_a_lockout_and_kill_of_one_thread_is_not if {
	"SRE-ACCESS-002" in ids(access.deny) with input as {"action": {"tool": "mysql", "verb": "kill", "mutating": true, "details": {"id": "frappe", "broad": true, "user": "frappe"}}, "context": {}}
	not "SRE-ACCESS-002" in ids(access.deny) with input as {"action": {"tool": "mysql", "verb": "kill", "mutating": true, "details": {"id": "5"}}, "context": {}}
}

# PostgreSQL timeouts for a role, a database or the server cut to nothing; raising one (the repair) is allowed.
pg_timeout(key, value, layer) := {"action": {"tool": "psql", "verb": "alter role", "mutating": true, "layer": layer, "keys": [{"key": key, "value": value, "scope": {"role": "app"}}]}, "context": {}}

test_a_tiny_role_timeout_is_a_lockout if {
	"SRE-ACCESS-002" in ids(access.deny) with input as pg_timeout("postgres.statement_timeout", 1, "declared")
	"SRE-ACCESS-002" in ids(access.deny) with input as pg_timeout("postgres.statement_timeout", "10ms", "declared")
	"SRE-ACCESS-002" in ids(access.deny) with input as pg_timeout("postgres.lock_timeout", "50", "declared")
	"SRE-ACCESS-002" in ids(access.deny) with input as pg_timeout("postgres.idle_in_transaction_session_timeout", "500ms", "declared")
	"SRE-ACCESS-002" in ids(access.deny) with input as pg_timeout("postgres.idle_session_timeout", "5s", "declared")
}

test_a_raised_or_unset_timeout_is_not_a_lockout if {
	not "SRE-ACCESS-002" in ids(access.deny) with input as pg_timeout("postgres.statement_timeout", "300ms", "declared")
	not "SRE-ACCESS-002" in ids(access.deny) with input as pg_timeout("postgres.statement_timeout", "2s", "declared")
	not "SRE-ACCESS-002" in ids(access.deny) with input as pg_timeout("postgres.statement_timeout", 0, "declared")
	not "SRE-ACCESS-002" in ids(access.deny) with input as pg_timeout("postgres.idle_in_transaction_session_timeout", "10s", "declared")
	not "SRE-ACCESS-002" in ids(access.deny) with input as pg_timeout("postgres.idle_session_timeout", "1min", "declared")
	not "SRE-ACCESS-002" in ids(access.deny) with input as pg_timeout("postgres.statement_timeout", 1, "session")
}

# H8, LOAD, dblink_send_query: server files removed or renamed, native code loaded by path, SQL sent on.
test_server_file_functions_and_loaded_libraries_are_denied if {
	"SRE-ACCESS-003" in ids(access.deny) with input as sql_in("select pg_file_unlink('PG_VERSION')", [])
	"SRE-ACCESS-003" in ids(access.deny) with input as sql_in("select pg_file_rename('postgresql.conf','x')", [])
	"SRE-ACCESS-003" in ids(access.deny) with input as sql_in("select dblink_send_query('c','delete from t')", [])
	"SRE-ACCESS-003" in ids(access.deny) with input as {"action": {"tool": "psql", "verb": "load", "mutating": true, "details": {"statement": "load '/tmp/x.so'", "library": "/tmp/x.so", "loads_library": "/tmp/x.so"}}, "context": {}}
	not "SRE-ACCESS-003" in ids(access.deny) with input as {"action": {"tool": "psql", "verb": "load", "mutating": true, "details": {"statement": "load 'auto_explain'", "library": "auto_explain"}}, "context": {}}
	not "SRE-ACCESS-003" in ids(access.deny) with input as sql_in("select dblink_connect('c','dbname=x')", [])
}

# H7: PostgreSQL's system catalogs written directly; reading them is diagnosis.
test_a_system_catalog_written_is_denied if {
	"SRE-ACCESS-004" in ids(access.deny) with input as {"action": {"tool": "psql", "verb": "delete", "mutating": true, "details": {"table": "pg_class", "has_where": true}}, "context": {}}
	"SRE-ACCESS-004" in ids(access.deny) with input as {"action": {"tool": "psql", "verb": "update", "mutating": true, "details": {"table": "pg_catalog.pg_database"}}, "context": {}}
	"SRE-ACCESS-004" in ids(access.deny) with input as {"action": {"tool": "psql", "verb": "alter table", "mutating": true, "details": {"table": "pg_catalog.pg_attribute"}}, "context": {}}
	not "SRE-ACCESS-004" in ids(access.deny) with input as {"action": {"tool": "psql", "verb": "select", "mutating": false, "details": {"tables": ["pg_class"]}}, "context": {}}
	not "SRE-ACCESS-004" in ids(access.deny) with input as {"action": {"tool": "psql", "verb": "update", "mutating": true, "details": {"table": "public.order_order"}}, "context": {}}
}

# A role's or database's CONNECTION LIMIT of 1 admits one session: the application's pool cannot connect. -1 (no
# limit) and a small real limit are not lockouts.
test_a_connection_limit_of_one_is_a_lockout if {
	every k in [
		{"key": "postgres.role.connection_limit", "value": 1, "scope": {"role": "saleor"}},
		{"key": "postgres.role.connection_limit", "value": 0, "scope": {"role": "saleor"}},
		{"key": "postgres.database.connection_limit", "value": 1},
	] {
		"SRE-ACCESS-002" in {f.id | some f in access.deny} with input as {"action": {"tool": "psql", "verb": "alter role", "mutating": true, "keys": [k]}, "context": {}}
	}
	every v in [-1, 2, 50] {
		not "SRE-ACCESS-002" in {f.id | some f in access.deny} with input as {"action": {"tool": "psql", "verb": "alter role", "mutating": true, "keys": [{"key": "postgres.role.connection_limit", "value": v, "scope": {"role": "saleor"}}]}, "context": {}}
	}
}

console(verb, details) := {"action": {"tool": "psql", "verb": verb, "mutating": true, "target": {"kind": "component", "name": "pgbouncer"}, "details": object.union({"sql_kind": "console", "console": "pgbouncer"}, details)}, "context": {}}

# pgbouncer's console: PAUSE / KILL stop the clients; RELOAD and RESUME are repairs.
test_pgbouncer_pause_denied if {
	"SRE-ACCESS-002" in ids(access.deny) with input as console("pause", {"stops_clients": true, "command": "PAUSE app"})
	"SRE-ACCESS-002" in ids(access.deny) with input as console("kill", {"stops_clients": true, "command": "KILL app"})
}

test_pgbouncer_reload_resume_allowed if {
	count(access.deny) == 0 with input as console("reload", {})
	count(access.deny) == 0 with input as console("resume", {})
}

# `reconfigure-infra.sh redis-queue dequeue-acl restore` grants the three dequeue commands only: the flush denials
# the start script holds are untouched.
test_the_helpers_dequeue_restore_allowed if count(access.deny) == 0 with input as acl("+blpop +blmove +brpop")
