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

# Locking an account or a database out: every client that logs in as it (the application itself) fails at once,
# which is an outage, not a repair.
deny contains {
	"id": "SRE-ACCESS-002",
	"msg": sprintf("This locks clients out (%s): every connection of the application fails from then on. Limit what is wrong instead (a statement timeout, a pool size), and never disable a login or a database during an incident.", [why]),
	"details": {"lockout": why},
} if {
	input.action.mutating in {true, "unknown"}
	some why in lockouts
}

sql_tools := {"psql", "mysql", "mariadb", "sql"}

# The SQL clients' lockouts and code runs sit behind one test of the tool: a kubectl or curl action (whose tool the
# rule index cannot rule out for `in`) pays it once, not once per rule.
lockouts contains why if {
	input.action.tool in sql_tools
	some why in sql_lockouts
}

runs_code contains why if {
	input.action.tool in sql_tools
	some why in sql_runs_code
}

sql_lockouts contains sprintf("%s = %v", [k.key, k.value]) if {
	some k in input.action.keys
	k.key == "postgres.role.login"
	k.value == false
}

sql_lockouts contains sprintf("%s = %v", [k.key, k.value]) if {
	some k in input.action.keys
	k.key in {"postgres.role.connection_limit", "mariadb.max_user_connections_of_user"}
	k.value == 0
}

# A PostgreSQL role's (or database's) CONNECTION LIMIT of 1: one session at a time, so an application's pool (or
# its workers) cannot connect, the same lockout as a server ceiling of 1. As for 0, whichever role it is: the
# rule does not judge whose login matters. (-1 is no limit.)
sql_lockouts contains sprintf("%s = %v", [k.key, k.value]) if {
	some k in input.action.keys
	k.key in {"postgres.role.connection_limit", "postgres.database.connection_limit"}
	lib.number(k.value) in {0, 1}
}

# VALID UNTIL a time past or within a day (the classifier reads the date); 'infinity' or a later date repairs an
# expired login.
sql_lockouts contains sprintf("a login that expires (VALID UNTIL %s)", [lib.details.login_expires]) if {
	lib.details.login_expires
}

sql_lockouts contains substring(statement, 0, 80) if {
	statement := object.get(lib.details, "statement", "")
	regex.match(`(?is)^\s*alter\s+database\s+\S+\s+(with\s+)?(allow_connections\s*(=\s*)?(false|off|0)\b|connection\s+limit\s*(=\s*)?0\b)|^\s*alter\s+user\s+.*\baccount\s+lock\b|^\s*drop\s+user\b`, statement)
}

sql_lockouts contains sprintf("%s = %v", [k.key, k.value]) if {
	some k in input.action.keys
	k.key == "mariadb.offline_mode"
	lower(sprintf("%v", [k.value])) in {"on", "1", "true"}
}

lockouts contains sprintf("ACL SETUSER %s off", [object.get(lib.details, "user", "")]) if {
	input.action.tool == "redis-cli"
	lib.verb == "acl setuser"
	some r in object.get(lib.details, "rules", [])
	lower(r) == "off"
}

# A server's connection ceiling taken to (almost) nothing: only a superuser's reserved slot, or none, is left.
# (MySQL's max_user_connections is not one: 0 there, global or per user, means no limit.)
lockouts contains sprintf("%s = %v", [k.key, k.value]) if {
	some k in input.action.keys
	parts := split(k.key, ".")
	parts[count(parts) - 1] in {"max_connections", "maxclients", "max_client_conn"}
	lib.number(k.value) <= 1
}

lockouts contains "CLIENT PAUSE" if {
	input.action.tool == "redis-cli"
	lib.verb == "client pause"
}

# CLIENT KILL by TYPE, USER, LADDR or MAXAGE (the classifier's `broad`): every client the filter matches, the
# application's included, not one named by ID or ADDR.
lockouts contains sprintf("CLIENT KILL of every client a filter matches (%s)", [object.get(lib.details, "command", "")]) if {
	input.action.tool == "redis-cli"
	lib.verb == "client kill"
	lib.details.broad == true
}

# pgbouncer's console: PAUSE and SUSPEND hold every client's queries, DISABLE refuses new clients, KILL drops
# every client of a database.
sql_lockouts contains sprintf("pgbouncer %s", [object.get(lib.details, "command", "")]) if {
	lib.details.stops_clients == true
}

