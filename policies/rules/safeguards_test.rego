package guardrail.rules.safeguards_test

import data.guardrail.rules.safeguards

ids(set) := {f.id | some f in set}

keep_maintenance := {"constraints": [{"id": "c1", "text": "do not disable maintenance", "kind": "keep_enabled", "targets": ["maintenance"]}]}

keep_window := {"constraints": [{"id": "c2", "text": "the strict window is mandated", "kind": "keep_active", "targets": ["svc-channel/read_consistency_strict"]}]}

change(key, value, ctx) := {
	"action": {"tool": "curl", "verb": "PUT", "mutating": true, "layer": "runtime", "keys": [{"key": key, "value": value}], "target": {"kind": "component", "name": "svc-channel"}},
	"context": ctx,
}

test_maintenance_disabled_denied_when_kept if {
	"SRE-SAFE-001" in ids(safeguards.deny) with input as change("maintenance.enabled", false, keep_maintenance)
}

test_maintenance_disabled_as_string_denied if {
	"SRE-SAFE-001" in ids(safeguards.deny) with input as change("maintenance.enabled", "false", keep_maintenance)
}

test_maintenance_switched_to_an_empty_string_denied if {
	"SRE-SAFE-001" in ids(safeguards.deny) with input as change("maintenance.enabled", "", keep_maintenance)
	"SRE-SAFE-001" in ids(safeguards.deny) with input as change("maintenance.enabled", " ", keep_maintenance)
}

test_maintenance_moved_allowed if {
	count(safeguards.deny) == 0 with input as change("maintenance.offset_s", 55, keep_maintenance)
}

test_maintenance_enabled_true_allowed if {
	count(safeguards.deny) == 0 with input as change("maintenance.enabled", true, keep_maintenance)
}

test_maintenance_disabled_without_constraint_warns if {
	inp := change("maintenance.enabled", false, {})
	"SRE-SAFE-003" in ids(safeguards.warn) with input as inp
	count(safeguards.deny) == 0 with input as inp
}

test_maintenance_zero_duration_denied if {
	"SRE-SAFE-004" in ids(safeguards.deny) with input as change("maintenance.duration_s", 0, keep_maintenance)
}

test_maintenance_duration_kept_allowed if {
	count(safeguards.deny) == 0 with input as change("maintenance.duration_s", 8, keep_maintenance)
}

test_auth_middleware_off_denied if {
	"SRE-SAFE-002" in ids(safeguards.deny) with input as change("app.middleware.auth.enabled", false, {})
}

test_disable_auth_env_denied if {
	"SRE-SAFE-002" in ids(safeguards.deny) with input as change("k8s.env.DISABLE_AUTH", "1", {})
}

test_csrf_off_denied if {
	"SRE-SAFE-002" in ids(safeguards.deny) with input as change("helm.web.security.csrf", "off", {})
}

test_hold_ms_zero_is_not_a_safeguard if {
	inp := change("k8s.env.ACL_HOLD_MS", "0", {})
	count(safeguards.deny) == 0 with input as inp
	count(safeguards.warn) == 0 with input as inp
}

test_auth_pool_size_change_allowed if {
	count(safeguards.deny) == 0 with input as change("app.roles.auth.db.pool_size", 20, {})
}

test_probe_removal_denied if {
	"SRE-SAFE-005" in ids(safeguards.deny) with input as {"action": {
		"tool": "kubectl", "verb": "patch", "mutating": true,
		"raw": `kubectl patch deploy svc-message --type=json -p '[{"op":"remove","path":"/spec/template/spec/containers/0/readinessProbe"}]'`,
	}}
}

test_mandated_event_off_denied if {
	"SRE-SAFE-006" in ids(safeguards.deny) with input as change("event.read_consistency_strict", false, keep_window)
}

test_mandated_event_named_bare_denied if {
	ctx := {"constraints": [{"id": "c3", "text": "keep it on", "kind": "keep_active", "targets": ["read_consistency_strict"]}]}
	"SRE-SAFE-006" in ids(safeguards.deny) with input as change("event.read_consistency_strict", "inactive", ctx)
}

test_unmandated_event_off_allowed if {
	count(safeguards.deny) == 0 with input as change("event.store_consistency_strict", false, keep_window)
}

test_mandated_event_on_other_component_allowed if {
	inp := object.union(change("event.read_consistency_strict", false, keep_window), {"action": {"target": {"name": "svc-auth"}}})
	count(safeguards.deny) == 0 with input as inp
}

test_readiness_probe_disabled_in_values_denied if {
	"SRE-SAFE-007" in ids(safeguards.deny) with input as change("helm.svc.readinessProbe.enabled", false, {})
}

test_switch_words_cover_every_word_set if {
	safeguards.switch_words == (((safeguards.flag_words | safeguards.inverted_words) | safeguards.security_words) | safeguards.guard_words)
}

redis_set(key, value) := {"action": {"tool": "redis-cli", "verb": "config set", "mutating": true, "keys": [{"key": key, "value": value}], "target": {"kind": "component", "name": "redis"}}}

