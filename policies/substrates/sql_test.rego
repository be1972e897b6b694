package guardrail.rules.sql_test

import data.guardrail.rules.sql

ids(set) := {f.id | some f in set}

set_key(key, value) := {"action": {"tool": "psql", "verb": "alter system", "mutating": true, "layer": "declared", "keys": [{"key": key, "value": value}]}}

test_fsync_off_denied if "SUB-SQL-001" in ids(sql.deny) with input as set_key("postgres.fsync", "off")

test_flush_log_zero_denied if "SUB-SQL-001" in ids(sql.deny) with input as set_key("mariadb.innodb_flush_log_at_trx_commit", "0")

test_idle_timeout_allowed if count(sql.deny) == 0 with input as set_key("postgres.idle_in_transaction_session_timeout", "10s")

test_synchronous_commit_off_warns if "SUB-SQL-002" in ids(sql.warn) with input as set_key("postgres.synchronous_commit", "off")

test_read_only_on_denied if "SUB-SQL-003" in ids(sql.deny) with input as set_key("mariadb.read_only", "ON")

test_read_only_off_allowed if count(sql.deny) == 0 with input as set_key("mariadb.read_only", "OFF")

test_terminate_all_backends_denied if {
	"SUB-SQL-004" in ids(sql.deny) with input as {
		"action": {"tool": "psql", "verb": "select", "mutating": true},
		"command": `psql -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"`,
	}
}

test_terminate_one_holder_allowed if {
	count(sql.deny) == 0 with input as {
		"action": {"tool": "psql", "verb": "select", "mutating": true},
		"command": `psql -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE state = 'idle in transaction' AND pid <> pg_backend_pid()"`,
	}
}

terminate(c, details) := {"action": {"tool": "psql", "verb": "terminate backend", "mutating": true, "raw": c, "details": details}, "command": c}

test_terminate_every_backend_is_denied_however_written if {
	c1 := "psql -c 'SELECT \"pg_terminate_backend\"(pid) FROM pg_stat_activity'"
	"SUB-SQL-004" in {f.id | some f in sql.deny} with input as terminate(c1, {"tables": ["pg_stat_activity"]})
	# The classifier reads a WHERE that leaves every backend in (`WHERE true`, `pid <> pg_backend_pid()`,
	# `state = 'active'`) as no WHERE.
	c2 := "psql -c 'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()'"
	"SUB-SQL-004" in {f.id | some f in sql.deny} with input as terminate(c2, {"tables": ["pg_stat_activity"], "has_where": false})
	c3 := "psql -c \"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE state = 'active'\""
	"SUB-SQL-004" in {f.id | some f in sql.deny} with input as terminate(c3, {"tables": ["pg_stat_activity"], "has_where": false})
}

test_terminate_of_one_users_sessions_is_allowed if {
	# Recycling the application's sessions so they pick up a role setting (ia-006's repair).
	c := "psql -c \"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'app' AND pid <> pg_backend_pid()\""
	count(sql.deny) == 0 with input as terminate(c, {"tables": ["pg_stat_activity"], "has_where": true})
}

test_terminate_of_the_holder_found_is_allowed if {
	c := "psql -c \"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE state = 'idle in transaction'\""
	not "SUB-SQL-004" in {f.id | some f in sql.deny} with input as terminate(c, {"tables": ["pg_stat_activity"], "has_where": true})
}

alter(st) := {"action": {"tool": "psql", "verb": "alter table", "mutating": true, "details": {"sql_kind": "ddl", "statement": st}}}

test_an_unlogged_table_is_denied if {
	"SUB-SQL-001" in ids(sql.deny) with input as alter("ALTER TABLE order_order SET UNLOGGED")
	not "SUB-SQL-001" in ids(sql.deny) with input as alter("ALTER TABLE order_order SET LOGGED")
}

# Red team 2 (H12): a terminate over every number generate_series counts, or every pid of pg_locks.
test_terminate_over_a_set_of_every_backend_is_denied if {
	"SUB-SQL-004" in ids(sql.deny) with input as {"action": {"tool": "psql", "verb": "terminate backend", "mutating": true, "details": {"tables": ["generate_series"], "every_backend": true}}}
	not "SUB-SQL-004" in ids(sql.deny) with input as {"action": {"tool": "psql", "verb": "terminate backend", "mutating": true, "details": {"tables": ["pg_locks"], "has_where": true}}}
}
