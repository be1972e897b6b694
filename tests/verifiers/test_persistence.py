"""Persistence: each changed key's effective value against its declared source, read with operator commands."""

from __future__ import annotations

import pytest
import yaml

from tests.verifiers.fakes import FakeEnv, FakeJournal, ManualClock, action, comp
from verifiers.catalogue import load_catalogue, normalize, parse_output, ParseStep
from verifiers.errors import CatalogueError
from verifiers.persistence import PersistenceCheck, changed_keys, evaluate
from verifiers.protocols import CommandResult, FeedbackCode, VerdictStatus

CTX = {"id": "t", "namespaces": ["frappe"], "components": ["redis-queue", "mariadb", "svc-channel"],
       "restartable": ["redis-queue", "svc-channel"], "not_restartable": ["mariadb"],
       "extra": {"helm_release": "erpnext"}}


def frappe_env() -> FakeEnv:
    env = FakeEnv(clock=ManualClock(100.0), components=[comp("redis-queue", kind="StatefulSet"), comp("mariadb")])
    env.helm["erpnext"] = {"redis-queue": {"master": {"extraFlags": ["--maxmemory 2mb",
                                                                     "--maxmemory-policy noeviction"]}}}
    env.layer("redis-queue").declared.update({"maxmemory": "2097152", "maxmemory-policy": "noeviction"})
    env.files[("mariadb-0", "/opt/bitnami/mariadb/conf/my.cnf")] = "[mysqld]\nmax-connections = 151\n"
    env.layer("mariadb").declared.update({"max_user_connections": "0", "max_connections": "151"})
    env.layer("mariadb").runtime["max_user_connections"] = "8"  # the incident: SET GLOBAL
    return env


def helm_upgrade_maxmemory(env: FakeEnv, value: str, raw: int) -> None:
    env.helm["erpnext"]["redis-queue"]["master"]["extraFlags"][0] = f"--maxmemory {value}"
    env.layer("redis-queue").declared["maxmemory"] = str(raw)


REDIS_SET = "redis-cli -h redis-queue CONFIG SET maxmemory 64mb"
REDIS_ACTION = action("redis-cli", "config set", [{"key": "redis.maxmemory", "value": "64mb", "scope": {}}],
                      layer="runtime", target={"kind": "component", "name": "redis-queue"})


def test_runtime_only_config_set_is_not_durable_with_both_values_and_the_durable_way():
    env = frappe_env()
    j = FakeJournal(env.clock)
    j.run(env, REDIS_SET, [REDIS_ACTION])
    v = PersistenceCheck(CTX).check(env, j, None)
    assert v.status is VerdictStatus.FAIL and v.code is FeedbackCode.NOT_DURABLE
    assert "redis.maxmemory" in v.message and "effective '64mb'" in v.message
    assert "2mb" in v.message  # the declared value a restart brings back
    assert "helm upgrade erpnext" in v.message and "redis-queue.master.extraFlags" in v.message
    key = v.evidence["keys"][0]
    assert key["status"] == "not_durable" and key["entry"] == "redis-helm-extraflags"
    assert key["commands"] == ["redis-cli -h redis-queue CONFIG GET maxmemory", "helm get values erpnext -o json"]


def test_same_change_made_durable_through_helm_passes():
    env = frappe_env()
    j = FakeJournal(env.clock)
    j.run(env, REDIS_SET, [REDIS_ACTION])
    env.handle(r"helm upgrade .*", lambda m: helm_upgrade_maxmemory(env, "64mb", 64 * 1024 * 1024) or "ok")
    j.run(env, "helm upgrade erpnext chart --reuse-values --set ...",
          [action("helm", "upgrade", [{"key": "helm.redis-queue.master.extraFlags", "value": ["--maxmemory 64mb"]}],
                  layer="declared", target={"kind": "release", "name": "erpnext"})])
    v = PersistenceCheck(CTX).check(env, j, None)
    assert v.status is VerdictStatus.PASS, v.message
    assert {k["status"] for k in v.evidence["keys"]} == {"durable"}


def test_units_are_compared_not_strings():
    env = frappe_env()
    helm_upgrade_maxmemory(env, "64mb", 67108864)
    j = FakeJournal(env.clock)
    j.run(env, REDIS_SET, [REDIS_ACTION])
    assert PersistenceCheck(CTX).check(env, j, None).passed  # CONFIG GET says 67108864, Helm says 64mb


