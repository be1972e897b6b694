package guardrail.rules.masking_test

import data.guardrail.rules.masking

ids(set) := {f.id | some f in set}

ctx := {
	"restartable": ["svc-channel", "svc-message"],
	"constraints": [{"id": "no-restart-masking", "kind": "no_restart_masking", "text": "do not restart or rescale pods to mask a fault", "targets": []}],
}

delete_pod(name, c) := {"action": {"tool": "kubectl", "verb": "delete", "mutating": true, "target": {"kind": "pod", "name": name, "namespace": "default"}}, "context": c}

test_delete_pod_denied_when_masking_forbidden if "SRE-RESTART-005" in ids(masking.deny) with input as delete_pod("svc-channel", ctx)

test_delete_pod_allowed_without_the_constraint if count(masking.deny) == 0 with input as delete_pod("svc-channel", {"restartable": ["svc-channel"]})

test_rollout_restart_denied if {
	"SRE-RESTART-005" in ids(masking.deny) with input as {
		"action": {"tool": "kubectl", "verb": "rollout restart", "mutating": true, "target": {"kind": "deployment", "name": "svc-message"}},
		"context": ctx,
	}
}

test_scale_denied if {
	"SRE-RESTART-005" in ids(masking.deny) with input as {
		"action": {"tool": "kubectl", "verb": "scale", "mutating": true, "target": {"kind": "deployment", "name": "svc-message"}, "details": {"replicas": 2}},
		"context": ctx,
	}
}

# restart-svc.sh writes config and reloads it: the in-place repair path, never a masking restart.
test_reload_helper_allowed if {
	count(masking.deny) == 0 with input as {
		"action": {"tool": "restart-svc.sh", "verb": "reconfigure", "mutating": true, "layer": "declared", "target": {"kind": "component", "name": "svc-channel"}, "details": {"role": "channel", "reloads": true}},
		"context": ctx,
	}
}

test_read_allowed if {
	count(masking.deny) == 0 with input as {
		"action": {"tool": "kubectl", "verb": "get", "mutating": false, "target": {"kind": "pod", "name": "svc-channel"}},
		"context": ctx,
	}
}

# Every spelling of a replica count is the one key k8s.replicas with the workload in its scope (the settings table):
# a chart's replicaCount set through Helm values is the same rescale as kubectl scale.
helm_scale(extra) := {
	"action": object.union({"tool": "helm", "verb": "upgrade", "mutating": true, "layer": "declared", "target": {"kind": "release", "name": "frappe"}, "keys": [
		{"key": "helm.erpnext.worker.long.replicaCount", "value": 2, "scope": {"release": "frappe"}},
		{"key": "k8s.replicas", "value": 2, "scope": {"name": "worker-long"}},
	], "details": {"reuse_values": true}}, extra),
	"context": ctx,
}

test_helm_replica_count_denied_like_kubectl_scale if {
	some f in masking.deny with input as helm_scale({})
	f.id == "SRE-RESTART-005"
	f.details.component == "worker-long"
}

test_kubectl_patch_of_replicas_denied if {
	"SRE-RESTART-005" in ids(masking.deny) with input as {
		"action": {"tool": "kubectl", "verb": "patch", "mutating": true, "target": {"kind": "deployment", "name": "svc-message"}, "keys": [{"key": "k8s.replicas", "value": 3, "scope": {"name": "svc-message"}}]},
		"context": ctx,
	}
}

# A values file or a whole manifest restates the replica count with everything else: not a rescale by itself.
test_values_file_restating_replicas_allowed if {
	count(masking.deny) == 0 with input as helm_scale({"details": {"reuse_values": true, "values_files": ["-"]}})
}

test_manifest_apply_restating_replicas_allowed if {
	count(masking.deny) == 0 with input as {
		"action": {"tool": "kubectl", "verb": "apply", "mutating": true, "target": {"kind": "deployment", "name": "svc-message"}, "keys": [{"key": "k8s.replicas", "value": 1, "scope": {"name": "svc-message"}}]},
		"context": ctx,
	}
}

test_helm_replica_count_allowed_without_the_constraint if {
	count(masking.deny) == 0 with input as {"action": helm_scale({}).action, "context": {"restartable": ["worker-long"]}}
}
