"""The slack-spine substrate: operator shell output and errors, the layers of its config and events, the pool
mechanism under the ACL hold, and what the SLI source shows (including the pre-incident baseline)."""

from __future__ import annotations

import json

import pytest

from arena.scenario import load_scenario
from arena.twin.engine import build_twin
from arena.twin.ledger import Histogram, bucket_of, BUCKETS_MS


@pytest.fixture()
def env():
    return build_twin(load_scenario("ia-011").twin, seed=0)


def _cfg(env, role: str) -> dict:
    return json.loads(env.run(f"curl -s svc-{role}:8000/admin/config").stdout)["db"]


def test_shell_errors_look_like_the_real_tools(env):
    r = env.run("frobnicate --now")
    assert r.exit_code == 127 and r.stderr == "bash: frobnicate: command not found\n"
    r = env.run('psql "$DB_ADMIN_DSN" -c "SELEC 1"')
    assert r.exit_code == 1 and r.stderr.startswith('ERROR:  syntax error at or near "SELEC"')
    r = env.run("curl -s http://svc-nowhere:8000/healthz")
    assert r.exit_code == 6 and "Could not resolve host: svc-nowhere" in r.stderr
    r = env.run("kubectl delete pod svc-channel")
    assert r.exit_code == 1 and "Forbidden" in r.stderr and "cannot delete resource \"pods\"" in r.stderr
    r = env.run("echo 'unterminated")
    assert r.exit_code == 2


def test_psql_and_kubectl_output(env):
    r = env.run('psql "$DB_ADMIN_DSN" -c "SHOW max_connections"')
    # psql pads every column but the last
    assert r.stdout.splitlines()[:4] == [" max_connections ", "-----------------", " 200", "(1 row)"]
    r = env.run("kubectl get pods")
    head, *rows = r.stdout.splitlines()
    assert head.split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert any(row.startswith("svc-channel-") and "1/1" in row for row in rows)
    r = env.run("kubectl get pods | grep svc-auth | wc -l")
    assert r.stdout.strip() == "1"


def test_commands_cost_virtual_time(env):
    t0 = env.clock.now()
    env.run("sleep 30 && echo done")
    assert env.clock.now() == pytest.approx(t0 + 30)
    env.run("false && sleep 100")
    assert env.clock.now() == pytest.approx(t0 + 30)


def test_put_config_needs_a_reload_and_survives_a_restart(env):
    assert _cfg(env, "channel")["pool_size"] == 3
    env.run("""curl -s -X PUT svc-channel:8000/admin/config -d '{"db":{"pool_size":20,"max_overflow":10}}'""")
    assert _cfg(env, "channel")["pool_size"] == 3  # staged: the running process keeps its pool
    env.run("curl -s -X POST svc-channel:8000/admin/reload")
    env.run("curl -s svc-channel:8000/healthz")
    assert env.run("curl -s svc-channel:8000/healthz").exit_code == 7  # reloading: not ready, refused
    env.clock.sleep(15)
    assert _cfg(env, "channel")["pool_size"] == 20
    env.restart("svc-channel")
    assert _cfg(env, "channel") ["pool_size"] == 20 and _cfg(env, "channel")["max_overflow"] == 10


def test_a_file_edit_in_the_container_is_lost_on_restart(env):
    env.run("kubectl exec deploy/svc-channel -- sed -i 's/pool_size: 3$/pool_size: 20/' /srv/app/config/app.yaml")
    env.run("curl -s -X POST svc-channel:8000/admin/reload")
    env.clock.sleep(15)
    assert _cfg(env, "channel")["pool_size"] == 20
    env.restart("svc-channel")
    assert _cfg(env, "channel")["pool_size"] == 3


def test_events_are_process_memory(env):
    env.clock.sleep(45)
    ev = json.loads(env.run("curl -s svc-channel:8000/admin/event").stdout)["events"]
    assert {"name": "read_consistency_strict", "active": True} in ev
    env.restart("svc-channel")
    ev = json.loads(env.run("curl -s svc-channel:8000/admin/event").stdout)["events"]
    assert {"name": "read_consistency_strict", "active": False} in ev


def test_the_acl_hold_starves_the_small_pool_only_at_peak(env):
    env.clock.sleep(600)
    err = {s.labels["phase"]: s.value for s in env.sli("error_ratio", 120, labels={"driver": "write_readback"})}
    assert err["peak"] > 0.5 and err["trough"] < 0.05
    conn = sum(s.value for s in env.sli("conn_errors", 120, labels={"driver": "write_readback"}))
    assert conn > 0
    env.run("""curl -s -X PUT svc-channel:8000/admin/event -d '{"name":"read_consistency_strict","active":false}'""")
    env.clock.sleep(120)
    err = [s.value for s in env.sli("error_ratio", 120, labels={"driver": "write_readback"})]
    assert max(err) == 0.0


def test_the_pre_incident_baseline_is_queryable_and_healthy(env):
    base = env.sli("latency_p90_ms", 180, labels={"driver": "write_readback", "phase": "peak"})
    assert len(base) == 3 and all(s.labels["phase"] == "peak" and int(s.labels["cycle"]) < 0 for s in base)
    assert all(s.value < 400 for s in base)
    steps = env.sli("offered_rps", 60, step=10)
    assert len(steps) == 6 and all(s.t_end - s.t_start == pytest.approx(10) for s in steps)
    assert env.sli("ready_replicas", 60, labels={"component": "svc-channel"})[-1].value == 1.0