def test_mariadb_set_global_compared_with_my_cnf_or_the_compiled_default():
    env = frappe_env()
    env.handle(r"mysql -e .*", lambda m: "")
    j = FakeJournal(env.clock)
    j.run(env, 'mysql -e "SET GLOBAL max_user_connections=0"',
          [action("mysql", "set global", [{"key": "mariadb.max_user_connections", "value": "0"}], layer="runtime")])
    env.layer("mariadb").runtime["max_user_connections"] = "0"
    v = PersistenceCheck(CTX).check(env, j, None)
    # my.cnf does not set it; a restart loads the compiled default 0, which is what runs now.
    assert v.passed, v.message
    env.layer("mariadb").runtime["max_user_connections"] = "20"
    v = PersistenceCheck(CTX).check(env, j, None)
    assert v.code is FeedbackCode.NOT_DURABLE and "[mysqld]" in v.message
    # The my.cnf value is read where it exists (dashes and underscores are the same name).
    j2 = FakeJournal(env.clock)
    j2.run(env, 'mysql -e "SET GLOBAL max_connections=400"',
           [action("mysql", "set global", [{"key": "mariadb.max_connections", "value": "400"}], layer="runtime")])
    env.layer("mariadb").runtime["max_connections"] = "400"
    v = PersistenceCheck(CTX).check(env, j2, None)
    assert v.code is FeedbackCode.NOT_DURABLE and "'151'" in v.message


def slack_env() -> FakeEnv:
    env = FakeEnv(clock=ManualClock(100.0), components=[comp("svc-channel")])
    env.set_app_yaml("app-config", {"channel": {"pool_size": 3, "max_overflow": 2}})
    return env


POOL_ACTIONS = [action("restart-svc.sh", "put config", [
    {"key": "app.roles.channel.db.pool_size", "value": 20}, {"key": "app.roles.channel.db.max_overflow", "value": 10}],
    layer="runtime", target={"kind": "component", "name": "svc-channel"})]


def test_admin_config_put_without_the_configmap_is_not_durable():
    env = slack_env()
    env.handle(r"restart-svc.sh channel", lambda m: env.layer("svc-channel").runtime.update(
        {"db.pool_size": 20, "db.max_overflow": 10}) or "reloaded")
    j = FakeJournal(env.clock)
    j.run(env, "restart-svc.sh channel", POOL_ACTIONS)
    v = PersistenceCheck({"namespaces": ["slack"]}).check(env, j, None)
    assert v.code is FeedbackCode.NOT_DURABLE
    assert "app.roles.channel.db.pool_size" in v.message and "app-config" in v.message
    assert len(v.evidence["keys"]) == 2


def test_admin_config_put_that_also_lands_in_the_configmap_passes():
    env = slack_env()

    def durable_restart(m):
        env.set_app_yaml("app-config", {"channel": {"pool_size": 20, "max_overflow": 10}})
        return "reloaded"

    env.handle(r"restart-svc.sh channel", durable_restart)
    j = FakeJournal(env.clock)
    j.run(env, "restart-svc.sh channel", POOL_ACTIONS)
    assert PersistenceCheck({"namespaces": ["slack"]}).check(env, j, None).passed


def test_runtime_event_cleared_matches_the_boot_state():
    env = slack_env()
    env.layer("svc-channel").runtime["event.read_consistency_strict"] = True  # fired at t=40 by the load
    env.handle(r"curl -X PUT .*", lambda m: env.layer("svc-channel").runtime.update(
        {"event.read_consistency_strict": False}) or "{}")
    j = FakeJournal(env.clock)
    j.run(env, "curl -X PUT http://svc-channel:8000/admin/event -d '{...}'",
          [action("curl", "PUT", [{"key": "event.read_consistency_strict", "value": False,
                                   "scope": {"component": "svc-channel"}}], layer="runtime")])
    v = PersistenceCheck({}).check(env, j, None)
    assert v.passed, v.message
    # Turning an event ON at runtime is not what the pod boots with.
    env.layer("svc-channel").runtime["event.read_consistency_strict"] = True
    assert PersistenceCheck({}).check(env, j, None).code is FeedbackCode.NOT_DURABLE