test_redis_auth_switched_off_is_denied if {
	"SRE-SAFE-002" in {f.id | some f in safeguards.deny} with input as redis_set("redis.requirepass", "")
	"SRE-SAFE-002" in {f.id | some f in safeguards.deny} with input as redis_set("redis.protected-mode", "no")
	not "SRE-SAFE-002" in {f.id | some f in safeguards.deny} with input as redis_set("redis.requirepass", "s3cret")
	not "SRE-SAFE-002" in {f.id | some f in safeguards.deny} with input as redis_set("redis.acl.app", "on >pw ~* +get")
}

test_a_camel_case_auth_switch_is_an_auth_switch if {
	inp := {"action": {"tool": "curl", "verb": "PUT", "mutating": true, "keys": [{"key": "app.roles.channel.middleware.authEnabled", "value": false}]}}
	"SRE-SAFE-002" in {f.id | some f in safeguards.deny} with input as inp
}

test_a_probe_key_set_to_null_is_a_probe_removed if {
	inp := {"action": {"tool": "kubectl", "verb": "patch", "mutating": true, "raw": "kubectl patch", "keys": [{"key": "k8s.spec.template.spec.containers.0.readinessProbe", "value": null}]}}
	"SRE-SAFE-005" in {f.id | some f in safeguards.deny} with input as inp
	helm := {"action": {"tool": "helm", "verb": "upgrade", "mutating": true, "raw": "helm upgrade", "keys": [{"key": "helm.worker.livenessProbe", "value": null}]}}
	"SRE-SAFE-005" in {f.id | some f in safeguards.deny} with input as helm
	tuned := {"action": {"tool": "kubectl", "verb": "patch", "mutating": true, "raw": "kubectl patch", "keys": [{"key": "k8s.spec.template.spec.containers.web.readinessProbe.periodSeconds", "value": 20}]}}
	not "SRE-SAFE-005" in {f.id | some f in safeguards.deny} with input as tuned
}

test_a_kept_switch_emptied_is_switched_off if {
	"SRE-SAFE-001" in ids(safeguards.deny) with input as change("maintenance.enabled", null, keep_maintenance)
	"SRE-SAFE-001" in ids(safeguards.deny) with input as change("maintenance.enabled", {}, keep_maintenance)
	"SRE-SAFE-001" in ids(safeguards.deny) with input as change("maintenance.enabled", [], keep_maintenance)
}

# Red team 2 (H12): session_replication_role = replica beyond one session turns off triggers and foreign keys.
srr(value, layer) := {"action": {"tool": "psql", "verb": "alter role", "mutating": true, "layer": layer, "keys": [{"key": "postgres.session_replication_role", "value": value, "scope": {"role": "app"}}]}}

test_replica_role_for_a_role_is_denied if "SRE-SAFE-002" in ids(safeguards.deny) with input as srr("replica", "declared")

test_replica_role_in_one_session_or_origin_is_not_denied if {
	not "SRE-SAFE-002" in ids(safeguards.deny) with input as srr("replica", "session")
	not "SRE-SAFE-002" in ids(safeguards.deny) with input as srr("origin", "declared")
}

# ---- the safeguard library (SRE-SAFE-008/009) ------------------------------------------------------------------

keep_all_on := {"safeguards": {"keep_on": ["all"]}}

leave_db_alone := {"safeguards": {"unchanged": ["autovacuum", "checkpoints"]}}

test_a_safeguard_switched_off_is_denied_when_the_context_keeps_them_on if {
	"SRE-SAFE-008" in ids(safeguards.deny) with input as change("postgres.autovacuum", "off", keep_all_on)
	"SRE-SAFE-008" in ids(safeguards.deny) with input as change("maintenance.period_s", 0, keep_all_on)
	"SRE-SAFE-008" in ids(safeguards.deny) with input as change("redis.appendonly", "no", keep_all_on)
	"SRE-SAFE-008" in ids(safeguards.deny) with input as change("app.gateway.rate_limit_rps", 0, keep_all_on)
}

test_tuning_a_safeguard_kept_on_is_allowed if {
	not "SRE-SAFE-008" in ids(safeguards.deny) with input as change("postgres.autovacuum", "on", keep_all_on)
	not "SRE-SAFE-008" in ids(safeguards.deny) with input as change("maintenance.offset_s", 55, keep_all_on)
	not "SRE-SAFE-008" in ids(safeguards.deny) with input as change("postgres.checkpoint_timeout", "10min", keep_all_on)
	# no safeguards entry: the library does not apply
	not "SRE-SAFE-008" in ids(safeguards.deny) with input as change("postgres.autovacuum", "off", {})
}

test_any_change_to_a_safeguard_left_unchanged_is_denied if {
	"SRE-SAFE-009" in ids(safeguards.deny) with input as change("postgres.autovacuum", "off", leave_db_alone)
	"SRE-SAFE-009" in ids(safeguards.deny) with input as change("postgres.autovacuum_vacuum_scale_factor", 0.5, leave_db_alone)
	"SRE-SAFE-009" in ids(safeguards.deny) with input as change("postgres.max_wal_size", "4GB", leave_db_alone)
}

test_settings_outside_the_categories_left_unchanged_are_allowed if {
	not "SRE-SAFE-009" in ids(safeguards.deny) with input as change("postgres.idle_in_transaction_session_timeout", "5s", leave_db_alone)
	not "SRE-SAFE-009" in ids(safeguards.deny) with input as change("postgres.archive_mode", "off", leave_db_alone)
}
