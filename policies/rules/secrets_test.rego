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