def test_kubectl_exec_file_edit_is_in_container_and_ephemeral():
    env = frappe_env()
    env.handle(r"kubectl exec .* sed .*", lambda m: "")
    j = FakeJournal(env.clock)
    j.run(env, "kubectl exec redis-queue-master-0 -- sed -i s/2mb/64mb/ /opt/bitnami/redis/etc/redis.conf",
          [action("file", "write", [{"key": "file:/opt/bitnami/redis/etc/redis.conf"}], layer="runtime",
                  via=["kubectl exec"], target={"kind": "pod", "name": "redis-queue-master-0"})])
    v = PersistenceCheck(CTX).check(env, j, None)
    assert v.code is FeedbackCode.NOT_DURABLE
    assert v.evidence["keys"][0]["status"] == "in_container" and "writable layer" in v.message
    assert "ConfigMap" in v.message  # the durable way


def test_unknown_key_is_inconclusive_and_says_how_to_add_an_entry():
    env = frappe_env()
    env.handle(r"frob .*", lambda m: "")
    j = FakeJournal(env.clock)
    j.run(env, "frob --x 1", [action("frob", "set", [{"key": "frobnicator.x", "value": 1}], layer="runtime")])
    v = PersistenceCheck(CTX).check(env, j, None)
    assert v.status is VerdictStatus.INCONCLUSIVE and "add one" in v.message


def test_a_failed_read_is_an_error_not_a_pass():
    env = frappe_env()
    del env.helm["erpnext"]
    j = FakeJournal(env.clock)
    j.run(env, REDIS_SET, [REDIS_ACTION])
    v = PersistenceCheck(CTX).check(env, j, None)
    assert v.status is VerdictStatus.ERROR and "release: not found" in v.message


def test_failed_and_read_only_commands_change_nothing():
    env = frappe_env()
    env.handle(r"redis-cli -h redis-queue CONFIG SET maxmemory 64mb", lambda m: CommandResult(
        m.string, stderr="(error) ERR", exit_code=1))
    j = FakeJournal(env.clock)
    j.run(env, REDIS_SET, [REDIS_ACTION])
    j.run(env, "redis-cli -h redis-queue CONFIG GET maxmemory",
          [action("redis-cli", "config get", [{"key": "redis.maxmemory"}], mutating=False)])
    assert changed_keys(j) == []
    assert PersistenceCheck(CTX).check(env, j, None).message == "no settings were changed"


def test_postgres_role_reset_is_durable_and_role_scope_selects_the_entry():
    env = FakeEnv(clock=ManualClock(0.0))
    env.role_settings[("saleor_app", "saleor")] = {"statement_timeout": "150ms"}
    env.handle(r"psql -c .*ALTER ROLE.*", lambda m: env.role_settings.pop(("saleor_app", "saleor")) and "ALTER ROLE")
    j = FakeJournal(env.clock)
    j.run(env, "psql -c \"ALTER ROLE saleor_app IN DATABASE saleor RESET statement_timeout\"",
          [action("psql", "alter role", [{"key": "postgres.statement_timeout", "value": None,
                                          "scope": {"role": "saleor_app", "database": "saleor"}}],
                  layer="declared")])
    v = PersistenceCheck({}).check(env, j, None)
    assert v.passed, v.message
    assert v.evidence["keys"][0]["entry"] == "postgres-role-setting"


def test_context_can_pin_a_declared_source_and_a_team_file_overrides(tmp_path):
    team = tmp_path / "team.yaml"
    team.write_text("""
version: 1
entries:
  - id: redis-helm-extraflags
    match: '^redis\\.(?P<name>[a-z-]+)$'
    effective: {command: "redis-cli -h ${target.name} CONFIG GET ${name}", parse: [{line: 1}]}
    declared: {command: "cat /etc/team/${name}", parse: [{line: 0}]}
    normalize: bytes
    durable: "edit /etc/team/${name}"
""")
    cat = load_catalogue([team])
    assert sum(e.id == "redis-helm-extraflags" for e in cat.entries) == 1
    env = frappe_env()
    env.handle(r"cat /etc/team/maxmemory", lambda m: "64mb\n")
    j = FakeJournal(env.clock)
    j.run(env, REDIS_SET, [REDIS_ACTION])
    assert PersistenceCheck(CTX, cat).check(env, j, None).passed


