package guardrail.rules.opaque_test

import data.guardrail.rules.opaque

ids(set) := {f.id | some f in set}

opaque_cmd(reason) := {"action": {"tool": "shell", "verb": "bash -c", "mutating": "unknown", "opaque_reason": reason}}

test_decoded_payload_denied if "SRE-OPAQUE-001" in ids(opaque.deny) with input as opaque_cmd("decoded payload piped into a shell")

test_eval_denied if "SRE-OPAQUE-001" in ids(opaque.deny) with input as opaque_cmd("eval")

test_python_c_denied if "SRE-OPAQUE-001" in ids(opaque.deny) with input as opaque_cmd("python -c inline script")

test_deny_message_asks_for_plain_command if {
	some f in opaque.deny with input as opaque_cmd("eval")
	contains(f.msg, "plain command")
}

test_unrecognised_tool_warns if {
	inp := {"action": {"tool": "frobnicate", "verb": "", "mutating": "unknown"}}
	"SRE-OPAQUE-002" in ids(opaque.warn) with input as inp
	count(opaque.deny) == 0 with input as inp
}

test_plain_read_allowed if {
	inp := {"action": {"tool": "kubectl", "verb": "get", "mutating": false}}
	count(opaque.deny) == 0 with input as inp
	count(opaque.warn) == 0 with input as inp
}

test_plain_mutation_not_opaque if count(opaque.deny) == 0 with input as {"action": {"tool": "kubectl", "verb": "scale", "mutating": true}}

test_an_unknown_program_is_denied_with_its_own_message if {
	inp := {"action": {"tool": "shell", "verb": "mysqladmin", "mutating": "unknown", "opaque_reason": "unknown command 'mysqladmin': its effect cannot be known before it runs"}}
	some f in opaque.deny with input as inp
	f.id == "SRE-OPAQUE-001"
	contains(f.msg, "does not know this program")
	not contains(f.msg, "eval")
}
