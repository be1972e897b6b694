"""The Frappe twin's mechanisms, seen the way an operator sees them: through the shell and the load ledger."""

from __future__ import annotations

import pytest

from arena.scenario import load_scenario
from arena.twin.engine import build_twin
from arena.twin.frappe.helm import parse_set
from arena.twin.frappe.mariadb import erlang_b
from arena.twin.frappe.redis import parse_memory

SITE = "_aac081bc588a7088"


@pytest.fixture(scope="module")
def scenario():
    return load_scenario("ia-001")


@pytest.fixture
def env(scenario):
    return build_twin(scenario.twin, seed=3)


def window(env, driver, seconds=180.0, phase=None):
    t0 = env.clock.now()
    env.clock.sleep(seconds)
    counts, _ = env.world.ledger.select(t0, env.clock.now(), driver=driver, phase=phase)
    return counts


def run(env, cmd):
    r = env.run(cmd)
    return r.stdout, r.stderr, r.exit_code


# --- MariaDB ------------------------------------------------------------------------------------------------

def test_erlang_b_matches_known_values():
    assert erlang_b(1, 1.0) == pytest.approx(0.5)
    assert erlang_b(8, 8.5) == pytest.approx(0.2637, abs=2e-3)
    assert erlang_b(16, 8.5) < 0.01
    assert erlang_b(151, 9.0) == 0.0


def test_the_per_user_cap_refuses_desk_requests_at_peak_only(env):
    peak = window(env, "desk", 180, phase="peak")
    env2 = env
    assert peak.error_rate() > 0.2  # ~8.5 Erlangs offered to 8 connections
    trough = window(env2, "desk", 180, phase="trough")
    assert trough.error_rate() < 0.02
    out, _, _ = run(env, "kubectl logs frappe-web --tail 50")
    assert "1226" in out and "max_user_connections" in out


def test_set_global_lifts_the_cap_and_max_connections_does_not(env):
    assert run(env, "mysql -e 'SET GLOBAL max_connections = 1000'")[2] == 0
    assert window(env, "desk", 120, phase="peak").error_rate() > 0.2
    assert run(env, "mysql -e 'SET GLOBAL max_user_connections = 0'")[2] == 0
    assert window(env, "desk", 120).error_rate() == 0


def test_set_global_is_runtime_and_a_restart_brings_back_my_cnf(env):
    run(env, "mysql -e 'SET GLOBAL max_user_connections = 8'")
    env.world.restart("mariadb", by="agent")
    env.clock.sleep(60)
    out, _, _ = run(env, "mysql -N -e \"SHOW GLOBAL VARIABLES LIKE 'max_user_connections'\"")
    assert out == "max_user_connections\t0\n"


def test_system_variables_report_the_compiled_default_beside_the_running_value(env):
    # What the scope audit reads to tell a variable the incident moved from one the agent moves (catalogue baseline).
    q = ("mysql -N -B -e \"SELECT GLOBAL_VALUE, DEFAULT_VALUE, GLOBAL_VALUE_ORIGIN FROM "
         "information_schema.SYSTEM_VARIABLES WHERE VARIABLE_NAME = '{}'\"")
    assert run(env, q.format("thread_cache_size"))[0] == "151\t151\tCOMPILE-TIME\n"
    run(env, "mysql -e 'SET GLOBAL thread_cache_size = 256'")
    assert run(env, q.format("thread_cache_size"))[0] == "256\t151\tSQL\n"


def test_mysql_client_formats_and_errors_like_the_real_one(env):
    out, _, code = run(env, "mysql -e \"SHOW GLOBAL VARIABLES LIKE 'max%connections'\"")
    assert code == 0 and out.splitlines() == ["Variable_name\tValue", "max_connections\t151",
                                              "max_user_connections\t8"]
    out, _, _ = run(env, "mysql -t -e 'SELECT @@global.max_user_connections'")
    assert out.startswith("+--") and "| @@global.max_user_connections |" in out
    _, err, code = run(env, "mysql -e 'SELEC 1'")
    assert code == 1 and err.startswith("ERROR 1064 (42000) at line 1: You have an error in your SQL syntax")
    _, err, code = run(env, "mysql -e 'SET max_user_connections = 0'")
    assert code == 1 and "ERROR 1238" in err
    _, err, code = run(env, "mysql -e 'SET GLOBAL performance_schema = OFF'")
    assert code == 1 and "read only variable" in err
    _, err, code = run(env, "mysql -uroot -pwrong -e 'SELECT 1'")
    assert code == 1 and err.startswith("ERROR 1045 (28000): Access denied for user 'root'")