def test_buckets_are_eighth_octaves_and_a_latency_lands_in_the_first_bound_at_or_above_it():
    # Literal bounds (2 ** (k / 8) ms), not values computed by the code under test.
    assert bucket_of(16.0) == 32 and BUCKETS_MS[32] == 16.0
    assert bucket_of(10.0) == 27 and BUCKETS_MS[27] == pytest.approx(10.3747, abs=1e-4)
    assert bucket_of(20.0) == 35 and BUCKETS_MS[35] == pytest.approx(20.7494, abs=1e-4)
    assert bucket_of(1000.0) == 80 and BUCKETS_MS[80] == 1024.0
    assert bucket_of(0.5) == 0 and bucket_of(1e12) == len(BUCKETS_MS) - 1 and BUCKETS_MS[-1] == float("inf")
    for ms in (1.01, 3.3, 47.0, 999.0, 60_000.0):
        k = bucket_of(ms)
        assert BUCKETS_MS[k - 1] < ms <= BUCKETS_MS[k], ms


def test_histogram_nearest_rank():
    h = Histogram()
    for ms in (10.0, 20.0, 1000.0):
        h.add(bucket_of(ms), 1)
    assert h.percentile(50) == pytest.approx(20.7494, abs=1e-4)  # the 2nd of 3: rank ceil(0.50 * 3) = 2
    assert h.percentile(66) == pytest.approx(20.7494, abs=1e-4)  # ceil(0.66 * 3) = 2
    assert h.percentile(67) == 1024.0                             # ceil(0.67 * 3) = 3
    assert h.percentile(1) == pytest.approx(10.3747, abs=1e-4)
    assert Histogram().percentile(90) is None


def _maint_env(offset: float):
    spec = {"substrate": "slack-spine", "profile": {"drivers": [{"name": "write_readback"}]},
            "spec": {"maintenance": {"enabled": True, "period_s": 60, "offset_s": offset, "duration_s": 8}}}
    return build_twin(spec, seed=0)


def test_maintenance_runs_in_the_peak_slow_writes_until_the_schedule_moves():
    env = _maint_env(35)
    env.clock.sleep(300)
    peak = [s.value for s in env.sli("latency_p90_ms", 240, labels={"driver": "write_readback", "phase": "peak"})]
    assert min(peak) > 554  # the F4 peak band after tolerance
    bad = env.run("""curl -s -X PUT db-maintenance:8081/v1/maintenance -d '{"offset_s": 55}'""")
    assert json.loads(bad.stdout)["detail"].startswith("a complete schedule is required")
    env.run("""curl -s -X PUT db-maintenance:8081/v1/maintenance """
            """-d '{"enabled":true,"period_s":60,"offset_s":55,"duration_s":8}'""")
    env.restart("db-maintenance")  # the schedule lives in a PostgreSQL row: durable
    env.clock.sleep(300)
    peak = [s.value for s in env.sli("latency_p90_ms", 240, labels={"driver": "write_readback", "phase": "peak"})]
    assert max(peak) < 400
    state = json.loads(env.run("curl -s db-maintenance:8081/v1/maintenance").stdout)
    assert state["schedule"]["offset_s"] == 55 and state["counters"]["checkpoints_req"] >= 9


def test_an_event_refires_after_the_declaration():
    spec = {"substrate": "slack-spine",
            "profile": {"events": [{"name": "read_consistency_strict", "at_s": 40, "targets": ["svc-channel"],
                                    "refire_after_declare_s": 60}]},
            "spec": {"env": {"channel": {"ACL_HOLD_MS": "350"}}}}
    env = build_twin(spec, seed=0)
    env.clock.sleep(50)
    env.run("""curl -s -X PUT svc-channel:8000/admin/event -d '{"name":"read_consistency_strict","active":false}'""")
    env.world.declare(env.clock.now())
    env.clock.sleep(59)
    assert env.world.truth()["svc-channel.events.read_consistency_strict"] is False
    env.clock.sleep(2)
    assert env.world.truth()["svc-channel.events.read_consistency_strict"] is True


def test_kubectl_jsonpath_and_the_configmap_file(env):
    r = env.run("kubectl get configmap app-config -o jsonpath='{.data.app\\.yaml}'")
    assert "pool_size: 3" in r.stdout and r.exit_code == 0
    # Unquoted, the shell eats the backslash, as bash does: kubectl then looks up data.app.yaml and fails.
    r = env.run("kubectl get configmap app-config -o jsonpath={.data.app\\.yaml}")
    assert r.exit_code == 1 and "app is not found" in r.stderr
    r = env.run('kubectl get deployment svc-channel -o jsonpath=\'{.spec.template.spec.containers[0]'
                '.env[?(@.name=="ACL_HOLD_MS")].value}\'')
    assert r.stdout == "350"
    r = env.run("kubectl get deployment svc-nope -o json")
    assert r.exit_code == 1 and 'deployments.apps "svc-nope" not found' in r.stderr
    r = env.run("curl -s 'http://svc-channel:8000/admin/event?name=read_consistency_strict'")
    assert json.loads(r.stdout) == {"service": "svc-channel", "name": "read_consistency_strict", "active": False}


def test_runtime_events_env_seeds_the_registry_at_start():
    spec = {"substrate": "slack-spine", "spec": {"env": {"channel": {"RUNTIME_EVENTS": "read_consistency_strict"}}}}
    env = build_twin(spec, seed=0)
    assert env.world.truth()["svc-channel.events.read_consistency_strict"] is True
    env.run("""curl -s -X PUT svc-channel:8000/admin/event -d '{"name":"read_consistency_strict","active":false}'""")
    env.restart("svc-channel")
    assert env.world.truth()["svc-channel.events.read_consistency_strict"] is True
