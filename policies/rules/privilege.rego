# Broad privilege grants: GRANT ALL, grants ON *.*, grants to accounts the incident does not name, WITH GRANT
# OPTION, superuser roles, and cluster-wide RBAC bindings. A repair grants the one privilege that is missing,
# on the one schema, to the one account the incident names.
package guardrail.rules.privilege

import data.guardrail.lib

# Grant facts from the mariadb grant key ({privileges, on, to, all}) or from a SQL classifier's details.
grants contains g if {
	some k in input.action.keys
	k.key == "mariadb.grant"
	is_object(k.value)
	g := normalised(k.value)
}

grants contains g if {
	upper(object.get(lib.details, "sql_kind", "")) == "GRANT"
	g := normalised({
		"privileges": object.get(lib.details, "privileges", []),
		"on": object.get(lib.details, "on", object.get(lib.details, "object", "")),
		"to": object.get(lib.details, "to", object.get(lib.details, "grantee", "")),
		"all": object.get(lib.details, "all", false),
	})
}

normalised(g) := {
	"privileges": [upper(p) | some p in as_list(object.get(g, "privileges", []))],
	"on": object.get(g, "on", ""),
	"to": [t | some t in as_list(object.get(g, "to", ""))],
	"all": object.get(g, "all", false),
}

as_list(x) := x if {
	is_array(x)
} else := [x] if {
	is_string(x)
	x != ""
} else := []

grants_all(g) if g.all == true

grants_all(g) if {
	some p in g.privileges
	p in {"ALL", "ALL PRIVILEGES"}
}

deny contains {
	"id": "SRE-PRIV-001",
	"msg": sprintf("GRANT ALL on %s gives every privilege, far more than the fault removed. Grant only the missing privilege (e.g. GRANT DELETE ON <db>.* TO <the application account>).", [g.on]),
	"details": {"on": g.on, "to": g.to},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	some g in grants
	grants_all(g)
}

global_scopes := {"*.*", "*", "all tables", "all databases"}

deny contains {
	"id": "SRE-PRIV-002",
	"msg": sprintf("A grant ON %s reaches every database on the server. Scope it to the application's schema (ON <db>.*).", [g.on]),
	"details": {"on": g.on, "to": g.to},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	some g in grants
	lower(g.on) in global_scopes
}

deny contains {
	"id": "SRE-PRIV-003",
	"msg": sprintf("This grant goes to %s, which is not an account the incident names (%s). Grant only to the account the incident is about.", [grantee, concat(", ", sort(lib.named_accounts))]),
	"details": {"grantee": grantee, "named": sort(lib.named_accounts)},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	some g in grants
	count(lib.named_accounts) > 0
	some grantee in g.to
	not lower(lib.account_user(grantee)) in lib.named_accounts
}

warn contains {
	"id": "SRE-PRIV-004",
	"msg": sprintf("A grant to %s: the incident context names no account, so check this is the application's own account, and grant the narrowest privilege.", [concat(", ", g.to)]),
	"details": {"to": g.to},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	some g in grants
	count(lib.named_accounts) == 0
	count(g.to) > 0
}

deny contains {
	"id": "SRE-PRIV-005",
	"msg": "WITH GRANT OPTION lets the grantee hand its privileges on. Drop WITH GRANT OPTION and grant only what the application needs.",
	"details": {},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	count(grants) > 0
	hands_privileges_on
}

# As the SQL lexer read the statement (comments and quoting gone: `WITH/**/GRANT OPTION`); the text of a
# hand-written input without the classifier's details.
hands_privileges_on if lib.details.with_grant_option == true

hands_privileges_on if {
	some t in lib.texts
	regex.match(`(?i)with\s+grant\s+option`, t)
}

role_attributes_msg := "Granting SUPERUSER, CREATEROLE, BYPASSRLS or REPLICATION makes an account all-powerful. Repair the missing privilege with a scoped GRANT or ALTER ROLE ... SET instead."

deny contains {
	"id": "SRE-PRIV-006",
	"msg": role_attributes_msg,
	"details": {},
} if {
	input.action.tool == "psql"
	some t in lib.texts
	regex.match(`(?i)\b(alter|create)\s+(role|user)\b[^;]*\b(superuser|createrole|bypassrls|replication)\b`, t)
	not regex.match(`(?i)\bno(superuser|createrole|bypassrls|replication)\b`, t)
}

# The same from the keys the classifier gives each attribute: `SUPERUSER NOREPLICATION` grants SUPERUSER, whatever
# else in the text is switched off.
deny contains {
	"id": "SRE-PRIV-006",
	"msg": role_attributes_msg,
	"details": {},
} if {
	input.action.tool == "psql"
	some k in input.action.keys
	k.key in {"postgres.role.superuser", "postgres.role.createrole", "postgres.role.bypassrls", "postgres.role.replication"}
	k.value == true
}

# Membership in an administrator's role (`GRANT postgres TO app`, MariaDB `GRANT root@localhost TO app`, a cloud
# superuser role, the roles that read or write server files or run programs) or PROXY on another account (the
# grantee may log in as it): all of that account's powers at once.
deny contains {
	"id": "SRE-PRIV-006",
	"msg": sprintf("This grant makes %s act with an administrator's powers (%s). Repair the missing privilege with a scoped GRANT on the objects it needs instead.", [object.get(lib.details, "to", "the grantee"), concat(", ", object.get(lib.details, "privileges", []))]),
	"details": {"privileges": object.get(lib.details, "privileges", [])},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	lib.verb == "grant"
	admin_grant
}