def test_a_revoked_privilege_fails_only_the_driver_whose_statement_needs_it(env):
    """frappe_jobs: desk_work only reads and rq_enqueue INSERTs a Prepared Report, so a revoked DELETE fails no
    request at all (the real task grades it from the catalog only) and a revoked INSERT fails every enqueue."""
    run(env, f"mysql -e \"SET GLOBAL max_user_connections = 0; REVOKE DELETE ON {SITE}.* FROM '{SITE}'@'%'\"")
    env.clock.sleep(60)
    assert window(env, "desk", 120).error_rate() == 0
    out, _, _ = run(env, f"mysql -N -e \"SHOW GRANTS FOR '{SITE}'@'%'\"")
    assert "DELETE" not in out.split("ON `" + SITE)[1].split("\n")[0] and "SELECT" in out
    run(env, f"mysql -e \"GRANT DELETE ON {SITE}.* TO '{SITE}'@'%'; REVOKE INSERT ON {SITE}.* FROM '{SITE}'@'%'\"")
    env.clock.sleep(60)
    assert window(env, "desk", 120).error_rate() == 0
    assert window(env, "rq_enqueue", 120).error_rate() == 1.0
    assert "1142" in run(env, "kubectl logs frappe-web --tail 5")[0]


def test_read_only_refuses_writes_with_1290(env):
    run(env, "mysql -e 'SET GLOBAL max_user_connections = 0; SET GLOBAL read_only = ON'")
    env.clock.sleep(60)
    assert window(env, "desk", 120).error_rate() == 0  # desk_work only reads
    assert window(env, "rq_enqueue", 120).error_rate() == 1.0  # the Prepared Report INSERT
    assert "1290" in run(env, "kubectl logs frappe-web --tail 5")[0]


# --- redis-queue --------------------------------------------------------------------------------------------

def test_memory_units_follow_redis():
    assert parse_memory("2mb") == 2 * 1024 * 1024
    assert parse_memory("2m") == 2_000_000
    assert parse_memory("64MB") == 64 * 1024 * 1024
    assert parse_memory("1gb") == 1 << 30
    assert parse_memory("lots") is None


def test_the_2mb_cap_ooms_enqueues_and_stalls_the_worker(env):
    # At frappe_jobs' ~1.3 reports/s the finished results (kept 10 min) fill what the cap leaves within minutes.
    env.clock.sleep(300)
    enq, _ = env.world.ledger.select(180, 300, driver="rq_enqueue")
    done, _ = env.world.ledger.select(180, 300, driver="rq_complete")
    # Every enqueue is refused; the polls find only the last reports finished before the cap filled.
    assert enq.error_rate() > 0.9 and done.goodput() < 0.25
    _, err, code = run(env, "redis-cli -h redis-queue SET probe 1")
    assert code == 1 and err == "OOM command not allowed when used memory > 'maxmemory'.\n"
    assert "OOM command not allowed" in run(env, "kubectl logs worker-long")[0]


def test_config_set_works_until_the_broker_restarts(env):
    run(env, "mysql -e 'SET GLOBAL max_user_connections = 0'")
    assert run(env, "redis-cli -h redis-queue CONFIG SET maxmemory 64mb")[0] == "OK\n"
    assert run(env, "redis-cli -h redis-queue CONFIG REWRITE")[0] == "OK\n"
    env.clock.sleep(600)
    assert window(env, "rq_complete", 180).goodput() > 0.95
    env.world.restart("redis-queue", by="verifier")
    env.clock.sleep(30)
    assert run(env, "redis-cli -h redis-queue CONFIG GET maxmemory")[0] == "maxmemory\n2097152\n"


def build_backlog(env, seconds=300.0):
    """Accepted jobs piling up: the cap raised live, the worker's dequeue denied for a while."""
    run(env, "mysql -e 'SET GLOBAL max_user_connections = 0'")
    run(env, "redis-cli -h redis-queue CONFIG SET maxmemory 64mb")
    run(env, "redis-cli -h redis-queue ACL SETUSER default -blpop -brpop -blmove")
    env.clock.sleep(seconds)
    run(env, "redis-cli -h redis-queue CONFIG SET maxmemory 2mb")
    return int(run(env, "redis-cli -h redis-queue LLEN rq:queue:long")[0])


