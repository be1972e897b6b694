package guardrail.rules.capacity_test

import data.guardrail.rules.capacity

ids(set) := {f.id | some f in set}

setting(key, value, ctx) := {"action": {"tool": "curl", "verb": "PUT", "mutating": true, "keys": [{"key": key, "value": value}]}, "context": ctx}

pools := {"ceilings": {"app.roles.*.db.pool_size": 20, "app.roles.*.db.max_overflow": 10, "redis.maxmemory": 134217728}}

test_pool_within_ceiling_allowed if count(capacity.deny) == 0 with input as setting("app.roles.channel.db.pool_size", 20, pools)

test_pool_above_ceiling_denied if "SRE-CAP-001" in ids(capacity.deny) with input as setting("app.roles.channel.db.pool_size", 32, pools)

test_overflow_as_string_above_ceiling_denied if "SRE-CAP-001" in ids(capacity.deny) with input as setting("app.roles.message.db.max_overflow", "32", pools)

test_redis_maxmemory_units_within_ceiling_allowed if count(capacity.deny) == 0 with input as setting("redis.maxmemory", "64mb", pools)

test_redis_maxmemory_units_above_ceiling_denied if "SRE-CAP-001" in ids(capacity.deny) with input as setting("redis.maxmemory", "1gb", pools)

test_redis_maxmemory_zero_is_unlimited if "SRE-CAP-001" in ids(capacity.deny) with input as setting("redis.maxmemory", 0, pools)

test_ceiling_from_constraint if {
	ctx := {"constraints": [{"id": "peer", "text": "no capacity above the peer budget", "kind": "ceiling", "targets": ["mariadb.max_user_connections"], "value": 64}]}
	"SRE-CAP-001" in ids(capacity.deny) with input as setting("mariadb.max_user_connections", 0, ctx)
}

test_protected_setting_denied if {
	ctx := {"protected_settings": ["mariadb.max_connections"]}
	"SRE-CAP-002" in ids(capacity.deny) with input as setting("mariadb.max_connections", 500, ctx)
}

test_protected_glob_denied if {
	ctx := {"protected_settings": ["postgres.*"]}
	"SRE-CAP-002" in ids(capacity.deny) with input as setting("postgres.shared_buffers", "1GB", ctx)
}

test_protected_by_constraint_denied if {
	ctx := {"constraints": [{"id": "p", "text": "do not change autovacuum", "kind": "protected", "targets": ["postgres.autovacuum"]}]}
	"SRE-CAP-002" in ids(capacity.deny) with input as setting("postgres.autovacuum", "off", ctx)
}

test_unprotected_setting_allowed if {
	ctx := {"protected_settings": ["postgres.max_connections"]}
	count(capacity.deny) == 0 with input as setting("postgres.idle_in_transaction_session_timeout", "10s", ctx)
}

test_max_user_connections_fix_without_ceiling_only_warns if {
	inp := setting("mariadb.max_user_connections", 0, {})
	count(capacity.deny) == 0 with input as inp
	"SRE-CAP-003" in ids(capacity.warn) with input as inp
}

restated_flags(key, value) := {"action": {
	"tool": "helm", "verb": "upgrade", "mutating": true,
	"keys": [{"key": "helm.redis-queue.master.extraFlags", "value": ["--maxmemory-policy noeviction"]}, {"key": key, "value": value}],
	"details": {"reuse_values": true, "server_flags": [key]},
}, "context": {"protected_settings": ["redis.maxmemory-policy"]}}

test_protected_flag_restated_in_server_flags_warned_not_denied if {
	not "SRE-CAP-002" in ids(capacity.deny) with input as restated_flags("redis.maxmemory-policy", "noeviction")
	"SRE-CAP-004" in ids(capacity.warn) with input as restated_flags("redis.maxmemory-policy", "noeviction")
}

test_protected_setting_set_directly_still_denied if {
	"SRE-CAP-002" in ids(capacity.deny) with input as setting("redis.maxmemory-policy", "noeviction", {"protected_settings": ["redis.maxmemory-policy"]})
	not "SRE-CAP-004" in ids(capacity.warn) with input as setting("redis.maxmemory-policy", "noeviction", {"protected_settings": ["redis.maxmemory-policy"]})
}

# ---- SRE-CAP-006: lowering a capacity limit below where the session found it ----

lowered_pool(value, initial, ctx) := {
	"action": {"tool": "restart-svc.sh", "verb": "apply", "mutating": true, "keys": [{"key": "app.roles.auth.db.pool_size", "value": value, "scope": {"role": "auth"}}]},
	"observed": {"keys": [{"key": "app.roles.auth.db.pool_size", "scope": {"role": "auth"}, "before": initial, "initial": initial}]},
	"context": ctx,
}

test_pool_lowered_below_start_denied if "SRE-CAP-006" in ids(capacity.deny) with input as lowered_pool(16, 20, pools)

test_pool_raised_allowed if count(capacity.deny) == 0 with input as lowered_pool(20, 3, pools)

test_pool_unchanged_allowed if count(capacity.deny) == 0 with input as lowered_pool(20, 20, pools)

test_pool_found_above_ceiling_may_come_down if count(capacity.deny) == 0 with input as lowered_pool(16, 40, pools)

test_no_observation_no_finding if {
	count(capacity.deny) == 0 with input as setting("app.roles.auth.db.pool_size", 1, pools)
}

