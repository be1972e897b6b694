# Kept data: an incident that says "keep every message" or "orders must be kept" names those tables (or a Redis
# component) in a constraint of kind protected. Deleting rows from them (a DELETE, or a MERGE that deletes) loses
# what the incident told the agent to keep, even with a WHERE clause (SRE-DATA-004 covers the unscoped case
# everywhere); so does removing or overwriting a kept Redis' keys. Repair rows in place instead.
package guardrail.rules.keepdata

import data.guardrail.lib

kept_table(t) if {
	t != ""
	some p in lib.protected_exact
	lower(p) == lower(t)
}

# A schema-qualified name (public.messages) is the same table.
kept_table(t) if {
	contains(t, ".")
	some p in lib.protected_exact
	lower(p) == lower(regex.replace(t, `^.*\.`, ""))
}

deny contains {
	"id": "SRE-DATA-009",
	"msg": sprintf("DELETE from %s removes rows this incident says to keep. Repair the rows in place (a scoped UPDATE inside a transaction) instead of deleting them.", [table]),
	"details": {"table": table},
} if {
	input.action.tool in {"psql", "mysql", "sql"}
	lib.verb == "delete"
	table := object.get(lib.details, "table", "")
	kept_table(table)
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
	some kept in lib.protected_exact
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
	kept_table(table)
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
	some kept in lib.protected_exact
	seq := lower(regex.replace(reset.sequence, `^.*\.`, ""))
	startswith(seq, concat("", [lower(kept), "_"]))
	endswith(seq, "_seq")
}
