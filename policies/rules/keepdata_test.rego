package guardrail.rules.keepdata_test

import data.guardrail.rules.keepdata

ids(set) := {f.id | some f in set}

ctx := {"constraints": [{"id": "keep", "kind": "protected", "text": "keep every message", "targets": ["messages", "channel_seq"]}]}

sql(verb, table) := {"action": {"tool": "psql", "verb": verb, "mutating": true, "details": {"sql_kind": "dml", "table": table, "has_where": true}}, "context": ctx}

test_delete_from_kept_table_denied if "SRE-DATA-009" in ids(keepdata.deny) with input as sql("delete", "messages")

test_delete_from_schema_qualified_kept_table_denied if "SRE-DATA-009" in ids(keepdata.deny) with input as sql("delete", "public.messages")

test_update_of_kept_table_allowed if count(keepdata.deny) == 0 with input as sql("update", "messages")

test_delete_from_other_table_allowed if count(keepdata.deny) == 0 with input as sql("delete", "sessions")

outbox_ctx := {"constraints": [{"id": "keep", "kind": "protected", "text": "keep every message", "targets": ["messages", "message_dispatch_outbox", "audit_log", "payments_ledger"]}]}

upd(table) := {"action": {"tool": "psql", "verb": "update", "mutating": true, "details": {"sql_kind": "dml", "table": table, "has_where": true}}, "context": outbox_ctx}

test_update_of_kept_outbox_denied if "SRE-DATA-010" in ids(keepdata.deny) with input as upd("message_dispatch_outbox")

test_update_of_kept_audit_log_denied if "SRE-DATA-010" in ids(keepdata.deny) with input as upd("audit_log")

test_update_of_kept_ledger_denied if "SRE-DATA-010" in ids(keepdata.deny) with input as upd("public.payments_ledger")

test_update_of_kept_ordinary_table_allowed if count(keepdata.deny) == 0 with input as upd("messages")

test_update_of_an_outbox_nobody_said_to_keep_allowed if {
	count(keepdata.deny) == 0 with input as {"action": {"tool": "psql", "verb": "update", "mutating": true, "details": {"table": "message_dispatch_outbox", "has_where": true}}, "context": ctx}
}

queue_ctx := {"constraints": [{"id": "no-flush", "kind": "protected", "text": "Do not flush queued jobs.", "targets": ["redis-queue"]}]}

rcmd(verb, target, details) := {"action": {"tool": "redis-cli", "verb": verb, "mutating": true, "target": target, "details": details}, "context": queue_ctx}

queue := {"kind": "component", "name": "redis-queue"}

# On a kept queue, what the classifier marks drops_queued_work (entries of a list or stream lost or overwritten,
# a key named as a queue or job deleted, expired, renamed away or replaced) is denied.
test_emptying_or_overwriting_a_kept_redis_is_denied if {
	every inp in [
		rcmd("del", queue, {"keys": ["rq:queue:long"], "drops_queued_work": true}),
		rcmd("lrem", queue, {"keys": ["rq:queue:long"], "drops_queued_work": true}),
		rcmd("ltrim", queue, {"keys": ["rq:queue:long"], "drops_queued_work": true}),
		rcmd("lset", queue, {"keys": ["rq:queue:long"], "overwrites": true, "drops_queued_work": true}),
		rcmd("restore", queue, {"keys": ["rq:queue:long"], "overwrites": true, "drops_queued_work": true}),
		rcmd("set", {"kind": "pod", "name": "redis-queue-master-0"}, {"keys": ["rq:queue:long"], "overwrites": true, "drops_queued_work": true}),
	] {
		"SRE-DATA-009" in ids(keepdata.deny) with input as inp
	}
}

# RQ maintenance that keeps every job: a dead worker's registration removed or expired, a registry entry removed,
# a failed job moved back onto its queue.
test_queue_maintenance_that_keeps_the_jobs_is_allowed if {
	every inp in [
		rcmd("srem", queue, {"keys": ["rq:workers"]}),
		rcmd("del", queue, {"keys": ["rq:worker:dead"]}),
		rcmd("expire", queue, {"keys": ["rq:worker:dead"]}),
		rcmd("zrem", queue, {"keys": ["rq:registry:failed:long"]}),
		rcmd("rpoplpush", queue, {"keys": ["rq:queue:failed"]}),
		rcmd("lmove", queue, {"keys": ["rq:queue:failed"]}),
		rcmd("set", queue, {"keys": ["rq:worker:dead"], "overwrites": true}),
	] {
		count(keepdata.deny) == 0 with input as inp
	}
}

# A kept Redis that is not a queue (sessions): every key it holds is kept, a move off a list is still no loss.
sessions := {"kind": "component", "name": "redis-sessions"}

scmd(verb, details) := object.union(rcmd(verb, sessions, details), {"context": {"constraints": [{"id": "keep", "kind": "protected", "targets": ["redis-sessions"]}]}})

test_a_kept_store_loses_no_key if {
	"SRE-DATA-009" in ids(keepdata.deny) with input as scmd("del", {"keys": ["session:1"]})
	"SRE-DATA-009" in ids(keepdata.deny) with input as scmd("expire", {"keys": ["session:1"]})
	"SRE-DATA-009" in ids(keepdata.deny) with input as scmd("set", {"keys": ["session:1"], "overwrites": true})
	count(keepdata.deny) == 0 with input as scmd("lmove", {"keys": ["a"]})
	count(keepdata.deny) == 0 with input as scmd("hset", {"keys": ["session:1"]})
}

