# Redis-only rules: eviction on a store used as a queue, switching persistence off, and commands that block
# the server. Keys are redis.<param> (CONFIG SET) as the action normaliser writes them.
package guardrail.rules.redis

import data.guardrail.lib

setting(name) := k if {
	some k in input.action.keys
	k.key == concat(".", ["redis", name])
}

queue_like if {
	name := lower(lib.target_name)
	some w in queue_words
	contains(name, w)
}

# A policy other than noeviction. A value of any type is read as its text (a flag given no value, null, sets no
# policy); a string builtin never sees a non-string, which would fail the whole package.
policy_other_than_noeviction(v) if {
	v != null
	lower(sprintf("%v", [v])) != "noeviction"
}

deny contains {
	"id": "SUB-REDIS-001",
	"msg": sprintf("maxmemory-policy %s lets %s evict keys, and on a queue that silently drops jobs. Keep noeviction and give it enough maxmemory (within its ceiling) instead.", [k.value, lib.target_name]),
	"details": {"value": k.value, "component": lib.target_name},
} if {
	input.action.mutating in {true, "unknown"}
	k := setting("maxmemory-policy")
	policy_other_than_noeviction(k.value)
	queue_like
}

# The same policy set through a chart's server flags (e.g. a Bitnami extraFlags value).
deny contains {
	"id": "SUB-REDIS-001",
	"msg": "This sets an evicting maxmemory-policy on a queue's Redis through its server flags, and on a queue that silently drops jobs. Keep noeviction and give it enough maxmemory (within its ceiling) instead.",
	"details": {"via": input.action.tool},
} if {
	input.action.tool in {"helm", "kubectl"}
	some t in lib.texts
	regex.match(`(?i)queue[^ ]*[^;|&]*--maxmemory-policy[ =]+(allkeys|volatile)-`, t)
}

warn contains {
	"id": "SUB-REDIS-002",
	"msg": sprintf("maxmemory-policy %s evicts keys when memory runs out; if this store holds anything that is not a cache (sessions, jobs, counters), keep noeviction and raise maxmemory instead.", [k.value]),
	"details": {"value": k.value},
} if {
	input.action.mutating in {true, "unknown"}
	k := setting("maxmemory-policy")
	policy_other_than_noeviction(k.value)
	not queue_like
}

deny contains {
	"id": "SUB-REDIS-003",
	"msg": sprintf("%s = %q switches Redis persistence off, so a restart loses the data. Keep appendonly yes, appendfsync everysec (or always) and the save schedule.", [k.key, k.value]),
	"details": {"key": k.key, "value": k.value},
} if {
	input.action.mutating in {true, "unknown"}
	some k in input.action.keys
	k.key in {"redis.appendonly", "redis.save", "redis.appendfsync"}
	off_value(k)
}

off_value(k) if {
	k.key == "redis.appendonly"
	lib.is_false(k.value)
}

# appendfsync no leaves flushing to the OS: a crash loses up to ~30 s of acknowledged writes. everysec and
# always both keep the append-only file durable.
off_value(k) if {
	k.key == "redis.appendfsync"
	lower(trim(sprintf("%v", [k.value]), "\"' ")) == "no"
}

off_value(k) if {
	k.key == "redis.save"
	trim(sprintf("%v", [k.value]), "\"' ") == ""
}

warn contains {
	"id": "SUB-REDIS-004",
	"msg": sprintf("redis-cli %s blocks or loads the server for every client. Use SCAN with MATCH and COUNT instead of KEYS, and SLOWLOG/INFO instead of MONITOR.", [upper(lib.verb)]),
	"details": {"verb": lib.verb},
} if {
	input.action.tool == "redis-cli"
	lib.verb in {"keys", "monitor", "debug"}
}

# A push onto a queue of a member already in it: the consumer takes the job twice. The guard looked each pushed
# member up (LPOS) just before (input.observed.lists); a job that is missing from the list may be pushed back.
push_verbs := {"lpush", "rpush", "lpushx", "rpushx"}

queue_words := {"queue", "broker", "jobs", "stream", "celery", "rq"}

queue_list(name) if queue_like

queue_list(name) if {
	some w in queue_words
	contains(lower(name), w)
}

deny contains {
	"id": "SUB-REDIS-005",
	"msg": sprintf("%s already holds %s (LPOS found each of them); pushing them again delivers those jobs twice. Push back only a job that is missing from the queue (LPOS returns nothing), once.", [list, concat(", ", sort(queued))]),
	"details": {"list": list, "already_queued": sort(queued)},
} if {
	input.action.tool == "redis-cli"
	lib.verb in push_verbs
	some list, members in lib.observed_lists
	queue_list(list)
	queued := {m | some m, pos in members; pos != null}
	count(queued) > 0
}
