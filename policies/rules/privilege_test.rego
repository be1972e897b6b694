package guardrail.rules.privilege_test

import data.guardrail.rules.privilege

ids(set) := {f.id | some f in set}

ctx := {"extra": {"grantees": ["site_db"]}}

mariadb_grant(g) := grant_in(g, ctx)

grant_in(g, c) := {"action": {
	"tool": "mysql", "verb": "grant", "mutating": true, "layer": "declared",
	"keys": [{"key": "mariadb.grant", "value": g}],
	"details": {"sql_kind": "GRANT"},
}, "context": c}

good := {"privileges": ["DELETE"], "on": "site_db.*", "to": "'site_db'@'%'", "all": false}

test_narrow_grant_to_named_account_allowed if count(privilege.deny) == 0 with input as mariadb_grant(good)

test_grant_all_denied if {
	"SRE-PRIV-001" in ids(privilege.deny) with input as mariadb_grant(object.union(good, {"all": true, "privileges": ["ALL PRIVILEGES"]}))
}

test_grant_on_star_star_denied if {
	"SRE-PRIV-002" in ids(privilege.deny) with input as mariadb_grant(object.union(good, {"on": "*.*"}))
}

test_grant_to_other_account_denied if {
	"SRE-PRIV-003" in ids(privilege.deny) with input as mariadb_grant(object.union(good, {"to": "'root'@'%'"}))
}

test_grant_with_no_named_account_warns if {
	inp := grant_in(good, {})
	"SRE-PRIV-004" in ids(privilege.warn) with input as inp
	count(privilege.deny) == 0 with input as inp
}

test_postgres_grant_from_details if {
	"SRE-PRIV-003" in ids(privilege.deny) with input as {
		"action": {"tool": "psql", "verb": "grant", "mutating": true, "details": {
			"sql_kind": "GRANT", "privileges": ["SELECT"], "on": "messages", "grantee": "svc_admin",
		}},
		"context": {"extra": {"db_users": ["app"]}},
	}
}

test_with_grant_option_denied if {
	inp := object.union(mariadb_grant(good), {"command": "mysql -e \"GRANT DELETE ON site_db.* TO 'site_db'@'%' WITH GRANT OPTION\""})
	"SRE-PRIV-005" in ids(privilege.deny) with input as inp
}

test_alter_role_superuser_denied if {
	"SRE-PRIV-006" in ids(privilege.deny) with input as {"action": {
		"tool": "psql", "verb": "alter role", "mutating": true, "raw": "psql -c 'ALTER ROLE app SUPERUSER'",
	}}
}

test_alter_role_set_guc_allowed if {
	count(privilege.deny) == 0 with input as {"action": {
		"tool": "psql", "verb": "alter role", "mutating": true,
		"raw": "psql -c \"ALTER ROLE app IN DATABASE app SET idle_in_transaction_session_timeout='15s'\"",
	}}
}

test_clusterrolebinding_denied if {
	"SRE-PRIV-007" in ids(privilege.deny) with input as {"action": {
		"tool": "kubectl", "verb": "create", "mutating": true,
		"target": {"kind": "clusterrolebinding", "name": "agent-admin"},
	}}
}

test_reading_clusterroles_allowed if {
	count(privilege.deny) == 0 with input as {"action": {
		"tool": "kubectl", "verb": "get", "mutating": false, "target": {"kind": "clusterrolebinding"},
	}}
}

test_cluster_admin_rolebinding_denied if {
	"SRE-PRIV-008" in ids(privilege.deny) with input as {"action": {
		"tool": "kubectl", "verb": "create", "mutating": true, "target": {"kind": "rolebinding", "name": "x"},
		"raw": "kubectl create rolebinding x --clusterrole=cluster-admin --user=agent -n slack",
	}}
}

test_superuser_granted_beside_a_no_attribute_is_denied if {
	c := "psql -c \"ALTER ROLE app WITH SUPERUSER NOREPLICATION\""
	inp := {"action": {"tool": "psql", "verb": "alter role", "mutating": true, "raw": c, "keys": [{"key": "postgres.role.superuser", "value": true}, {"key": "postgres.role.replication", "value": false}]}, "command": c}
	"SRE-PRIV-006" in {f.id | some f in privilege.deny} with input as inp
	count({f | some f in privilege.deny; f.id == "SRE-PRIV-006"}) == 1 with input as inp
}

test_cluster_admin_bound_through_a_quoted_option_is_denied if {
	c := "kubectl create rolebinding agent --clusterrole \"cluster-admin\" --serviceaccount=default:agent"
	inp := {"action": {"tool": "kubectl", "verb": "create", "mutating": true, "raw": c, "target": {"kind": "rolebinding", "name": "agent"}, "details": {"clusterrole": ["cluster-admin"]}}, "command": c}
	"SRE-PRIV-008" in {f.id | some f in privilege.deny} with input as inp
}

test_a_password_change_warns if {
	"SRE-PRIV-009" in {f.id | some f in data.guardrail.rules.privilege.warn} with input as {"action": {
		"tool": "psql", "verb": "alter role", "mutating": true, "target": {"name": "postgres"},
		"keys": [{"key": "postgres.role.password", "value": "<redacted>", "scope": {"role": "app"}}],
	}}
}

