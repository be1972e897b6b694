package guardrail_test

import data.guardrail

ids(list) := {f.id | some f in list}

flushall := {"action": {"tool": "redis-cli", "verb": "flushall", "mutating": true, "target": {"name": "redis-queue"}}, "context": {}}

with_exceptions(inp, ex) := object.union(inp, {"context": {"extra": {"exceptions": ex}}})

test_decision_gathers_denies_from_rule_packages if "SRE-DATA-001" in ids(guardrail.decision.deny) with input as flushall

test_decision_gathers_warns if {
	"SRE-DATA-007" in ids(guardrail.decision.warn) with input as {"action": {"tool": "redis-cli", "verb": "del", "mutating": true}}
}

test_read_only_get_pods_is_clean if {
	d := guardrail.decision with input as {"action": {"tool": "kubectl", "verb": "get", "mutating": false, "target": {"kind": "pod", "namespace": "slack"}}, "context": {"namespaces": ["slack"]}, "command": "kubectl get pods -n slack"}
	d == {"deny": [], "warn": [], "exempted": []}
}

test_context_exception_exempts_rule if {
	d := guardrail.decision with input as with_exceptions(flushall, ["SRE-DATA-001"])
	not "SRE-DATA-001" in ids(d.deny)
	"SRE-DATA-001" in ids(d.exempted)
}

test_exception_object_with_reason if {
	d := guardrail.decision with input as with_exceptions(flushall, [{"id": "SRE-DATA-001", "reason": "cache-only staging store"}])
	count(d.deny) == 0
}

test_exception_glob if {
	d := guardrail.decision with input as with_exceptions(flushall, ["SRE-DATA-*"])
	count(d.deny) == 0
}

test_other_exception_does_not_exempt if {
	d := guardrail.decision with input as with_exceptions(flushall, ["SRE-TRAFFIC-001"])
	"SRE-DATA-001" in ids(d.deny)
}

test_data_document_exception if {
	d := guardrail.decision with input as flushall with data.exceptions as ["SRE-DATA-001"]
	count(d.deny) == 0
}

test_every_deny_has_id_msg_details if {
	inputs := [
		flushall,
		{"action": {"tool": "shell", "mutating": "unknown", "opaque_reason": "eval"}},
		{"action": {"tool": "kubectl", "verb": "scale", "mutating": true, "target": {"name": "loadgen"}, "keys": [{"key": "k8s.replicas", "value": 0}]}},
	]
	every inp in inputs {
		d := guardrail.decision with input as inp
		count(d.deny) > 0
		every f in d.deny {
			is_string(f.id)
			count(f.msg) > 40
			is_object(f.details)
		}
	}
}
