# Opaque commands: text whose effect cannot be known before it runs (eval, a decoded payload piped into a shell,
# python -c, a variable used as a command name). The guard cannot check what it cannot read, so these are
# denied by default; the agent is asked for the plain command.
package guardrail.rules.opaque

import data.guardrail.lib

reason := object.get(lib.action, "opaque_reason", null)

deny contains {
	"id": "SRE-OPAQUE-001",
	"msg": sprintf("This command is opaque (%s): its effect cannot be checked before it runs. Run the plain command itself, with no eval, encoding, inline script or variable as the command, so it can be checked.", [reason]),
	"details": {"opaque_reason": reason},
} if {
	input.action.mutating == "unknown"
	is_string(reason)
	reason != ""
	not unknown_program
}

# A plain program the guard has no classifier for is not hidden, only unknown: say so, and point at the tools it
# does know, rather than at eval and encodings.
unknown_program if startswith(reason, "unknown command ")

deny contains {
	"id": "SRE-OPAQUE-001",
	"msg": sprintf("The guard does not know this program (%s). Use the standard tools for the same purpose (kubectl, helm, psql, mysql -e, redis-cli, curl), which it can check.", [reason]),
	"details": {"opaque_reason": reason},
} if {
	input.action.mutating == "unknown"
	is_string(reason)
	unknown_program
}

warn contains {
	"id": "SRE-OPAQUE-002",
	"msg": sprintf("%s is not a command the guard recognises, so it is treated as a change. Prefer the standard tools (kubectl, helm, psql, mysql, redis-cli, curl) so the action can be checked.", [object.get({"": "This command"}, lib.tool, lib.tool)]),
	"details": {"tool": lib.tool},
} if {
	input.action.mutating == "unknown"
	not is_string(reason)
}
