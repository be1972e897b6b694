package guardrail.rules.data_test

import data.guardrail.rules.data

ids(set) := {f.id | some f in set}

sql(kind, has_where) := {"action": {
	"tool": "psql", "verb": lower(kind), "mutating": true,
	"details": {"sql_kind": kind, "has_where": has_where, "table": "messages"},
}}

redis(verb) := {"action": {"tool": "redis-cli", "verb": verb, "mutating": true, "target": {"kind": "component", "name": "redis-queue"}}}

test_flushall_denied if "SRE-DATA-001" in ids(data.deny) with input as redis("flushall")

test_flushdb_denied if "SRE-DATA-001" in ids(data.deny) with input as redis("FLUSHDB")

test_redis_get_allowed if count(data.deny) == 0 with input as redis("get")

test_drop_table_denied if "SRE-DATA-002" in ids(data.deny) with input as sql("DROP", false)

test_truncate_denied if "SRE-DATA-003" in ids(data.deny) with input as sql("TRUNCATE", false)

test_delete_without_where_denied if "SRE-DATA-004" in ids(data.deny) with input as sql("DELETE", false)

test_update_without_where_denied if "SRE-DATA-004" in ids(data.deny) with input as sql("UPDATE", false)

test_delete_with_where_allowed if count(data.deny) == 0 with input as sql("DELETE", true)

test_update_with_where_allowed if count(data.deny) == 0 with input as sql("UPDATE", true)

# The shape the action normaliser writes: sql_kind dml, the statement in the verb.
test_normaliser_dml_delete_without_where_denied if {
	"SRE-DATA-004" in ids(data.deny) with input as {"action": {
		"tool": "psql", "verb": "delete", "mutating": true,
		"details": {"sql_kind": "dml", "table": "messages", "has_where": false},
	}}
}

test_normaliser_drop_denied if {
	"SRE-DATA-002" in ids(data.deny) with input as {"action": {
		"tool": "psql", "verb": "drop", "mutating": true,
		"details": {"sql_kind": "drop", "object": "table", "table": "messages"},
	}}
}

test_delete_missing_where_fact_is_unscoped if {
	"SRE-DATA-004" in ids(data.deny) with input as {"action": {"tool": "mysql", "details": {"sql_kind": "DELETE"}}}
}

test_select_allowed if count(data.deny) == 0 with input as sql("SELECT", false)

test_delete_pvc_denied if {
	"SRE-DATA-005" in ids(data.deny) with input as {"action": {
		"tool": "kubectl", "verb": "delete", "mutating": true,
		"target": {"kind": "pvc", "name": "data-postgres-0", "namespace": "slack"},
	}}
}

test_delete_pod_not_a_data_loss if {
	count(data.deny) == 0 with input as {"action": {
		"tool": "kubectl", "verb": "delete", "mutating": true,
		"target": {"kind": "pod", "name": "svc-message-0"},
	}}
}

test_rm_redis_aof_denied if {
	"SRE-DATA-006" in ids(data.deny) with input as {"action": {
		"tool": "file", "verb": "rm", "mutating": true,
		"target": {"kind": "file", "name": "/data/appendonly.aof"},
	}}
}

test_rm_tmp_file_allowed if {
	count(data.deny) == 0 with input as {"action": {
		"tool": "file", "verb": "rm", "mutating": true,
		"details": {"path": "/tmp/plan.txt"},
	}}
}

test_redis_del_warns if "SRE-DATA-007" in ids(data.warn) with input as redis("del")

test_update_recomputing_each_row_only_warns if {
	inp := {"action": {
		"tool": "psql", "verb": "update", "mutating": true,
		"details": {"sql_kind": "dml", "table": "channel_seq", "has_where": false,
			"statement": "UPDATE channel_seq c SET last_seq = (SELECT max(seq) FROM messages m WHERE m.channel_id = c.channel_id)"},
	}}
	count(data.deny) == 0 with input as inp
	"SRE-DATA-008" in ids(data.warn) with input as inp
}

