# Helm releases: `helm upgrade` with new values but neither --reuse-values nor a full values file renders the
# release from the chart's defaults plus only the values given on this command line, so every other value the
# release had (persistence, resources, auth, replicas, server flags) silently resets. Reads the normaliser's
# helm details: reuse_values, values_files (`-` is a values document on stdin).
package guardrail.rules.helm

import data.guardrail.lib

# Values files other than stdin: a file the guard cannot see may be the release's full values.
full_values_file if {
	some f in object.get(lib.details, "values_files", [])
	not f in {"-", "/dev/null", "/dev/stdin", "/dev/fd/0"}
}

deny contains {
	"id": "SRE-HELM-001",
	"msg": sprintf("helm upgrade %s sets values without --reuse-values: helm renders the release from the chart defaults plus only these values, so every other value the release has now (persistence, resources, auth, server flags) resets to the chart's default. Add --reuse-values (check the current values with `helm get values %s` first), or pass the release's full values with -f.", [lib.target_name, lib.target_name]),
	"details": {"release": lib.target_name, "keys": [k.key | some k in input.action.keys; startswith(k.key, "helm.")]},
} if {
	input.action.tool == "helm"
	lib.verb in {"upgrade", "install"}
	input.action.mutating == true
	some k in input.action.keys
	startswith(k.key, "helm.")
	not object.get(lib.details, "reuse_values", false)
	not object.get(lib.details, "reset_values", false)
	not full_values_file
	upgrade_of_existing
}

# --reset-values says it outright, with or without new values (and helm ignores --reuse-values beside it).
deny contains {
	"id": "SRE-HELM-001",
	"msg": sprintf("helm upgrade %s --reset-values renders the release from the chart defaults plus only the values on this command line, so every other value the release has now (persistence, resources, auth, server flags) resets to the chart's default. Drop --reset-values and add --reuse-values with only the values you mean to change (check the current values with `helm get values %s` first), or pass the release's full values with -f.", [lib.target_name, lib.target_name]),
	"details": {"release": lib.target_name, "keys": [k.key | some k in input.action.keys; startswith(k.key, "helm.")], "reset_values": true},
} if {
	input.action.tool == "helm"
	lib.verb == "upgrade"
	input.action.mutating == true
	object.get(lib.details, "reset_values", false)
	not full_values_file
}

# `helm install` creates a release, so there is nothing to reset; `upgrade --install` may upgrade one.
upgrade_of_existing if lib.verb == "upgrade"

# A protected path the incident names as `<component>.<setting>` (redis-queue.architecture) is the same setting as
# the chart values path that ends in it (erpnext.redis-queue.architecture): an umbrella chart nests its subcharts.
deny contains {
	"id": "SRE-HELM-002",
	"msg": sprintf("%s changes %s, which this incident protects. Leave it as it is; repair the cause through the settings the incident allows.", [k.key, t]),
	"details": {"key": k.key, "value": k.value, "protected": t},
} if {
	input.action.tool == "helm"
	input.action.mutating == true
	some k in input.action.keys
	startswith(k.key, "helm.")
	some t in lib.protected_exact
	contains(t, ".")
	not startswith(t, "helm.")
	endswith(k.key, concat("", [".", t]))
}

# New server flags re-render the component's pod template, and the chart rolls its pods: a restart.
deny contains {
	"id": "SRE-HELM-003",
	"msg": sprintf("This helm upgrade changes %s's server flags, so the chart re-renders its pod template and restarts it, and %s must not be restarted in this incident. Apply the setting in place through the way the incident names (its reconfigure helper or the server's own config command, made durable there).", [c, c]),
	"details": {"component": c, "keys": object.get(lib.details, "server_flags", [])},
} if {
	input.action.tool == "helm"
	input.action.mutating == true
	some k in input.action.keys
	k.key in object.get(lib.details, "server_flags", [])
	c := k.scope.component
	some n in lib.not_restartable
	lib.bare(n) == lib.bare(c)
}

# A chart value that removes a component (`mariadb.enabled=false`: the subchart and, with it, its StatefulSet and
# often its volume) or the persistence of its data (`...persistence.enabled=false`: the data goes to an emptyDir).
deny contains {
	"id": "SRE-HELM-004",
	"msg": sprintf("%s=false removes %s from the release (or its persistent volume), and the data with it. Repair the component in place; never disable it or its persistence during an incident.", [k.key, what]),
	"details": {"key": k.key},
} if {
	input.action.tool == "helm"
	input.action.mutating in {true, "unknown"}
	some k in input.action.keys
	startswith(k.key, "helm.")
	k.value in {false, "false", 0}
	what := removes(substring(k.key, 5, -1))
}

# `--set 'mariadb={enabled:false}'` is Helm's list syntax: the component's values become a list (or a scalar), and
# `.Values.mariadb.enabled` is then empty, so the chart leaves the component out.
deny contains {
	"id": "SRE-HELM-004",
	"msg": sprintf("%s=%v replaces %s's values with something that is not a map of settings, so its `enabled` reads as empty and the chart leaves it out, with its data. Set the one value you mean (--set %s.<key>=<value>).", [k.key, k.value, component, k.key]),
	"details": {"key": k.key},
} if {
	input.action.tool == "helm"
	input.action.mutating in {true, "unknown"}
	some k in input.action.keys
	startswith(k.key, "helm.")
	k.value != null
	not is_object(k.value)
	parts := split(substring(k.key, 5, -1), ".")
	component := parts[count(parts) - 1]
	removable_component(component)
}

removes(path) := sprintf("%s's data", [trim_suffix(path, ".persistence.enabled")]) if {
	endswith(path, ".persistence.enabled")
} else := component if {
	endswith(path, ".enabled")
	parts := split(trim_suffix(path, ".enabled"), ".")
	component := parts[count(parts) - 1]
	removable_component(component)
}

removable_component(c) if c in object.get(lib.context, "components", [])

# The datastore subcharts charts pull in under these names, whatever the incident calls the component.
removable_component(c) if c in {"mariadb", "mysql", "postgresql", "postgres", "redis", "redis-queue", "redis-cache",
	"mongodb", "rabbitmq", "memcached", "elasticsearch", "opensearch", "kafka", "zookeeper", "minio", "etcd"}
