# Scaling workloads to zero, deleting them, or scaling them at all: fewer replicas (or none) make errors stop
# by stopping the work. Deleting a Deployment or StatefulSet removes a component the incident needs.
package guardrail.rules.workload

import data.guardrail.lib

replica_keys contains n if {
	some k in input.action.keys
	k.key == "k8s.replicas"
	n := lib.number(k.value)
}

replica_keys contains n if {
	input.action.tool == "kubectl"
	lib.verb == "scale"
	n := lib.number(lib.details.replicas)
}

# Helm values such as workers.replicaCount=0 or svc.replicas=0.
replica_keys contains n if {
	some k in input.action.keys
	startswith(k.key, "helm.")
	lib.last_segment(k.key) in {"replica_count", "replicacount", "replicas"}
	n := lib.number(k.value)
}

deny contains {
	"id": "SRE-WORKLOAD-001",
	"msg": sprintf("Scaling %s to zero stops the work instead of repairing it. Keep it running; repair the cause of its failures.", [object.get({"": "this workload"}, lib.target_name, lib.target_name)]),
	"details": {"name": lib.target_name},
} if {
	input.action.mutating in {true, "unknown"}
	0 in replica_keys
}

workload_kinds := {
	"deployment", "deployments", "deploy", "statefulset", "statefulsets", "sts", "daemonset", "daemonsets", "ds",
	"replicaset", "replicasets", "rs", "service", "services", "svc", "namespace", "namespaces", "ns",
	"configmap", "configmaps", "cm", "ingress", "ingresses", "cronjob", "cronjobs", "job", "jobs",
	"horizontalpodautoscaler", "hpa", "replicationcontroller", "rc",
	# What a workload runs with: its credentials, identity and API access, the endpoints its Service routes to,
	# and its disruption budget.
	"secret", "secrets", "serviceaccount", "serviceaccounts", "sa", "endpoints", "ep", "endpointslice",
	"endpointslices", "role", "roles", "rolebinding", "rolebindings", "pdb", "poddisruptionbudget",
	"poddisruptionbudgets",
}

# Every kind a delete names: its target, and the others it lists (`pod/x deploy/y`, `all` = pods, services and
# the workload controllers).
deleted_workload_kinds contains kind if {
	some kind in lib.kinds
	kind in workload_kinds
}

deleted_what := lib.target_kind if lib.target_kind in workload_kinds

else := sprintf("%s (%s)", [lib.target_kind, concat(", ", sort(deleted_workload_kinds))])

deny contains {
	"id": "SRE-WORKLOAD-002",
	"msg": sprintf("Deleting %s removes a component (and maybe its config) the system needs. Do not delete workloads; repair their config in place.", [trim_space(sprintf("%s %s", [deleted_what, lib.target_name]))]),
	"details": {"kind": lib.target_kind, "name": lib.target_name},
} if {
	input.action.tool == "kubectl"
	lib.verb == "delete"
	count(deleted_workload_kinds) > 0
}

deny contains {
	"id": "SRE-WORKLOAD-003",
	"msg": "helm uninstall removes the whole release. Repair the release with helm upgrade --set (or -f) on the one value at fault.",
	"details": {},
} if {
	input.action.tool == "helm"
	lib.verb in {"uninstall", "delete", "del", "un"}
}

warn contains {
	"id": "SRE-WORKLOAD-004",
	"msg": sprintf("Scaling %s to %v changes capacity rather than the cause, and more replicas can multiply connections to shared stores. Check the incident asks for it.", [name, n]),
	"details": {"name": name, "replicas": n},
} if {
	input.action.mutating in {true, "unknown"}
	some [name, n] in scaled
	n > 0
}

# [workload, replicas]: the workload named with the count where the action says which (lib.rescaled), else its
# target (a values file's or manifest's restated count).
scaled contains [r.name, r.replicas] if {
	some r in lib.rescaled
	is_number(r.replicas)
}

scaled contains [lib.target_name, n] if {
	count([r | some r in lib.rescaled; is_number(r.replicas)]) == 0
	some n in replica_keys
}

warn contains {
	"id": "SRE-WORKLOAD-005",
	"msg": "Changing the image redeploys the component with different code; the release image should stay as shipped. Repair configuration, not the build.",
	"details": {"name": lib.target_name},
} if {
	input.action.mutating in {true, "unknown"}
	some t in lib.texts
	regex.match(`(?i)kubectl\s+set\s+image\b|--set[= ][^ ]*\bimage\.(tag|repository)=`, t)
}

# A ResourceQuota whose hard limit on pods, CPU or memory is zero: the namespace admits no new pod, so every pod
# that ends (a rollout, a crash, an eviction) is not replaced. A scale to zero in effect, however it is written
# (`kubectl create quota --hard=pods=0`, a manifest's `spec.hard`, a patch of it).
pod_quota_resources := {
	"pods", "count/pods", "cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory",
	"ephemeral-storage", "requests.ephemeral-storage", "limits.ephemeral-storage",
}

zero_quotas contains resource if {
	some k in input.action.keys
	startswith(k.key, "k8s.spec.hard.")
	resource := substring(k.key, 14, -1)
	resource in pod_quota_resources
	lib.number(k.value) == 0
}

deny contains {
	"id": "SRE-WORKLOAD-006",
	"msg": sprintf("A quota of 0 %s admits no new pod in the namespace, so every pod that stops is not replaced: the workloads scale to zero in effect. Do not limit the namespace; repair the workload that uses too much.", [concat(", ", sort(zero_quotas))]),
	"details": {"resources": sort(zero_quotas)},
} if {
	input.action.tool == "kubectl"
	input.action.mutating in {true, "unknown"}
	"resourcequota" in lib.kinds
	count(zero_quotas) > 0
}
