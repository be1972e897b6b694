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