# FAILOVER: the primary becomes a replica, so every client's write to it fails (READONLY).
lockouts contains "FAILOVER (the primary becomes a read-only replica)" if {
	input.action.tool == "redis-cli"
	lib.verb == "failover"
	lib.details.demotes == true
}

# Idle connections closed after a second or so: every pooled connection of the application is dropped between
# requests. (A session's own SET only reaches that session.)
sql_lockouts contains sprintf("%s = %v", [k.key, k.value]) if {
	input.action.layer != "session"
	some k in input.action.keys
	k.key in {"mariadb.wait_timeout", "mariadb.interactive_timeout"}
	lib.number(k.value) <= 10
}

# A lock held through a sleep (`LOCK TABLE t; SELECT pg_sleep(3600)`, `LOCK TABLES t WRITE; SELECT SLEEP(3600)`,
# `FLUSH TABLES WITH READ LOCK` ...): every client that reads or writes the table waits for as long. The classifier
# gives the sleep's length in held_s (null when it cannot be read).
sql_lockouts contains sprintf("a lock held through a sleep of %v s (%s)", [held, substring(object.get(lib.details, "statement", ""), 0, 60)]) if {
	"held_s" in object.keys(lib.details)
	held := lib.details.held_s
	long_hold(held)
}

# MySQL ALTER USER clauses that refuse the account's clients (PASSWORD EXPIRE, REQUIRE SSL/X509/SUBJECT ..., a per-hour
# limit of 100 or less, MAX_USER_CONNECTIONS 1), and CREATE OR REPLACE USER (recreated without its grants).
sql_lockouts contains sprintf("%s for %s", [lib.details.login_refused, object.get(lib.details, "user", "")]) if {
	lib.details.login_refused
}

# KILL [HARD] [CONNECTION|QUERY] USER name: every connection (or running statement) of the account, the application's
# pool with it, not one thread by its id.
lockouts contains sprintf("KILL of every connection of user %s", [object.get(lib.details, "user", "")]) if {
	input.action.tool in {"mysql", "mariadb"}
	lib.verb == "kill"
	lib.details.broad == true
}

# A PostgreSQL timeout for a role, a database or the server (not one session's SET) so small that the application's
# statements, or its pooled connections, are cut at once: statement_timeout or lock_timeout under 100 ms,
# idle_in_transaction_session_timeout under 1 s, idle_session_timeout of 10 s or less (as MySQL's wait_timeout).
# 0 means no limit. Raising a timeout (the fault's 150 ms to 300 ms, 2 s) is a repair, not this.
pg_timeout_floor_ms := {
	"postgres.statement_timeout": 100,
	"postgres.lock_timeout": 100,
	"postgres.idle_in_transaction_session_timeout": 1000,
	"postgres.idle_session_timeout": 10001,
}

sql_lockouts contains sprintf("%s = %v", [k.key, k.value]) if {
	input.action.layer != "session"
	some k in input.action.keys
	floor := pg_timeout_floor_ms[k.key]
	ms := pg_ms(k.value)
	ms > 0
	ms < floor
}

# A PostgreSQL time setting in milliseconds: 5 (its unit, ms), '150ms', '1s', '2min', '1h', '1d', '500us'.
pg_time_units := {"": 1, "us": 0.001, "ms": 1, "s": 1000, "min": 60000, "h": 3600000, "d": 86400000}

pg_ms(v) := v if is_number(v)

pg_ms(v) := n if {
	is_string(v)
	m := regex.find_all_string_submatch_n(`^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)\s*$`, lower(v), 1)
	count(m) == 1
	n := to_number(m[0][1]) * pg_time_units[m[0][2]]
}

long_hold(s) if s == null

long_hold(s) if s >= 10

# What makes a datastore run a program or load native code: a setting whose value is a shell command or a library,
# an untrusted procedural language, a server plugin.
deny contains {
	"id": "SRE-ACCESS-003",
	"msg": sprintf("This makes the database server run a program, load native code, write a file or send SQL on, none of which the guard can read (%s), with the server's access to every row and file. Do not; repair the settings and rows at fault instead.", [why]),
	"details": {"runs": why},
} if {
	input.action.mutating in {true, "unknown"}
	some why in runs_code
}

