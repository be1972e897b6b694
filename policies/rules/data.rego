# Destructive data operations: flushing a store, dropping or truncating tables, unscoped DELETE/UPDATE,
# deleting persistent volumes or data directories. Data loss cannot be rolled back by any later step.
package guardrail.rules.data

import data.guardrail.lib

# The statement: the classifier's sql_kind where it is specific (drop, truncate), else its verb (dml -> delete).
sql_kind := k if {
	k := upper(object.get(lib.details, "sql_kind", ""))
	not k in {"DML", "DDL", ""}
} else := upper(lib.verb)

table := object.get(lib.details, "table", "")

deny contains {
	"id": "SRE-DATA-001",
	"msg": sprintf("redis-cli %s deletes every key, including queued jobs and sessions. Do not flush: find the keys the fault affects and repair those (SCAN with a MATCH pattern, then inspect).", [upper(lib.verb)]),
	"details": {"verb": lib.verb, "target": lib.target_name},
} if {
	input.action.tool == "redis-cli"
	lib.verb in {"flushall", "flushdb"}
}

# The other commands the redis catalogue marks destructive (guardrail/actions/catalogue.yaml): SWAPDB, SCRIPT FLUSH,
# FUNCTION FLUSH ... each throws away or swaps out data that no later step brings back.
deny contains {
	"id": "SRE-DATA-001",
	"msg": sprintf("redis-cli %s throws away or swaps out data that cannot be restored. Do not run it during an incident: find the keys the fault affects and repair those.", [upper(lib.verb)]),
	"details": {"verb": lib.verb, "target": lib.target_name},
} if {
	input.action.tool == "redis-cli"
	object.get(lib.details, "destructive", false) == true
	not lib.verb in {"flushall", "flushdb"}
}

# DDL that destroys data without DROP TABLE or TRUNCATE: a column or a partition dropped or emptied, a table
# replaced by an empty one (MariaDB CREATE OR REPLACE TABLE).
deny contains {
	"id": "SRE-DATA-002",
	"msg": sprintf("This %s destroys data that cannot be restored from here (%s). Repair the rows or settings in place; never drop or replace schema objects during an incident.", [lower(lib.verb), substring(statement, 0, 80)]),
	"details": {"sql_kind": sql_kind, "table": table},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	statement := object.get(lib.details, "statement", lib.raw)
	destroys_data(statement)
}

destroys_data(st) if regex.match(`(?is)\b(drop|truncate)\s+(column|partition|subpartition)\b|\bcreate\s+or\s+replace\s+table\b`, st)

# A table's rows thrown away by its storage: MySQL's BLACKHOLE engine keeps none, MEMORY (HEAP) none past a
# restart, DISCARD TABLESPACE removes the
# data file, a column's type changed USING a constant overwrites every value.
destroys_data(st) if regex.match(`(?is)\balter\s+table\b.*(\bengine\s*=?\s*['"]?(blackhole|memory|heap)\b|\bdiscard\s+tablespace\b|\btype\s+[\w ()]+\s+using\s+('[^']*'|\d+|null)\s*(;|$))`, st)

# `ALTER TABLE [IF EXISTS] t DROP body`: the COLUMN keyword is optional in MySQL and PostgreSQL. Not a default, a NOT NULL, an index or
# a constraint dropped, which lose no rows.
destroys_data(st) if {
	regex.match(`(?is)\balter\s+table\s+(if\s+exists\s+)?(only\s+)?[\w."]+\s+(.*,\s*)?drop\s+(if\s+exists\s+)?[\w"]+\s*(,|;|$)`, st)
	not regex.match(`(?is)\bdrop\s+(default|not\s+null|identity|expression|constraint|index|key|primary|foreign|check)\b`, st)
}

