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