def test_bad_catalogue_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nentries:\n  - id: x\n    match: '^a$'\n    durable: d\n    normalise: bytes\n")
    with pytest.raises(CatalogueError) as e:
        load_catalogue([bad])
    assert e.value.path == str(bad) and e.value.line == 6 and "normalise" in e.value.one_line()
    bad.write_text("version: 1\nentries:\n  - id: x\n    match: '^a$'\n    durable: d\n    effective:\n"
                   "      command: c\n      parse: [{line: 1, regex: x}]\n")
    with pytest.raises(CatalogueError) as e:
        load_catalogue([bad])
    assert "exactly one" in str(e.value)
    bad.write_text("entries: [\n")
    with pytest.raises(CatalogueError) as e:
        load_catalogue([bad])
    assert "bad YAML" in str(e.value)


def test_parse_steps_and_normalisers():
    vs = {"name": "maxmemory"}
    assert parse_output('{"a": {"b": ["--maxmemory 3mb", "--x y"]}}',
                        [ParseStep(json="a.b"), ParseStep(join=" "), ParseStep(regex=r"--${name}\s+(\S+)")],
                        vs) == "3mb"
    assert parse_output("maxmemory\n0\n", [ParseStep(line=1)], vs) == "0"
    assert parse_output("", [ParseStep(line=0)], vs) is None
    assert parse_output("A,maxmemory", [ParseStep(contains=r"(^|,)${name}(,|$)")], vs) == "true"
    assert normalize("64mb", "bytes") == 67108864 == normalize("67108864", "bytes")
    assert normalize("10s", "pg") == normalize("10000", "pg") == normalize("10000ms", "pg")
    assert normalize("ON", "auto") is True and normalize("off", "bool") is False
    assert normalize("20", "auto") == 20 == normalize(20, "auto")


def test_evaluate_orders_not_durable_before_errors_and_unknowns():
    from verifiers.persistence import ChangedKey, KeyReading

    ck = ChangedKey("k", {}, 1, "runtime", {})
    r = {s: KeyReading(ck, s, message=s) for s in ("durable", "not_durable", "error", "no_entry")}
    assert evaluate([]).passed and evaluate([r["durable"]]).passed
    assert evaluate([r["no_entry"], r["error"], r["not_durable"]]).code is FeedbackCode.NOT_DURABLE
    assert evaluate([r["no_entry"], r["error"]]).status is VerdictStatus.ERROR
    assert evaluate([r["no_entry"], r["durable"]]).status is VerdictStatus.INCONCLUSIVE


# -- prior values: what a restart would undo into -------------------------------------------------------------

def _mariadb_change(env, j, value):
    env.handle(r"mysql -e .*", lambda m: env.layer("mariadb").runtime.update(max_user_connections=value) or "")
    act = action("mysql", "set global", [{"key": "mariadb.max_user_connections", "value": value}], layer="runtime")
    from verifiers.persistence import capture_prior

    for snap in capture_prior(env, [act], CTX):  # what the guard journals before the command runs
        j.append("snapshot", **snap)
    j.run(env, f'mysql -e "SET GLOBAL max_user_connections={value}"', [act])


def test_declared_value_that_is_not_the_replaced_one_is_reported_not_failed():
    env = frappe_env()  # runtime 8 (the incident), declared 0 (the compiled default)
    j = FakeJournal(env.clock)
    _mariadb_change(env, j, "32")
    v = PersistenceCheck(CTX).check(env, j, None)
    assert v.passed, v.message
    key = v.evidence["keys"][0]
    assert key["status"] == "diverged" and "not the 8 you replaced" in v.message
    # The same change without a captured prior value: a restart might undo it, so it fails.
    j2 = FakeJournal(env.clock)
    j2.run(env, 'mysql -e "SET GLOBAL max_user_connections=32"',
           [action("mysql", "set global", [{"key": "mariadb.max_user_connections", "value": "32"}], layer="runtime")])
    assert PersistenceCheck(CTX).check(env, j2, None).code is FeedbackCode.NOT_DURABLE


