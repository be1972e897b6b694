# Durability hints: a change that lands only in the runtime layer (CONFIG SET, SET GLOBAL, PUT /admin/config
# before a reload, an edit inside a container) is lost on the next restart. A warning, never a deny: runtime
# changes are often the right first step. Reads `context.declared_sources` (key glob -> where it is declared).
package guardrail.rules.durability

import data.guardrail.lib

declared_source(key) := src if {
	some pattern, src in object.get(lib.context, "declared_sources", {})
	lib.key_matches(pattern, key)
} else := "its declared config (Helm values, ConfigMap, ALTER SYSTEM, config file)"

# Runtime events are in-process toggles with no declared layer; turning one off at runtime is the repair.
durable_needed(k) if not strings.any_prefix_match(k.key, ["event.", "file:"])

warn contains {
	"id": "SRE-DURABLE-001",
	"msg": sprintf("%s changes only the runtime layer; a restart will drop it. Also write it to %s, or the repair is not durable.", [k.key, declared_source(k.key)]),
	"details": {"key": k.key, "layer": "runtime", "declared_source": declared_source(k.key)},
} if {
	input.action.layer == "runtime"
	some k in input.action.keys
	durable_needed(k)
}

warn contains {
	"id": "SRE-DURABLE-002",
	"msg": sprintf("%s is a session-level change: it affects only this one connection. Set it at the system, role or database level instead.", [k.key]),
	"details": {"key": k.key, "layer": "session"},
} if {
	input.action.layer == "session"
	some k in input.action.keys
}