# A column's type changed USING an expression that does not read it (`USING (0)`, `USING null::int`) or multiplies
# it by zero: every row's value replaced (the classifier names the column). `USING total::numeric` converts it.
deny contains {
	"id": "SRE-DATA-002",
	"msg": sprintf("This ALTER TABLE rewrites every row's %s with a value that does not come from it (a USING expression that ignores the column): the old values are lost. Convert the column from itself (USING %s::newtype), or repair the rows at fault with a scoped UPDATE.", [col, col]),
	"details": {"sql_kind": sql_kind, "table": table, "column": col},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	col := lib.details.rewrites_column
}

deny contains {
	"id": "SRE-DATA-002",
	"msg": sprintf("DROP %s destroys data and schema that cannot be restored from here. Repair the rows or settings in place; never drop objects during an incident.", [object.get(lib.details, "object", table)]),
	"details": {"sql_kind": sql_kind, "table": table},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	sql_kind == "DROP"
}

deny contains {
	"id": "SRE-DATA-003",
	"msg": sprintf("TRUNCATE %s deletes every row. Fix the specific rows with a scoped UPDATE or DELETE ... WHERE, inside a transaction.", [table]),
	"details": {"sql_kind": sql_kind, "table": table},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	sql_kind == "TRUNCATE"
}

deny contains {
	"id": "SRE-DATA-004",
	"msg": sprintf("%s on %s %s, so it touches every row. Add a WHERE clause that names exactly the rows to repair (by id, channel, or key), and run it in a transaction.", [sql_kind, table, unscoped]),
	"details": {"sql_kind": sql_kind, "table": table},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	sql_kind in {"DELETE", "UPDATE"}
	object.get(lib.details, "has_where", false) != true
	not recomputes_each_row
	unscoped := unscoped_why
}

# Why the classifier found no WHERE that narrows the statement (has_where false).
unscoped_why := "is a MERGE whose ON condition (or WHEN NOT MATCHED BY SOURCE) reaches every row" if {
	lib.details.merge == true
} else := "is an upsert whose rows come from a query with no WHERE that narrows it" if {
	lib.details.upsert == true
} else := "has a WHERE clause that every row passes (a constant truth, col IS NOT NULL, id > 0)" if {
	lib.details.where_selects_all == true
} else := "has no WHERE clause"

# UPDATE t SET col = (SELECT ... WHERE inner.x = t.x): every row gets a value derived from its own data (a cursor
# or counter rebuilt from the rows it counts), not one blanket value. Still every row, so a warning.
recomputes_each_row if {
	sql_kind == "UPDATE"
	statement := object.get(lib.details, "statement", lib.raw)
	regex.match(`(?is)\bset\s+[\w.]+\s*=\s*\(\s*select\b.+\bwhere\b`, statement)
}

warn contains {
	"id": "SRE-DATA-008",
	"msg": sprintf("UPDATE on %s has no WHERE clause: it recomputes every row from a subquery. Run it inside a transaction with the table locked, and check the result before committing.", [table]),
	"details": {"sql_kind": sql_kind, "table": table},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	object.get(lib.details, "has_where", false) != true
	recomputes_each_row
}

# The log that replicas and point-in-time recovery read, thrown away: MariaDB's RESET MASTER or a PURGE of every
# binary log up to now, a PostgreSQL replication slot dropped. The classifier names what goes in discards_logs.
deny contains {
	"id": "SRE-DATA-015",
	"msg": sprintf("This throws away %s, which replicas, change-data consumers and point-in-time recovery read: they lose their place and must be rebuilt from a fresh copy. Leave the logs and slots alone; if they fill the disk, purge only old binary logs (PURGE BINARY LOGS BEFORE NOW() - INTERVAL 7 DAY) and report an abandoned slot to its owner.", [lib.details.discards_logs]),
	"details": {"discards": lib.details.discards_logs, "sql_kind": sql_kind},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	lib.details.discards_logs
}

pvc_kinds := {"pvc", "persistentvolumeclaim", "persistentvolumeclaims", "pv", "persistentvolume", "persistentvolumes"}

