package guardrail.rules.secrets_test

import data.guardrail.rules.secrets

ids(set) := {f.id | some f in set}

kget(kind, name, raw) := {"action": {"tool": "kubectl", "verb": "get", "mutating": false, "target": {"kind": kind, "name": name, "namespace": "slack"}, "raw": raw}}

test_get_named_secret_denied if "SRE-SECRET-001" in ids(secrets.deny) with input as kget("secret", "db-credentials", "kubectl get secret db-credentials -n slack")

test_get_secrets_as_yaml_denied if "SRE-SECRET-001" in ids(secrets.deny) with input as kget("secret", "", "kubectl get secrets -n slack -o yaml")

test_list_secret_names_allowed if count(secrets.deny) == 0 with input as kget("secret", "", "kubectl get secrets -n slack")

test_describe_secret_allowed if {
	count(secrets.deny) == 0 with input as {"action": {"tool": "kubectl", "verb": "describe", "mutating": false, "target": {"kind": "secret", "name": "db-credentials"}}}
}

test_get_configmap_allowed if count(secrets.deny) == 0 with input as kget("configmap", "app-config", "kubectl get cm app-config -o yaml")

test_sa_token_read_denied if {
	"SRE-SECRET-002" in ids(secrets.deny) with input as {
		"action": {"tool": "kubectl", "verb": "exec", "mutating": false},
		"command": "kubectl exec svc-auth-0 -- cat /var/run/secrets/kubernetes.io/serviceaccount/token",
	}
}

test_create_token_denied if {
	"SRE-SECRET-002" in ids(secrets.deny) with input as {"action": {"tool": "kubectl", "verb": "create token", "mutating": true, "raw": "kubectl create token default -n slack"}}
}

test_environ_dump_denied if {
	"SRE-SECRET-003" in ids(secrets.deny) with input as {"action": {"tool": "shell", "verb": "cat", "mutating": false}, "command": "kubectl exec svc-message-0 -- cat /proc/1/environ"}
}

test_reading_logs_allowed if {
	count(secrets.deny) == 0 with input as {"action": {"tool": "kubectl", "verb": "logs", "mutating": false, "target": {"kind": "pod", "name": "svc-auth-0"}}, "command": "kubectl logs svc-auth-0 -n slack --tail=50"}
}

secret_get(details, name) := {"action": {"tool": "kubectl", "verb": "get", "mutating": false, "raw": "kubectl get", "target": {"kind": "secret", "name": name}, "details": details}, "command": "kubectl get"}

test_any_output_format_but_the_table_reads_values if {
	"SRE-SECRET-001" in ids(secrets.deny) with input as secret_get({"output": "yaml"}, "")
	"SRE-SECRET-001" in ids(secrets.deny) with input as secret_get({"output": "template"}, "")
	count(secrets.deny) == 0 with input as secret_get({"output": "wide"}, "")
	count(secrets.deny) == 0 with input as secret_get({}, "")
}

test_secrets_listed_after_another_kind_are_secrets if {
	c := "kubectl get configmaps,secrets -o yaml"
	inp := {"action": {"tool": "kubectl", "verb": "get", "mutating": false, "raw": c, "target": {"kind": "configmap", "name": ""}, "details": {"output": "yaml", "resource_kinds": ["configmap", "secret"]}}, "command": c}
	"SRE-SECRET-001" in ids(secrets.deny) with input as inp
}

test_the_raw_secrets_api_is_a_secret_read if {
	c := "kubectl get --raw /api/v1/namespaces/frappe/secrets"
	inp := {"action": {"tool": "kubectl", "verb": "get", "mutating": false, "raw": c, "target": {"kind": "", "name": "api/v1/namespaces/frappe/secrets"}, "details": {}}, "command": c}
	"SRE-SECRET-001" in ids(secrets.deny) with input as inp
}

test_a_token_minted_with_flags_before_create_is_denied if {
	c := "kubectl -n saleor create token default"
	inp := {"action": {"tool": "kubectl", "verb": "create", "mutating": true, "raw": c, "target": {"kind": "serviceaccount token", "name": "default"}, "details": {}}, "command": c}
	"SRE-SECRET-002" in ids(secrets.deny) with input as inp
}

shell_read(c) := {"action": {"tool": "cat", "verb": "read", "mutating": false, "raw": c}, "command": c}

test_an_example_env_file_and_a_filtered_out_password_line_are_not_secret_reads if {
	count(secrets.deny) == 0 with input as shell_read("cat /app/.env.example")
	count(secrets.deny) == 0 with input as shell_read("grep maxmemory /etc/redis/redis.conf | grep -v requirepass")
	"SRE-SECRET-003" in ids(secrets.deny) with input as shell_read("cat /app/.env")
	"SRE-SECRET-003" in ids(secrets.deny) with input as shell_read("cat /etc/redis/redis.conf | grep requirepass")
}