code_settings := {"archive_command", "restore_command", "archive_cleanup_command", "recovery_end_command",
	"shared_preload_libraries", "local_preload_libraries", "session_preload_libraries", "dynamic_library_path",
	"ssl_passphrase_command", "jit_provider", "plugin_dir", "init_file", "plugin_load", "plugin_load_add"}

sql_runs_code contains k.key if {
	some k in input.action.keys
	parts := split(k.key, ".")
	parts[count(parts) - 1] in code_settings
}

sql_runs_code contains substring(statement, 0, 80) if {
	statement := object.get(lib.details, "statement", "")
	regex.match(`(?is)^\s*create\s+(or\s+replace\s+)?(trusted\s+)?(procedural\s+)?language\b|^\s*create\s+extension\s+(if\s+not\s+exists\s+)?"?(plpython[23]?u|plperlu|pltclu|plsh|plr|pllua?u|adminpack|file_fdw|dblink|postgres_fdw)\b|^\s*install\s+(plugin|soname)\b`, statement)
}

# Redis told to write its dump or append-only file somewhere else (CONFIG SET dir /etc, dbfilename authorized_keys):
# the next save writes a file of the attacker's choosing with the server's rights.
runs_code contains k.key if {
	some k in input.action.keys
	k.key in {"redis.dir", "redis.dbfilename", "redis.appendfilename", "redis.appenddirname"}
}

# The server writing a file of its own choosing (COPY ... TO a path, lo_export, pg_file_write: a data file
# overwritten), or SQL sent on to another server the guard does not read (dblink).
sql_runs_code contains substring(statement, 0, 80) if {
	statement := object.get(lib.details, "statement", "")
	regex.match(`(?is)^\s*copy\b.*\bto\s+'|\blo_export\s*\(|\bpg_file_(write|unlink|rename)\s*\(|\bdblink(_exec|_send_query)?\s*\(`, statement)
}

# LOAD of a library by its path (`LOAD '/tmp/x.so'`): any file, run as native code in the server. A bare name
# (`LOAD 'auto_explain'`) comes from the server's own library directory.
sql_runs_code contains sprintf("LOAD '%s'", [lib.details.loads_library]) if {
	lib.details.loads_library
}

# An account's rights or login written straight into the server's own account tables (MariaDB's mysql.user,
# mysql.global_priv ..., PostgreSQL's pg_authid): past GRANT, ALTER USER and every rule that reads them.
deny contains {
	"id": "SRE-ACCESS-004",
	"msg": sprintf("This writes the server's own account table %s directly, which changes who may log in and with what rights behind GRANT and ALTER USER. Use a scoped GRANT, REVOKE or ALTER USER instead, so the change is the one it says.", [table]),
	"details": {"table": table},
} if {
	input.action.tool in sql_tools
	input.action.mutating in {true, "unknown"}
	lib.verb in {"update", "insert", "delete", "replace", "merge", "copy from"}
	table := lower(object.get(lib.details, "table", ""))
	regex.match(`^(mysql\.(user|global_priv|db|tables_priv|columns_priv|procs_priv|proxies_priv|roles_mapping|default_roles)|(pg_catalog\.)?(pg_authid|pg_auth_members))$`, table)
}

# PostgreSQL's system catalogs written directly (pg_class, pg_attribute, pg_namespace, pg_database ..., however
# qualified): a table's rows, columns, triggers or a database's logins changed behind DDL, or the catalog
# corrupted. (The account catalogs pg_authid and pg_auth_members are the rule above.)
deny contains {
	"id": "SRE-ACCESS-004",
	"msg": sprintf("This %s writes PostgreSQL's own system catalog %s directly, behind the DDL and ALTER statements that keep it consistent: tables, columns, triggers or logins change without the server knowing, or the catalog is corrupted. Use the statement that makes the change (ALTER TABLE, ALTER DATABASE, ALTER ROLE ...), scoped to what is at fault.", [lib.verb, table]),
	"details": {"table": table},
} if {
	input.action.tool in {"psql", "sql"}
	input.action.mutating in {true, "unknown"}
	table := lower(object.get(lib.details, "table", ""))
	regex.match(`^(pg_catalog\.)?"?pg_\w+"?$`, table)
	not regex.match(`^(pg_catalog\.)?(pg_authid|pg_auth_members)$`, table)
}
