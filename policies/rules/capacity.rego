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
	not negative_overflow(k, n)
}

negative_overflow(k, n) if {
	lib.last_segment(k.key) == "max_overflow"
	n < 0
}

effective(k) := "unlimited" if zero_means_unlimited(k, lib.number(k.value))

# SQLAlchemy's max_overflow = -1: no limit on overflow connections.
effective(k) := "unlimited" if negative_overflow(k, lib.number(k.value))

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
	some k in input.action.keys
	ceiling := lib.all_ceilings[k.key]
}

ceiling_hits contains [k, lib.all_ceilings[pattern]] if {
	some k in input.action.keys
	some pattern in lib.ceiling_globs
	glob.match(pattern, ["."], k.key)
}

protected_hits contains [k, p] if {
	some k in changed_keys
	strings.any_prefix_match(concat("", [k.key, "."]), lib.protected_exact_dotted)
	some p in lib.key_prefixes(k.key)
	p in lib.protected_exact
}

protected_hits contains [k, pattern] if {
	some k in changed_keys
	some pattern in lib.protected_globs
	glob.match(pattern, ["."], k.key)
}

# The keys changed, and a Kubernetes key also by the object it is set on: a context protects one workload's
# replicas as `k8s.replicas.worker-long`, and `kubectl scale deploy worker-long` sets `k8s.replicas` on it.
changed_keys contains k if some k in input.action.keys

changed_keys contains object.union(k, {"key": concat(".", [k.key, k.scope.name])}) if {
	some k in input.action.keys
	startswith(k.key, "k8s.")
	is_string(k.scope.name)
	k.scope.name != ""
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
	some k in input.action.keys
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

# ---- lowering a capacity limit ----------------------------------------------------------------------------------

# Limits whose value is capacity: lowering one means fewer connections, pooled sessions or bytes at the next peak.
capacity_limits := {
	"pool_size", "max_overflow", "default_pool_size", "reserve_pool_size", "max_client_conn", "max_db_connections",
	"max_connections", "max_user_connections", "maxclients", "maxmemory",
}

# The guard's observation of a changed key (its value now, and `initial`: its value when this session first
# touched it), matched on key and scope.
# (The first one: a function must not give two answers.)
observation(k) := os[0] if {
	os := [o | some o in lib.observed_keys; o.key == k.key; lib.scope_of(o) == lib.scope_of(k)]
	count(os) > 0
}

lowered(new, start) if {
	is_number(new)
	start == "unlimited"
}

lowered(new, start) if {
	is_number(new)
	is_number(start)
	new < start
}

# A limit the session found above its stated ceiling may come down (to the budget, or below it).
found_above_ceiling(k, start) if {
	some [hit, ceiling] in ceiling_hits
	hit.key == k.key
	above(start, ceiling)
}

# A pool's capacity is pool_size + max_overflow (SQLAlchemy's most connections at once). When one action sets
# both halves of a pool, it is their sum that must not go down: 12/2 -> 10/5 moves capacity into the overflow
# and adds one connection.
pool_parts := {"pool_size", "max_overflow"}

parent(key) := concat(".", array.slice(segs, 0, count(segs) - 1)) if segs := split(key, ".")

pool_halves(k) := [x |
	some x in input.action.keys
	lib.last_segment(x.key) in pool_parts
	parent(x.key) == parent(k.key)
	lib.scope_of(x) == lib.scope_of(k)
]

# [new, start] for the capacity this key is judged by: the pool's total when the action sets both halves (and
# both were read before), else the key alone.
judged(k) := [sum(news), sum(starts)] if {
	lib.last_segment(k.key) in pool_parts
	halves := pool_halves(k)
	count(halves) == 2
	news := [effective(x) | some x in halves]
	starts := [effective({"key": x.key, "value": observation(x).initial}) | some x in halves]
	count(starts) == 2
	every v in array.concat(news, starts) {
		is_number(v)
	}
} else := [effective(k), effective({"key": k.key, "value": observation(k).initial})]

deny contains {
	"id": "SRE-CAP-006",
	"msg": sprintf("This lowers %s from %v (its value when this session began) to %v. Taking capacity away during an incident adds queueing and refusals at the next peak and repairs no fault; leave it as it was, or put back the value you found. If a smaller limit is the fix (it starves a peer), the runbook states that budget as a ceiling.", [k.key, o.initial, k.value]),
	"details": {"key": k.key, "value": k.value, "initial": o.initial},
} if {
	input.action.mutating in {true, "unknown"}
	some k in input.action.keys
	lib.last_segment(k.key) in capacity_limits
	o := observation(k)
	[new, start] := judged(k)
	lowered(new, start)
	not found_above_ceiling(k, effective({"key": k.key, "value": o.initial}))
}

# ---- floors ----------------------------------------------------------------------------------------------------

# A value below the floor the runbook states (`context.floors`, constraints of kind floor): a pool timeout under
# its floor turns waits into errors at the next peak, a retention under its floor drops what must be kept.
deny contains {
	"id": "SRE-CAP-007",
	"msg": sprintf("%s = %v is below its floor of %v, which this incident states. Keep it at %v or above; repair what makes a lower value look necessary.", [k.key, k.value, floor, floor]),
	"details": {"key": k.key, "value": k.value, "floor": floor},
} if {
	input.action.mutating in {true, "unknown"}
	some k in input.action.keys
	some pattern, floor in lib.all_floors
	lib.key_matches(pattern, k.key)
	lib.number(k.value) < lib.number(floor)
}
