# Access rules that must keep denying commands: a constraint of kind keep_denied names ACL keys in `targets`
# (redis.acl.<user>; globs such as redis.acl.* allowed) and, in `value`, the commands the rule must keep denying
# ("keep the queue's protections against flushing: its ACL denies FLUSHALL and FLUSHDB"). A new ACL for such a
# user is read as Redis reads it, left to right, the last rule that covers a command winning; a user written
# from scratch (a `user` line, ACL SETUSER after `reset`) starts with no commands.
package guardrail.rules.access

import data.guardrail.lib

keep_denied := lib.constraints_of("keep_denied")

# Redis' command categories for the commands a keep_denied constraint is likely to name (redis.io ACL docs;
# `ACL CAT <category>`). For a command not listed here only +@all, allcommands and the command itself count.
categories := {
	"flushall": {"keyspace", "write", "slow", "dangerous"},
	"flushdb": {"keyspace", "write", "slow", "dangerous"},
	"keys": {"keyspace", "read", "slow", "dangerous"},
	"config": {"admin", "slow", "dangerous"},
	"debug": {"admin", "slow", "dangerous"},
	"shutdown": {"admin", "slow", "dangerous"},
	"del": {"keyspace", "write", "slow"},
}

rules_text(v) := v if is_string(v)

rules_text(v) := concat(" ", [sprintf("%v", [x]) | some x in v]) if is_array(v)

effect(tok, _) := "allow" if tok in {"+@all", "allcommands"}

effect(tok, _) := "deny" if tok in {"-@all", "nocommands", "reset"}

effect(tok, cmd) := "allow" if tok == concat("", ["+", cmd])

effect(tok, cmd) := "deny" if tok == concat("", ["-", cmd])

effect(tok, cmd) := "allow" if {
	startswith(tok, "+@")
	not tok == "+@all"
	substring(tok, 2, -1) in object.get(categories, cmd, set())
}

effect(tok, cmd) := "deny" if {
	startswith(tok, "-@")
	not tok == "-@all"
	substring(tok, 2, -1) in object.get(categories, cmd, set())
}

allows(rules, cmd) if {
	toks := [t | some t in split(lower(rules), " "); t != ""]
	effects := [e | some tok in toks; e := effect(tok, cmd)]
	count(effects) > 0
	effects[count(effects) - 1] == "allow"
}

deny contains {
	"id": "SRE-ACCESS-001",
	"msg": sprintf("The new ACL for %s allows %s, which the incident says must stay denied (%s). Keep the denial in the rule (for example append -%s after +@all).", [k.key, upper(cmd), c.text, cmd]),
	"details": {"key": k.key, "command": cmd, "constraint": c.id},
} if {
	input.action.mutating in {true, "unknown"}
	some k in input.action.keys
	startswith(k.key, "redis.acl.")
	some c in keep_denied
	some t in c.targets
	lib.key_matches(t, k.key)
	some raw in c.value
	cmd := lower(raw)
	allows(rules_text(k.value), cmd)
}
