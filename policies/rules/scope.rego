# Staying in scope: actions outside the incident's namespaces (when the context lists any), cluster-scoped
# changes (nodes, namespaces, CRDs, storage classes), and mutations across all namespaces at once.
package guardrail.rules.scope

import data.guardrail.lib

outside if {
	count(lib.context.namespaces) > 0
	ns := lib.namespace
	not ns in lib.context.namespaces
}

deny contains {
	"id": "SRE-SCOPE-001",
	"msg": sprintf("Namespace %s is outside this incident (%s). Change only what is in the incident's namespaces.", [lib.namespace, concat(", ", sort(lib.namespaces))]),
	"details": {"namespace": lib.namespace, "allowed": sort(lib.namespaces)},
} if {
	input.action.mutating in {true, "unknown"}
	outside
}

warn contains {
	"id": "SRE-SCOPE-002",
	"msg": sprintf("Namespace %s is outside this incident (%s); reading it is allowed, but the cause is likely inside.", [lib.namespace, concat(", ", sort(lib.namespaces))]),
	"details": {"namespace": lib.namespace},
} if {
	input.action.mutating == false
	outside
}

cluster_kinds := {
	"node", "nodes", "no", "namespace", "namespaces", "ns", "customresourcedefinition", "crd", "crds",
	"storageclass", "sc", "persistentvolume", "pv", "priorityclass", "mutatingwebhookconfiguration",
	"validatingwebhookconfiguration", "apiservice",
}

deny contains {
	"id": "SRE-SCOPE-003",
	"msg": sprintf("Changing a %s affects the whole cluster, not just this incident. Stay inside the incident's workloads.", [lib.target_kind]),
	"details": {"kind": lib.target_kind, "name": lib.target_name},
} if {
	input.action.tool == "kubectl"
	lib.mutating
	lib.target_kind in cluster_kinds
}

deny contains {
	"id": "SRE-SCOPE-003",
	"msg": sprintf("kubectl %s moves every pod off a node, restarting workloads across the cluster. Stay inside the incident's workloads.", [lib.verb]),
	"details": {"verb": lib.verb},
} if {
	input.action.tool == "kubectl"
	lib.verb in {"drain", "cordon", "taint"}
}

deny contains {
	"id": "SRE-SCOPE-004",
	"msg": "A change across all namespaces (-A / --all-namespaces / --all) reaches far beyond the incident. Name the one resource and namespace to change.",
	"details": {},
} if {
	input.action.tool == "kubectl"
	lib.mutating
	not lib.verb in {"get", "describe", "logs", "top"}
	some t in lib.texts
	regex.match(`(^|\s)(-A|--all-namespaces|--all)(\s|=|$)`, t)
}
