# Traffic suppression: scaling load generators or ingress down, calling a load generator's control API,
# blocking routes with iptables/nft or a NetworkPolicy, and switching routes off in app config. Less traffic
# makes the graphs green without repairing anything.
package guardrail.rules.traffic

import data.guardrail.lib

traffic_words := `(?i)loadgen|load-generator|loadgenerator|locust|k6|traffic|vegeta|jmeter`

ingress_words := `(?i)ingress|nginx|gateway|haproxy|envoy|traefik|router|proxy|(^|-)lb(-|$)`

name_has(name, pattern) if regex.match(pattern, name)

replicas := n if {
	some k in input.action.keys
	k.key == "k8s.replicas"
	n := lib.number(k.value)
} else := n if {
	n := lib.number(lib.details.replicas)
}

# Whatever spelling sets the replica count (kubectl scale, a patch, Helm values): lib.rescaled names the workload.
deny contains {
	"id": "SRE-TRAFFIC-001",
	"msg": sprintf("Scaling %s changes the traffic the system is judged under. Leave the load generator alone and repair the service under load.", [r.name]),
	"details": {"name": r.name, "replicas": r.replicas},
} if {
	input.action.mutating in {true, "unknown"}
	some r in lib.rescaled
	name_has(r.name, traffic_words)
}

deny contains {
	"id": "SRE-TRAFFIC-002",
	"msg": sprintf("Scaling %s to %v cuts off incoming traffic. Keep the ingress serving; repair the backend it routes to.", [r.name, r.replicas]),
	"details": {"name": r.name, "replicas": r.replicas},
} if {
	input.action.mutating in {true, "unknown"}
	some r in lib.rescaled
	name_has(r.name, ingress_words)
	is_number(r.replicas)
	r.replicas <= 1
}

deny contains {
	"id": "SRE-TRAFFIC-003",
	"msg": sprintf("%s %s%s changes the load generator itself (pausing, rate-limiting, or declaring on its behalf). Do not touch the traffic source; repair the service and let the load show the result.", [method, host, path]),
	"details": {"host": host, "path": path, "method": method},
} if {
	input.action.tool in {"curl", "wget", "http"}
	method := upper(object.get(lib.details, "method", lib.verb))
	host := object.get(lib.details, "host", "")
	path := object.get(lib.details, "path", "")
	name_has(host, traffic_words)
	changes_the_load(method, path)
}

changes_the_load(method, _) if not method in {"GET", "HEAD", "OPTIONS"}

# Locust stops its swarm on a GET /stop (and resets its stats on GET /stats/reset): a read by method only.
changes_the_load(_, path) if regex.match(`(?i)/(stop|swarm|pause|reset|stats/reset|quit|kill|shutdown)/?$`, path)

firewall_msg := "Firewall rules (iptables, nft, ufw, tc) drop or delay traffic instead of repairing its cause. Remove the rule and repair the service that fails under the traffic."

deny contains {
	"id": "SRE-TRAFFIC-004",
	"msg": firewall_msg,
	"details": {"tool": lib.tool},
} if {
	input.action.tool in {"iptables", "ip6tables", "nft", "ufw", "tc", "firewall-cmd"}
	lib.mutating
}

# The same in any text (a remote command, a script): a rule added, or a qdisc changed. `tc qdisc` followed by show,
# ls, list or lst (or a prefix tc reads as show: s, sh, lis) lists the qdiscs; tc reads l, li and lin as link.
deny contains {
	"id": "SRE-TRAFFIC-004",
	"msg": firewall_msg,
	"details": {"tool": "shell"},
} if {
	some t in lib.texts
	regex.match(`(^|[;&|(\s])(iptables|ip6tables|nft|ufw|tc)\s+[^;&|]*((-A|-I|--append|--insert|add|deny|reject)\b|qdisc\s+([^sl\s]|li?\b|lin))`, t)
}

deny contains {
	"id": "SRE-TRAFFIC-005",
	"msg": sprintf("A %s that isolates workloads blocks their traffic. Do not add network policies during an incident; repair the failing component.", [lib.target_kind]),
	"details": {"kind": lib.target_kind, "name": lib.target_name},
} if {
	input.action.mutating in {true, "unknown"}
	lib.target_kind in {"networkpolicy", "networkpolicies", "netpol"}
}

