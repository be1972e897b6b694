package guardrail.rules.helm_test

import data.guardrail.rules.helm

ids(set) := {f.id | some f in set}

upgrade(details) := {"action": {
	"tool": "helm", "verb": "upgrade", "mutating": true, "layer": "declared",
	"target": {"kind": "release", "name": "frappe"},
	"keys": [{"key": "helm.erpnext.redis-queue.master.extraFlags", "value": ["--maxmemory 64mb"], "scope": {"release": "frappe"}}],
	"details": details,
}}

test_set_without_reuse_values_denied if "SRE-HELM-001" in ids(helm.deny) with input as upgrade({"chart": "/opt/charts/frappe"})

test_stdin_values_without_reuse_values_denied if {
	"SRE-HELM-001" in ids(helm.deny) with input as upgrade({"chart": "/opt/charts/frappe", "values_files": ["-"]})
}

test_set_with_reuse_values_allowed if count(helm.deny) == 0 with input as upgrade({"chart": "c", "reuse_values": true})

test_full_values_file_allowed if count(helm.deny) == 0 with input as upgrade({"chart": "c", "values_files": ["values.yaml"]})

test_install_allowed if {
	count(helm.deny) == 0 with input as {"action": {
		"tool": "helm", "verb": "install", "mutating": true, "target": {"kind": "release", "name": "x"},
		"keys": [{"key": "helm.a", "value": 1}], "details": {},
	}}
}

test_upgrade_without_values_allowed if {
	count(helm.deny) == 0 with input as {"action": {
		"tool": "helm", "verb": "upgrade", "mutating": true, "target": {"kind": "release", "name": "x"},
		"keys": [], "details": {"chart": "c"},
	}}
}
