# The one document every engine evaluates: data.guardrail.decision = {"deny": [...], "warn": [...], "exempted": [...]}.
#
# It gathers the `deny` and `warn` sets of every package under data.guardrail.rules (the general library in
# rules/ and the per-technology rules in substrates/), then drops the findings an exception names. Exceptions,
# as in conftest and gatekeeper, come from two places, each a list of rule ids or id globs ("SRE-TRAFFIC-*"):
#   - context.extra.exceptions            (per incident: a list of ids, or of {"id": ..., "reason": ...})
#   - data.exceptions                     (per deployment: a data.json/data.yaml beside the policies)
package guardrail

import data.guardrail.lib

denies contains f if {
	some pkg
	some f in data.guardrail.rules[pkg].deny
}

warns contains f if {
	some pkg
	some f in data.guardrail.rules[pkg].warn
}

exception_patterns contains id if {
	some e in object.get(object.get(lib.context, "extra", {}), "exceptions", [])
	id := exception_id(e)
}

exception_patterns contains id if {
	some e in data.exceptions
	id := exception_id(e)
}

exception_id(e) := e if is_string(e)

exception_id(e) := e.id if is_object(e)

exempt(f) if {
	some pattern in exception_patterns
	glob.match(pattern, [], f.id)
}

# Most decisions have no exception to apply: then nothing is exempted, and no finding needs the test.
decision := {
	"deny": [f | some f in denies],
	"warn": [f | some f in warns],
	"exempted": [],
} if {
	count(exception_patterns) == 0
} else := {
	"deny": [f | some f in denies; not exempt(f)],
	"warn": [f | some f in warns; not exempt(f)],
	"exempted": [f | some f in denies | warns; exempt(f)],
}