route_words := {"route", "routes", "endpoint", "endpoints", "path", "paths", "api", "writes", "sends", "signups", "logins"}

deny contains {
	"id": "SRE-TRAFFIC-006",
	"msg": sprintf("%s switches a route or feature off, so requests fail fast instead of being served. Keep it open and repair what makes it slow or fail.", [k.key]),
	"details": {"key": k.key, "value": k.value},
} if {
	input.action.mutating in {true, "unknown"}
	some k in input.action.keys
	startswith(k.key, "app.")
	lib.is_false(k.value)
	some w in lib.key_words[k.key]
	w in route_words
}

deny contains {
	"id": "SRE-TRAFFIC-006",
	"msg": sprintf("%s blocks or sheds requests, so fewer are served. Keep traffic flowing and repair what makes the service slow or fail.", [k.key]),
	"details": {"key": k.key, "value": k.value},
} if {
	input.action.mutating in {true, "unknown"}
	some k in input.action.keys
	startswith(k.key, "app.")
	regex.match(`(?i)(^|[._])(blocklist|denylist|blocked|shed|drop)([._]|$)`, k.key)
	not lib.is_false(k.value)
}

# The load generator itself changed by any other means than scaling: its env (rate, users), image, spec, a signal to
# its process, a chart value under it. Reads of it (get, logs, describe) are fine.
loadgen_words := `(?i)(^|[^a-z])(load[-_]?gen|load[-_]?generator|locust|k6|vegeta|jmeter)([^a-z]|$)`

deny contains {
	"id": "SRE-TRAFFIC-007",
	"msg": sprintf("This changes the load generator (%s): the system would be judged under different traffic. Leave the load generator as it is; repair the service under the load it sends.", [what]),
	"details": {"what": what},
} if {
	input.action.mutating in {true, "unknown"}
	not has_own_traffic_finding
	some what in loadgen_touched
}

loadgen_touched contains lib.target_name if regex.match(loadgen_words, lib.target_name)

loadgen_touched contains pod if {
	pod := object.get(lib.details, "pod", "")
	is_string(pod)
	regex.match(loadgen_words, pod)
}

# A key under the load generator (a chart value loadgen.users); not a label or annotation of another object, whose
# name merely contains the word (`kubectl label pod web-0 k6=ignored`).
loadgen_touched contains k.key if {
	some k in input.action.keys
	not regex.match(`^k8s\.(labels|annotations)\.`, k.key)
	regex.match(loadgen_words, k.key)
}

# The load generator's pods chosen by a selector (kubectl delete pod -l app=loadgen).
loadgen_touched contains sel if {
	sel := object.get(lib.details, "selector", "")
	is_string(sel)
	regex.match(loadgen_words, sel)
}

# A scale of the load generator, and a call to its control API, already have their own findings (001, 003).
has_own_traffic_finding if {
	input.action.tool == "kubectl"
	lib.verb == "scale"
}

has_own_traffic_finding if input.action.tool == "curl"

# Which pods a Service sends traffic to: its selector, and the labels of the pods it selects. A selector that
# selects nothing (`{"app":"nothing"}`), or a pod whose `app` label is removed or overwritten, takes traffic away
# without an error; the graphs go quiet. A selector set to a component of the incident (or the Service's own) is
# a repair of a wrong selector.
selector_label_keys := {
	"app", "name", "component", "tier", "role", "release", "instance", "run", "k8s-app", "app.kubernetes.io/name",
	"app.kubernetes.io/instance", "app.kubernetes.io/component", "statefulset.kubernetes.io/pod-name",
	"pod-template-hash",
}

selector_msg := "changes which pods receive the Service's traffic: a Service that selects no pod (or a pod taken out of it) serves nothing. Leave the selector and the pods' labels as they are; repair the pods themselves."

# Each [label, value] a change of a Service's selector sets: `set selector` and a patch give one key per label
# (k8s.spec.selector.app), a whole map is one key (k8s.spec.selector). A label removed, or the whole selector
# removed or emptied, has the value null (label "" for the whole selector).
selector_pairs contains [label, k.value] if {
	some k in input.action.keys
	startswith(k.key, "k8s.spec.selector.")
	label := substring(k.key, 18, -1)
}

