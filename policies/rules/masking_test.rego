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