deny contains {
	"id": "SRE-DATA-005",
	"msg": sprintf("Deleting %s %q destroys the data on it. Leave volumes alone; repair the workload that uses it.", [kind, lib.target_name]),
	"details": {"kind": kind, "name": lib.target_name},
} if {
	input.action.tool == "kubectl"
	lib.verb == "delete"
	some kind in deleted_kinds
	kind in pvc_kinds
}

# The target's kind, and every kind a delete lists (`pod/x pvc/y`, `pods,pvc`).
deleted_kinds contains kind if some kind in lib.kinds

deleted_kinds contains lower(kind) if some kind in object.get(lib.details, "resource_kinds", [])

data_paths := `^(/var/lib/(postgresql|pgsql|mysql|mariadb|redis|kafka)|/data|/bitnami/(redis|mariadb|postgresql))(/|$)|\.(rdb|aof|ibd|frm)$`

deny contains {
	"id": "SRE-DATA-006",
	"msg": sprintf("Removing %s deletes a datastore's files. Never remove data files; repair the store through its own client.", [path]),
	"details": {"path": path},
} if {
	input.action.tool == "file"
	lib.verb in {"rm", "delete", "remove", "truncate"}
	path := object.get(lib.details, "path", lib.target_name)
	data_path(path)
}

# The data directories themselves, for a path written as a glob (`rm -rf /var/lib/postgres*`, `{postgresql,x}`).
data_dirs := ["/var/lib/postgresql", "/var/lib/pgsql", "/var/lib/mysql", "/var/lib/mariadb", "/var/lib/redis",
	"/var/lib/kafka", "/data", "/bitnami/redis", "/bitnami/mariadb", "/bitnami/postgresql"]

# A path as the kernel resolves it: `//var//lib`, `/var/lib/./postgresql` are /var/lib/postgresql.
clean_path(p) := regex.replace(regex.replace(p, `/(\./)+`, "/"), `/{2,}`, "/")

data_path(p) if regex.match(data_paths, clean_path(p))

# A glob is judged as every path it could match: one whose first components could name a data directory (or a
# directory above one) could match it or a file below it (`/var/lib/p*ostgresql/data`, `/var/*/mysql`, `/v*`).
data_path(p) if {
	regex.match(`[*?\[{]`, p)
	some d in data_dirs
	could_match(clean_path(p), d)
}

could_match(pattern, d) if {
	parts := split(pattern, "/")
	dparts := split(d, "/")
	n := min([count(parts), count(dparts)])
	glob.match(concat("/", array.slice(parts, 0, n)), ["/"], concat("/", array.slice(dparts, 0, n)))
}

# Emptied by a redirection (`> dump.rdb`), overwritten (`cp /dev/null`, `tee`, `dd of=`), edited in place, or all
# access taken away (`chmod 000`): the store's data files changed behind its back. Not its config files
# (postgresql.conf, pg_hba.conf in the data directory are declared config), and not a chmod/chown that repairs
# permissions.
data_files_written := `^/var/lib/(postgresql|pgsql|mysql|mariadb|redis|kafka)/|^/bitnami/(redis|mariadb|postgresql)/|\.(rdb|aof|ibd|frm)$|/(pg_wal|pg_xlog|base|global)/`

deny contains {
	"id": "SRE-DATA-006",
	"msg": sprintf("This %s of %s changes a datastore's own files behind the server's back: they can be corrupted or become unreadable to it. Never write, empty or re-permission data files; repair the store through its own client.", [lib.verb, path]),
	"details": {"path": path, "verb": lib.verb},
} if {
	input.action.tool == "file"
	lib.verb in {"write", "append", "edit"}
	path := object.get(lib.details, "path", lib.target_name)
	regex.match(data_files_written, clean_path(path))
	not regex.match(`\.(conf|cnf)$`, path)
}