test_update_to_a_constant_without_where_denied if {
	"SRE-DATA-004" in ids(data.deny) with input as {"action": {
		"tool": "psql", "verb": "update", "mutating": true,
		"details": {"sql_kind": "dml", "table": "channel_seq", "has_where": false,
			"statement": "UPDATE channel_seq SET last_seq = 0"},
	}}
}

sql_stmt(tool, verb, st) := {"action": {"tool": tool, "verb": verb, "mutating": true, "raw": st, "target": {"kind": "component", "name": "db"}, "details": {"sql_kind": "ddl", "statement": st}}, "command": st}

test_ddl_that_destroys_data_is_denied if {
	"SRE-DATA-002" in ids(data.deny) with input as sql_stmt("psql", "alter table", "ALTER TABLE m DROP COLUMN body")
	"SRE-DATA-002" in ids(data.deny) with input as sql_stmt("mysql", "alter table", "ALTER TABLE t DROP body")
	"SRE-DATA-002" in ids(data.deny) with input as sql_stmt("mysql", "alter table", "ALTER TABLE t TRUNCATE PARTITION p0")
	"SRE-DATA-002" in ids(data.deny) with input as sql_stmt("mysql", "create table", "CREATE OR REPLACE TABLE t (id int)")
}

test_ddl_that_keeps_the_rows_is_allowed if {
	count(data.deny) == 0 with input as sql_stmt("psql", "alter table", "ALTER TABLE m ALTER COLUMN x DROP DEFAULT")
	count(data.deny) == 0 with input as sql_stmt("psql", "alter table", "ALTER TABLE m DROP CONSTRAINT c")
	count(data.deny) == 0 with input as sql_stmt("psql", "alter table", "ALTER TABLE m ADD COLUMN x int")
}

test_a_redis_command_the_catalogue_marks_destructive_is_denied if {
	inp := {"action": {"tool": "redis-cli", "verb": "swapdb", "mutating": true, "target": {"kind": "component", "name": "r"}, "details": {"destructive": true}}}
	"SRE-DATA-001" in ids(data.deny) with input as inp
}

test_a_pvc_deleted_beside_another_kind_is_denied if {
	inp := {"action": {"tool": "kubectl", "verb": "delete", "mutating": true, "target": {"kind": "pod", "name": ""}, "details": {"resource_kinds": ["pod", "pvc"]}}}
	"SRE-DATA-005" in ids(data.deny) with input as inp
}

test_datastore_file_emptied_by_a_redirect_denied if {
	"SRE-DATA-006" in ids(data.deny) with input as {"action": {
		"tool": "file", "verb": "write", "mutating": true,
		"details": {"path": "/var/lib/redis/appendonly.aof", "by": "redirect", "content": ""},
	}}
}

test_datastore_dir_made_unreadable_denied if {
	"SRE-DATA-006" in ids(data.deny) with input as {"action": {
		"tool": "file", "verb": "chmod", "mutating": true, "raw": "chmod -R 000 /var/lib/postgresql",
		"details": {"path": "/var/lib/postgresql", "recursive": true},
	}, "command": "chmod -R 000 /var/lib/postgresql"}
}

test_datastore_permissions_repaired_allowed if {
	count(data.deny) == 0 with input as {"action": {
		"tool": "file", "verb": "chmod", "mutating": true, "raw": "chmod 700 /var/lib/postgresql/data",
		"details": {"path": "/var/lib/postgresql/data"},
	}, "command": "chmod 700 /var/lib/postgresql/data"}
}

test_datastore_config_file_edit_is_not_a_data_file_write if {
	count(data.deny) == 0 with input as {"action": {
		"tool": "file", "verb": "append", "mutating": true,
		"details": {"path": "/var/lib/postgresql/data/pg_hba.conf"},
	}}
}

