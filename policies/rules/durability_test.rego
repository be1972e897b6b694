package guardrail.rules.durability_test

import data.guardrail.rules.durability

ids(set) := {f.id | some f in set}

change(layer, key) := {
	"action": {"tool": "redis-cli", "verb": "config set", "mutating": true, "layer": layer, "keys": [{"key": key, "value": "64mb"}]},
	"context": {"declared_sources": {"redis.*": "helm values erpnext.redis-queue.master.extraFlags"}},
}

test_runtime_config_set_warns_with_source if {
	some f in durability.warn with input as change("runtime", "redis.maxmemory")
	f.id == "SRE-DURABLE-001"
	contains(f.msg, "extraFlags")
}

test_declared_change_no_warning if count(durability.warn) == 0 with input as change("declared", "redis.maxmemory")

test_runtime_event_toggle_no_warning if count(durability.warn) == 0 with input as change("runtime", "event.store_consistency_strict")

test_session_set_warns if "SRE-DURABLE-002" in ids(durability.warn) with input as change("session", "postgres.statement_timeout")

test_durability_never_denies if {
	not durability.deny with input as change("runtime", "redis.maxmemory")
	count(durability.warn) > 0 with input as change("runtime", "redis.maxmemory")
}

# reconfigure-infra.sh's three services: the queue's repair is persisted (declared), mariadb's is a SET GLOBAL and
# the cache's a CONFIG SET (runtime), as the helper's own normalisation says.
helper(kind, layer, key) := {
	"action": {"tool": "reconfigure-infra.sh", "verb": "reconfigure", "mutating": true, "layer": layer, "target": {"kind": "component", "name": kind}, "keys": [{"key": key, "value": "64", "scope": {"component": kind}}]},
	"context": {"declared_sources": {"redis.*": "helm values erpnext.redis-queue.master.extraFlags"}},
}

test_the_helpers_persisted_queue_repair_no_warning if count(durability.warn) == 0 with input as helper("redis-queue", "declared", "redis.maxmemory")

test_the_helpers_set_global_warns_runtime_only if {
	some f in durability.warn with input as helper("mariadb", "runtime", "mariadb.max_user_connections")
	f.id == "SRE-DURABLE-001"
}
