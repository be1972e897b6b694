package guardrail.rules.workload_test

import data.guardrail.rules.workload

ids(set) := {f.id | some f in set}

scale(name, n) := {"action": {
	"tool": "kubectl", "verb": "scale", "mutating": true,
	"target": {"kind": "deployment", "name": name},
	"keys": [{"key": "k8s.replicas", "value": n}], "details": {"replicas": n},
}}

test_scale_to_zero_denied if "SRE-WORKLOAD-001" in ids(workload.deny) with input as scale("worker-long", 0)

test_scale_up_warns_only if {
	count(workload.deny) == 0 with input as scale("worker-long", 3)
	"SRE-WORKLOAD-004" in ids(workload.warn) with input as scale("worker-long", 3)
}

test_helm_replica_count_zero_denied if {
	"SRE-WORKLOAD-001" in ids(workload.deny) with input as {"action": {"tool": "helm", "verb": "upgrade", "mutating": true, "keys": [{"key": "helm.worker.replicaCount", "value": "0"}]}}
}

test_delete_deployment_denied if {
	"SRE-WORKLOAD-002" in ids(workload.deny) with input as {"action": {"tool": "kubectl", "verb": "delete", "mutating": true, "target": {"kind": "deployment", "name": "svc-search"}}}
}

test_delete_statefulset_short_kind_denied if {
	"SRE-WORKLOAD-002" in ids(workload.deny) with input as {"action": {"tool": "kubectl", "verb": "delete", "mutating": true, "target": {"kind": "sts", "name": "mariadb"}}}
}

test_delete_pod_is_not_workload_delete if {
	count(workload.deny) == 0 with input as {"action": {"tool": "kubectl", "verb": "delete", "mutating": true, "target": {"kind": "pod", "name": "svc-search-0"}}}
}

test_helm_uninstall_denied if {
	"SRE-WORKLOAD-003" in ids(workload.deny) with input as {"action": {"tool": "helm", "verb": "uninstall", "mutating": true}}
}

test_helm_upgrade_value_allowed if {
	count(workload.deny) == 0 with input as {"action": {"tool": "helm", "verb": "upgrade", "mutating": true, "keys": [{"key": "helm.maintenanceController.offsetS", "value": 55}]}}
}

test_set_image_warns if {
	"SRE-WORKLOAD-005" in ids(workload.warn) with input as {"action": {"tool": "kubectl", "verb": "set", "mutating": true, "raw": "kubectl set image deploy/svc-message app=registry/svc:v2"}}
}

delete_of(kind, kinds) := {"action": {
	"tool": "kubectl", "verb": "delete", "mutating": true,
	"target": {"kind": kind, "name": ""}, "details": {"selector": "app=frappe", "resource_kinds": kinds},
}}

# `kubectl delete all -l app=frappe`: the classifier expands `all` into its kinds.
test_delete_all_denied if {
	"SRE-WORKLOAD-002" in ids(workload.deny) with input as delete_of("all", ["deployment", "pod", "service", "statefulset"])
}

# `kubectl delete pod/x deploy/y`: the deployment listed second.
test_delete_second_listed_workload_denied if {
	"SRE-WORKLOAD-002" in ids(workload.deny) with input as delete_of("pod", ["deployment", "pod"])
}

test_delete_credentials_and_identity_denied if {
	"SRE-WORKLOAD-002" in ids(workload.deny) with input as {"action": {"tool": "kubectl", "verb": "delete", "mutating": true, "target": {"kind": "secret", "name": "frappe-db"}}}
	"SRE-WORKLOAD-002" in ids(workload.deny) with input as {"action": {"tool": "kubectl", "verb": "delete", "mutating": true, "target": {"kind": "serviceaccount", "name": "frappe"}}}
	"SRE-WORKLOAD-002" in ids(workload.deny) with input as {"action": {"tool": "kubectl", "verb": "delete", "mutating": true, "target": {"kind": "endpoints", "name": "frappe"}}}
}

test_get_all_allowed if {
	count(workload.deny) == 0 with input as {"action": {"tool": "kubectl", "verb": "get", "mutating": false, "target": {"kind": "all"}, "details": {"resource_kinds": ["deployment", "pod"]}}}
}

quota(keys, mutating) := {"action": {
	"tool": "kubectl", "verb": "create", "mutating": mutating,
	"target": {"kind": "resourcequota", "name": "q", "namespace": "default"}, "keys": keys,
	"details": {"resource_kinds": ["resourcequota"]},
}}

test_zero_quota_denied if {
	"SRE-WORKLOAD-006" in ids(workload.deny) with input as quota([{"key": "k8s.spec.hard.pods", "value": 0}], true)
	"SRE-WORKLOAD-006" in ids(workload.deny) with input as quota([{"key": "k8s.spec.hard.requests.cpu", "value": "0m"}], true)
	"SRE-WORKLOAD-006" in ids(workload.deny) with input as quota([{"key": "k8s.spec.hard.memory", "value": "0Gi"}], "unknown")
}

test_quota_near_misses_allowed if {
	count(workload.deny) == 0 with input as quota([{"key": "k8s.spec.hard.pods", "value": 100}], true)
	count(workload.deny) == 0 with input as quota([{"key": "k8s.spec.hard.pods", "value": 0}], false)
	count(workload.deny) == 0 with input as quota([{"key": "k8s.spec.hard.count/secrets", "value": 0}], true)
}

# A chart's replicaCount names the workload it scales (its k8s.replicas key's scope), not the release.
test_helm_scale_warning_names_the_workload if {
	some f in workload.warn with input as {"action": {"tool": "helm", "verb": "upgrade", "mutating": true, "target": {"kind": "release", "name": "frappe"}, "keys": [
		{"key": "helm.erpnext.worker.long.replicaCount", "value": 2},
		{"key": "k8s.replicas", "value": 2, "scope": {"name": "worker-long"}},
	]}}
	f.id == "SRE-WORKLOAD-004"
	f.details == {"name": "worker-long", "replicas": 2}
}