test_config_file_write_is_not_a_data_file if {
	count(data.deny) == 0 with input as {"action": {
		"tool": "file", "verb": "write", "mutating": true,
		"details": {"path": "/etc/redis/redis.conf"},
	}}
}

test_recursive_delete_of_the_root_or_a_system_dir_denied if {
	every p in ["/", "/*", "/etc", "/usr/", "~", "/var/*"] {
		"SRE-DATA-011" in ids(data.deny) with input as {"action": {
			"tool": "file", "verb": "delete", "mutating": true,
			"details": {"path": p, "recursive": true},
		}}
	}
}

test_recursive_delete_of_an_app_dir_is_not_host_destruction if {
	not "SRE-DATA-011" in ids(data.deny) with input as {"action": {
		"tool": "file", "verb": "delete", "mutating": true,
		"details": {"path": "/var/log/app/old", "recursive": true},
	}}
}

test_write_to_a_block_device_denied if {
	"SRE-DATA-011" in ids(data.deny) with input as {"action": {
		"tool": "file", "verb": "write", "mutating": true,
		"details": {"path": "/dev/sda", "by": "dd"},
	}}
}

test_removing_a_keys_contents_warns if {
	every v in ["expire", "ltrim", "rename", "lpop"] {
		"SRE-DATA-007" in ids(data.warn) with input as {"action": {
			"tool": "redis-cli", "verb": v, "mutating": true,
		}}
	}
}

test_adding_to_a_key_does_not_warn if {
	count(data.warn) == 0 with input as {"action": {"tool": "redis-cli", "verb": "rpush", "mutating": true}}
}

test_http_delete_of_everything_denied if {
	every p in ["/_all", "/logs-*", "/*"] {
		"SRE-DATA-012" in ids(data.deny) with input as {"action": {
			"tool": "curl", "verb": "DELETE", "mutating": true, "details": {"path": p},
		}}
	}
}

test_http_delete_of_one_resource_warns if {
	"SRE-DATA-013" in ids(data.warn) with input as {"action": {
		"tool": "curl", "verb": "DELETE", "mutating": true, "details": {"path": "/api/orders/7"},
	}}
}

test_rename_of_a_table_or_column_warns if {
	every stmt in [
		"ALTER TABLE users RENAME TO users_old",
		"RENAME TABLE orders TO orders_bak",
		"ALTER TABLE users RENAME COLUMN email TO mail",
		"alter table if exists public.users rename email to mail",
		"ALTER DATABASE app RENAME TO app_old",
	] {
		found := ids(data.warn) with input as {"action": {"tool": "psql", "verb": "alter table", "mutating": true, "details": {"statement": stmt}}}
		"SRE-DATA-014" in found
	}
}

test_rename_of_an_index_or_a_rename_free_alter_does_not_warn if {
	every stmt in [
		"ALTER INDEX i RENAME TO j",
		"ALTER TABLE users RENAME CONSTRAINT a TO b",
		"ALTER TABLE users ADD COLUMN renamed text",
		"ALTER TABLE users ALTER COLUMN email SET DEFAULT ''",
	] {
		found := ids(data.warn) with input as {"action": {"tool": "psql", "verb": "alter", "mutating": true, "details": {"statement": stmt}}}
		not "SRE-DATA-014" in found
	}
}

test_storage_that_throws_rows_away_is_destroying_data if {
	every stmt in [
		"ALTER TABLE tabUser ENGINE=BLACKHOLE",
		"ALTER TABLE tabUser DISCARD TABLESPACE",
		"ALTER TABLE order_order ALTER COLUMN total TYPE int USING 0",
	] {
		"SRE-DATA-002" in ids(data.deny) with input as {"action": {"tool": "mysql", "verb": "alter table", "mutating": true, "details": {"statement": stmt}}}
	}
	every stmt in ["ALTER TABLE t ENGINE=InnoDB", "ALTER TABLE t ALTER COLUMN c TYPE bigint"] {
		not "SRE-DATA-002" in ids(data.deny) with input as {"action": {"tool": "mysql", "verb": "alter table", "mutating": true, "details": {"statement": stmt}}}
	}
}