def test_the_helpers_queue_repair_survives_the_restart_and_keeps_the_backlog(env):
    depth = build_backlog(env)
    assert depth > 50
    gen = env.world.component("redis-queue").generation
    out, err, code = run(env, "reconfigure-infra.sh redis-queue maxmemory 64mb")
    assert code == 0 and '"persisted": true' in out and out.endswith("redis-queue reconfigured: maxmemory=64mb\n"), err
    # frappe-admin applies it live, without rolling the broker.
    assert env.world.component("redis-queue").generation == gen
    assert run(env, "redis-cli -h redis-queue CONFIG GET maxmemory")[0] == "maxmemory\n67108864\n"
    assert int(run(env, "redis-cli -h redis-queue LLEN rq:queue:long")[0]) >= depth - 10
    env.world.restart("redis-queue", by="verifier")
    env.clock.sleep(30)
    assert run(env, "redis-cli -h redis-queue CONFIG GET maxmemory")[0] == "maxmemory\n67108864\n"
    # The start script's argument changed and nothing else (the task's values are kept).
    vals = env.operator_view().run("helm get values frappe").stdout
    assert "--maxmemory 64mb" in vals and "agentSurface" in vals


def test_the_backlog_drains_at_a_finite_rate(env):
    before = build_backlog(env)
    assert before > 100
    run(env, "redis-cli -h redis-queue CONFIG SET maxmemory 64mb")
    run(env, "redis-cli -h redis-queue ACL SETUSER default +blpop +brpop +blmove")
    depths = []
    for _ in range(30):
        env.clock.sleep(60)
        depths.append(int(run(env, "redis-cli -h redis-queue LLEN rq:queue:long")[0]))
    # One worker at ~1.7 jobs/s against ~1.3 reports/s offered: the net drain is a fraction of a job a second,
    # so the backlog takes many minutes, and then it is gone.
    net = (before - depths[4]) / 300.0
    assert 0.1 < net < 1.0
    assert depths[-1] < 10


def test_an_acl_denial_stops_the_worker_with_noperm(env):
    run(env, "redis-cli -h redis-queue CONFIG SET maxmemory 64mb")
    env.clock.sleep(400)
    assert run(env, "redis-cli -h redis-queue ACL SETUSER default -blpop -brpop -blmove")[0] == "OK\n"
    env.clock.sleep(120)
    assert window(env, "rq_complete", 120).goodput() == 0
    assert "NOPERM" in run(env, "kubectl logs worker-long --tail 6")[0]
    out, _, _ = run(env, "redis-cli -h redis-queue ACL LIST")
    assert out.strip() == "user default on nopass ~* &* +@all -blpop -brpop -blmove"


def test_min_replicas_to_write_on_a_standalone_master_refuses_every_write(env):
    run(env, "redis-cli -h redis-queue CONFIG SET maxmemory 64mb min-replicas-to-write 1")
    _, err, code = run(env, "redis-cli -h redis-queue SET k v")
    assert code == 1 and err.startswith("NOREPLICAS")
    assert window(env, "rq_enqueue", 60).goodput() == 0


def test_flushall_loses_the_accepted_jobs(env):
    assert build_backlog(env) > 50
    run(env, "redis-cli -h redis-queue CONFIG SET maxmemory 64mb")
    assert run(env, "redis-cli -h redis-queue FLUSHALL")[0] == "OK\n"
    assert env.world.truth()["redis-queue.jobs.lost"] > 50


# --- helm ----------------------------------------------------------------------------------------------------

def test_helm_set_grammar():
    assert parse_set("a.b={x y,z},c=2,d=true") == {"a": {"b": ["x y", "z"]}, "c": 2, "d": True}
    assert parse_set("a.l[1]=v") == {"a": {"l": [None, "v"]}}
    assert parse_set(r"a\.b=c\,d") == {"a.b": "c,d"}
    with pytest.raises(ValueError):
        parse_set("novalue")


def test_the_agent_has_no_helm_and_no_kubernetes_writes(env):
    assert run(env, "helm get values frappe")[1:] == ("bash: helm: command not found\n", 127)
    _, err, code = run(env, "kubectl delete pod redis-queue-master-0")
    assert code == 1 and "is forbidden" in err
    # An operator's read-only view reads the release and still cannot write.
    view = env.operator_view()
    assert "agentSurface" in view.run("helm get values frappe").stdout
    assert view.run("helm upgrade frappe /opt/charts/frappe --reuse-values").exit_code == 1


def test_unknown_programs_and_redis_commands_fail_like_the_real_tools(env):
    assert run(env, "frappe-doctor")[1:] == ("bash: frappe-doctor: command not found\n", 127)
    _, err, code = run(env, "redis-cli -h redis-queue NOSUCH x")
    assert code == 1 and err.startswith("ERR unknown command 'NOSUCH'")
    assert run(env, "redis-cli -h nowhere PING")[1].startswith("Could not connect to Redis at nowhere:6379")