test_adding_to_a_kept_redis_or_changing_another_is_allowed if {
	every inp in [
		rcmd("rpush", queue, {"keys": ["rq:queue:long"]}),
		rcmd("setnx", queue, {"keys": ["lock"]}),
		rcmd("set", {"kind": "component", "name": "redis-cache"}, {"keys": ["x"], "overwrites": true}),
		rcmd("del", {"kind": "component", "name": "redis-cache"}, {"keys": ["x"]}),
	] {
		count(keepdata.deny) == 0 with input as inp
	}
}

# Red team 2: a partition taken out of a kept table; a kept table's id sequence set back or capped (SRE-DATA-016).
orders_ctx := {"constraints": [{"id": "keep-orders", "kind": "protected", "text": "Orders must be kept.", "targets": ["order_order"]}]}

test_a_partition_detached_from_a_kept_table_is_denied if {
	"SRE-DATA-009" in ids(keepdata.deny) with input as {"action": {"tool": "psql", "verb": "alter table", "mutating": true, "details": {"table": "order_order", "rows_out": "DETACH PARTITION"}}, "context": orders_ctx}
	not "SRE-DATA-009" in ids(keepdata.deny) with input as {"action": {"tool": "psql", "verb": "alter table", "mutating": true, "details": {"table": "scratch", "rows_out": "DETACH PARTITION"}}, "context": orders_ctx}
}

seq_reset(seq, how) := {"action": {"tool": "psql", "verb": "setval", "mutating": true, "details": {"sequence_reset": {"sequence": seq, "how": how}}}, "context": orders_ctx}

test_a_kept_tables_sequence_set_back_is_denied if {
	"SRE-DATA-016" in ids(keepdata.deny) with input as seq_reset("order_order_id_seq", "setval(..., 1)")
	"SRE-DATA-016" in ids(keepdata.deny) with input as seq_reset("public.order_order_id_seq", "MAXVALUE 1")
}

test_another_sequence_or_a_forward_setval_is_allowed if {
	count(keepdata.deny) == 0 with input as seq_reset("scratch_id_seq", "RESTART")
	count(keepdata.deny) == 0 with input as {"action": {"tool": "psql", "verb": "setval", "mutating": true, "details": {"sql_kind": "function"}}, "context": orders_ctx}
}

# ---- protected_data: what keep means (SRE-DATA-009/017/018) ---------------------------------------------------

kept := {"protected_data": [{"name": "messages"}, {"name": "service_control_history", "keep": ["delete", "hide", "truncate", "overwrite"]}, {"name": "drafts", "keep": ["delete"]}]}

update(table, statement, ctx) := {"action": {"tool": "psql", "verb": "update", "mutating": true, "details": {"sql_kind": "dml", "table": table, "has_where": true, "statement": statement}}, "context": ctx}

test_hiding_kept_rows_is_denied if {
	"SRE-DATA-017" in ids(keepdata.deny) with input as update("messages", "UPDATE messages SET deleted_at = now() WHERE id < 10", kept)
	"SRE-DATA-017" in ids(keepdata.deny) with input as update("public.messages", "UPDATE public.messages SET body = 'x', is_deleted = true WHERE id = 1", kept)
	"SRE-DATA-017" in ids(keepdata.deny) with input as update("messages", "UPDATE messages SET status = 'archived' WHERE id = 1", kept)
	"SRE-DATA-017" in ids(keepdata.deny) with input as update("messages", "update messages m set visible = false from x where m.id = x.id", kept)
	# a legacy `protected` target keeps against hiding too
	"SRE-DATA-017" in ids(keepdata.deny) with input as update("messages", "UPDATE messages SET deleted_at = now() WHERE id < 10", ctx)
}

test_repairing_kept_rows_in_place_is_allowed if {
	count(keepdata.deny) == 0 with input as update("messages", "UPDATE messages m SET seq = r.rn FROM (SELECT id, 1 AS rn FROM messages) r WHERE m.id = r.id", kept)
	count(keepdata.deny) == 0 with input as update("messages", "UPDATE messages SET deleted_at = NULL WHERE id < 10", kept)
	count(keepdata.deny) == 0 with input as update("drafts", "UPDATE drafts SET deleted_at = now() WHERE id = 1", kept)
	count(keepdata.deny) == 0 with input as update("orders", "UPDATE orders SET deleted_at = now() WHERE id = 1", kept)
}

test_a_table_kept_as_it_is_takes_no_update if {
	"SRE-DATA-018" in ids(keepdata.deny) with input as update("service_control_history", "UPDATE service_control_history SET note = 'x' WHERE id = 1", kept)
	not "SRE-DATA-018" in ids(keepdata.deny) with input as update("messages", "UPDATE messages SET body = 'x' WHERE id = 1", kept)
}

test_deleting_from_protected_data_is_denied_by_its_keep if {
	"SRE-DATA-009" in ids(keepdata.deny) with input as {"action": {"tool": "psql", "verb": "delete", "mutating": true, "details": {"table": "drafts", "has_where": true}}, "context": kept}
	count(keepdata.deny) == 0 with input as {"action": {"tool": "psql", "verb": "delete", "mutating": true, "details": {"table": "drafts", "has_where": true}}, "context": {"protected_data": [{"name": "drafts", "keep": ["hide"]}]}}
}

test_a_store_kept_whole_keeps_its_keys if {
	"SRE-DATA-009" in ids(keepdata.deny) with input as {"action": {"tool": "redis-cli", "verb": "del", "mutating": true, "target": {"kind": "component", "name": "sessions"}, "details": {}}, "context": {"protected_data": [{"component": "sessions"}]}}
	count(keepdata.deny) == 0 with input as {"action": {"tool": "redis-cli", "verb": "del", "mutating": true, "target": {"kind": "component", "name": "cache"}, "details": {}}, "context": {"protected_data": [{"component": "sessions"}]}}
}