test_an_example_file_beside_a_real_env_file_still_reads_the_real_one if {
	"SRE-SECRET-003" in ids(secrets.deny) with input as shell_read("cat /app/.env.example /app/.env")
	"SRE-SECRET-003" in ids(secrets.deny) with input as shell_read("cat .env.production")
	"SRE-SECRET-003" in ids(secrets.deny) with input as shell_read("cat .env-prod")
	count(secrets.deny) == 0 with input as shell_read("cat .envrc.md")
	count(secrets.deny) == 0 with input as shell_read("cat /app/.env.sample")
}

test_the_redis_password_searched_for_in_either_order_or_asked_of_the_server_is_a_secret_read if {
	"SRE-SECRET-003" in ids(secrets.deny) with input as shell_read("grep requirepass /etc/redis/redis.conf")
	"SRE-SECRET-003" in ids(secrets.deny) with input as shell_read("grep -rn requirepass /etc")
	"SRE-SECRET-003" in ids(secrets.deny) with input as shell_read("awk '/requirepass/' /etc/redis/redis.conf")
	"SRE-SECRET-003" in ids(secrets.deny) with input as shell_read("redis-cli CONFIG GET requirepass")
	"SRE-SECRET-003" in ids(secrets.deny) with input as shell_read("redis-cli config get 'masterauth'")
	"SRE-SECRET-003" in ids(secrets.deny) with input as shell_read("grep -v '^#' /etc/redis/redis.conf | grep requirepass")
	count(secrets.deny) == 0 with input as shell_read("grep -v requirepass /etc/redis/redis.conf")
	count(secrets.deny) == 0 with input as shell_read("redis-cli CONFIG GET maxmemory")
}

pod_action(tool, verb, raw) := {"action": {"tool": tool, "verb": verb, "mutating": false, "raw": raw, "details": {"pod": "svc-0"}}, "command": sprintf("kubectl exec svc-0 -- %s", [raw])}

test_a_pods_environment_printed_whole_or_a_credential_variable_is_a_secret_read if {
	"SRE-SECRET-003" in ids(secrets.deny) with input as pod_action("shell", "env", "env")
	"SRE-SECRET-003" in ids(secrets.deny) with input as pod_action("printenv", "printenv", "printenv")
	"SRE-SECRET-003" in ids(secrets.deny) with input as pod_action("printenv", "printenv", "printenv DB_PASSWORD")
	"SRE-SECRET-003" in ids(secrets.deny) with input as pod_action("printenv", "printenv", "printenv HOME DATABASE_URL")
	count(secrets.deny) == 0 with input as pod_action("printenv", "printenv", "printenv REDIS_HOST POOL_SIZE")
	count(secrets.deny) == 0 with input as {"action": {"tool": "shell", "verb": "env", "mutating": false, "raw": "env", "details": {}}, "command": "env"}
}

test_the_token_path_however_spelt_is_a_token_read if {
	"SRE-SECRET-002" in ids(secrets.deny) with input as shell_read("cat /var/run/secrets//kubernetes.io/serviceaccount/token")
	"SRE-SECRET-002" in ids(secrets.deny) with input as shell_read("cat /var/run/secrets/kubernetes.io/./serviceaccount/token")
	"SRE-SECRET-002" in ids(secrets.deny) with input as shell_read("cat /var/run/secrets/*/serviceaccount/tok*")
	"SRE-SECRET-002" in ids(secrets.deny) with input as shell_read("cat /run/secrets/*/*/token")
	"SRE-SECRET-002" in ids(secrets.deny) with input as shell_read("cd /var/run/secrets/kubernetes.io/serviceaccount && cat token")
	count(secrets.deny) == 0 with input as shell_read("ls /var/run/app/config/")
	count(secrets.deny) == 0 with input as shell_read("cat ./serviceaccount.md")
}

test_the_secrets_mount_read_by_any_tool_is_a_token_read if {
	"SRE-SECRET-002" in ids(secrets.deny) with input as shell_read("grep -r . /var/run/secrets")
	"SRE-SECRET-002" in ids(secrets.deny) with input as shell_read("find /var/run/secrets -name token -exec cat {} +")
	count(secrets.deny) == 0 with input as shell_read("ls /var/run/app")
	count(secrets.deny) == 0 with input as shell_read("redis-cli -a \"$(cat /run/secrets/redis-pw)\" PING")
}

test_a_pods_environment_listed_by_the_shell_or_a_credential_printed_is_a_secret_read if {
	"SRE-SECRET-003" in ids(secrets.deny) with input as pod_action("printenv", "printenv", "printenv -0")
	"SRE-SECRET-003" in ids(secrets.deny) with input as pod_action("shell", "export", "export -p")
	"SRE-SECRET-003" in ids(secrets.deny) with input as pod_action("shell", "set", "set")
	"SRE-SECRET-003" in ids(secrets.deny) with input as pod_action("echo", "echo", "echo $DB_PASSWORD")
	count(secrets.deny) == 0 with input as pod_action("printenv", "printenv", "printenv PATH")
	count(secrets.deny) == 0 with input as pod_action("shell", "set", "set -e")
	count(secrets.deny) == 0 with input as pod_action("redis-cli", "ping", "redis-cli -a \"$REDIS_PASSWORD\" PING")
}