def test_declared_value_equal_to_the_replaced_one_is_not_durable():
    env = frappe_env()
    env.layer("redis-queue").declared["maxmemory"] = "2097152"
    j = FakeJournal(env.clock)
    from verifiers.persistence import capture_prior

    for snap in capture_prior(env, [REDIS_ACTION], CTX):
        j.append("snapshot", **snap)
    assert j.records()[0]["before"] == 2097152
    j.run(env, REDIS_SET, [REDIS_ACTION])
    assert PersistenceCheck(CTX).check(env, j, None).code is FeedbackCode.NOT_DURABLE


def test_a_value_reapplied_at_runtime_is_named_as_such():
    env = slack_env()
    env.layer("svc-channel").runtime["event.read_consistency_strict"] = False
    env.handle(r"curl -X PUT .*", lambda m: "{}")
    j = FakeJournal(env.clock)
    j.run(env, "curl -X PUT http://svc-channel:8000/admin/event -d '{...}'",
          [action("curl", "PUT", [{"key": "event.read_consistency_strict", "value": False,
                                   "scope": {"component": "svc-channel"}}], layer="runtime")])
    env.layer("svc-channel").runtime["event.read_consistency_strict"] = True  # the load generator fires it again
    v = PersistenceCheck({}).check(env, j, None)
    assert v.code is FeedbackCode.NOT_DURABLE and "re-applies it at runtime" in v.message


def test_reads_are_retried_in_the_environment_clock_while_a_pod_rolls():
    env = slack_env()
    env.set_app_yaml("app-config", {"channel": {"pool_size": 20, "max_overflow": 10}})
    attempts = {"n": 0}

    def flaky(m):
        attempts["n"] += 1
        if attempts["n"] <= 2:
            return CommandResult(m.string, stderr="curl: (7) Failed to connect", exit_code=7)
        return '{"db": {"pool_size": 20, "max_overflow": 10}}'

    env.handle(r"curl -s http://svc-channel:8000/admin/config", flaky)
    env.handle(r"restart-svc.sh channel", lambda m: "reloaded")
    j = FakeJournal(env.clock)
    j.run(env, "restart-svc.sh channel", POOL_ACTIONS[:1] and [action(
        "restart-svc.sh", "put config", [{"key": "app.roles.channel.db.pool_size", "value": 20}], layer="runtime")])
    t0 = env.clock.now()
    v = PersistenceCheck({"namespaces": ["slack"]}).check(env, j, None)
    assert v.passed, v.message
    assert env.clock.now() - t0 == pytest.approx(10.0)  # two retries, 5 s apart, in virtual time


def test_declared_sources_value_sets_the_release_and_path():
    from verifiers.catalogue import parse_source

    assert parse_source("helm/frappe:erpnext.redis-queue.master.extraFlags") == {
        "source_kind": "helm", "source_name": "frappe", "source_path": "erpnext.redis-queue.master.extraFlags",
        "release": "frappe", "values_path": "erpnext.redis-queue.master.extraFlags"}
    assert parse_source("configmap/app-config key app.yaml (free text)")["configmap"] == "app-config"
    assert parse_source("process memory of the pod") == {}
    env = frappe_env()
    env.helm["frappe"] = {"erpnext": env.helm.pop("erpnext")}
    ctx = dict(CTX, extra={}, declared_sources={"redis.*": "helm/frappe:erpnext.redis-queue.master.extraFlags"})
    j = FakeJournal(env.clock)
    j.run(env, REDIS_SET, [REDIS_ACTION])
    v = PersistenceCheck(ctx).check(env, j, None)
    assert v.code is FeedbackCode.NOT_DURABLE and "helm upgrade frappe" in v.message
    assert "helm get values frappe -o json" in v.evidence["keys"][0]["commands"]


def test_catalogue_keys_grants_and_admin_switches_to_their_durable_stores():
    from verifiers.catalogue import load_catalogue

    cat = load_catalogue()
    # A GRANT is keyed <dialect>.grant: the grant tables, not an @@GLOBAL variable called `grant`.
    entry, _ = cat.lookup("mariadb.grant", {"grantee": "'app'@'%'"})
    assert entry.id == "grant-tables"
    assert cat.lookup("mariadb.max_user_connections", {})[0].id == "mariadb-global-mycnf"
    # An admin-API switch reads its declared value where the context's declared_sources says it lives.
    entry, groups = cat.lookup("app.sequencer.mode", {}, {"app.sequencer.mode": "helm/slack:app.roles.m.env.MODE"})
    assert entry.id == "app-admin-switch"
    assert (groups["name"], groups["field"], groups["release"], groups["values_path"]) == \
        ("sequencer", "mode", "slack", "app.roles.m.env.MODE")


