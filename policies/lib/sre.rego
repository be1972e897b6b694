# Shared vocabulary for every rule package: the action, the context, component and key matching, value parsing.
# Rules import it as `data.guardrail.lib`; it has no deny/warn of its own.
package guardrail.lib

# Direct references with defaults, not object.get chains: OPA evaluates these once per decision, and the
# fewer steps each takes the faster every rule that reads them is.
default action := {}

action := input.action

# The incident's public context. EmbeddedOPA loads each session's context once, as data under
# data.incident_contexts[<digest>], and sends only the digest as input.context_ref: converting a 3 KB context
# into OPA values on every decision cost more than all the rules. Other callers send input.context itself.
# Rules read the context through this rule (or the sets below), never as input.context.
default context := {}

context := c if {
	c := data.incident_contexts[input.context_ref]
} else := input.context

default details := {}

details := input.action.details

default target := {}

target := input.action.target

default target_name := ""

target_name := short_dns[0] if {
	is_string(input.action.target.name)
} else := input.action.target.name if is_string(input.action.target.name)

# `component.namespace`, the short DNS name of a Service (redis-queue.slack): read as that component in that
# namespace when the context names the component or the namespace. Other dotted names (example.com) stay whole.
short_dns := [c, ns] if {
	input.action.target.kind == "component"
	[c, ns] := split(input.action.target.name, ".")
	short_dns_known(c, ns)
}

short_dns_known(_, ns) if ns in context.namespaces

short_dns_known(c, ns) if {
	not ns in host_suffixes
	some k in object.get(context, "components", [])
	same_component(k, c)
}

# Suffixes of host names that are not Kubernetes namespaces (redis-queue.local is an mDNS or /etc/hosts name).
host_suffixes := {"local", "localdomain", "localhost", "internal", "lan", "home", "corp", "svc", "cluster"}

default target_kind := ""

target_kind := lower(input.action.target.kind)

# The resource kinds an action names, from its target and from its details.
kinds contains target_kind

kinds contains lower(input.action.details.kind) if is_string(input.action.details.kind)

# `kubectl delete pod/x deploy/y`, `kubectl delete all`: every kind listed (the classifier expands `all`).
kinds contains lower(k) if {
	some k in object.get(details, "resource_kinds", [])
	is_string(k)
}

default tool := ""

tool := lower(input.action.tool)

default verb := ""

verb := lower(input.action.verb)

# This action's own text (its invocation as typed; one part of it when the invocation splits into several actions,
# see guardrail/actions/invocation.py own_raw), and the whole command as typed.
default raw := ""

raw := input.action.raw

default command := ""

command := input.command

# The texts that rules matching text read: the action's own words as its program receives them (parsed, quotes and
# escapes removed: `'NOSAVE'` and `NOS\AVE` are NOSAVE), joined by single spaces; raw text only for a hand-written
# input that has no words, and the command only when it has no raw either. Never the whole command for every
# action: a command of N statements cost N times its length per rule, and 2,000 statements of one psql -c ran past
# the evaluation deadline.
texts := {concat(" ", input.action.words)} if count(object.get(input.action, "words", [])) > 0

else := {raw} if raw != ""

else := {command}

# Unknown (opaque) counts as mutating; so does a missing field, because an action we cannot read is not safe.
default mutating := true

mutating := false if input.action.mutating == false

default keys := []

keys := input.action.keys

key_names contains k.key if some k in keys

# The workloads whose replica count this action sets, each {name, replicas}. Every spelling comes to the one key
# `k8s.replicas` with the workload in its scope (guardrail/actions/catalogue.yaml `settings:`): kubectl scale, a
# patch of spec.replicas, a chart's `<workload>.replicaCount` in Helm values. A whole object or values file
# restates its replica count with everything else, so only a change that names the count is a rescale.
rescaled contains {"name": name, "replicas": number(k.value)} if {
	some k in keys
	k.key == "k8s.replicas"
	not restates_whole_object
	name := object.get(scope_of(k), "name", target_name)
}

# kubectl scale with no literal count (--replicas=$N) is a rescale of its target all the same.
rescaled contains {"name": target_name, "replicas": null} if {
	tool == "kubectl"
	verb == "scale"
	count([k | some k in keys; k.key == "k8s.replicas"]) == 0
}

restates_whole_object if {
	tool == "kubectl"
	verb in {"apply", "create", "replace"}
}

restates_whole_object if {
	tool == "helm"
	count(object.get(details, "values_files", [])) > 0
}

# What the guard read before deciding a mutating action (verifiers/observe.py), absent without an environment:
# `keys` [{key, scope, before, initial}] (each changed key's value now and when this session first touched it),
# `earlier` [{key, scope, value, seq}] (this session's earlier changes of the same keys), `lists` {list: {member:
# position or null}} (for a push onto a Redis list).
default observed := {}

observed := input.observed

observed_keys := object.get(observed, "keys", [])

observed_earlier := object.get(observed, "earlier", [])

observed_lists := object.get(observed, "lists", {})

