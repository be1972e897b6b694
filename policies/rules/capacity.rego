# Capacity inflation and protected settings: raising a limit above the ceiling the runbook states
# (`context.ceilings`, or constraints of kind ceiling), changing a setting the context protects
# (`context.protected_settings`, or constraints of kind protected), and raising connection limits at all.
# A limit raised past its budget hides a leak or starves a peer; the fix is what holds the capacity.
package guardrail.rules.capacity

import data.guardrail.lib

# Settings for which 0 means "no limit at all".
unlimited_when_zero := {"max_user_connections", "maxmemory", "max_connections_per_hour", "max_queries_per_hour", "max_updates_per_hour"}

# A key's value as a number, with 0 read as infinity where it means unlimited.
effective(k) := n if {
	n := lib.number(k.value)
	not zero_means_unlimited(k, n)
}

effective(k) := "unlimited" if zero_means_unlimited(k, lib.number(k.value))

zero_means_unlimited(k, n) if {
	n == 0
	lib.last_segment(k.key) in unlimited_when_zero
}

above(v, ceiling) if v == "unlimited"

above(v, ceiling) if {
	is_number(v)
	v > lib.number(ceiling)
}

deny contains {
	"id": "SRE-CAP-001",
	"msg": sprintf("%s = %v is above its ceiling of %v. Stay within the budget: capacity past it starves peers or hides a leak; find what holds the capacity and repair that.", [k.key, k.value, ceiling]),
	"details": {"key": k.key, "value": k.value, "ceiling": ceiling},
} if {
	input.action.mutating in {true, "unknown"}
	some k in lib.keys
	some pattern, ceiling in lib.all_ceilings
	lib.key_matches(pattern, k.key)
	above(effective(k), ceiling)
}

deny contains {
	"id": "SRE-CAP-002",
	"msg": sprintf("%s is a protected setting in this incident and must not change. Leave it as it is; repair the cause through the settings the incident allows.", [k.key]),
	"details": {"key": k.key, "value": k.value, "protected": pattern},
} if {
	input.action.mutating in {true, "unknown"}
	some k in lib.keys
	some pattern in lib.protected_settings
	protected_match(pattern, k)
}

protected_match(pattern, k) if lib.key_matches(pattern, k.key)

# A protected postgres.max_connections also covers a scoped ALTER ROLE/DATABASE of the same GUC.
protected_match(pattern, k) if {
	count(object.get(k, "scope", {})) > 0
	lib.key_matches(pattern, concat(".", [split(k.key, ".")[0], lib.last_segment(k.key)]))
}

connection_limits := {"max_connections", "max_user_connections", "maxclients", "max_client_conn", "default_pool_size"}

warn contains {
	"id": "SRE-CAP-003",
	"msg": sprintf("Changing %s is rarely the fix: a connection limit that is hit usually means something holds connections (a leak, a lock, a slow query). Find the holder first (pg_stat_activity, SHOW PROCESSLIST, CLIENT LIST).", [k.key]),
	"details": {"key": k.key, "value": k.value},
} if {
	input.action.mutating in {true, "unknown"}
	some k in lib.keys
	lib.last_segment(k.key) in connection_limits
	not governed(k.key)
}

# Keys under a stated ceiling or protection already get a sharper finding.
governed(key) if {
	some pattern, _ in lib.all_ceilings
	lib.key_matches(pattern, key)
}

governed(key) if {
	some pattern in lib.protected_settings
	lib.key_matches(pattern, key)
}
