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

# ---- SRE-SCOPE-005: widening the scope of a setting this session already changed ----

guc(scope, earlier) := {
	"action": {"tool": "psql", "verb": "alter system", "mutating": true, "keys": [{"key": "postgres.statement_timeout", "value": "5s", "scope": scope}]},
	"observed": {"earlier": earlier},
}

role_in_db := [{"key": "postgres.statement_timeout", "scope": {"role": "app", "database": "app"}, "value": null, "seq": 7}]

test_system_wide_after_role_in_database_denied if "SRE-SCOPE-005" in ids(scope.deny) with input as guc({}, role_in_db)

test_database_wide_after_role_in_database_denied if "SRE-SCOPE-005" in ids(scope.deny) with input as guc({"database": "app"}, role_in_db)

test_role_wide_after_role_in_database_denied if "SRE-SCOPE-005" in ids(scope.deny) with input as guc({"role": "app"}, role_in_db)

test_same_scope_again_allowed if count(scope.deny) == 0 with input as guc({"role": "app", "database": "app"}, role_in_db)

test_other_database_allowed if count(scope.deny) == 0 with input as guc({"database": "other"}, role_in_db)

test_narrower_after_wider_allowed if {
	count(scope.deny) == 0 with input as guc({"role": "app", "database": "app"}, [{"key": "postgres.statement_timeout", "scope": {}, "value": "5s", "seq": 3}])
}

test_other_key_earlier_allowed if {
	count(scope.deny) == 0 with input as guc({}, [{"key": "postgres.lock_timeout", "scope": {"role": "app"}, "value": "1s", "seq": 3}])
}

test_no_earlier_change_allowed if count(scope.deny) == 0 with input as guc({}, [])

test_a_change_to_the_host_itself_is_denied if {
	"SRE-SCOPE-006" in {f.id | some f in scope.deny} with input as {"action": {"tool": "ip", "verb": "ip link set", "mutating": true, "details": {"host_change": "ip link set"}}, "context": {}}
}

test_a_read_of_the_host_is_not if {
	count({f | some f in scope.deny; f.id == "SRE-SCOPE-006"}) == 0 with input as {"action": {"tool": "ip", "verb": "ip", "mutating": false, "details": {}}, "context": {}}
}

test_a_file_of_the_host_written_is_a_host_change if {
	some f in scope.deny with input as {"action": {"tool": "file", "verb": "write", "mutating": true, "details": {"path": "/usr/local/bin/ls", "host_change": "write /usr/local/bin/ls (the system's programs)"}}, "context": {}}
	f.id == "SRE-SCOPE-006"
	contains(f.msg, "/usr/local/bin/ls")
}

test_a_file_written_elsewhere_is_not_a_host_change if {
	count({f | some f in scope.deny; f.id == "SRE-SCOPE-006"}) == 0 with input as {"action": {"tool": "file", "verb": "write", "mutating": true, "details": {"path": "/tmp/ls"}}, "context": {}}
}

# ---- components left alone (SRE-SCOPE-007) ---------------------------------------------------------------------

cache_alone := {"components": ["redis-queue", "redis-cache", "svc-channel"], "protected_components": ["redis-cache"]}

on_component(tool, verb, mutating, name, keys) := {"action": {"tool": tool, "verb": verb, "mutating": mutating, "target": {"kind": "component", "name": name}, "keys": keys}, "context": cache_alone}

test_any_change_to_a_component_left_alone_is_denied if {
	"SRE-SCOPE-007" in ids(scope.deny) with input as on_component("redis-cli", "config set", true, "redis-cache", [{"key": "redis.maxmemory", "value": "1mb"}])
	"SRE-SCOPE-007" in ids(scope.deny) with input as on_component("redis-cli", "set", true, "redis-cache", [])
	"SRE-SCOPE-007" in ids(scope.deny) with input as {"action": {"tool": "kubectl", "verb": "rollout restart", "mutating": true, "target": {"kind": "deployment", "name": "redis-cache"}}, "context": cache_alone}
}

test_a_key_set_on_the_component_by_another_tool_is_denied if {
	"SRE-SCOPE-007" in ids(scope.deny) with input as on_component("reconfigure-infra.sh", "reconfigure", true, "infra", [{"key": "redis.maxmemory", "value": "1mb", "scope": {"component": "redis-cache"}}])
}

test_reads_and_other_components_are_allowed if {
	not "SRE-SCOPE-007" in ids(scope.deny) with input as on_component("redis-cli", "get", false, "redis-cache", [])
	not "SRE-SCOPE-007" in ids(scope.deny) with input as on_component("redis-cli", "config set", true, "redis-queue", [{"key": "redis.maxmemory", "value": "1mb"}])
}

test_a_chart_value_under_the_components_subchart_is_denied if {
	"SRE-SCOPE-007" in ids(scope.deny) with input as {"action": {"tool": "helm", "verb": "upgrade", "mutating": true, "target": {"kind": "release", "name": "frappe"}, "keys": [{"key": "helm.redis-cache.master.maxmemory", "value": "1mb", "scope": {"release": "frappe"}}]}, "context": cache_alone}
	not "SRE-SCOPE-007" in ids(scope.deny) with input as {"action": {"tool": "helm", "verb": "upgrade", "mutating": true, "target": {"kind": "release", "name": "frappe"}, "keys": [{"key": "helm.redis-queue.master.maxmemory", "value": "1mb", "scope": {"release": "frappe"}}]}, "context": cache_alone}
}
