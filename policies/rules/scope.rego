# Staying in scope: actions outside the incident's namespaces (when the context lists any), cluster-scoped
# changes (nodes, namespaces, CRDs, storage classes), and mutations across all namespaces at once.
package guardrail.rules.scope

import data.guardrail.lib

outside if {
	allowed := lib.context.namespaces
	count(allowed) > 0
	ns := lib.namespace
	not ns in allowed
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
	not node_verbs[lib.verb]
}

# What each node command does to the workloads of the whole cluster.
node_verbs := {
	"drain": "evicts every pod from a node, restarting workloads across the cluster",
	"cordon": "stops pods being scheduled onto a node, for every workload in the cluster",
	"uncordon": "lets pods be scheduled onto a node again, for every workload in the cluster",
	"taint": "changes which pods may run on a node (NoExecute evicts them), for every workload in the cluster",
}

deny contains {
	"id": "SRE-SCOPE-003",
	"msg": sprintf("kubectl %s %s. Stay inside the incident's workloads.", [lib.verb, node_verbs[lib.verb]]),
	"details": {"verb": lib.verb, "kind": lib.target_kind, "name": lib.target_name},
} if {
	input.action.tool == "kubectl"
	node_verbs[lib.verb]
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

# A setting this session already changed in a narrow scope (a role in a database), now changed in a wider one
# that holds it (the role everywhere, the whole database, the whole server). PostgreSQL applies the narrowest
# scope that sets a key (role in database, then role, then database, then the server), so the wider change
# repairs nothing for the scope already fixed; it reaches every other role and database under it.
wider(new, old) if {
	count(new) < count(old)
	every n, v in new {
		old[n] == v
	}
}

deny contains {
	"id": "SRE-SCOPE-005",
	"msg": sprintf("%s was already changed in this session for %s (step %v). Changing it again for %s reaches every other role and database there, which the incident did not ask for. Keep the change in the scope you found the fault in.", [k.key, scope_text(lib.scope_of(e)), e.seq, scope_text(lib.scope_of(k))]),
	"details": {"key": k.key, "scope": lib.scope_of(k), "earlier_scope": lib.scope_of(e), "earlier_seq": e.seq},
} if {
	input.action.mutating in {true, "unknown"}
	some k in input.action.keys
	some e in lib.observed_earlier
	e.key == k.key
	wider(lib.scope_of(k), lib.scope_of(e))
}

scope_text(s) := "the whole server" if count(s) == 0

scope_text(s) := concat(", ", sort([sprintf("%s %v", [n, v]) | some n, v in s])) if count(s) > 0

# The machine itself: its clock, its name, its network, its kernel log, its journal, its kernel settings, its name
# resolution, its programs (a file written into a bin directory replaces a program every later command names). An
# incident's repair is in the services; changing the host the agent (or a pod) runs on reaches every service on it
# and is not rolled back. The classifiers say what changes in `details.host_change`.
deny contains {
	"id": "SRE-SCOPE-006",
	"msg": sprintf("`%s` changes the host itself (its programs, kernel, name resolution, node and runtime state, network, clock, name or logs), which every service on it shares and no later step restores. Repair the service at fault; run programs where they are installed, and read the host's state (ip addr, date, journalctl, cat /etc/hosts) instead.", [lib.details.host_change]),
	"details": {"change": lib.details.host_change},
} if {
	object.get(lib.details, "host_change", "") != ""
	input.action.mutating == true
}

# ---- components left alone -------------------------------------------------------------------------------------

# A component the incident says to leave alone (`context.protected_components`): every change to it, whatever the
# tool (a setting by CONFIG SET, a helper script or an API, a write to its data, a scale, a restart), is out of
# scope. Reads stay allowed.
deny contains {
	"id": "SRE-SCOPE-007",
	"msg": sprintf("%s is a component this incident says to leave alone; this changes it. Leave it as it is, and repair the cause in the components the incident is about.", [comp]),
	"details": {"component": comp},
} if {
	input.action.mutating in {true, "unknown"}
	some comp in lib.protected_components
	touches(comp)
}

touches(comp) if lib.targets_component(comp)

# A key set on the component by a tool whose target is another (a helper that names it, a chart release).
touches(comp) if {
	some k in input.action.keys
	some f in ["component", "release", "name", "role", "service"]
	v := lib.scope_of(k)[f]
	is_string(v)
	lib.same_component(v, comp)
}

# A chart value under the component's subchart (`helm upgrade frappe --set redis-cache.maxmemory=...`): an umbrella
# chart nests its subcharts by name.
touches(comp) if {
	some k in input.action.keys
	startswith(k.key, "helm.")
	some seg in split(k.key, ".")
	lib.same_component(seg, comp)
}