# A key change's scope ({} when it has none: a system-wide setting).
scope_of(k) := object.get(k, "scope", {}) if is_object(object.get(k, "scope", {}))

scope_of(k) := {} if object.get(k, "scope", {}) == null

# ---- values -------------------------------------------------------------------------------------------------

false_values := {false, "false", "off", "no", "disabled", "disable", "inactive", "0", 0, "n", "none", ""}

true_values := {true, "true", "on", "yes", "enabled", "enable", "active", "1", 1, "y"}

is_false(v) if v in false_values

is_false(v) if {
	is_string(v)
	lower(trim_space(v)) in false_values
}

is_true(v) if v in true_values

is_true(v) if {
	is_string(v)
	lower(trim_space(v)) in true_values
}

unit_factor := {
	"": 1, "b": 1,
	"k": 1000, "kb": 1024, "ki": 1024, "kib": 1024,
	"m": 1000000, "mb": 1048576, "mi": 1048576, "mib": 1048576,
	"g": 1000000000, "gb": 1073741824, "gi": 1073741824, "gib": 1073741824,
}

# A setting's value as a number: 20, "20", "64mb" (redis units), "128Mi" (Kubernetes units).
number(v) := v if is_number(v)

number(v) := n if {
	is_string(v)
	m := regex.find_all_string_submatch_n(`^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$`, v, 1)
	count(m) == 1
	unit := lower(m[0][2])
	unit_factor[unit]
	n := to_number(m[0][1]) * unit_factor[unit]
}

# ---- names --------------------------------------------------------------------------------------------------

# Components are named with or without the svc- prefix (svc-channel, channel); compare them bare.
bare(name) := trim_prefix(lower(name), "svc-")

same_component(a, b) if bare(a) == bare(b)

target_bare := bare(target_name)

# Does the action's target name this component? A pod is named after its workload.
targets_component(comp) if target_bare == bare(comp)

targets_component(comp) if {
	target_kind == "pod"
	startswith(target_bare, concat("", [bare(comp), "-"]))
}

# A pod is named after its workload: svc-message-0, redis-queue-master-0, svc-channel-7d9f-x2.
names_component(name, comp) if same_component(name, comp)

names_component(name, comp) if {
	target_kind == "pod"
	startswith(bare(name), concat("", [bare(comp), "-"]))
}

# The segments and words of a dotted key: app.middleware.auth_enabled -> {app, middleware, auth, enabled}.
# camelCase splits as snake_case does: authEnabled -> auth_enabled, maxConnections -> max_connections.
segments(key) := split(lower(regex.replace(replace(key, "-", "_"), `([a-z0-9])([A-Z])`, "${1}_${2}")), ".")

last_segment(key) := segs[count(segs) - 1] if segs := segments(key)

words(key) := {w | some s in segments(key); some w in split(s, "_")}

# The words of every key the action changes, once per decision.
key_words[k.key] := words(k.key) if some k in keys

# A pattern from the context matches a key exactly, as a glob over dotted segments, or as a whole prefix.
key_matches(pattern, key) if pattern == key

key_matches(pattern, key) if {
	contains(pattern, "*")
	glob.match(pattern, ["."], key)
}

key_matches(pattern, key) if startswith(key, concat("", [pattern, "."]))

# ---- context ------------------------------------------------------------------------------------------------

constraints := object.get(context, "constraints", [])

# What the context alone determines, derived once per loaded context. EmbeddedOPA evaluates `context_derived`
# when it loads a context (guardrail/policy/embedded.py, DERIVED_QUERY) and stores the result beside it, as
# data.incident_derived[<digest>]: a real incident's context lists dozens of protected keys and constraints, and
# deriving these sets again on every decision cost more than the rules that read them. Without a stored copy
# (OPAServer, `guardrail policy eval`, Rego tests, a context sent inline) each rule below derives its value per
# decision, as `else`. The stored copy has been through JSON, so its sets are sorted arrays: rules only iterate
# over these, test membership with `in`, and count them, which reads the same on both.
context_derived := {
	"constraints_by_kind": constraints_by_kind,
	"ceiling_globs": ceiling_globs,
	"protected_exact": protected_exact,
	"protected_globs": protected_globs,
	"protected_exact_dotted": protected_exact_dotted,
	"all_ceilings": all_ceilings,
	"safeguards_kept_on": safeguards_kept_on,
	"safeguards_unchanged": safeguards_unchanged,
}

stored_derived := data.incident_derived[input.context_ref]

# The constraints of each kind, in context order (kinds that are strings; constraints_of is called with strings).
constraints_by_kind := d if {
	d := stored_derived.constraints_by_kind
} else := {kind: [c | some c in constraints; c.kind == kind] |
	some c0 in constraints
	kind := c0.kind
	is_string(kind)
}

constraints_of(kind) := object.get(constraints_by_kind, kind, [])

# Each constraint kind read once per decision (rules, so OPA evaluates them once and caches them).
keep_enabled := [c | some c in constraints; c.kind == "keep_enabled"]

