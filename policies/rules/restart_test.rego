package guardrail.rules.restart_test

import data.guardrail.rules.restart

ids(set) := {f.id | some f in set}

ctx := {"restartable": ["svc-channel", "svc-message"], "not_restartable": ["postgres", "redis"]}

delete_pod(name, c) := {"action": {"tool": "kubectl", "verb": "delete", "mutating": true, "target": {"kind": "pod", "name": name, "namespace": "slack"}}, "context": c}

helper(role, c) := {"action": {"tool": "restart-svc.sh", "verb": "reconfigure", "mutating": true, "layer": "declared", "target": {"kind": "component", "name": role}, "details": {"role": role, "reloads": true}}, "context": c}

# restart-svc.sh writes config and reloads it: not a restart, so neither the restart lists nor the reminder apply.
test_restart_helper_is_a_reload_not_a_restart if {
	count(restart.deny) == 0 with input as helper("channel", ctx)
	count(restart.warn) == 0 with input as helper("channel", ctx)
}

test_restart_helper_other_role_allowed if count(restart.deny) == 0 with input as helper("auth", ctx)

test_restart_helper_not_restartable_allowed if {
	count(restart.deny) == 0 with input as helper("postgres", ctx)
}

test_delete_pod_of_not_restartable_denied if "SRE-RESTART-001" in ids(restart.deny) with input as delete_pod("postgres-0", ctx)

test_delete_pod_of_restartable_allowed if count(restart.deny) == 0 with input as delete_pod("svc-message-0", ctx)

test_rollout_restart_not_listed_denied if {
	"SRE-RESTART-002" in ids(restart.deny) with input as {
		"action": {"tool": "kubectl", "verb": "rollout restart", "mutating": true, "target": {"kind": "deployment", "name": "svc-auth"}},
		"context": ctx,
	}
}

test_no_restart_constraint_denied if {
	c := {"constraints": [{"id": "r", "text": "do not restart workers", "kind": "no_restart", "targets": ["worker-long"]}]}
	"SRE-RESTART-001" in ids(restart.deny) with input as {
		"action": {"tool": "kubectl", "verb": "rollout restart", "mutating": true, "target": {"kind": "deployment", "name": "worker-long"}},
		"context": c,
	}
}

test_restart_without_lists_warns if {
	inp := delete_pod("svc-auth-5d8f-abcde", {})
	"SRE-RESTART-003" in ids(restart.warn) with input as inp
	count(restart.deny) == 0 with input as inp
}

test_redis_shutdown_nosave_denied if {
	"SRE-RESTART-004" in ids(restart.deny) with input as {"action": {"tool": "redis-cli", "verb": "shutdown", "mutating": true, "raw": "redis-cli -h redis-queue SHUTDOWN NOSAVE", "target": {"name": "redis-queue"}}}
}

test_redis_shutdown_of_protected_store_denied if {
	"SRE-RESTART-001" in ids(restart.deny) with input as {"action": {"tool": "redis-cli", "verb": "shutdown", "mutating": true, "target": {"kind": "component", "name": "redis"}}, "context": ctx}
}

test_get_pods_is_no_restart if {
	inp := {"action": {"tool": "kubectl", "verb": "get", "mutating": false, "target": {"kind": "pod"}}, "context": ctx}
	count(restart.deny) == 0 with input as inp
	count(restart.warn) == 0 with input as inp
}

selector_restart(sel, c) := {"action": {"tool": "kubectl", "verb": "delete", "mutating": true, "target": {"kind": "pod", "name": "", "namespace": "slack"}, "details": {"selector": sel, "restart": true}}, "context": c}

test_a_selector_that_reaches_a_not_restartable_component_is_denied if {
	"SRE-RESTART-006" in ids(restart.deny) with input as selector_restart("app=postgres", ctx)
}

test_a_selector_that_names_only_restartable_components_is_allowed if {
	count(restart.deny) == 0 with input as selector_restart("app=svc-channel", ctx)
}

test_a_whole_kind_restarted_where_restarts_are_limited_is_denied if {
	"SRE-RESTART-006" in ids(restart.deny) with input as {
		"action": {"tool": "kubectl", "verb": "rollout restart", "mutating": true, "target": {"kind": "statefulset", "name": ""}, "details": {"restart": true}},
		"context": ctx,
	}
}

test_a_nameless_restart_with_no_limits_in_the_context_only_warns if {
	count(restart.deny) == 0 with input as selector_restart("app=postgres", {})
	"SRE-RESTART-003" in ids(restart.warn) with input as selector_restart("app=postgres", {})
}

