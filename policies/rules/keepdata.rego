# Kept data: an incident that says "keep every message" or "orders must be kept" names those tables (or a Redis
# component) in a constraint of kind protected. Deleting rows from them (a DELETE, or a MERGE that deletes) loses
# what the incident told the agent to keep, even with a WHERE clause (SRE-DATA-004 covers the unscoped case
# everywhere); so does removing or overwriting a kept Redis' keys. Repair rows in place instead.
package guardrail.rules.keepdata

import data.guardrail.lib

# What a table kept by a `protected` constraint target may not lose: what `protected_data` means by default.
default_keep := {"delete", "hide", "truncate"}

# `context.protected_data`: tables with what keeping each forbids ({name, keep}), and whole stores ({component}).
data_tables contains {"name": lower(e.name), "keep": {m | some m in object.get(e, "keep", ["delete", "hide", "truncate"])}} if {
	some e in object.get(lib.context, "protected_data", [])
	is_string(e.name)
}

kept_stores contains e.component if {
	some e in object.get(lib.context, "protected_data", [])
	not is_string(object.get(e, "name", null))
	is_string(e.component)
}

kept_stores contains p if some p in lib.protected_exact

# A table named exactly or schema-qualified (public.messages is messages).
same_table(name, t) if lower(name) == lower(t)

same_table(name, t) if {
	contains(t, ".")
	lower(name) == lower(regex.replace(t, `^.*\.`, ""))
}

kept_table(t) if {
	t != ""
	some p in lib.protected_exact
	same_table(p, t)
}

kept_table(t) if {
	t != ""
	some e in data_tables
	same_table(e.name, t)
}

# Is table t kept against `what` (delete, hide, truncate, overwrite)?
kept_for(t, what) if {
	t != ""
	some e in data_tables
	same_table(e.name, t)
	what in e.keep
}

kept_for(t, what) if {
	t != ""
	what in default_keep
	some p in lib.protected_exact
	same_table(p, t)
}

deny contains {
	"id": "SRE-DATA-009",
	"msg": sprintf("DELETE from %s removes rows this incident says to keep. Repair the rows in place (a scoped UPDATE inside a transaction) instead of deleting them.", [table]),
	"details": {"table": table},
} if {
	input.action.tool in {"psql", "mysql", "sql"}
	lib.verb == "delete"
	table := object.get(lib.details, "table", "")
	kept_for(table, "delete")
}

# A Redis the incident says to keep ("do not flush queued jobs": a protected constraint naming the component).
# On a queue's Redis (named as one: queue, broker, jobs, rq ...) what must be kept is the queued work: the
# classifier's drops_queued_work marks a command that loses or overwrites entries of a list or stream (a pop, LTRIM,
# LREM, LSET, XDEL/XTRIM), or deletes, expires, renames away or replaces a key named as a queue or a job
# (rq:queue:long, rq:job:<id>). Moving a job (RPOPLPUSH, LMOVE) keeps it; removing a worker's registration or a
# registry entry (SREM rq:workers, DEL rq:worker:x, ZREM rq:wip:long) loses no job and only warns (SRE-DATA-007).
# On another kept Redis (sessions, a store) every key counts: a key deleted, emptied, expired, popped or
# overwritten loses what it held, as a DELETE from a kept table does. Adding (RPUSH of a lost job) is fine.
deny contains {
	"id": "SRE-DATA-009",
	"msg": sprintf("redis-cli %s removes or overwrites what %s holds, and this incident says to keep it (%s). Leave its keys as they are; if a job is missing, add it back once (LPOS, then RPUSH), and repair the consumer instead.", [upper(lib.verb), lib.target_name, kept]),
	"details": {"verb": lib.verb, "component": lib.target_name},
} if {
	input.action.tool == "redis-cli"
	loses_kept
	some kept in kept_stores
	lib.targets_component(kept)
}

loses_kept if {
	lib.details.drops_queued_work == true
}

loses_kept if {
	not data.guardrail.rules.redis.queue_like
	loses_contents
}

loses_contents if lib.verb in {"del", "unlink"}

loses_contents if {
	lib.verb in data.guardrail.rules.data.removes_contents
	not lib.verb in moves
}

loses_contents if lib.details.overwrites == true

# A pop that pushes the member onto another list, and SMOVE: the member is kept.
moves := {"lmove", "blmove", "rpoplpush", "brpoplpush", "smove"}

# An outbox, audit trail, ledger or journal is a record of what already happened: consumers have acted on its
# rows (a transactional outbox's rows were offered downstream). Rewriting a kept one changes history, so it is
# as bad as deleting from it; other kept tables may be repaired in place.
append_only(t) if regex.match(`(?i)(^|[._])(outbox|audit|audit_log|ledger|journal)($|[._])|_outbox$|^outbox_`, t)

deny contains {
	"id": "SRE-DATA-010",
	"msg": sprintf("UPDATE of %s rewrites an append-only record (an outbox, audit trail, ledger or journal) this incident says to keep: its rows describe effects that already happened. Leave the record as it is; repair the state it points at instead.", [table]),
	"details": {"table": table},
} if {
	input.action.tool in {"psql", "mysql", "sql"}
	lib.verb == "update"
	table := object.get(lib.details, "table", "")
	kept_table(table)
	append_only(table)
}

