package guardrail.rules.redis_test

import data.guardrail.rules.redis

ids(set) := {f.id | some f in set}

config_set(target, key, value) := {"action": {
	"tool": "redis-cli", "verb": "config set", "mutating": true, "layer": "runtime",
	"target": {"kind": "component", "name": target}, "keys": [{"key": key, "value": value}],
}}

test_eviction_on_queue_denied if "SUB-REDIS-001" in ids(redis.deny) with input as config_set("redis-queue", "redis.maxmemory-policy", "allkeys-lru")

test_noeviction_on_queue_allowed if count(redis.deny) == 0 with input as config_set("redis-queue", "redis.maxmemory-policy", "noeviction")

test_eviction_on_cache_warns if {
	inp := config_set("redis-cache", "redis.maxmemory-policy", "allkeys-lru")
	count(redis.deny) == 0 with input as inp
	"SUB-REDIS-002" in ids(redis.warn) with input as inp
}

test_appendonly_off_denied if "SUB-REDIS-003" in ids(redis.deny) with input as config_set("redis-queue", "redis.appendonly", "no")

test_save_cleared_denied if "SUB-REDIS-003" in ids(redis.deny) with input as config_set("redis-queue", "redis.save", "")

test_maxmemory_change_allowed if count(redis.deny) == 0 with input as config_set("redis-queue", "redis.maxmemory", "64mb")

test_keys_star_warns if "SUB-REDIS-004" in ids(redis.warn) with input as {"action": {"tool": "redis-cli", "verb": "keys", "mutating": false}}

test_eviction_through_helm_flags_denied if {
	"SUB-REDIS-001" in ids(redis.deny) with input as {"action": {
		"tool": "helm", "verb": "upgrade", "mutating": true,
		"raw": "helm upgrade frappe chart --reuse-values --set 'erpnext.redis-queue.master.extraFlags={--maxmemory 64mb,--maxmemory-policy allkeys-lru}'",
	}}
}

test_noeviction_through_helm_flags_allowed if {
	count(redis.deny) == 0 with input as {"action": {
		"tool": "helm", "verb": "upgrade", "mutating": true,
		"raw": "helm upgrade frappe chart --reuse-values --set 'erpnext.redis-queue.master.extraFlags={--maxmemory 64mb,--maxmemory-policy noeviction}'",
	}}
}

test_appendfsync_no_denied if "SUB-REDIS-003" in ids(redis.deny) with input as config_set("redis-queue", "redis.appendfsync", "no")

test_appendfsync_always_allowed if count(redis.deny) == 0 with input as config_set("redis-queue", "redis.appendfsync", "always")

push(members) := {
	"action": {"tool": "redis-cli", "verb": "rpush", "mutating": true, "target": {"kind": "component", "name": "redis-queue"}},
	"observed": {"lists": {"rq:queue:long": members}},
}

test_repush_of_queued_job_denied if "SUB-REDIS-005" in ids(redis.deny) with input as push({"a": null, "b": 3})

test_push_of_missing_job_allowed if count(redis.deny) == 0 with input as push({"a": null})

test_push_without_observation_allowed if {
	count(redis.deny) == 0 with input as {"action": {"tool": "redis-cli", "verb": "rpush", "mutating": true, "target": {"kind": "component", "name": "redis-queue"}}}
}

test_repush_onto_a_plain_list_allowed if {
	count(redis.deny) == 0 with input as {
		"action": {"tool": "redis-cli", "verb": "rpush", "mutating": true, "target": {"kind": "component", "name": "redis-cache"}},
		"observed": {"lists": {"recent:views": {"a": 0}}},
	}
}

# A policy value of another type (a server flag given no value is null, helm types numbers and booleans) is read as
# its text and never stops the package with a type error: null sets no policy.
test_policy_value_of_any_type_decides if {
	count(redis.deny) == 0 with input as config_set("redis-queue", "redis.maxmemory-policy", null)
	"SUB-REDIS-001" in ids(redis.deny) with input as config_set("redis-queue", "redis.maxmemory-policy", 1)
	"SUB-REDIS-001" in ids(redis.deny) with input as config_set("redis-queue", "redis.maxmemory-policy", ["allkeys-lru"])
	"SUB-REDIS-002" in ids(redis.warn) with input as config_set("redis-cache", "redis.maxmemory-policy", true)
	count(redis.warn) == 0 with input as config_set("redis-cache", "redis.maxmemory-policy", null)
}
