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

nested(key, value, ctx) := {"action": {
	"tool": "helm", "verb": "upgrade", "mutating": true, "target": {"kind": "release", "name": "frappe"},
	"keys": [{"key": key, "value": value, "scope": {"release": "frappe"}}], "details": {"reuse_values": true},
}, "context": ctx}

topology := {"constraints": [{"id": "t", "kind": "protected", "text": "keep the topology", "targets": ["redis-queue.architecture"]}]}

test_nested_values_path_of_protected_setting_denied if {
	"SRE-HELM-002" in ids(helm.deny) with input as nested("helm.erpnext.redis-queue.architecture", "replication", topology)
}

test_other_values_path_allowed if count(helm.deny) == 0 with input as nested("helm.erpnext.redis-queue.master.persistence", true, topology)

test_similar_suffix_not_on_segment_boundary_allowed if {
	count(helm.deny) == 0 with input as nested("helm.erpnext.myredis-queue.architecture", "replication", topology)
}

flags_for(component, ctx) := {"action": {
	"tool": "helm", "verb": "upgrade", "mutating": true, "target": {"kind": "release", "name": "frappe"},
	"keys": [
		{"key": "helm.erpnext.redis-queue.master.extraFlags", "value": ["--maxmemory 64mb"], "scope": {"release": "frappe"}},
		{"key": "redis.maxmemory", "value": "64mb", "scope": {"component": component}},
	],
	"details": {"reuse_values": true, "server_flags": ["redis.maxmemory"]},
}, "context": ctx}

test_server_flags_of_not_restartable_component_denied if {
	"SRE-HELM-003" in ids(helm.deny) with input as flags_for("redis-queue", {"not_restartable": ["redis-queue"]})
}

test_server_flags_of_restartable_component_allowed if {
	count(helm.deny) == 0 with input as flags_for("redis-queue", {"not_restartable": ["redis-cache"]})
}

test_reset_values_is_denied_with_or_without_new_values if {
	deny := helm.deny with input as upgrade({"chart": "c", "reset_values": true})
	[f.details.reset_values | some f in deny; f.id == "SRE-HELM-001"] == [true]
	"SRE-HELM-001" in ids(helm.deny) with input as {"action": {
		"tool": "helm", "verb": "upgrade", "mutating": true, "target": {"kind": "release", "name": "x"},
		"keys": [], "details": {"chart": "c", "reset_values": true},
	}}
}

test_reset_values_with_the_full_values_file_is_allowed if {
	count(helm.deny) == 0 with input as upgrade({"chart": "c", "reset_values": true, "values_files": ["values.yaml"]})
}

test_reset_values_with_an_empty_values_file_is_still_a_reset if {
	"SRE-HELM-001" in ids(helm.deny) with input as upgrade({"chart": "c", "reset_values": true, "values_files": ["/dev/null"]})
}

helm_keys(keys) := {"action": {"tool": "helm", "verb": "upgrade", "mutating": true, "keys": keys,
	"details": {"reuse_values": true}}, "context": {"components": ["worker-long", "mariadb"]}}

test_disabling_a_component_or_its_persistence_is_denied if {
	every key in ["helm.mariadb.enabled", "helm.erpnext.redis-queue.enabled", "helm.mariadb.primary.persistence.enabled",
		"helm.postgresql.enabled"] {
		"SRE-HELM-004" in ids(helm.deny) with input as helm_keys([{"key": key, "value": false}])
	}
}

test_a_component_disabled_with_0_or_replaced_by_a_list_is_denied if {
	"SRE-HELM-004" in ids(helm.deny) with input as helm_keys([{"key": "helm.mariadb.enabled", "value": 0}])
	"SRE-HELM-004" in ids(helm.deny) with input as helm_keys([{"key": "helm.mariadb.primary.persistence.enabled", "value": 0}])
	"SRE-HELM-004" in ids(helm.deny) with input as helm_keys([{"key": "helm.mariadb", "value": ["enabled:false"]}])
	"SRE-HELM-004" in ids(helm.deny) with input as helm_keys([{"key": "helm.erpnext.redis-queue", "value": "off"}])
	# a setting under the component, a map for it, or null (Helm drops the key: the chart's default applies)
	not "SRE-HELM-004" in ids(helm.deny) with input as helm_keys([{"key": "helm.mariadb.auth.database", "value": "x"}])
	not "SRE-HELM-004" in ids(helm.deny) with input as helm_keys([{"key": "helm.mariadb", "value": {"enabled": true}}])
	not "SRE-HELM-004" in ids(helm.deny) with input as helm_keys([{"key": "helm.mariadb", "value": null}])
	not "SRE-HELM-004" in ids(helm.deny) with input as helm_keys([{"key": "helm.worker.replicas", "value": 0}])
}

test_disabling_a_feature_is_not_removing_a_component if {
	every key in ["helm.worker.autoscaling.enabled", "helm.metrics.enabled", "helm.ingress.enabled"] {
		not "SRE-HELM-004" in ids(helm.deny) with input as helm_keys([{"key": key, "value": false}])
	}
	not "SRE-HELM-004" in ids(helm.deny) with input as helm_keys([{"key": "helm.mariadb.enabled", "value": true}])
}