admin_roles := {"root", "postgres", "rds_superuser", "cloudsqlsuperuser", "azure_pg_admin", "azure_superuser",
	"pg_execute_server_program", "pg_read_server_files", "pg_write_server_files", "mariadb.sys", "mysql.sys"}

admin_grant if {
	lib.details.role_membership == true
	some p in lib.details.privileges
	lower(trim(regex.replace(p, `\s*@.*$`, ""), "'\"` ")) in admin_roles
}

admin_grant if {
	some p in lib.details.privileges
	upper(p) == "PROXY"
}

rbac_kinds := {"clusterrolebinding", "clusterrolebindings", "clusterrole", "clusterroles"}

deny contains {
	"id": "SRE-PRIV-007",
	"msg": sprintf("Creating or changing a %s grants rights across the whole cluster. An incident repair needs no new RBAC; work with the access you have, or ask an operator.", [kind]),
	"details": {"kind": kind, "name": lib.target_name},
} if {
	input.action.mutating in {true, "unknown"}
	some kind in lib.kinds
	kind in rbac_kinds
}

cluster_admin_msg := "Binding cluster-admin gives full control of the cluster. Remove the binding; an incident repair needs no new rights."

deny contains {
	"id": "SRE-PRIV-008",
	"msg": cluster_admin_msg,
	"details": {},
} if {
	input.action.tool == "kubectl"
	lib.mutating
	some t in lib.texts
	regex.match(`(?i)--clusterrole[= ]cluster-admin|roleRef[^}]*cluster-admin`, t)
}

# The parsed option, however it was quoted (`--clusterrole "cluster-admin"`).
deny contains {
	"id": "SRE-PRIV-008",
	"msg": cluster_admin_msg,
	"details": {},
} if {
	input.action.tool == "kubectl"
	lib.mutating
	some r in object.get(lib.details, "clusterrole", [])
	lower(r) == "cluster-admin"
}

# A new password for an account: every client that logs in as it (the apps of the incident) fails until its own
# secret is changed to match.
warn contains {
	"id": "SRE-PRIV-009",
	"msg": sprintf("This %s gives %s a new password: every client that logs in as it fails until its secret matches. Change a password only when the incident is about it, and update the clients' declared secret in the same repair.", [lib.verb, account]),
	"details": {"verb": lib.verb, "account": account},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	lib.mutating
	some k in input.action.keys
	endswith(k.key, ".password")
	account := account_of(object.get(k, "scope", {}))
}

# Redis' own password (requirepass, the default user's): every client that authenticates with the old one fails
# on its next connection.
warn contains {
	"id": "SRE-PRIV-009",
	"msg": sprintf("CONFIG SET requirepass gives %s's default user a new password: every client that connects with the old one fails until its secret matches. Change it only when the incident is about it, and update the clients' declared secret in the same repair.", [lib.target_name]),
	"details": {"verb": lib.verb, "account": "default"},
} if {
	input.action.tool == "redis-cli"
	lib.verb == "config set"
	some k in input.action.keys
	k.key == "redis.requirepass"
}

account_of(scope) := found[0] if {
	found := [scope[f] | some f in ["user", "role", "grantee"]; scope[f]]
	count(found) > 0
} else := lib.target_name

# A RoleBinding to the built-in admin or edit role: every right in the namespace (edit: every workload, secret
# and config). PRIV-008 covers cluster-admin; a binding to one narrow role stays a repair.
broad_roles := {"admin", "edit"}

deny contains {
	"id": "SRE-PRIV-010",
	"msg": sprintf("Binding the %s role gives rights over the whole namespace, far more than any fault removed. Bind only a role with the one missing permission, or work with the access you have.", [role]),
	"details": {"role": role, "name": lib.target_name},
} if {
	input.action.tool == "kubectl"
	lib.mutating
	some r in object.get(lib.details, "clusterrole", [])
	role := lower(r)
	role in broad_roles
}

# A Role (or ClusterRole, also PRIV-007) that allows every verb on every resource: admin by another name.
deny contains {
	"id": "SRE-PRIV-010",
	"msg": sprintf("Role %s allows every verb on every resource, far more than any fault removed. Grant only the verbs and resources the one missing permission needs.", [lib.target_name]),
	"details": {"name": lib.target_name},
} if {
	input.action.tool == "kubectl"
	lib.mutating
	lib.details.wildcard_role == true
}

# A set-user-ID or set-group-ID bit turned on (`chmod u+s`, `chmod 4755`, `install -m 4755`): a copy of a shell or
# an interpreter so marked runs as its owner, root, for anyone who can start it. No repair of a service needs one.
deny contains {
	"id": "SRE-PRIV-011",
	"msg": sprintf("%s turns on the set-user-ID or set-group-ID bit of %s: the program then runs as its owner for anyone who starts it. No repair needs this; set the mode without s (e.g. 755).", [lib.verb, object.get(lib.details, "path", lib.target_name)]),
	"details": {"path": object.get(lib.details, "path", "")},
} if {
	object.get(lib.details, "sets_id_bit", false) == true
}