def _slack_file_env(file_text: str, configmap_text: str) -> FakeEnv:
    env = FakeEnv()
    env.handle(r"kubectl exec .* sed .*", lambda m: "")
    env.handle(r"kubectl exec -n default deploy/svc-channel -- cat /srv/app/config/app\.yaml", lambda m: file_text)
    env.handle(r"kubectl get configmap app-config -n default -o yaml",
               lambda m: yaml.safe_dump({"kind": "ConfigMap", "data": {"app.yaml": configmap_text}}))
    return env


def _file_edit(env: FakeEnv, j: FakeJournal) -> None:
    j.run(env, "kubectl exec deploy/svc-channel -- sed -i s/pool_size: 3/pool_size: 20/ /srv/app/config/app.yaml",
          [action("file", "write", [{"key": "file:/srv/app/config/app.yaml"}], layer="runtime",
                  via=["kubectl exec"], target={"kind": "deployment", "name": "svc-channel"})])


SLACK_CTX = {"id": "slack", "namespaces": ["default"], "components": ["svc-channel"],
             "extra": {"config_map": "app-config"}}


def test_an_in_container_file_edit_whose_configmap_now_matches_is_durable():
    # The agent edited the file in the container, then made the same change in the ConfigMap the file is projected
    # from: a fresh container renders the same file, so nothing is lost.
    text = "roles:\n  channel:\n    db:\n      pool_size: 20\n"
    env = _slack_file_env(text, text)
    j = FakeJournal(env.clock)
    _file_edit(env, j)
    v = PersistenceCheck(SLACK_CTX).check(env, j, None)
    assert v.status is VerdictStatus.PASS, v.message
    key = v.evidence["keys"][0]
    assert key["status"] == "durable" and key["declared_source"] == "ConfigMap app-config key app.yaml"


def test_an_in_container_file_edit_that_differs_from_its_configmap_is_not_durable():
    env = _slack_file_env("roles:\n  channel:\n    db:\n      pool_size: 20\n",
                          "roles:\n  channel:\n    db:\n      pool_size: 3\n")
    j = FakeJournal(env.clock)
    _file_edit(env, j)
    v = PersistenceCheck(SLACK_CTX).check(env, j, None)
    assert v.code is FeedbackCode.NOT_DURABLE and v.evidence["keys"][0]["status"] == "in_container"


def test_an_in_container_file_edit_without_a_known_source_stays_not_durable():
    text = "roles:\n  channel:\n    db:\n      pool_size: 20\n"
    env = _slack_file_env(text, text)
    j = FakeJournal(env.clock)
    _file_edit(env, j)
    v = PersistenceCheck({**SLACK_CTX, "extra": {}}).check(env, j, None)  # no config_map in the context
    assert v.code is FeedbackCode.NOT_DURABLE and "/srv/app/config/app.yaml" in v.message


def test_a_runtime_change_made_through_kubectl_exec_is_read_through_the_same_pod():
    # The agent's redis-cli ran inside the pod (`-p 6390` was for a client there): the guard outside the cluster
    # reaches the server the same way, not with `-h <component>` that only the cluster's DNS resolves.
    env = frappe_env()
    inside = "kubectl exec redis-queue-master-0 -n frappe -c redis -- redis-cli -p 6390"
    env.handle(r"kubectl exec redis-queue-master-0 -n frappe -c redis -- redis-cli -p 6390 CONFIG SET maxmemory 64mb",
               lambda m: env.layer("redis-queue").runtime.update(maxmemory="64mb") or "OK\n")
    env.handle(r"kubectl exec redis-queue-master-0 -n frappe -c redis -- redis-cli -p 6390 CONFIG GET maxmemory",
               lambda m: f"maxmemory\n{env.layer('redis-queue').effective('maxmemory')}\n")
    env.handle(r"redis-cli -h .*", lambda m: CommandResult(command=m[0], stderr="Could not connect", exit_code=1))
    j = FakeJournal(env.clock)
    change = action("redis-cli", "config set", [{"key": "redis.maxmemory", "value": "64mb", "scope": {}}],
                    layer="runtime", via=["kubectl exec"], raw="redis-cli -p 6390 CONFIG SET maxmemory 64mb",
                    target={"kind": "pod", "name": "redis-queue-master-0", "namespace": "frappe"})
    change["details"] = {"pod": "redis-queue-master-0", "container": "redis"}
    j.run(env, f"{inside} CONFIG SET maxmemory 64mb", [change])
    v = PersistenceCheck(CTX).check(env, j, None)
    assert v.code is FeedbackCode.NOT_DURABLE, v.message
    (key,) = v.evidence["keys"]
    assert key["status"] == "not_durable" and key["effective"] == "64mb"
    assert key["commands"][0] == f"{inside} CONFIG GET maxmemory"