deny contains {
	"id": "SRE-DATA-006",
	"msg": sprintf("chmod %s on %s takes every permission away from a datastore's files: the server can no longer read them. Repair permissions to what the server needs (its user, 0700 for a postgres data directory), not away.", [mode, path]),
	"details": {"path": path, "verb": lib.verb, "mode": mode},
} if {
	input.action.tool == "file"
	lib.verb == "chmod"
	path := object.get(lib.details, "path", lib.target_name)
	data_path(path)
	some mode in modes_removing_all
}

# The mode as the classifier read it (`chmod 0`, `chmod -R 0000`, `a-rwx`, `ugo=`), else as written in the text.
modes_removing_all contains m if {
	m := lib.details.mode
	regex.match(`^(0+|[ugoa]*-rwx|[ugoa]*=)$`, m)
}

modes_removing_all contains m if {
	not lib.details.mode
	some t in lib.texts
	m := regex.find_n(`\b0?000\b|\ba-rwx\b|\bugo?-rwx\b|\b[ugoa]*=\s`, t, 1)[0]
}

# The users the datastores' images run their servers as (by name, or the uid of the official and bitnami images).
data_owners := {"postgres", "mysql", "redis", "mongodb", "kafka", "memcache", "rabbitmq", "pgbouncer", "999", "1001", "70"}

deny contains {
	"id": "SRE-DATA-006",
	"msg": sprintf("%s %s on %s hands a datastore's files to someone other than its server, which then can no longer read them (postgres refuses a data directory it does not own). Give them back to the server's own user (postgres, mysql, redis, or its uid) instead.", [lib.verb, owner, path]),
	"details": {"path": path, "verb": lib.verb, "owner": owner},
} if {
	input.action.tool == "file"
	lib.verb in {"chown", "chgrp"}
	path := object.get(lib.details, "path", lib.target_name)
	data_path(path)
	owner := object.get(lib.details, "mode", "")
	not owner_of_data(lib.verb, owner)
}

# chown USER[:GROUP] judges the user (the group when only `:GROUP` is given); chgrp GROUP the group.
owner_of_data("chgrp", owner) if owner in data_owners

owner_of_data("chown", owner) if {
	user := regex.split(`[:.]`, owner)[0]
	user != ""
	user in data_owners
}

owner_of_data("chown", owner) if {
	parts := regex.split(`[:.]`, owner)
	parts[0] == ""
	count(parts) > 1
	parts[1] in data_owners
}

# The host itself: a recursive delete of the root or a system directory, or a write to a block device.
system_dirs := `^(/+\*?|~/?\*?|\$HOME/?|/(etc|usr|bin|sbin|lib|lib32|lib64|boot|var|home|root|opt|srv|dev|sys|proc|run)/*\*?)$`

block_devices := `^/dev/(sd|hd|vd|xvd|nvme|mmcblk|dm-|md|loop|sr|disk/|mapper/)`

deny contains {
	"id": "SRE-DATA-011",
	"msg": sprintf("Removing %s recursively destroys the host's system or every file on it. Never delete system directories; remove only the specific files you have shown to be the problem.", [path]),
	"details": {"path": path},
} if {
	input.action.tool == "file"
	lib.verb in {"rm", "delete", "remove"}
	object.get(lib.details, "recursive", false) == true
	path := object.get(lib.details, "path", lib.target_name)
	system_dir(path)
}

system_dir(p) if regex.match(system_dirs, p)

# A glob that could name a system directory itself, or all of one's contents (`/e?c`, `/[e]tc/*`, `/u*`).
system_dir(p) if {
	regex.match(`[*?\[{]`, p)
	some d in system_dir_names
	some candidate in {d, concat("", [d, "/*"])}
	glob.match(clean_path(p), ["/"], candidate)
}

system_dir_names := ["/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/boot", "/var", "/home", "/root",
	"/opt", "/srv", "/dev", "/sys", "/proc", "/run"]

