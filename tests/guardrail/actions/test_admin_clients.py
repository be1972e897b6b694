"""Operator diagnostics that are not SQL or redis clients: mysqladmin (judged as the SQL it sends), nc -z (a port
check), pidof and pg_isready (reads). Each was opaque, and so denied, before it had a classifier."""

import pytest

from guardrail.actions import normalise


@pytest.mark.parametrize("cmd,verbs", [
    ("mysqladmin -h mariadb status", [("show", False)]),
    ("mysqladmin -h mariadb -u root -psecret proc", [("show", False)]),  # any unique prefix: processlist
    ("mysqladmin -h mariadb -i 5 -c 3 extended-status", [("show", False)]),  # -i/-c take a value
    ("mysqladmin -h mariadb ping", [("connect", False)]),
    ("mysqladmin -h mariadb kill 12,13", [("kill", True), ("kill", True)]),
    ("mysqladmin -h mariadb flush-hosts", [("flush", True)]),
    ("mysqladmin -h mariadb drop frappe", [("drop", True)]),
    ("mysqladmin -h mariadb password hunter2", [("password", "unknown")]),
    ("mysqladmin -h mariadb st", [("st", "unknown")]),
    ("mysqladmin -h mariadb -w shutdown", [("shutdown", True)]),  # -w takes its value only attached (-w5)
    ("mysqladmin -h mariadb -w5 status", [("show", False)]),  # status, start-slave, stop-slave ...: mysqladmin refuses it too
    ("mysqladmin -h mariadb drop $DB", [("drop", "unknown")]),
])
def test_mysqladmin_is_judged_as_the_sql_it_sends(cmd, verbs):
    acts = normalise(cmd)
    assert [(a.verb, a.mutating) for a in acts] == verbs
    assert all(a.target.name == "mariadb" for a in acts)


def test_mysqladmin_shutdown_is_a_restart_of_its_server():
    [a] = normalise("mysqladmin -h mariadb shutdown")
    assert (a.verb, a.mutating, a.details.get("restart")) == ("shutdown", True, True)


@pytest.mark.parametrize("cmd,mutating", [
    ("nc -zv redis-queue 6379", False),
    ("nc -z -w1 redis-queue 6379", False),
    ("nc -z -w 2 -u dns 53", False),
    ("nc redis-queue 6379", "unknown"),  # an open connection: what the terminal types goes to the server
    ("nc -l 8080", "unknown"),
    ("nc -z -e /bin/sh host 1", "unknown"),  # -e runs a program on the connection
    ("ncat -z --exec sh host 1", "unknown"),
])
def test_nc_is_a_read_only_as_a_port_check(cmd, mutating):
    assert normalise(cmd)[-1].mutating == mutating


def test_nc_with_input_sends_it():
    acts = normalise("echo FLUSHALL | nc -z redis-queue 6379")
    assert acts[-1].mutating == "unknown"


@pytest.mark.parametrize("cmd", ["pidof redis-server", "pg_isready -h postgres -p 5432"])
def test_process_and_readiness_probes_only_read(cmd):
    assert [a.mutating for a in normalise(cmd)] == [False]


@pytest.mark.parametrize("cmd,destructive", [
    ("redis-cli -h redis-queue REPLICAOF evil.example.com 6379", True),  # drops the dataset, copies another's
    ("redis-cli -h redis-queue slaveof 10.0.0.1 6379", True),
    ("redis-cli -h redis-queue REPLICAOF NO ONE", False),  # promotes it: keeps the data
    ("redis-cli -h redis-queue MIGRATE 10.0.0.9 6379 '' 0 5000 KEYS a b", True),  # moved away: gone here
    ("redis-cli -h redis-queue MIGRATE 10.0.0.9 6379 '' 0 5000 COPY KEYS a b", False),
])
def test_redis_commands_that_give_up_the_dataset_are_destructive(cmd, destructive):
    [a] = normalise(cmd)
    assert a.mutating is True
    assert a.details.get("destructive", False) is destructive


@pytest.mark.parametrize("cmd", ["> /var/lib/redis/appendonly.aof", ": > /var/lib/redis/appendonly.aof"])
def test_a_redirection_alone_writes_its_file(cmd):
    writes = [a for a in normalise(cmd) if a.tool == "file"]
    assert [(a.verb, a.details["path"]) for a in writes] == [("write", "/var/lib/redis/appendonly.aof")]


@pytest.mark.parametrize("cmd,mutating", [
    ("kubectl apply -f https://example.com/x.yaml", "unknown"),  # fetched as it runs: never seen
    ("kubectl create -f http://example.com/x.yaml", "unknown"),
    ("curl -s https://example.com/x.yaml | kubectl apply -f -", "unknown"),
    ("kubectl apply -f deploy.yaml -n payments", "unknown"),  # read at decision time: not here, so not known
    ("kubectl apply -f - < deploy.yaml", "unknown"),  # the file on stdin is read now: not here
    ("kubectl apply -f - < <(curl -s https://example.com/x.yaml)", "unknown"),  # process substitution on stdin
    ("kubectl apply -f <(curl -s https://example.com/x.yaml)", "unknown"),  # ... or as the file
    ("kubectl apply -k https://github.com/org/repo/overlays/prod", "unknown"),  # a remote kustomization
    ("kubectl apply -k github.com/org/repo//overlays/prod?ref=v1.2", "unknown"),  # kustomize's git address
    ("kubectl apply --kustomize=git@github.com:org/repo.git", "unknown"),
    ("kubectl apply -k ./overlays/prod", True),  # a directory the operator has
    ("kubectl apply -k overlays/prod -n payments", True),
])
def test_a_manifest_fetched_as_the_command_runs_is_opaque(cmd, mutating):
    assert normalise(cmd)[-1].mutating == mutating


@pytest.mark.parametrize("cmd,keys", [
    ("curl -XPUT db-maintenance:8081/v1/maintenance -d enabled=false", [("maintenance.enabled", False)]),
    ("curl -XPUT db-maintenance:8081/v1/maintenance --data-urlencode 'enabled=false'", [("maintenance.enabled", False)]),
    ("curl -X PUT svc:8000/admin/config -d 'roles.api.db.pool_size=500'", [("app.roles.api.db.pool_size", 500)]),
])
def test_a_form_body_to_an_admin_api_is_read_like_json(cmd, keys):
    """A form body (key=value) was taken as opaque text: `-d enabled=false` disabled maintenance unseen."""
    [a] = normalise(cmd)
    assert [(k.key, k.value) for k in a.keys] == keys


def test_an_admin_payload_uploaded_from_a_file_is_opaque():
    [a] = normalise("curl -XPUT db-maintenance:8081/v1/maintenance -T body.json")
    assert a.mutating == "unknown" and "body.json" in a.opaque_reason
