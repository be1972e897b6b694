# Finite capacity: an incident that says "keep queue capacity finite" (a constraint of kind finite, targets are
# keys or globs) forbids lifting the limit altogether, even where it states no number. A cap of 0 means
# "unlimited" for maxmemory and the connection limits; -1 does for PostgreSQL connection limits.
package guardrail.rules.finite

import data.guardrail.lib
import data.guardrail.rules.capacity

finite_constraints := lib.constraints_of("finite")

unlimited(k) if capacity.effective(k) == "unlimited"

unlimited(k) if lib.number(k.value) == -1

deny contains {
	"id": "SRE-CAP-005",
	"msg": sprintf("%s = %v removes the limit, and this incident says: %q. Keep a finite value: size it to the load (and within any stated ceiling) instead of lifting it.", [k.key, k.value, c.text]),
	"details": {"key": k.key, "value": k.value, "constraint": c.id},
} if {
	input.action.mutating in {true, "unknown"}
	some c in finite_constraints
	some k in input.action.keys
	some t in c.targets
	lib.key_matches(t, k.key)
	unlimited(k)
}
