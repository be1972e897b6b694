# Reading secrets and service-account tokens: credentials are never needed to repair an incident, and once read
# they end up in the agent's context and transcript.
package guardrail.rules.secrets

import data.guardrail.lib

secret_kinds := {"secret", "secrets"}

secret_kind if lib.target_kind in secret_kinds

secret_kind if lower(lib.details.kind) in secret_kinds

# `kubectl get configmaps,secrets`: the first kind is the target, the others are listed here.
secret_kind if {
	some k in object.get(lib.details, "resource_kinds", [])
	lower(k) in secret_kinds
}

reads_secret_values if {
	lib.target_name != ""
}

# Every output format but the default table, `name` and `wide` prints the values (yaml, json, jsonpath, template,
# go-template, custom-columns ...), however the option was written (`-o=yaml`, `-o "yaml"`, `--output yaml`).
reads_secret_values if {
	out := lower(object.get(lib.details, "output", ""))
	out != ""
	not out in {"name", "wide"}
}

reads_secret_values if {
	some t in lib.texts
	regex.match(`(?i)(\s-o\s*|--output[= ])(yaml|json|jsonpath|go-template|custom-columns)`, t)
}

# --template alone prints through a Go template (`{{range .items}}{{.data}}{{end}}`): the values.
reads_secret_values if {
	some t in lib.texts
	regex.match(`(?i)\s--template[= ]`, t)
}

# The API read directly: `kubectl get --raw /api/v1/namespaces/x/secrets[/name]`.
deny contains {
	"id": "SRE-SECRET-001",
	"msg": "Reading secrets through the raw API would expose credentials. You do not need them to repair the incident: use `kubectl describe secret` (keys and sizes only), or the service's own health and admin endpoints.",
	"details": {"name": lib.target_name},
} if {
	input.action.tool == "kubectl"
	some t in lib.texts
	regex.match(`(?i)--raw[= ]\s*['"]?\S*/secrets\b`, t)
}

deny contains {
	"id": "SRE-SECRET-001",
	"msg": sprintf("Reading secret %s would expose credentials. You do not need them to repair the incident: use `kubectl describe secret` (keys and sizes only), or the service's own health and admin endpoints.", [object.get({"": "values"}, lib.target_name, lib.target_name)]),
	"details": {"name": lib.target_name},
} if {
	input.action.tool == "kubectl"
	input.action.verb in {"get", "edit", "view"}
	secret_kind
	reads_secret_values
}

token_msg := "This reads or mints a service-account token, which grants the workload's API access. Do not use tokens; work through the access you were given."

deny contains {
	"id": "SRE-SECRET-002",
	"msg": token_msg,
	"details": {},
} if {
	some t in lib.texts
	token_path(t)
}

# The token's directory or file however the path is spelt: `//` and `/./` collapse as the kernel reads them, and
# a glob over the secrets mount (`/var/run/secrets/*/serviceaccount/tok*`) reaches the same file.
token_path(t) if {
	p := regex.replace(t, `/(\.?/)+`, "/")
	regex.match(`(?i)/var/run/secrets(/|\s|$|['"])|/run/secrets/kubernetes\.io|/run/secrets/[^\s;&|]*/token|serviceaccount/(token|[^\s;&|]*[*?\[])|kubernetes\.io/serviceaccount`, p)
}

deny contains {
	"id": "SRE-SECRET-002",
	"msg": token_msg,
	"details": {"kind": lib.target_kind},
} if {
	input.action.tool == "kubectl"
	lib.verb in {"create token", "create"}
	mints_token
}

mints_token if lib.target_kind == "serviceaccount token"

mints_token if {
	some t in lib.texts
	regex.match(`(?i)kubectl\s+create\s+token\b`, t)
}

deny contains {
	"id": "SRE-SECRET-003",
	"msg": credential_msg,
	"details": {},
} if {
	some t in lib.texts
	credential_read(t)
}

# The servers' own password hashes: PostgreSQL's pg_authid/pg_shadow (rolpassword, passwd), MySQL's mysql.user
# (authentication_string, password). pg_roles and pg_user show the same rows with the password masked.
deny contains {
	"id": "SRE-SECRET-003",
	"msg": "This reads the database's password hashes, which are credentials too. You do not need them to repair the incident: read roles and their settings from pg_roles (PostgreSQL) or SHOW GRANTS (MySQL).",
	"details": {},
} if {
	input.action.tool in {"psql", "mysql", "mariadb", "sql"}
	some t in lib.texts
	regex.match(`(?is)\b(pg_authid|pg_shadow)\b|\b(rolpassword|authentication_string)\b|\bmysql\s*\.\s*user\b[^;]*\bpassword\b|\bselect\b[^;]*\bpassword\b[^;]*\bfrom\s+mysql\s*\.\s*user\b`, t)
}

# kubectl's client config with its certificates, keys and tokens inline.
deny contains {
	"id": "SRE-SECRET-003",
	"msg": "`kubectl config view --raw`/`--flatten` prints the client's certificates, keys and tokens. Use `kubectl config view` (they are redacted) or `kubectl config current-context`.",
	"details": {},
} if {
	input.action.tool == "kubectl"
	startswith(input.action.verb, "config")
	some t in lib.texts
	regex.match(`(?i)\bconfig\s+view\b[^|;&]*\s--(raw|flatten)\b`, t)
}