test_mysql_shutdown_of_a_not_restartable_store_is_denied if {
	"SRE-RESTART-001" in ids(restart.deny) with input as {
		"action": {"tool": "mysql", "verb": "shutdown", "mutating": true, "target": {"kind": "component", "name": "postgres"}, "details": {"restart": true}},
		"context": ctx,
	}
}

test_redis_debug_segfault_is_a_restart if {
	"SRE-RESTART-001" in ids(restart.deny) with input as {
		"action": {"tool": "redis-cli", "verb": "debug segfault", "mutating": true, "target": {"kind": "component", "name": "redis"}},
		"context": ctx,
	}
}

test_redis_debug_crashes_are_restarts if {
	every verb in ["debug oom", "debug panic", "debug assert"] {
		"SRE-RESTART-001" in {f.id | some f in restart.deny} with input as {
			"action": {"tool": "redis-cli", "verb": verb, "mutating": true, "target": {"kind": "component", "name": "redis"}},
			"context": {"not_restartable": ["redis"]},
		}
	}
}

shutdown(host) := {"action": {"tool": "curl", "verb": "POST", "mutating": true, "target": {"kind": "component", "name": host}, "details": {"method": "POST", "path": "/admin/shutdown", "api": "shutdown", "restart": true}}, "context": ctx}

test_a_shutdown_endpoint_is_a_restart if {
	"SRE-RESTART-001" in ids(restart.deny) with input as shutdown("postgres")
	count(restart.deny) == 0 with input as shutdown("svc-channel")
	"SRE-RESTART-003" in ids(restart.warn) with input as shutdown("svc-channel")
}

debug_cmd(verb, command) := {
	"action": {"tool": "redis-cli", "verb": verb, "mutating": true, "target": {"kind": "component", "name": "redis"}, "details": {"command": command}},
	"context": {"not_restartable": ["redis"]},
}

test_a_long_debug_sleep_or_a_reload_is_a_restart if {
	"SRE-RESTART-001" in ids(restart.deny) with input as debug_cmd("debug sleep", "DEBUG SLEEP 3600")
	"SRE-RESTART-001" in ids(restart.deny) with input as debug_cmd("debug sleep", "DEBUG SLEEP $n")
	"SRE-RESTART-001" in ids(restart.deny) with input as debug_cmd("debug reload", "DEBUG RELOAD")
	not "SRE-RESTART-001" in ids(restart.deny) with input as debug_cmd("debug sleep", "DEBUG SLEEP 0.5")
	not "SRE-RESTART-001" in ids(restart.deny) with input as debug_cmd("debug object", "DEBUG OBJECT k")
}

docker_kill(name, details) := {"action": {"tool": "docker", "verb": "kill", "mutating": true, "target": {"kind": "container", "name": name}, "details": details}, "context": ctx}

# `docker kill -s HUP redis`: the process reloads and keeps running (the classifier says restart: false).
test_docker_kill_hup_not_a_restart if {
	count(restart.deny) == 0 with input as docker_kill("redis", {"signal": "-HUP", "restart": false})
	count(restart.warn) == 0 with input as docker_kill("redis", {"signal": "-HUP", "restart": false})
}

test_docker_kill_denied if {
	"SRE-RESTART-001" in ids(restart.deny) with input as docker_kill("redis", {"signal": "-KILL", "restart": true})
	"SRE-RESTART-001" in ids(restart.deny) with input as docker_kill("redis", {})
}

# The words the program receives, not the text typed: `'NOSAVE'` and `NOS\AVE` are NOSAVE.
test_shutdown_nosave_read_from_the_words_not_the_raw_text if {
	"SRE-RESTART-004" in ids(restart.deny) with input as {"action": {
		"tool": "redis-cli", "verb": "shutdown", "mutating": true, "raw": "redis-cli SHUTDOWN 'NOSAVE'",
		"words": ["redis-cli", "SHUTDOWN", "NOSAVE"], "target": {"kind": "component", "name": "redis"},
	}, "context": ctx}
	not "SRE-RESTART-004" in ids(restart.deny) with input as {"action": {
		"tool": "redis-cli", "verb": "shutdown", "mutating": true, "raw": "redis-cli SHUTDOWN SAVE # NOSAVE",
		"words": ["redis-cli", "SHUTDOWN", "SAVE"], "target": {"kind": "component", "name": "redis"},
	}, "context": ctx}
}
