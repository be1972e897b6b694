# Staying in scope: actions outside the incident's namespaces (when the context lists any), cluster-scoped
# changes (nodes, namespaces, CRDs, storage classes), and mutations across all namespaces at once.
package guardrail.rules.scope

import data.guardrail.lib

outside if {
	count(lib.namespaces) > 0
	ns := lib.namespace
	not ns in lib.namespaces
}

deny contains {
	"id": "SRE-SCOPE-001",
	"msg": sprintf("Namespace %s is outside this incident (%s). Change only what is in the incident's namespaces.", [lib.namespace, concat(", ", sort(lib.namespaces))]),
	"details": {"namespace": lib.namespace, "allowed": sort(lib.namespaces)},
} if {
	outside
	lib.mutating
}

warn contains {
	"id": "SRE-SCOPE-002",
	"msg": sprintf("Namespace %s is outside this incident (%s); reading it is allowed, but the cause is likely inside.", [lib.namespace, concat(", ", sort(lib.namespaces))]),
	"details": {"namespace": lib.namespace},
} if {
	outside
	not lib.mutating
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
	lib.mutating
	lib.tool == "kubectl"
	lib.target_kind in cluster_kinds
}

deny contains {
	"id": "SRE-SCOPE-003",
	"msg": sprintf("kubectl %s moves every pod off a node, restarting workloads across the cluster. Stay inside the incident's workloads.", [lib.verb]),
	"details": {"verb": lib.verb},
} if {
	lib.tool == "kubectl"
	lib.verb in {"drain", "cordon", "taint"}
}

deny contains {
	"id": "SRE-SCOPE-004",
	"msg": "A change across all namespaces (-A / --all-namespaces / --all) reaches far beyond the incident. Name the one resource and namespace to change.",
	"details": {},
} if {
	lib.mutating
	lib.tool == "kubectl"
	not lib.verb in {"get", "describe", "logs", "top"}
	some t in lib.texts
	regex.match(`(^|\s)(-A|--all-namespaces|--all)(\s|=|$)`, t)
}