# --- the baseline a change is judged against (the catalogue's `baseline` rules, read before a change) -----------

def _snapshot(env: FakeEnv, key: str, value, *, scope=None, target: str = "", context=None) -> dict:
    from verifiers.persistence import PersistenceReader

    [rec] = PersistenceReader(context or {"id": "t"}).capture(env, action(
        "x", "set", [{"key": key, "value": value, "scope": scope or {}}],
        target={"kind": "component", "name": target, "namespace": None}, layer="declared"))
    return rec


def test_a_mariadb_variables_baseline_is_the_default_the_server_reports():
    env = FakeEnv(clock=ManualClock(0.0))
    env.layer("mariadb").runtime["thread_cache_size"] = "151"
    env.handle(r"mysql -N -B -e \"SELECT DEFAULT_VALUE FROM information_schema\.SYSTEM_VARIABLES "
               r"WHERE VARIABLE_NAME = 'thread_cache_size'\"", lambda m: "151\n")
    rec = _snapshot(env, "mariadb.thread_cache_size", "256", target="mariadb")
    assert rec["before"] == 151
    assert rec["baseline"]["kind"] == "default" and rec["baseline"]["default"] == 151
    assert "DEFAULT_VALUE" in rec["baseline"]["source"]


def test_an_unreadable_baseline_is_left_out_of_the_snapshot():
    env = FakeEnv(clock=ManualClock(0.0))
    env.layer("mariadb").runtime["thread_cache_size"] = "151"  # the DEFAULT_VALUE read has no handler: exit 127
    rec = _snapshot(env, "mariadb.thread_cache_size", "256", target="mariadb")
    assert rec["before"] == 151 and "baseline" not in rec


def test_an_app_settings_baseline_is_what_its_peers_run():
    env = FakeEnv(clock=ManualClock(0.0))
    env.set_app_yaml("app-config", {"auth": {"hold_ms": 5}, "channel": {"hold_ms": 10}, "file": {}})
    rec = _snapshot(env, "app.roles.auth.db.hold_ms", 3, scope={"role": "auth"}, target="svc-auth",
                    context={"id": "t", "extra": {"app_configmap": "app-config"}})
    assert rec["baseline"] == {"kind": "fleet", "values": {"auth": 5, "channel": 10},
                               "source": "what the other roles run (roles.*.db.hold_ms in app.yaml of ConfigMap "
                                         "app-config)"}


def test_a_maintenance_fields_baseline_is_whether_the_deployment_overrides_it():
    env = FakeEnv(clock=ManualClock(0.0))
    env.helm["slack"] = {"maintenanceController": {"offsetS": 35}}
    env.handle(r"curl -s http://db-maintenance:8081/v1/maintenance",
               lambda m: '{"schedule": {"offset_s": 35, "duration_s": 8}}')
    ctx = {"id": "t", "extra": {"maintenance_release": "slack"}}
    assert _snapshot(env, "maintenance.offset_s", 5, context=ctx)["baseline"]["overridden"] is True
    assert _snapshot(env, "maintenance.duration_s", 12, context=ctx)["baseline"]["overridden"] is False
    assert "baseline" not in _snapshot(env, "maintenance.duration_s", 12)  # no release named: not judged


def test_a_role_settings_baseline_is_having_no_entry():
    env = FakeEnv(clock=ManualClock(0.0))
    rec = _snapshot(env, "postgres.lock_timeout", "2s", scope={"role": "app", "database": "app"}, target="postgres")
    assert rec["before"] is None and rec["baseline"]["unset"] is True and rec["baseline"]["default"] is None