test_a_revoke_is_not_a_password_change if {
	not "SRE-PRIV-009" in {f.id | some f in data.guardrail.rules.privilege.warn} with input as {"action": {
		"tool": "psql", "verb": "revoke", "mutating": true, "target": {"name": "postgres"},
		"keys": [{"key": "postgres.grant", "value": ["DELETE"], "scope": {"grantee": "app"}}],
	}}
}

# ---- SRE-PRIV-010: a binding to the built-in admin or edit role ---------------------------------------------

rolebinding(details) := {"action": {
	"tool": "kubectl", "verb": "create", "mutating": true,
	"target": {"kind": "rolebinding", "name": "x", "namespace": "default"}, "details": details,
}}

test_rolebinding_admin_or_edit_denied if {
	"SRE-PRIV-010" in ids(privilege.deny) with input as rolebinding({"clusterrole": ["admin"], "serviceaccount": ["default:app"]})
	"SRE-PRIV-010" in ids(privilege.deny) with input as rolebinding({"clusterrole": ["Edit"]})
}

test_rolebinding_narrow_role_allowed if {
	count(privilege.deny) == 0 with input as rolebinding({"clusterrole": ["view"]})
	count(privilege.deny) == 0 with input as rolebinding({"role": ["pod-reader"]})
}

test_rolebinding_dry_run_allowed if {
	count(privilege.deny) == 0 with input as {"action": {"tool": "kubectl", "verb": "create", "mutating": false,
		"target": {"kind": "rolebinding", "name": "x"}, "details": {"clusterrole": ["admin"], "dry_run": "client"}}}
}

test_wildcard_role_denied if {
	"SRE-PRIV-010" in ids(privilege.deny) with input as {"action": {"tool": "kubectl", "verb": "create", "mutating": true,
		"target": {"kind": "role", "name": "super"}, "details": {"wildcard_role": true}}}
}

test_narrow_role_allowed if {
	count(privilege.deny) == 0 with input as {"action": {"tool": "kubectl", "verb": "create", "mutating": true,
		"target": {"kind": "role", "name": "pod-reader"}, "details": {}}}
}

redis_cfg(key) := {"action": {"tool": "redis-cli", "verb": "config set", "mutating": true, "target": {"kind": "component", "name": "redis"}, "keys": [{"key": key, "value": "x"}]}}

test_a_new_redis_password_warns if {
	"SRE-PRIV-009" in {f.id | some f in data.guardrail.rules.privilege.warn} with input as redis_cfg("redis.requirepass")
	not "SRE-PRIV-009" in {f.id | some f in data.guardrail.rules.privilege.warn} with input as redis_cfg("redis.maxmemory")
}

admin_grant_in(privs, details) := {"action": {"tool": "mysql", "verb": "grant", "mutating": true, "details": object.union({"sql_kind": "grant", "privileges": privs, "to": "'app'@'%'"}, details)}}

test_an_administrators_role_or_proxy_is_denied if {
	"SRE-PRIV-006" in {f.id | some f in data.guardrail.rules.privilege.deny} with input as admin_grant_in(["ROOT @LOCALHOST"], {"role_membership": true})
	"SRE-PRIV-006" in {f.id | some f in data.guardrail.rules.privilege.deny} with input as admin_grant_in(["POSTGRES"], {"role_membership": true})
	"SRE-PRIV-006" in {f.id | some f in data.guardrail.rules.privilege.deny} with input as admin_grant_in(["PROXY"], {"on": "root"})
	not "SRE-PRIV-006" in {f.id | some f in data.guardrail.rules.privilege.deny} with input as admin_grant_in(["PG_READ_ALL_STATS"], {"role_membership": true})
	not "SRE-PRIV-006" in {f.id | some f in data.guardrail.rules.privilege.deny} with input as admin_grant_in(["SELECT"], {"on": "frappe.*"})
}

# As the SQL lexer read it: a comment between WITH and GRANT does not hide the option.
test_with_grant_option_read_from_the_parsed_statement if {
	"SRE-PRIV-005" in ids(privilege.deny) with input as {"action": {
		"tool": "psql", "verb": "grant", "mutating": true, "words": ["psql", "-c", "GRANT ALL ON t TO bob WITH/**/GRANT OPTION"],
		"keys": [{"key": "postgres.grant", "value": ["ALL"], "scope": {"grantee": "bob"}}],
		"details": {"sql_kind": "grant", "privileges": ["ALL"], "on": "t", "to": "bob", "grantees": ["bob"], "all": true, "with_grant_option": true},
	}, "context": ctx}
}

file_action(verb, d) := {"action": {"tool": "file", "verb": verb, "mutating": true, "layer": "runtime",
	"keys": [], "details": d}, "context": {}}

test_a_setuid_bit_is_denied if {
	"SRE-PRIV-011" in ids(privilege.deny) with input as file_action("chmod", {"path": "/tmp/sh", "mode": "u+s", "sets_id_bit": true})
	"SRE-PRIV-011" in ids(privilege.deny) with input as file_action("write", {"path": "/tmp/sh", "mode": "4755", "sets_id_bit": true})
}

test_a_plain_mode_is_not_denied if {
	not "SRE-PRIV-011" in ids(privilege.deny) with input as file_action("chmod", {"path": "/tmp/sh", "mode": "755"})
}