keep_active := [c | some c in constraints; c.kind == "keep_active"]

not_restartable contains c if some c in context.not_restartable

not_restartable contains t if {
	some c in constraints
	c.kind == "no_restart"
	some t in c.targets
}

# A component the incident says to leave alone is not restarted either.
not_restartable contains c if some c in protected_components

protected_components contains c if some c in object.get(context, "protected_components", [])

restartable contains c if some c in context.restartable

protected_settings contains p if some p in context.protected_settings

protected_settings contains t if {
	some c in constraints
	c.kind == "protected"
	some t in c.targets
}

# Ceilings from `context.ceilings` and from constraints of kind ceiling (targets share one value).
ceilings := object.get(context, "ceilings", {})

ceiling_constraints[t] := c.value if {
	some c in constraints
	c.kind == "ceiling"
	some t in c.targets
	not ceilings[t]
}

# The safeguard library's settings (data.safeguards, verifiers/safeguards.yaml) in the categories the context
# keeps on (only the settings that can be switched off) and leaves unchanged, as {key, off_when, category, text}.
default safeguard_library := {}

safeguard_library := data.safeguards.categories

safeguard_categories(mode) := {c | some c, _ in safeguard_library} if {
	"all" in object.get(object.get(context, "safeguards", {}), mode, [])
} else := {c | some c in object.get(object.get(context, "safeguards", {}), mode, [])}

safeguard_settings(mode, switchable) := [object.union(s, {"category": cat, "text": safeguard_library[cat].text}) |
	some cat in safeguard_categories(mode)
	some s in safeguard_library[cat].settings
	switchable_ok(s, switchable)
]

switchable_ok(_, false)

switchable_ok(s, true) if is_string(object.get(s, "off_when", null))

# Each as {"exact": {key: [setting]}, "globs": [setting]}: an exact key is one lookup, only patterns are matched.
safeguards_kept_on := d if {
	d := stored_derived.safeguards_kept_on
} else := by_key(safeguard_settings("keep_on", true))

safeguards_unchanged := d if {
	d := stored_derived.safeguards_unchanged
} else := by_key(safeguard_settings("unchanged", false))

by_key(settings) := {
	"exact": {k: [s | some s in settings; s.key == k] | some s0 in settings; k := s0.key; not contains(k, "*")},
	"globs": [s | some s in settings; contains(s.key, "*")],
}

# The settings of a by_key index that cover a changed key (exactly, under it, or by a pattern).
safeguards_covering(index, key) := {s | some s in object.get(index.exact, key, [])} | {s |
	some p in key_prefixes(key)
	some s in object.get(index.exact, p, [])
} | {s |
	some s in index.globs
	glob.match(s.key, ["."], key)
}

# Floors from `context.floors` and from constraints of kind floor (targets share one value).
floors := object.get(context, "floors", {})

floor_constraints[t] := c.value if {
	some c in constraints
	c.kind == "floor"
	some t in c.targets
	not floors[t]
}

all_floors := object.union(floors, floor_constraints)

all_ceilings := d if {
	d := stored_derived.all_ceilings
} else := object.union(ceilings, ceiling_constraints)

ceiling_globs := d if {
	d := stored_derived.ceiling_globs
} else := {p | some p, _ in all_ceilings; contains(p, "*")}

protected_exact := d if {
	d := stored_derived.protected_exact
} else := {p | some p in protected_settings; not contains(p, "*")}

protected_globs := d if {
	d := stored_derived.protected_globs
} else := {p | some p in protected_settings; contains(p, "*")}

# Each exact protected key with a dot after it. A key is a protected key or lies under one exactly when the key
# with a dot after it starts with one of these (one builtin call per key, before key_prefixes builds the prefixes).
protected_exact_dotted := d if {
	d := stored_derived.protected_exact_dotted
} else := {concat("", [p, "."]) | some p in protected_exact}

# A key and each dotted prefix of it: app.roles.channel -> {app, app.roles, app.roles.channel}.
key_prefixes(key) := {concat(".", array.slice(parts, 0, n)) |
	parts := split(key, ".")
	some n in numbers.range(1, count(parts))
}

namespaces := {n | some n in context.namespaces}

namespace := ns if {
	ns := target.namespace
	is_string(ns)
	ns != ""
} else := ns if {
	ns := details.namespace
	is_string(ns)
	ns != ""
} else := short_dns[1]

# The accounts the incident names (who may be granted to): context.extra.grantees, db_users or accounts.
named_accounts contains lower(account_user(a)) if {
	some field in ["grantees", "db_users", "accounts"]
	some a in object.get(object.get(context, "extra", {}), field, [])
}

# 'site_db'@'%' -> site_db; "app" -> app.
account_user(a) := u if {
	parts := split(a, "@")
	u := trim(parts[0], "'\"` ")
}

# Does a constraint's target name this thing? Targets are components, keys, event names or component/event.
constraint_names(t, name) if lower(t) == lower(name)

constraint_names(t, key) if key_matches(lower(t), lower(key))

constraint_names(t, key) if lower(t) in segments(key)
