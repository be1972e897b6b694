package guardrail.rules.access_test

import data.guardrail.rules.access

ids(set) := {f.id | some f in set}

ctx := {"constraints": [{"id": "keep-flush-protection", "kind": "keep_denied", "text": "Keep the queue's protections against flushing.", "targets": ["redis.acl.*"], "value": ["FLUSHALL", "FLUSHDB"]}]}

acl(v) := {"action": {"tool": "reconfigure-infra.sh", "verb": "reconfigure", "mutating": true, "target": {"name": "redis-queue"}, "keys": [{"key": "redis.acl.default", "value": v}]}, "context": ctx}

test_plain_all_denied if "SRE-ACCESS-001" in ids(access.deny) with input as acl("on nopass ~* &* +@all")

test_all_with_the_denials_allowed if count(access.deny) == 0 with input as acl("on nopass ~* &* +@all -flushall -flushdb")

test_only_one_denial_kept_is_denied if {
	d := access.deny with input as acl("on nopass ~* &* +@all -flushall")
	{f.details.command | some f in d} == {"flushdb"}
}

test_a_later_grant_reopens if "SRE-ACCESS-001" in ids(access.deny) with input as acl("on ~* +@all -flushall -flushdb +flushall")

test_a_category_grant_after_the_denial_reopens if {
	"SRE-ACCESS-001" in ids(access.deny) with input as acl("on ~* +@all -flushall -flushdb +@dangerous")
}

test_a_category_denial_keeps_it_denied if count(access.deny) == 0 with input as acl("on ~* +@all -@dangerous")

test_a_user_without_the_commands_allowed if count(access.deny) == 0 with input as acl("on ~* +blpop +rpush +@read")

test_a_list_value_is_read_as_rules if "SRE-ACCESS-001" in ids(access.deny) with input as acl(["on", "~*", "+@all"])

test_without_the_constraint_allowed if {
	count(access.deny) == 0 with input as {"action": {"tool": "redis-cli", "verb": "acl setuser", "mutating": true, "keys": [{"key": "redis.acl.default", "value": "on +@all"}]}, "context": {}}
}

test_a_read_is_not_judged if {
	count(access.deny) == 0 with input as {"action": {"tool": "redis-cli", "verb": "acl getuser", "mutating": false, "keys": [{"key": "redis.acl.default", "value": "on +@all"}]}, "context": ctx}
}