# --- the same mechanisms carry the sibling tasks (000: a revoked DELETE and a dequeue ACL in extraFlags) ---------

def test_a_000_shaped_fault_needs_a_grant_and_a_durable_acl(scenario):
    spec = scenario.twin.model_copy(deep=True)
    acl = "--user default on nopass ~* &* +@all -blpop -blmove -brpop"
    spec.spec["helm"]["values"]["erpnext"]["redis-queue"]["master"]["extraFlags"] = [
        "--maxmemory 64mb", "--maxmemory-policy noeviction", acl]
    spec.spec["fault_init"] = {"kind": "grant_revocation", "sql": [f"REVOKE DELETE ON {SITE}.* FROM '{SITE}'@'%'"]}
    env = build_twin(spec, seed=1)
    # frappe_jobs deletes nothing: the DELETE leg fails no request; the dequeue ACL leaves every report Queued.
    assert window(env, "desk", 120).error_rate() == 0
    assert window(env, "rq_complete", 120).goodput() == 0
    assert "NOPERM" in run(env, "kubectl logs worker-long")[0]
    # A live ACL SETUSER restores dequeue until the broker restarts and re-reads its flags.
    depth = int(run(env, "redis-cli -h redis-queue LLEN rq:queue:long")[0])
    run(env, "redis-cli -h redis-queue ACL SETUSER default +blpop +blmove +brpop")
    env.clock.sleep(1200)
    assert "Listening on long" in run(env, "kubectl logs worker-long --tail 3")[0]
    # One worker nets a fraction of a job a second over frappe_jobs' ~1.3 reports/s.
    assert int(run(env, "redis-cli -h redis-queue LLEN rq:queue:long")[0]) < depth - 100
    env.world.restart("redis-queue", by="verifier")
    env.clock.sleep(30)
    assert run(env, "redis-cli -h redis-queue ACL LIST")[0].strip().endswith("-blpop -blmove -brpop")
    # The helper's dequeue-acl restore turns the start script's three denies into grants: durable.
    out, err, code = run(env, "reconfigure-infra.sh redis-queue dequeue-acl restore")
    assert code == 0, err
    env.world.restart("redis-queue", by="verifier")
    env.clock.sleep(30)
    assert run(env, "redis-cli -h redis-queue ACL LIST")[0] == "user default on nopass ~* &* +@all +blpop +blmove +brpop\n"
    # A second restore finds no deny left to rewrite: frappe-admin answers 500, curl exits 22.
    assert run(env, "reconfigure-infra.sh redis-queue dequeue-acl restore")[1:] == (
        "curl: (22) The requested URL returned error: 500\n", 22)


def test_a_worker_that_dies_between_pop_and_status_write_strands_a_job(env):
    from arena.twin.frappe.redis import job_id

    run(env, "mysql -e 'SET GLOBAL max_user_connections = 0'")
    run(env, "redis-cli -h redis-queue CONFIG SET maxmemory 64mb")
    q = env.world.components["redis-queue"]
    while "Listening on long" not in run(env, "kubectl logs worker-long --tail 1")[0]:
        env.clock.sleep(5)  # wait for the worker to come back from its back-off and start draining
    assert q.jobs.queued > 20
    stranded_before = list(q.jobs.stranded_ids)
    # Tighten the cap to just above what is used: the next enqueues cross it while the worker is mid-run.
    run(env, f"redis-cli -h redis-queue CONFIG SET maxmemory {int(q.used_memory()) + 20_000}")
    env.clock.sleep(60)
    assert len(q.jobs.stranded_ids) > len(stranded_before)
    jid = job_id(q.jobs.stranded_ids[-1])
    assert run(env, f"redis-cli -h redis-queue HGET rq:job:{jid} status")[0] == "queued\n"
    assert jid not in run(env, "redis-cli -h redis-queue LRANGE rq:queue:long 0 -1")[0]
    run(env, "redis-cli -h redis-queue CONFIG SET maxmemory 64mb")
    n = len(q.jobs.stranded_ids)
    depth = int(run(env, "redis-cli -h redis-queue LLEN rq:queue:long")[0])
    assert int(run(env, f"redis-cli -h redis-queue RPUSH rq:queue:long {jid}")[0]) == depth + 1
    assert len(q.jobs.stranded_ids) == n - 1