test_initial_value_not_the_current_one_is_compared if {
	# The session raised the pool to 30 earlier (initial 20); putting back 20 is not a reduction.
	inp := {
		"action": {"tool": "restart-svc.sh", "verb": "apply", "mutating": true, "keys": [{"key": "app.roles.auth.db.pool_size", "value": 20, "scope": {"role": "auth"}}]},
		"observed": {"keys": [{"key": "app.roles.auth.db.pool_size", "scope": {"role": "auth"}, "before": 30, "initial": 20}]},
		"context": {},
	}
	count(capacity.deny) == 0 with input as inp
}

test_limit_from_unlimited_to_a_number_denied if {
	inp := {
		"action": {"tool": "mysql", "verb": "set", "mutating": true, "keys": [{"key": "mariadb.max_user_connections", "value": 32}]},
		"observed": {"keys": [{"key": "mariadb.max_user_connections", "before": 0, "initial": 0}]},
		"context": {},
	}
	"SRE-CAP-006" in ids(capacity.deny) with input as inp
}

test_limit_to_unlimited_is_not_lowering if {
	inp := {
		"action": {"tool": "mysql", "verb": "set", "mutating": true, "keys": [{"key": "mariadb.max_user_connections", "value": 0}]},
		"observed": {"keys": [{"key": "mariadb.max_user_connections", "before": 8, "initial": 8}]},
		"context": {},
	}
	count(capacity.deny) == 0 with input as inp
}

test_maxmemory_units_compared if {
	inp := {
		"action": {"tool": "helm", "verb": "upgrade", "mutating": true, "keys": [{"key": "redis.maxmemory", "value": "64mb"}]},
		"observed": {"keys": [{"key": "redis.maxmemory", "before": "2097152", "initial": "2097152"}]},
		"context": {},
	}
	count(capacity.deny) == 0 with input as inp
}

pool_pair(size, overflow, size0, overflow0) := {
	"action": {"tool": "restart-svc.sh", "verb": "apply", "mutating": true, "keys": [
		{"key": "app.roles.channel.db.pool_size", "value": size, "scope": {"role": "channel"}},
		{"key": "app.roles.channel.db.max_overflow", "value": overflow, "scope": {"role": "channel"}},
	]},
	"observed": {"keys": [
		{"key": "app.roles.channel.db.pool_size", "scope": {"role": "channel"}, "before": size0, "initial": size0},
		{"key": "app.roles.channel.db.max_overflow", "scope": {"role": "channel"}, "before": overflow0, "initial": overflow0},
	]},
	"context": pools,
}

test_pool_rebalanced_with_more_connections_allowed if count(capacity.deny) == 0 with input as pool_pair(10, 5, 12, 2)

test_pool_both_halves_lowered_denied if "SRE-CAP-006" in ids(capacity.deny) with input as pool_pair(16, 8, 20, 10)

test_pool_total_lowered_by_rebalance_denied if "SRE-CAP-006" in ids(capacity.deny) with input as pool_pair(10, 5, 20, 2)

test_unlimited_overflow_is_not_lowering if {
	not "SRE-CAP-006" in ids(capacity.deny) with input as pool_pair(20, -1, 20, 10)
}

# SQLAlchemy's max_overflow = -1 is no limit at all: above any ceiling.
test_unlimited_overflow_above_ceiling if "SRE-CAP-001" in ids(capacity.deny) with input as pool_pair(20, -1, 20, 10)

test_a_workloads_protected_replicas_are_protected_by_its_name if {
	scale := {"action": {"tool": "kubectl", "verb": "scale", "mutating": true, "keys": [{"key": "k8s.replicas", "value": 5, "scope": {"kind": "deployment", "name": "worker-long"}}]}, "context": {"protected_settings": ["k8s.replicas.worker-long"]}}
	"SRE-CAP-002" in {f.id | some f in capacity.deny} with input as scale
	other := json.patch(scale, [{"op": "replace", "path": "/action/keys/0/scope/name", "value": "worker-short"}])
	not "SRE-CAP-002" in {f.id | some f in capacity.deny} with input as other
}

# ---- floors (SRE-CAP-007) --------------------------------------------------------------------------------------

floored := {"floors": {"app.roles.*.db.pool_timeout_s": 1}}

floored_by_constraint := {"constraints": [{"id": "f", "kind": "floor", "text": "pool_timeout_s stays >= 1", "targets": ["app.roles.*.db.pool_timeout_s"], "value": 1}]}

test_a_value_below_its_floor_is_denied if {
	"SRE-CAP-007" in ids(capacity.deny) with input as setting("app.roles.channel.db.pool_timeout_s", 0.5, floored)
	"SRE-CAP-007" in ids(capacity.deny) with input as setting("app.roles.channel.db.pool_timeout_s", "0", floored_by_constraint)
}

test_a_value_at_or_above_its_floor_is_allowed if {
	not "SRE-CAP-007" in ids(capacity.deny) with input as setting("app.roles.channel.db.pool_timeout_s", 1, floored)
	not "SRE-CAP-007" in ids(capacity.deny) with input as setting("app.roles.channel.db.pool_timeout_s", 5, floored_by_constraint)
}

test_a_floor_covers_only_its_keys if {
	not "SRE-CAP-007" in ids(capacity.deny) with input as setting("app.roles.channel.db.pool_size", 0.5, floored)
	not "SRE-CAP-007" in ids(capacity.deny) with input as setting("app.roles.channel.db.pool_timeout_s", 0.5, {})
}
