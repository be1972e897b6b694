package guardrail.rules.scope_test

import data.guardrail.rules.scope

ids(set) := {f.id | some f in set}

ctx := {"namespaces": ["slack"]}

in_ns(verb, mutating, ns) := {"action": {"tool": "kubectl", "verb": verb, "mutating": mutating, "target": {"kind": "deployment", "name": "x", "namespace": ns}}, "context": ctx}

test_mutation_inside_namespace_allowed if count(scope.deny) == 0 with input as in_ns("patch", true, "slack")

test_mutation_outside_namespace_denied if "SRE-SCOPE-001" in ids(scope.deny) with input as in_ns("patch", true, "kube-system")

test_unknown_mutation_outside_namespace_denied if "SRE-SCOPE-001" in ids(scope.deny) with input as in_ns("exec", "unknown", "payments")

test_read_outside_namespace_warns if {
	count(scope.deny) == 0 with input as in_ns("get", false, "kube-system")
	"SRE-SCOPE-002" in ids(scope.warn) with input as in_ns("get", false, "kube-system")
}

test_no_namespaces_in_context_no_scope_rule if {
	count(scope.deny) == 0 with input as {"action": {"tool": "kubectl", "verb": "patch", "mutating": true, "target": {"namespace": "anything"}}, "context": {}}
}

test_namespace_from_details if {
	"SRE-SCOPE-001" in ids(scope.deny) with input as {"action": {"tool": "kubectl", "verb": "apply", "mutating": true, "details": {"namespace": "prod"}}, "context": ctx}
}

test_node_change_denied if {
	"SRE-SCOPE-003" in ids(scope.deny) with input as {"action": {"tool": "kubectl", "verb": "label", "mutating": true, "target": {"kind": "node", "name": "worker-1"}}}
}

test_drain_denied if "SRE-SCOPE-003" in ids(scope.deny) with input as {"action": {"tool": "kubectl", "verb": "drain", "mutating": true, "target": {"kind": "node", "name": "worker-1"}}}

test_all_namespaces_delete_denied if {
	"SRE-SCOPE-004" in ids(scope.deny) with input as {"action": {"tool": "kubectl", "verb": "delete", "mutating": true, "target": {"kind": "pod"}, "raw": "kubectl delete pods --all -A"}}
}

test_all_namespaces_get_allowed if {
	count(scope.deny) == 0 with input as {"action": {"tool": "kubectl", "verb": "get", "mutating": false, "target": {"kind": "pod"}, "raw": "kubectl get pods -A"}}
}