test_a_data_directory_however_written_is_a_data_directory if {
	every path in ["/var/lib/postgres*", "/var/lib/postgresq?", "/var/lib/{postgresql,x}", "//var//lib//postgresql",
		"/var/lib/./postgresql", "/var/lib/*"] {
		"SRE-DATA-006" in ids(data.deny) with input as {"action": {"tool": "file", "verb": "delete", "mutating": true, "details": {"path": path}}}
	}
	every path in ["/var/log/app/*", "/tmp/x*", "/var/lib/postgresql-backup-notes.txt"] {
		not "SRE-DATA-006" in ids(data.deny) with input as {"action": {"tool": "file", "verb": "delete", "mutating": true, "details": {"path": path}}}
	}
}

test_datastore_dir_chmod_0_denied if {
	"SRE-DATA-006" in ids(data.deny) with input as {"action": {
		"tool": "file", "verb": "chmod", "mutating": true, "raw": "chmod 0 /var/lib/postgresql/data",
		"details": {"path": "/var/lib/postgresql/data", "mode": "0"},
	}, "command": "kubectl exec postgres-0 -- chmod 0 /var/lib/postgresql/data"}
}

test_datastore_dir_chmod_0750_in_pod_0_allowed if {
	# The pod's name ends in -0: only the mode the classifier read decides.
	count(data.deny) == 0 with input as {"action": {
		"tool": "file", "verb": "chmod", "mutating": true, "raw": "chmod 0750 /var/lib/postgresql/data",
		"details": {"path": "/var/lib/postgresql/data", "mode": "0750"},
	}, "command": "kubectl exec postgres-0 -- chmod 0750 /var/lib/postgresql/data"}
}

test_datastore_dir_given_away_denied if {
	"SRE-DATA-006" in ids(data.deny) with input as {"action": {
		"tool": "file", "verb": "chown", "mutating": true, "raw": "chown -R nobody /var/lib/postgresql/data",
		"details": {"path": "/var/lib/postgresql/data", "mode": "nobody"},
	}}
	"SRE-DATA-006" in ids(data.deny) with input as {"action": {
		"tool": "file", "verb": "chown", "mutating": true, "details": {"path": "/var/lib/mysql", "mode": "root:root"},
	}}
}

test_datastore_dir_given_back_to_its_server_allowed if {
	count(data.deny) == 0 with input as {"action": {
		"tool": "file", "verb": "chown", "mutating": true,
		"details": {"path": "/var/lib/postgresql/data", "mode": "postgres:postgres"},
	}}
	count(data.deny) == 0 with input as {"action": {
		"tool": "file", "verb": "chown", "mutating": true, "details": {"path": "/bitnami/redis", "mode": "1001"},
	}}
	count(data.deny) == 0 with input as {"action": {
		"tool": "file", "verb": "chown", "mutating": true, "details": {"path": "/var/lib/mysql", "mode": ":mysql"},
	}}
}

test_chown_elsewhere_allowed if {
	count(data.deny) == 0 with input as {"action": {
		"tool": "file", "verb": "chown", "mutating": true, "details": {"path": "/tmp/report", "mode": "nobody"},
	}}
}

logs(details) := {"action": {"tool": "mysql", "verb": "reset master", "mutating": true, "details": object.union({"sql_kind": "server"}, details)}}

test_throwing_away_binlogs_or_slots_is_denied if {
	"SRE-DATA-015" in ids(data.deny) with input as logs({"discards_logs": "every binary log"})
	"SRE-DATA-015" in ids(data.deny) with input as {"action": {"tool": "psql", "verb": "pg_drop_replication_slot", "mutating": true, "details": {"sql_kind": "function", "discards_logs": "a replication slot"}}}
	# PURGE BINARY LOGS BEFORE NOW() - INTERVAL 7 DAY keeps the recent logs: the classifier names nothing.
	not "SRE-DATA-015" in ids(data.deny) with input as logs({})
}

