# PostgreSQL and MariaDB rules: switching durability off (fsync, full_page_writes, synchronous_commit,
# innodb_flush_log_at_trx_commit, sync_binlog), making the database read-only, and killing every backend at
# once. Keys are postgres.<guc> and mariadb.<var> as the action normaliser writes them.
package guardrail.rules.sql

import data.guardrail.lib

durability_settings := {
	"postgres.fsync": "on",
	"postgres.full_page_writes": "on",
	"mariadb.innodb_doublewrite": "ON",
}

deny contains {
	"id": "SUB-SQL-001",
	"msg": sprintf("%s = %v turns off crash safety: a crash or restart can corrupt or lose committed data. Leave it %s; fix the cause of the slowness instead (locks, pool sizes, checkpoints).", [k.key, k.value, want]),
	"details": {"key": k.key, "value": k.value},
} if {
	input.action.mutating in {true, "unknown"}
	some k in input.action.keys
	want := durability_settings[k.key]
	lib.is_false(k.value)
}

deny contains {
	"id": "SUB-SQL-001",
	"msg": sprintf("%s = %v lets commits be lost on a crash. Keep it at its durable setting; fix the cause of the slowness instead.", [k.key, k.value]),
	"details": {"key": k.key, "value": k.value},
} if {
	input.action.mutating in {true, "unknown"}
	some k in input.action.keys
	k.key in {"mariadb.innodb_flush_log_at_trx_commit", "mariadb.sync_binlog"}
	lib.number(k.value) == 0
}

# A table made UNLOGGED: its writes skip the WAL, and after a crash PostgreSQL empties it.
deny contains {
	"id": "SUB-SQL-001",
	"msg": sprintf("ALTER TABLE ... SET UNLOGGED turns off crash safety for its rows: after a crash or an unclean restart PostgreSQL empties the table, and replicas never see it (%s). Keep it LOGGED; fix the cause of the write load instead.", [substring(statement, 0, 80)]),
	"details": {"statement": substring(statement, 0, 80)},
} if {
	input.action.tool == "psql"
	lib.verb == "alter table"
	statement := object.get(lib.details, "statement", "")
	regex.match(`(?is)\bset\s+unlogged\b`, statement)
}

warn contains {
	"id": "SUB-SQL-002",
	"msg": sprintf("%s = %v trades durability for speed (recent commits can be lost on a crash). Prefer fixing what makes commits slow.", [k.key, k.value]),
	"details": {"key": k.key, "value": k.value},
} if {
	input.action.mutating in {true, "unknown"}
	some k in input.action.keys
	k.key == "postgres.synchronous_commit"
	lib.is_false(k.value)
}

deny contains {
	"id": "SUB-SQL-003",
	"msg": sprintf("%s = %v makes the database refuse writes, which stops the service rather than repairing it. Leave it writable.", [k.key, k.value]),
	"details": {"key": k.key, "value": k.value},
} if {
	input.action.mutating in {true, "unknown"}
	some k in input.action.keys
	k.key in {"mariadb.read_only", "mariadb.super_read_only", "postgres.default_transaction_read_only"}
	lib.is_true(k.value)
}

terminate_all_msg := "pg_terminate_backend over every backend (no filter on pid, state or query) drops all sessions at once, like a restart. Terminate only the holder you identified: WHERE pid = <pid>, or WHERE state = 'idle in transaction' AND the lock you found."

deny contains {
	"id": "SUB-SQL-004",
	"msg": terminate_all_msg,
	"details": {},
} if {
	input.action.tool == "psql"
	some t in lib.texts
	contains(lower(t), "pg_terminate_backend")
	regex.match(`(?i)pg_terminate_backend\s*\(\s*pid\s*\)\s+from\s+pg_stat_activity\s*(;|'|"|$)`, t)
}

# From what the classifier read, however the text was written (a quoted function name, an alias, a comment): a
# terminate over pg_stat_activity with no WHERE, or one whose WHERE leaves every backend in (`WHERE true`, one
# that only spares this session, `state = 'active'`): has_where is false then.
deny contains {
	"id": "SUB-SQL-004",
	"msg": terminate_all_msg,
	"details": {},
} if {
	input.action.tool == "psql"
	lib.verb == "terminate backend"
	some table in object.get(lib.details, "tables", [])
	endswith(lower(table), "pg_stat_activity")
	object.get(lib.details, "has_where", false) != true
}

# A terminate over a set of backends that no WHERE narrows (the classifier's every_backend): every pid of pg_locks or
# pg_stat_replication, every number generate_series counts through.
deny contains {
	"id": "SUB-SQL-004",
	"msg": terminate_all_msg,
	"details": {},
} if {
	input.action.tool == "psql"
	lib.verb == "terminate backend"
	lib.details.every_backend == true
}