deny contains {
	"id": "SRE-DATA-011",
	"msg": sprintf("Writing to %s overwrites a disk under its filesystems and destroys what is on it. Never write to block devices during an incident.", [path]),
	"details": {"path": path},
} if {
	input.action.tool == "file"
	lib.verb in {"write", "append", "edit", "delete", "rm", "truncate"}
	path := object.get(lib.details, "path", lib.target_name)
	regex.match(block_devices, path)
}

warn contains {
	"id": "SRE-DATA-007",
	"msg": "Deleting redis keys loses what they hold (queued jobs, sessions, counters). Inspect them first (TYPE, TTL, LRANGE) and delete only keys you have shown to be the fault.",
	"details": {"verb": lib.verb},
} if {
	input.action.tool == "redis-cli"
	lib.verb in {"del", "unlink"}
}

# What removes a key or part of what it holds another way: an expiry, a rename away from where the app reads it,
# a trim, a pop or move off a list (a queued job taken out of its queue), a member or entry removed.
removes_contents := {
	"getdel", "expire", "pexpire", "expireat", "pexpireat", "rename", "renamenx", "move", "ltrim", "lrem", "lpop",
	"rpop", "blpop", "brpop", "lmove", "blmove", "rpoplpush", "brpoplpush", "hdel", "srem", "spop", "smove", "zrem",
	"zpopmin", "zpopmax", "bzpopmin", "bzpopmax", "zremrangebyscore", "zremrangebyrank", "zremrangebylex", "xdel",
	"xtrim",
}

warn contains {
	"id": "SRE-DATA-007",
	"msg": sprintf("redis-cli %s removes a key or part of what it holds (queued jobs, sessions, members). Inspect it first (TYPE, TTL, LRANGE) and change only what you have shown to be the fault.", [upper(lib.verb)]),
	"details": {"verb": lib.verb},
} if {
	input.action.tool == "redis-cli"
	lib.verb in removes_contents
}

# A table, view, column, schema or database renamed: nothing is lost, but every query of the application that
# names the old one fails from then on. An index or constraint renamed breaks no query.
warn contains {
	"id": "SRE-DATA-014",
	"msg": sprintf("This renames what the application's queries name (%s): they fail until the code is changed too. Repair in place; if a rename is the fix, do it with the application's migration, not during the incident.", [substring(statement, 0, 80)]),
	"details": {"sql_kind": sql_kind, "object": object.get(lib.details, "object", "")},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	statement := object.get(lib.details, "statement", lib.raw)
	renames_named(statement)
}

renames_named(st) if regex.match(`(?is)^\s*rename\s+(table|database|schema|user)\b`, st)

renames_named(st) if regex.match(`(?is)^\s*alter\s+(table|view|materialized\s+view|schema|database)\s+(if\s+exists\s+)?(only\s+)?[\w."]+\s+rename\s+(to|as|column|[\w"]+\s+to)\b`, st)

# HTTP DELETE: of everything at once (`/_all`, `*`, an index pattern), or of one resource.
deny contains {
	"id": "SRE-DATA-012",
	"msg": sprintf("DELETE %s removes every resource the pattern matches (Elasticsearch's _all or a wildcard). Delete only the one resource you have shown to be the fault, by its exact name.", [path]),
	"details": {"path": path},
} if {
	input.action.tool == "curl"
	upper(lib.verb) == "DELETE"
	path := object.get(lib.details, "path", "")
	regex.match(`(^|/)(_all|\*)(/|$)|\*`, path)
}

warn contains {
	"id": "SRE-DATA-013",
	"msg": sprintf("DELETE %s removes a resource through the service's API, and it cannot be restored from here. Make sure it is the one that is at fault.", [path]),
	"details": {"path": path},
} if {
	input.action.tool == "curl"
	upper(lib.verb) == "DELETE"
	path := object.get(lib.details, "path", "")
	not regex.match(`(^|/)(_all|\*)(/|$)|\*`, path)
}