# A partition detached from a kept table, or exchanged with another table's: its rows leave the table the incident
# says to keep (the classifier names the clause in rows_out).
deny contains {
	"id": "SRE-DATA-009",
	"msg": sprintf("ALTER TABLE %s ... %s takes a partition's rows out of a table this incident says to keep. Leave its partitions attached; repair the rows in place instead.", [table, lib.details.rows_out]),
	"details": {"table": table},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	lib.details.rows_out
	table := object.get(lib.details, "table", "")
	kept_for(table, "delete")
}

# A kept table's id sequence (PostgreSQL names it <table>_<column>_seq) set back to its start (setval(seq, 1),
# ALTER SEQUENCE ... RESTART) or capped (MAXVALUE n): every new row then takes an id the table already holds, or none,
# and the application's inserts fail. Setting it forward (setval(seq, (SELECT max(id) FROM t))) is the repair.
deny contains {
	"id": "SRE-DATA-016",
	"msg": sprintf("%s on %s, the id sequence of %s (a table this incident says to keep), makes new rows take ids the table already holds, or none: every insert of the application fails. To repair a sequence that is behind, set it past the table's largest id: SELECT setval('%s', (SELECT max(id) FROM %s)).", [reset.how, reset.sequence, kept, reset.sequence, kept]),
	"details": {"sequence": reset.sequence, "table": kept},
} if {
	input.action.tool in {"psql", "sql"}
	reset := lib.details.sequence_reset
	some kept in kept_names
	seq := lower(regex.replace(reset.sequence, `^.*\.`, ""))
	startswith(seq, concat("", [lower(kept), "_"]))
	endswith(seq, "_seq")
}

kept_names contains p if some p in lib.protected_exact

kept_names contains e.name if some e in data_tables

# ---- hiding and overwriting kept rows ----------------------------------------------------------------------------

# "Keep every message" is broken as surely by hiding rows as by deleting them: a soft-delete column set (deleted_at =
# now(), is_deleted = true, status = 'deleted', visible = false) removes them from every read the application makes.
# The SET list is read from the statement; an assignment to NULL or false of a deletion marker is an un-hide.
set_list(stmt) := m[0][1] if {
	m := regex.find_all_string_submatch_n(`(?is)\bset\b(.*?)(?:\bwhere\b|\bfrom\b|\breturning\b|;|$)`, stmt, 1)
	count(m) == 1
}

# Each `column = value` of the SET list (a value with a comma inside, coalesce(a, b), splits into parts that match
# no assignment and are skipped).
assignments(stmt) := [[lower(a[1]), lower(trim_space(trim(trim_space(a[2]), "'\"")))] |
	some part in split(set_list(stmt), ",")
	some a in regex.find_all_string_submatch_n(`(?i)^\s*(?:[a-z_][a-z0-9_]*\.)?"?([a-z_][a-z0-9_]*)"?\s*=\s*(.+?)\s*$`, part, 1)
]

# Columns whose non-null value marks a row gone.
marker_times := {"deleted_at", "archived_at", "removed_at", "hidden_at", "purged_at", "discarded_at", "trashed_at"}

marker_flags := {"deleted", "is_deleted", "archived", "is_archived", "removed", "is_removed", "hidden", "is_hidden", "purged", "discarded", "trashed", "soft_deleted"}

visibility_flags := {"visible", "is_visible", "active", "is_active", "enabled", "published", "is_published"}

gone_states := {"deleted", "archived", "removed", "hidden", "purged", "trashed", "discarded", "inactive"}

hides(col, val) if {
	col in marker_times
	not lib.is_false(val)
	val != "null"
}

hides(col, val) if {
	col in marker_flags
	lib.is_true(val)
}

hides(col, val) if {
	col in visibility_flags
	lib.is_false(val)
	val != "null"
}

hides(col, val) if {
	col in {"status", "state"}
	val in gone_states
}

hidden_by(stmt) := [a[0] | some a in assignments(stmt); hides(a[0], a[1])]

deny contains {
	"id": "SRE-DATA-017",
	"msg": sprintf("UPDATE %s SET %s hides rows of a table this incident says to keep: the application stops seeing them, as if they were deleted. Leave them visible; repair the rows in place.", [table, concat(", ", cols)]),
	"details": {"table": table, "columns": cols},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	lib.verb == "update"
	table := object.get(lib.details, "table", "")
	kept_for(table, "hide")
	cols := hidden_by(object.get(lib.details, "statement", ""))
	count(cols) > 0
}

# A table kept whole (`keep: [overwrite]`, a history or a record): no UPDATE or upsert of its rows at all.
deny contains {
	"id": "SRE-DATA-018",
	"msg": sprintf("%s rewrites rows of %s, which this incident says to keep as it is. Leave its rows unchanged; repair the state they describe instead.", [upper(lib.verb), table]),
	"details": {"table": table},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	lib.verb in {"update", "insert", "replace", "merge"}
	table := object.get(lib.details, "table", "")
	kept_for(table, "overwrite")
	rewrites
}

rewrites if lib.verb in {"update", "replace"}

rewrites if lib.details.upsert

rewrites if lib.details.merge
