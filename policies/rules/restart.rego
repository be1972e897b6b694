# Masking restarts: restarting a component clears in-memory faults (locks, runtime events, leaked sessions)
# and hides them until they recur. Reads `context.not_restartable` (and constraints of kind no_restart) and
# `context.restartable` (when it lists any, every other component is not restartable).
package guardrail.rules.restart

import data.guardrail.lib

# A restart: kubectl delete pod, kubectl rollout restart, docker/systemctl restart, redis SHUTDOWN. Not restart-svc.sh:
# despite its name it writes the role's config (PUT /admin/config) and reloads it (POST /admin/reload); the pod and
# its in-memory state stay.
is_restart if {
	input.action.tool == "kubectl"
	lib.verb == "delete"
	lib.target_kind in {"pod", "pods", "po"}
}

is_restart if {
	input.action.tool == "kubectl"
	lib.verb in {"rollout restart", "rollout"}
	object.get(lib.details, "subcommand", "restart") == "restart"
}

# The action normaliser marks restarts it recognises (delete pod, rollout restart, a signal to PID 1 in a pod).
is_restart if input.action.details.restart == true

# (`docker kill -s HUP`, which the process handles and keeps running, the classifier marks `restart: false`.)
is_restart if {
	input.action.tool in {"systemctl", "service", "docker", "podman"}
	lib.verb in {"restart", "stop", "kill"}
	object.get(lib.details, "restart", true) != false
}

is_restart if {
	input.action.tool == "redis-cli"
	lib.verb == "shutdown"
}

# DEBUG SEGFAULT / RESTART / CRASH-AND-RECOVER / OOM / PANIC / ASSERT crash or restart the server; its pod restarts
# it.
is_restart if {
	input.action.tool == "redis-cli"
	lib.verb in {"debug segfault", "debug restart", "debug crash-and-recover", "debug oom", "debug panic", "debug assert"}
}

# DEBUG SLEEP N blocks every client for N seconds: past a few seconds the liveness probe fails and the kubelet
# restarts the pod. DEBUG RELOAD drops the dataset and reloads it from the dump file: a restart of the data.
is_restart if {
	input.action.tool == "redis-cli"
	lib.verb == "debug sleep"
	parts := split(trim_space(object.get(lib.details, "command", "")), " ")
	count(parts) >= 3
	not short_sleep(parts[2])
}

short_sleep(n) if {
	regex.match(`^[0-9]*\.?[0-9]+$`, n)
	to_number(n) < 5
}

is_restart if {
	input.action.tool == "redis-cli"
	lib.verb == "debug reload"
}

component := lib.target_name

deny contains {
	"id": "SRE-RESTART-001",
	"msg": sprintf("%s must not be restarted in this incident: a restart would clear the fault from memory and hide it. Repair it in place (its admin API, config, or database), then let the verifier's restart check the repair.", [component]),
	"details": {"component": component, "listed": c},
} if {
	is_restart
	some c in lib.not_restartable
	lib.targets_component(c)
}

deny contains {
	"id": "SRE-RESTART-002",
	"msg": sprintf("%s is not among the components an operator may restart here (%s). Repair it in place instead of restarting it.", [component, concat(", ", sort(lib.restartable))]),
	"details": {"component": component, "restartable": sort(lib.restartable)},
} if {
	is_restart
	count(lib.restartable) > 0
	component != ""
	not restartable
	not listed_not_restartable
}

restartable if {
	some c in lib.restartable
	lib.targets_component(c)
}

listed_not_restartable if {
	some c in lib.not_restartable
	lib.targets_component(c)
}

# Every restart the rules above let through still gets a reminder of what a restart hides.
warn contains {
	"id": "SRE-RESTART-003",
	"msg": sprintf("Restarting %s clears in-memory state and can hide the fault until it recurs. Make sure the repair is in the declared config first, then restart to apply it.", [object.get({"": "this component"}, component, component)]),
	"details": {"component": component},
} if {
	is_restart
	not listed_not_restartable
	not outside_restartable
}

outside_restartable if {
	count(lib.restartable) > 0
	component != ""
	not restartable
}

# A restart that names no component (a label selector, or a whole kind: `kubectl rollout restart statefulset`,
# `kubectl delete pods -l app=db`) where the context limits restarts: unless its selector names only components an
# operator may restart, it may reach one that must not be.
deny contains {
	"id": "SRE-RESTART-006",
	"msg": sprintf("This restart names no component (%s), so it reaches every %s it selects, and this incident limits what may be restarted. Name the one workload you may restart instead.", [object.get(lib.details, "selector", "no selector"), lib.target_kind]),
	"details": {"selector": object.get(lib.details, "selector", ""), "kind": lib.target_kind},
} if {
	is_restart
	component == ""
	count(lib.not_restartable) + count(lib.restartable) > 0
	not selects_only_restartable
}

selects_only_restartable if {
	sel := lower(object.get(lib.details, "selector", ""))
	sel != ""
	some c in lib.restartable
	contains(sel, lower(c))
	not selects_not_restartable(sel)
}

selects_not_restartable(sel) if {
	some c in lib.not_restartable
	contains(sel, lower(c))
}

deny contains {
	"id": "SRE-RESTART-004",
	"msg": "redis SHUTDOWN NOSAVE stops the server and throws away unsaved data. Do not shut the store down; repair its configuration with CONFIG SET and make it durable.",
	"details": {},
} if {
	input.action.tool == "redis-cli"
	lib.verb == "shutdown"
	some t in lib.texts
	regex.match(`(?i)shutdown\s+nosave`, t)
}