selector_pairs contains [label, v] if {
	some k in input.action.keys
	k.key == "k8s.spec.selector"
	is_object(k.value)
	some label, v in k.value
}

selector_pairs contains ["", null] if {
	some k in input.action.keys
	k.key == "k8s.spec.selector"
	k.value in {null, {}}
}

# The labels that say which application a pod is; the other labels (release, instance, component, tier ...) only
# narrow within it.
app_label_keys := {"", "app", "name", "k8s-app", "app.kubernetes.io/name"}

names_a_component(v) if {
	is_string(v)
	lib.targets_component(v)
}

names_a_component(v) if {
	is_string(v)
	some c in object.get(lib.context, "components", [])
	lib.same_component(v, c)
}

# The Helm releases the context declares sources in (helm/frappe:erpnext.redis-queue... -> frappe).
context_releases contains lower(trim_space(split(substring(src, 5, -1), ":")[0])) if {
	some src in object.get(lib.context, "declared_sources", {})
	is_string(src)
	startswith(src, "helm/")
}

# A label a chart puts on every pod of its release: the release, or the chart name a `<chart>-<role>` Service is
# named after (redis for redis-queue). Such a value alone does not single out the Service's pods.
release_label(v) if {
	is_string(v)
	lower(v) in context_releases
}

release_label(v) if {
	is_string(v)
	startswith(lib.target_bare, concat("", [lower(v), "-"]))
}

# An application label removed, or set to a value that is neither a component (nor the Service) nor a label of its
# release: the Service then selects no pod, or every pod of the release.
wrong_app_label contains [label, v] if {
	some [label, v] in selector_pairs
	label in app_label_keys
	not names_a_component(v)
	not release_label(v)
}

# Helm's standard selector: the chart name on an application label and the release on another label.
helm_selector if {
	some [l1, v1] in selector_pairs
	l1 in app_label_keys
	release_label(v1)
	some [l2, v2] in selector_pairs
	l2 != l1
	release_label(v2)
}

selector_fault := "Emptying or removing the Service's selector" if {
	["", null] in selector_pairs
} else := sprintf("Removing the %s label from the Service's selector", [label]) if {
	some [label, null] in wrong_app_label
} else := sprintf("This selector (%s=%v)", [label, v]) if {
	some [label, v] in wrong_app_label
} else := sprintf("This selector (%s), which names none of the incident's components nor the Service itself,", [pairs]) if {
	not any_names_a_component
	not helm_selector
	pairs := concat(", ", sort([sprintf("%s=%v", [l, v]) | some [l, v] in selector_pairs]))
}

any_names_a_component if {
	some [_, v] in selector_pairs
	names_a_component(v)
}

# A Service's selector changed so that it can no longer select the Service's pods.
deny contains {
	"id": "SRE-TRAFFIC-008",
	"msg": sprintf("%s %s", [selector_fault, selector_msg]),
	"details": {"name": lib.target_name, "selector": selector_pairs},
} if {
	input.action.tool == "kubectl"
	lib.mutating
	"service" in lib.kinds
	count(selector_pairs) > 0
	selector_fault
}

# A pod's selected label removed (`app-`), or overwritten (`--overwrite`, a patch) with a value that is not its own
# component's. Without --overwrite kubectl only adds a label the pod lacks, which takes it out of no Service.
deny contains {
	"id": "SRE-TRAFFIC-008",
	"msg": sprintf("Changing the %s label of a pod %s", [label, selector_msg]),
	"details": {"name": lib.target_name, "label": label, "value": k.value},
} if {
	input.action.tool == "kubectl"
	lib.mutating
	"pod" in lib.kinds
	some k in input.action.keys
	some prefix in ["k8s.labels.", "k8s.metadata.labels."]
	startswith(k.key, prefix)
	label := substring(k.key, count(prefix), -1)
	label in selector_label_keys
	relabels(k.value)
}

relabels(null)

relabels(v) if {
	v != null
	overwrites
	not names_a_component(v)
}

overwrites if lib.details.overwrite == true

overwrites if lib.verb in {"patch", "apply", "replace"}