test_a_where_that_every_row_passes_is_named_in_the_denial if {
	inp := {"action": {"tool": "psql", "verb": "update", "mutating": true, "details": {"sql_kind": "dml", "table": "orders", "has_where": false, "where_selects_all": true}}}
	some f in data.deny with input as inp
	f.id == "SRE-DATA-004"
	contains(f.msg, "every row passes")
	some g in data.deny with input as sql("DELETE", false)
	g.id == "SRE-DATA-004"
	contains(g.msg, "has no WHERE clause")
}

# Red team 2 (H6): a column rewritten USING an expression that ignores it; MEMORY tables; DROP col after IF EXISTS.
alter_table(statement, details) := {"action": {"tool": "psql", "verb": "alter table", "mutating": true, "details": object.union({"sql_kind": "ddl", "table": "order_order", "statement": statement}, details)}}

test_a_column_rewritten_from_a_constant_is_denied if {
	"SRE-DATA-002" in ids(data.deny) with input as alter_table("alter table order_order alter column total type int using (0)", {"rewrites_column": "total"})
	not "SRE-DATA-002" in ids(data.deny) with input as alter_table("alter table order_order alter column total type int using total::int", {})
}

test_drop_without_column_after_if_exists_is_denied if {
	"SRE-DATA-002" in ids(data.deny) with input as alter_table("alter table if exists order_order drop total", {})
	"SRE-DATA-002" in ids(data.deny) with input as alter_table("alter table only order_order drop total", {})
	not "SRE-DATA-002" in ids(data.deny) with input as alter_table("alter table if exists order_order drop constraint c", {})
}

test_a_memory_engine_is_denied_and_innodb_is_not if {
	"SRE-DATA-002" in ids(data.deny) with input as alter_table("alter table tabUser engine=memory", {})
	not "SRE-DATA-002" in ids(data.deny) with input as alter_table("alter table tabUser engine=InnoDB", {})
}

# H5: PURGE ... TO and replica resets (the classifier names what is discarded).
test_binary_logs_purged_to_a_name_are_denied if {
	"SRE-DATA-015" in ids(data.deny) with input as {"action": {"tool": "mysql", "verb": "purge binary", "mutating": true, "details": {"sql_kind": "server", "discards_logs": "every binary log before the one named (all of them, for a name past the last)"}}}
	not "SRE-DATA-015" in ids(data.deny) with input as {"action": {"tool": "mysql", "verb": "purge binary", "mutating": true, "details": {"sql_kind": "server"}}}
}

test_a_glob_is_judged_as_every_data_path_it_could_match if {
	every path in ["/var/lib/p*ostgresql/data", "/var/lib/postgres?l/data", "/var/lib/[p]ostgresql/data",
		"/var/*/mysql/ibdata1", "/v*"] {
		"SRE-DATA-006" in ids(data.deny) with input as {"action": {"tool": "file", "verb": "delete", "mutating": true, "details": {"path": path}}}
	}
	every path in ["/var/log/p*/x", "/tmp/*/postgresql", "/var/lib/x*/data"] {
		not "SRE-DATA-006" in ids(data.deny) with input as {"action": {"tool": "file", "verb": "delete", "mutating": true, "details": {"path": path}}}
	}
}

test_a_glob_that_could_name_a_system_directory_is_one if {
	every path in ["/e?c", "/[e]tc", "/e*c/*", "/u*"] {
		"SRE-DATA-011" in ids(data.deny) with input as {"action": {"tool": "file", "verb": "delete", "mutating": true, "details": {"path": path, "recursive": true}}}
	}
	every path in ["/tmp/e?c", "/etc/nginx/*.bak"] {
		not "SRE-DATA-011" in ids(data.deny) with input as {"action": {"tool": "file", "verb": "delete", "mutating": true, "details": {"path": path, "recursive": true}}}
	}
}