test_variable_names_are_read_by_their_words_and_example_files_by_their_suffix if {
	count(secrets.deny) == 0 with input as pod_action("printenv", "printenv", "printenv KEYSPACE_COUNT MONKEY")
	"SRE-SECRET-003" in ids(secrets.deny) with input as pod_action("printenv", "printenv", "printenv API_KEY")
	count(secrets.deny) == 0 with input as shell_read("cat /app/.env.local.example")
	"SRE-SECRET-003" in ids(secrets.deny) with input as shell_read("cat /app/.env.local")
}

test_a_config_get_glob_that_matches_the_password_is_a_secret_read if {
	"SRE-SECRET-003" in ids(secrets.deny) with input as shell_read("redis-cli CONFIG GET requir?pass")
	"SRE-SECRET-003" in ids(secrets.deny) with input as shell_read("redis-cli CONFIG GET '*'")
	count(secrets.deny) == 0 with input as shell_read("redis-cli CONFIG GET 'max*'")
}

test_a_grep_for_pass_or_auth_in_a_redis_config_is_a_secret_read if {
	"SRE-SECRET-003" in ids(secrets.deny) with input as shell_read("grep -E 'require(pass)' /opt/bitnami/redis/etc/redis.conf")
	"SRE-SECRET-003" in ids(secrets.deny) with input as shell_read("cat /etc/redis/redis.conf | grep -i auth")
	count(secrets.deny) == 0 with input as shell_read("grep maxmemory /etc/redis/redis.conf")
}

test_credential_files_by_name_or_place_are_denied if {
	every raw in ["cat /etc/secrets/db-password", "cat /app/config/secrets.yaml", "cat ~/.kube/config", "cat ~/.ssh/id_rsa",
		"head -c 100 /home/u/.aws/credentials"] {
		"SRE-SECRET-003" in {f.id | some f in secrets.deny} with input as {"action": {"tool": "cat", "verb": "cat", "mutating": false, "raw": raw}, "command": raw}
	}
	every raw in ["ls /etc/secrets/", "cat /etc/app/app.yaml", "grep -c secrets.yaml.example notes.txt"] {
		not "SRE-SECRET-003" in {f.id | some f in secrets.deny} with input as {"action": {"tool": "cat", "verb": "cat", "mutating": false, "raw": raw}, "command": raw}
	}
}

test_pgbouncer_userlist_is_a_credential_file if {
	raw := "cat /etc/pgbouncer/userlist.txt"
	"SRE-SECRET-003" in ids(secrets.deny) with input as {"action": {"tool": "cat", "verb": "cat", "mutating": false, "raw": raw}, "command": raw}
	other := "cat /etc/pgbouncer/pgbouncer.ini"
	count(secrets.deny) == 0 with input as {"action": {"tool": "cat", "verb": "cat", "mutating": false, "raw": other}, "command": other}
}

sql_read(tool, raw) := {"action": {"tool": tool, "verb": "select", "mutating": false, "raw": raw}, "command": raw}

test_the_servers_password_hashes_are_secrets if {
	"SRE-SECRET-003" in ids(secrets.deny) with input as sql_read("psql", "psql -c 'SELECT rolname, rolpassword FROM pg_authid'")
	"SRE-SECRET-003" in ids(secrets.deny) with input as sql_read("psql", "psql -c 'select * from pg_shadow'")
	"SRE-SECRET-003" in ids(secrets.deny) with input as sql_read("mysql", "mysql -e 'select user, authentication_string from mysql.user'")
	"SRE-SECRET-003" in ids(secrets.deny) with input as sql_read("mysql", "mysql -e 'SELECT User, Password FROM mysql.user'")
	count(secrets.deny) == 0 with input as sql_read("psql", "psql -c 'SELECT rolname, rolconnlimit, rolvaliduntil FROM pg_roles'")
	count(secrets.deny) == 0 with input as sql_read("mysql", "mysql -e 'select user, host, max_user_connections from mysql.user'")
}

test_kubectl_config_with_its_keys_inline_is_a_secret_read if {
	every raw in ["kubectl config view --raw", "kubectl config view --flatten --minify"] {
		"SRE-SECRET-003" in ids(secrets.deny) with input as {"action": {"tool": "kubectl", "verb": "config view", "mutating": false, "raw": raw}, "command": raw}
	}
	every raw in ["kubectl config view", "kubectl config view --minify"] {
		count(secrets.deny) == 0 with input as {"action": {"tool": "kubectl", "verb": "config view", "mutating": false, "raw": raw}, "command": raw}
	}
}
