package guardrail.rules.finite_test

import data.guardrail.rules.finite

ids(set) := {f.id | some f in set}

ctx := {"constraints": [{"id": "finite-queue", "kind": "finite", "text": "Keep queue capacity finite.", "targets": ["redis.maxmemory"]}]}

flags(v) := {"action": {"tool": "helm", "verb": "upgrade", "mutating": true, "keys": [{"key": "redis.maxmemory", "value": v, "scope": {"component": "redis-queue"}}]}, "context": ctx}

test_unlimited_maxmemory_denied if "SRE-CAP-005" in ids(finite.deny) with input as flags("0")

test_minus_one_denied if "SRE-CAP-005" in ids(finite.deny) with input as flags(-1)

test_finite_maxmemory_allowed if count(finite.deny) == 0 with input as flags("64mb")

test_unlimited_without_the_constraint_allowed if {
	count(finite.deny) == 0 with input as {"action": {"tool": "redis-cli", "verb": "config set", "mutating": true, "keys": [{"key": "redis.maxmemory", "value": "0"}]}, "context": {}}
}

# The Frappe foothold's helper, as its positional grammar normalises: `reconfigure-infra.sh redis-queue maxmemory V`.
helper(v) := {"action": {"tool": "reconfigure-infra.sh", "verb": "reconfigure", "mutating": true, "layer": "declared", "target": {"kind": "component", "name": "redis-queue"}, "keys": [{"key": "redis.maxmemory", "value": v, "scope": {"component": "redis-queue"}}]}, "context": ctx}

test_the_helper_asked_for_an_unlimited_queue_is_denied if "SRE-CAP-005" in ids(finite.deny) with input as helper("0")

test_the_helpers_bounded_cap_is_allowed if count(finite.deny) == 0 with input as helper("32mb")
