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
