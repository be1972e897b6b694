package guardrail.lib_test

import data.guardrail.lib

test_number_plain if lib.number(20) == 20

test_number_string if lib.number("20") == 20

test_number_redis_units if lib.number("64mb") == 67108864

test_number_kubernetes_units if lib.number("128Mi") == 134217728

test_number_rejects_words if not lib.number("noeviction")

test_bare_component_names if {
	lib.same_component("svc-channel", "channel")
	not lib.same_component("svc-channel", "svc-chan")
}

test_pod_names_its_workload if {
	lib.names_component("svc-message-0", "svc-message") with input as {"action": {"target": {"kind": "pod"}}}
	not lib.names_component("svc-message-0", "svc-message") with input as {"action": {"target": {"kind": "deployment"}}}
}

test_key_matches_glob_and_prefix if {
	lib.key_matches("app.roles.*.db.pool_size", "app.roles.channel.db.pool_size")
	lib.key_matches("postgres", "postgres.max_connections")
	not lib.key_matches("app.roles.*.db.pool_size", "app.roles.channel.db.max_overflow")
}

test_false_values if {
	lib.is_false("OFF")
	lib.is_false(false)
	not lib.is_false("64mb")
}

test_mutating_defaults if {
	lib.mutating with input as {"action": {"mutating": "unknown"}}
	lib.mutating with input as {"action": {}}
	not lib.mutating with input as {"action": {"mutating": false}}
}

test_named_accounts_strip_host_and_quotes if {
	lib.named_accounts == {"site_db", "app"} with input as {"context": {"extra": {"grantees": ["'site_db'@'%'"], "db_users": ["app"]}}}
}

host(name) := {
	"action": {"tool": "redis-cli", "verb": "config set", "target": {"kind": "component", "name": name, "namespace": null}},
	"context": {"namespaces": ["slack"], "components": ["redis-queue", "svc-channel"]},
}

test_a_short_dns_name_is_its_component_in_that_namespace if {
	lib.target_name == "redis-queue" with input as host("redis-queue.slack")
	lib.namespace == "slack" with input as host("redis-queue.slack")
	lib.target_name == "redis-queue" with input as host("redis-queue.other")
	lib.namespace == "other" with input as host("redis-queue.other")
	lib.target_name == "cache" with input as host("cache.slack")
}

test_other_dotted_names_stay_whole if {
	lib.target_name == "example.com" with input as host("example.com")
	not lib.namespace with input as host("example.com")
	lib.target_name == "a.b.c" with input as host("a.b.c")
	file := {"action": {"tool": "file", "target": {"kind": "file", "name": "redis.slack"}}, "context": {"namespaces": ["slack"]}}
	lib.target_name == "redis.slack" with input as file
}

test_a_host_suffix_that_is_no_namespace_stays_whole if {
	lib.target_name == "redis-queue.local" with input as host("redis-queue.local")
	not lib.namespace with input as host("redis-queue.local")
}
