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

# Which stated ceiling or protection covers each changed key. Exact keys and dotted prefixes are set lookups;
# only the patterns with a * are matched one by one (a context lists dozens of keys, a change touches few).
ceiling_hits contains [k, ceiling] if {
	some k in lib.keys
	ceiling := lib.all_ceilings[k.key]
}

ceiling_hits contains [k, lib.all_ceilings[pattern]] if {
	some k in lib.keys
	some pattern in lib.ceiling_globs
	glob.match(pattern, ["."], k.key)
}

protected_hits contains [k, p] if {
	count(lib.protected_exact) > 0
	some k in lib.keys
	some p in lib.key_prefixes(k.key)
	p in lib.protected_exact
}

protected_hits contains [k, pattern] if {
	some k in lib.keys
	some pattern in lib.protected_globs
	glob.match(pattern, ["."], k.key)
}

deny contains {
	"id": "SRE-CAP-001",
	"msg": sprintf("%s = %v is above its ceiling of %v. Stay within the budget: capacity past it starves peers or hides a leak; find what holds the capacity and repair that.", [k.key, k.value, ceiling]),
	"details": {"key": k.key, "value": k.value, "ceiling": ceiling},
} if {
	input.action.mutating in {true, "unknown"}
	some [k, ceiling] in ceiling_hits
	above(effective(k), ceiling)
}

deny contains {
	"id": "SRE-CAP-002",
	"msg": sprintf("%s is a protected setting in this incident and must not change. Leave it as it is; repair the cause through the settings the incident allows.", [k.key]),
	"details": {"key": k.key, "value": k.value, "protected": pattern},
} if {
	input.action.mutating in {true, "unknown"}
	some [k, pattern] in protected_hits
	not restated_flag(k)
}

# A chart's server-flags list (Bitnami extraFlags) is rewritten whole, so a protected flag in it may only be
# restated: warn, and leave the value to the scope audit, which reads it at the declaration.
restated_flag(k) if k.key in object.get(lib.details, "server_flags", [])

warn contains {
	"id": "SRE-CAP-004",
	"msg": sprintf("%s is a protected setting in this incident, and this rewrite of the chart's server flags restates it as %v. Keep exactly the value it has now (check with `helm get values`); the guard checks at the declaration that it did not change.", [k.key, k.value]),
	"details": {"key": k.key, "value": k.value, "protected": pattern},
} if {
	input.action.mutating in {true, "unknown"}
	some [k, pattern] in protected_hits
	restated_flag(k)
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
	some [k, _] in ceiling_hits
	k.key == key
}

governed(key) if {
	some [k, _] in protected_hits
	k.key == key
}