credential_msg := "Dumping a process environment or credential file exposes passwords and keys (`env | grep` matches values too: a URL holding a password). Read the one non-secret setting you need: `printenv NAME` of that variable in the pod, or `kubectl get deploy X -o jsonpath='{.spec.template.spec.containers[0].env}'` for declared values."

# Inside a pod (kubectl exec), the process environment printed whole (`env`, `printenv`) or a variable named like a
# credential: the same secrets as /proc/1/environ, injected from Secrets into the container's env.
deny contains {
	"id": "SRE-SECRET-003",
	"msg": credential_msg,
	"details": {},
} if {
	object.get(lib.details, "pod", "") != ""
	pod_env_read
}

pod_env_read if {
	input.action.tool == "shell"
	lib.verb == "env"
}

pod_env_read if {
	input.action.tool == "printenv"
	some name in printenv_names
	regex.match(`(?i)(^|_)(pass(wd|word)?|secret|token|credentials?|key|auth|dsn|url)(_|$)`, name)
}

pod_env_read if {
	input.action.tool == "printenv"
	count(printenv_names) == 0
}

# printenv's variable names (its options, -0 and --null, are not names).
printenv_names := [w | some t in lib.texts; some w in array.slice(regex.split(`\s+`, trim_space(t)), 1, 1000); not startswith(w, "-")]

# The shell's own listings of its variables (export -p, declare -p/-x, a bare set) print the same environment.
pod_env_read if {
	some t in lib.texts
	regex.match(`(^|[;&|(]\s*|\s)(export\s+-p|declare\s+-[a-z]*[px]|typeset\s+-[a-z]*[px]|set)\s*($|[;&|)])`, t)
}

# A credential-named variable printed in a pod (echo $DB_PASSWORD, printf %s "${API_TOKEN}"). Passing one to a
# client (redis-cli -a "$REDIS_PASSWORD") uses it without showing it, and is not this.
pod_env_read if {
	some t in lib.texts
	regex.match(`(^|[;&|(\s])(echo|printf)\s[^;&|]*\$\{?[A-Za-z0-9_]*(?i:pass|secret|token|credential|api_?key|private_?key)`, t)
}

# Each way a command text reads a credential, one body per reason, so that a harmless reading of one (an example
# env file, a password line filtered out) never hides another in the same text.
credential_read(t) if regex.match(`(?i)/proc/[^/\s]+/environ|\.pgpass|\.my\.cnf|/etc/shadow|\buserlist\.txt\b`, t)

# Files that hold credentials by their name or place: a mounted secret (/etc/secrets/..., /app/secrets/...; not
# /run/secrets/NAME, which a client is fed from with $(cat ...)), a secrets.yaml, a kubeconfig, an SSH private key,
# cloud and registry credentials.
credential_read(t) if regex.match(`(?i)\b(cat|tac|head|tail|less|more|strings|xxd|od|base64|cp|scp|nl|jq|yq)\s+[^|;&]*((/etc|/app|/opt|/srv|/config|/mnt|/home|~)[^\s|;&]*/secrets?/[^\s|;&]|\bsecrets?\.(ya?ml|json|env|txt|properties)\b|\.kube/config\b|\.ssh/id_|\bid_(rsa|ed25519|ecdsa|dsa)\b|\.aws/credentials|\.docker/config\.json|\.netrc\b|\.git-credentials)`, t)

# An env file printed with cat: `.env`, `.env.local`, `.env-prod`; not an example (.env.example, .sample, .template,
# .dist), nor a longer name (.envrc, .environment).
credential_read(t) if {
	some cat in regex.find_n(`(?i)\b(cat|tac|head|tail|less|more|strings|xxd|od|grep|awk)\s+[^|;&]*`, t, -1)
	some f in regex.find_n(`(?i)\.env(\.[a-z0-9_.-]*[a-z0-9_-])?\b`, cat, -1)
	not regex.match(`(?i)\.(example|sample|template|dist)$`, f)
}

# The redis password searched for, in the config file (either order) or with grep anywhere, or asked of the server.
credential_read(t) if {
	regex.match(`(?i)redis\.conf.*requirepass|requirepass.*redis\.conf|grep\s[^|;&]*requirepass|grep\s[^|;&]*(pass|auth)[^|;&]*redis[^\s|;&]*\.conf|redis[^\s|;&]*\.conf.*\|\s*grep\s[^|;&]*(pass|auth)`, t)
	not requirepass_filtered_out(t)
}

credential_read(t) if regex.match(`(?i)config\s+get\s+['"]?[^\s'"]*(requirepass|masterauth|pass|auth)`, t)

# A glob that matches a password parameter (CONFIG GET requir?pass, CONFIG GET *): redis answers with the password.
credential_read(t) if {
	some m in regex.find_all_string_submatch_n(`(?i)config\s+get\s+['"]?([^\s'"]*[*?\[][^\s'"]*)`, t, -1)
	some param in ["requirepass", "masterauth"]
	glob.match(lower(m[1]), [], param)
}

# The password line filtered out (`grep -v requirepass`) rather than searched for, and no other grep searches for it.
requirepass_filtered_out(t) if {
	regex.match(`(?i)grep\s+(-[a-z]*v[a-z]*\s+)+['"]?requirepass`, t)
	not regex.match(`(?i)grep\s+(-[a-uw-z]+\s+)*['"]?requirepass`, t)
}
