"""Smoke test of the whole live stack: real servers, apps, load, Prometheus, the Environment seam, clean stop.

Starts PostgreSQL, MariaDB, Redis and Prometheus with the three substrates' apps, runs a healthy load for two
cycles, checks Prometheus scrapes every target (`up == 1`) and that the SLIs are clean, runs the real clients
through the environment's shell, restarts one app and one server, and stops everything. About a minute here.
Skips, with the reason, when a server package or the `live` extra is missing.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.arena.live.livemarks import LiveShell, live_marks, processes_mentioning

pytestmark = live_marks(180)


@pytest.fixture(scope="module")
def env():
    from arena.live.loadgen import LoadShape
    from arena.live.stack import LiveStack

    stack = LiveStack(("slack", "frappe", "saleor"),
                      shape=LoadShape(seed=7, warmup_s=2, warmup_rps=3, cycles=[[4, 8, 4, 2]]))
    stack.up()
    try:
        yield LiveShell(stack)
    finally:
        tracked = stack.pids()
        stack_dir = str(stack.dir)
        left = stack.down()
        assert tracked and left == [], f"processes left behind: {left}"
        assert processes_mentioning(stack_dir) == [], "a process of the stack is still running"


def _bad_rows(env) -> list[str]:
    rows = [json.loads(line) for line in open(env.stack.ledger_path) if line.strip()]
    return [f'{r["phase"]} {r["driver"]} {r["detail"]}' for r in rows if not (r["ok"] and r["correct"])][:20]


def _cycles_done(env) -> float:
    res = env.stack.prometheus_query("loadgen_cycles_total")
    return float(res[0]["value"][1]) if res else 0.0


def _wait_cycles(env, n: int) -> float:
    """Wait (on the environment's clock) until the load generator reports `n` more completed cycles."""
    deadline = env.clock.now() + (n + 1) * env.stack.shape.cycle_s + 20
    target = _cycles_done(env) + n
    while env.clock.now() < deadline and _cycles_done(env) < target:
        env.clock.sleep(0.5)
    return _cycles_done(env) - target + n


def test_the_stack_runs_healthy_load_and_prometheus_sees_it(env):
    assert env.stack.wait_scraped(timeout_s=120), "Prometheus never saw up == 1 for every target"
    up = {r["metric"]["job"] for r in env.stack.prometheus_query("up == 1")}
    assert {"saleor-api", "frappe-web", "worker-long", "svc-message", "loadgen", "prometheus"} <= up
    scraped_at = env.clock.now()
    assert _wait_cycles(env, 2) >= 2
    print("cold starts:", {k: round(v, 2) for k, v in env.stack.timings.items()},
          "sli source:", type(env.sli_source).__name__)

    window = env.clock.now() - scraped_at  # two full cycles, plus parts of the ones at either end
    err = [s for s in env.sli("error_ratio", window) if s.t_end - s.t_start >= 1.0]
    assert {"peak", "trough"} <= {s.labels["phase"] for s in err}, err
    for s in err:
        assert s.count > 0 and s.value is not None, s
    # A healthy stack errs only when the shared machine starves it (client timeouts); the ledger says which.
    overall = env.sli("error_ratio", window, step=window)[0]
    assert overall.count > 0 and overall.value <= 0.05, (overall, _bad_rows(env))
    for driver in ("browse", "checkout_readback", "desk", "rq_enqueue", "rq_complete", "write_readback"):
        good = env.sli("goodput", window, labels={"driver": driver}, step=window)
        assert good[0].count > 0 and good[0].value >= 0.9, (driver, good, _bad_rows(env))
    p95 = env.sli("latency_p95_ms", window, labels={"driver": "checkout_readback"}, step=window)[0].value
    assert p95 is not None and p95 >= 250  # the pricing statement really runs its 250 ms on the server
    ok = env.stack.prometheus_query('sum(loadgen_requests_total{outcome="ok"})')
    assert float(ok[0]["value"][1]) > 0
    assert env.stack.prometheus_query("loadgen_phase == 1")


def test_the_shell_has_the_real_clients_and_the_service_names(env):
    r = env.run('psql -X -At "postgresql://postgres:postgres@postgres:5432/app" -c "select count(*) from messages"')
    assert r.ok and int(r.stdout) >= 160, r
    assert env.run("redis-cli -h redis-queue ping").stdout.strip() == "PONG"
    r = env.run('mysql -u root -N -e "select count(*) from _aac081bc588a7088.tabToDo"')
    assert r.ok and int(r.stdout) >= 200, r
    r = env.run("curl -sf http://svc-message:8000/healthz")
    assert r.ok and '"status": "ok"' in r.stdout, r
    r = env.run("psql -X -At -h nowhere-such-host -c 'select 1'")
    assert not r.ok and "nowhere-such-host" in r.stderr
    assert env.run("no-such-command").exit_code == 127


def test_restart_gives_a_new_instance_with_the_same_image(env):
    before = env.run("curl -s http://svc-message:8000/healthz").stdout
    res = env.restart("svc-message")
    assert res.ready and res.old_id != res.new_id and res.image_unchanged, res
    assert res.old_id in before
    after = env.run("curl -s http://svc-message:8000/healthz").stdout
    assert res.new_id in after
    desc = env.describe()
    assert env.restarts("svc-message") == 1 and desc.name == "kubernetes"
    assert desc.component("svc-message").ready_replicas == 1
    deadline = env.clock.now() + 120  # generous: ends as soon as the SLI source has it
    seen = None
    while env.clock.now() < deadline:  # the restart reaches the SLI source within a scrape or two
        samples = env.sli("restarts", 30, labels={"component": "svc-message"})
        seen = samples[-1].value if samples else None
        if seen == 1:
            break
        env.clock.sleep(0.5)
    assert seen == 1, samples


def test_the_agents_real_kubectl_reads_pods_and_logs_and_cannot_write(env):
    pods = env.run("kubectl get pods -n saleor")
    assert pods.ok and pods.stdout.splitlines()[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    old = next(line.split()[0] for line in pods.stdout.splitlines() if line.startswith("saleor-api-"))
    assert "listening on" in env.run("kubectl -n saleor logs deploy/saleor-api --tail=5").stdout
    r = env.run("kubectl -n saleor rollout restart deployment/saleor-api")
    assert r.exit_code == 1 and "forbidden" in r.stderr, r  # the foothold has no Kubernetes write authority
    assert old in env.run("kubectl get pods -n saleor").stdout and env.restarts("saleor-api") == 0
    r = env.run("kubectl -n saleor exec deploy/saleor-api -- printenv APP_INSTANCE")  # exec is a read verb here
    assert r.ok and r.stdout.strip() == old, r  # run beside the pod's process, with its environment
    assert env.run("kubectl delete pod no-such-pod").exit_code == 1
    assert "unknown command" in env.run("kubectl frobnicate").stderr
    # The harness's rollout restart (as the guard's probe does it): a new pod, its process up before it is ready.
    res = env.restart("saleor-api")
    assert res.ready and res.rollout == "complete" and old in res.old_id and old not in res.new_id, res
    assert env.restarts("saleor-api") == 1
    assert old not in env.run("kubectl get pods -n saleor").stdout


def test_a_crashed_app_is_started_again_and_counted(env):
    import signal

    sup = env.stack.supervisor
    before, old = sup.restarts["worker-long"], sup.running["worker-long"]
    os.kill(old.proc.pid, signal.SIGKILL)
    deadline = env.clock.now() + 120  # generous: ends as soon as the app is back
    while env.clock.now() < deadline and not (sup.running["worker-long"] is not old and sup.ready("worker-long")):
        env.clock.sleep(0.25)
    new = sup.running["worker-long"]
    # The container restarts in the same pod: a new process, the pod's name kept.
    assert new.proc.pid != old.proc.pid and new.instance == old.instance and sup.ready("worker-long")
    assert env.restarts("worker-long") == before + 1


def test_a_redis_runtime_change_is_lost_on_restart(env):
    assert env.run("redis-cli -h redis-queue config set maxmemory 3mb && redis-cli -h redis-queue config rewrite").ok
    res = env.restart("redis-queue")
    assert res.ready and res.old_id != res.new_id
    out = env.run("redis-cli -h redis-queue config get maxmemory").stdout.split()
    assert out[-1] == str(64 * 1024 * 1024)  # back to the Helm values' 64mb


def test_a_configmap_edit_and_a_rollout_restart_reach_the_new_process(env):
    import shlex

    import yaml

    admin = f"kubectl --kubeconfig {env.stack.cluster.kubeconfig}"  # the harness's kubeconfig: the agent's reads only
    cfg = yaml.safe_load(env.run(f"{admin} get configmap app-config -o jsonpath='{{.data.app\\.yaml}}'").stdout)
    cfg["roles"]["message"]["db"]["pool_size"] = 7
    patch = json.dumps({"data": {"app.yaml": yaml.safe_dump(cfg)}})
    assert env.run(f"{admin} patch configmap app-config --type merge -p {shlex.quote(patch)}").ok
    running = json.loads(env.run("curl -s http://svc-message:8000/admin/config").stdout)
    assert running["roles"]["message"]["db"]["pool_size"] != 7  # the running process read its file at boot
    r = env.run(f"{admin} rollout restart deploy/svc-message && "
                f"{admin} rollout status deploy/svc-message --timeout=120s")
    assert r.ok and "successfully rolled out" in r.stdout, r
    running = json.loads(env.run("curl -s http://svc-message:8000/admin/config").stdout)
    assert running["roles"]["message"]["db"]["pool_size"] == 7
