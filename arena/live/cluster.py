"""The live stack's Kubernetes: the emulated API server (`arena.live.kubeapi`) whose pods are the stack's processes.

`LiveStack.up()` starts one `LiveCluster` on the stack's `kubernetes` address and installs the stack's "chart" in
it: per substrate a namespace; each server (PostgreSQL, MariaDB, each Redis) a StatefulSet, each app a Deployment
(strategy Recreate: an app owns one loopback address, so the new process starts once the old one has stopped);
each app config file and each Redis values file a ConfigMap its pod mounts; a substrate's Helm release (Frappe's)
a Helm 3 release Secret holding the user-supplied values. `kubectl` (the real binary) and the guard's
`KubernetesEnvironment` reach it through kubeconfigs the stack writes: the agent's acts as a read-only user
(`as:`, the real footholds have no Kubernetes write authority), the guard's and the harness's as the admin.

`StackPods` is the emulated kubelet's container runtime (`arena.live.kubeapi.PodRuntime`): a pod start renders the
pod's ConfigMap volumes into files under the stack's `pods/<component>/` (one file per key, as Kubernetes projects
them) and starts the component's real process from them (an app through the supervisor, with the pod's name as its
instance id; a server through its launcher); a pod stop stops the process; a pod is ready once the process answers
its check (apps are probed every second, as a readinessProbe); a pod's log is the process's log from the pod's
start; `kubectl exec` runs beside the pod's process (its pid, `pod_pid`). Starts and stops run on one worker thread
per component, in order, off the controller's loop, so a rollout's status moves only once the new process is up.
Restart observers (the graded world) are told just before a running component's process stops for a new pod, and
again once the new one is ready.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from arena.live.kubeapi import KubeAPI
from arena.live.kubeapi.store import resource_for
from arena.live.names import Endpoint
from guardrail.errors import EnvironmentError_

__all__ = ["LiveCluster", "StackPods", "Component", "configmap_name", "COMPONENT_LABEL", "AGENT_USER"]

COMPONENT_LABEL = "app.kubernetes.io/name"
AGENT_USER = "system:serviceaccount:ops:agent"
_CONFIGMAPS = resource_for("", "v1", "configmaps")
_SECRETS = resource_for("", "v1", "secrets")


def configmap_name(config_file: str) -> str:
    """The ConfigMap a config file ships in: `app.yaml` -> app-config, `redis-queue-values.yaml` ->
    redis-queue-values (a chart's values file keeps its name)."""
    stem = Path(config_file).stem
    return stem if stem.endswith("-values") else f"{stem}-config"


@dataclass
class Component:
    """One workload of the stack: a server (StatefulSet) or an app (Deployment), with the files its pod mounts."""

    name: str
    namespace: str
    kind: str  # StatefulSet | Deployment
    image: str
    # config file name -> (ConfigMap name, mount path in the pod)
    mounts: dict[str, tuple[str, str]] = field(default_factory=dict)
    helm_release: str | None = None

    def rendered(self, root: Path, config_file: str) -> Path:
        """Where a pod start writes `config_file` (the pod's view of its ConfigMap)."""
        _cm, mount = self.mounts[config_file]
        return root / self.name / mount.lstrip("/") / config_file

    def manifest(self) -> dict[str, Any]:
        labels = {COMPONENT_LABEL: self.name}
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace, "labels": dict(labels)}
        if self.helm_release:
            meta["annotations"] = {"meta.helm.sh/release-name": self.helm_release,
                                   "meta.helm.sh/release-namespace": self.namespace}
            meta["labels"]["app.kubernetes.io/managed-by"] = "Helm"
        volumes = [{"name": cm, "configMap": {"name": cm}} for cm, _ in self.mounts.values()]
        container = {"name": self.name, "image": self.image,
                     "volumeMounts": [{"name": cm, "mountPath": mount} for cm, mount in self.mounts.values()]}
        spec: dict[str, Any] = {"replicas": 1, "selector": {"matchLabels": labels},
                                "template": {"metadata": {"labels": labels},
                                             "spec": {"containers": [container], "volumes": volumes}}}
        if self.kind == "Deployment":
            spec["strategy"] = {"type": "Recreate"}
        else:
            spec["serviceName"] = self.name
        return {"apiVersion": "apps/v1", "kind": self.kind, "metadata": meta, "spec": spec}


@dataclass
class _Pod:
    uid: str
    name: str
    component: str
    started: bool = False
    healthy: bool = False
    error: str = ""
    log_offset: int = 0


class StackPods:
    """The emulated kubelet's runtime for a live stack: pods are the stack's real processes."""

    def __init__(self, stack, components: dict[str, Component], root: Path, *, probe_s: float = 1.0):
        self.stack = stack
        self.components = components
        self.root = Path(root)
        self.probe_s = probe_s
        self.pods: dict[str, _Pod] = {}
        self.current: dict[str, str] = {}  # component -> uid of the pod whose process runs
        self.starts: dict[str, int] = {}
        # Who is rolling a component (the harness sets "verifier" around its challenge restart): told to observers.
        self.rolled_by: dict[str, str] = {}
        self._lock = threading.RLock()
        self._workers = {name: ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"pod-{name}")
                         for name in components}
        self._before: dict[str, str] = {}  # component -> `by` of a stop the observers were told of
        self._stop = threading.Event()
        self._prober = threading.Thread(target=self._probe_loop, name="live-readiness", daemon=True)
        self._prober.start()

    # -- PodRuntime ----------------------------------------------------------------------------------------------
    def _component(self, pod: dict[str, Any]) -> Component | None:
        return self.components.get(((pod.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL, ""))

    def pod_started(self, pod: dict[str, Any]) -> None:
        comp = self._component(pod)
        if comp is None:
            return
        meta = pod["metadata"]
        state = _Pod(meta["uid"], meta["name"], comp.name)
        with self._lock:
            self.pods[state.uid] = state
        volumes = {v.get("name"): (v.get("configMap") or {}).get("name") for v in pod["spec"].get("volumes") or ()}
        self._workers[comp.name].submit(self._start, comp, state, meta["namespace"], volumes)

    def pod_stopped(self, pod: dict[str, Any]) -> None:
        comp = self._component(pod)
        if comp is not None:
            self._workers[comp.name].submit(self._stop_pod, comp, pod["metadata"]["uid"])

    def pod_ready(self, pod: dict[str, Any]) -> bool:
        state = self.pods.get(pod["metadata"]["uid"])
        if state is None:
            return self._component(pod) is None
        return state.started and state.healthy and self.current.get(state.component) == state.uid

    def pod_pid(self, pod: dict[str, Any], container: str) -> int | None:
        """The pid of the process that is this pod's container (`kubectl exec` runs beside it), None when the pod
        is not the one whose process runs."""
        state = self.pods.get(pod["metadata"]["uid"])
        if state is None or not state.started or self.current.get(state.component) != state.uid:
            return None
        return self.stack.component_pid(state.component)

    def pod_log(self, pod: dict[str, Any], container: str) -> str:
        state = self.pods.get(pod["metadata"]["uid"])
        path = self.stack.log_path(state.component) if state is not None else None
        if path is None or not path.exists():
            return ""
        with open(path, "rb") as f:
            f.seek(state.log_offset)
            return f.read().decode(errors="replace")

    # -- the work, one component at a time -----------------------------------------------------------------------
    def _render(self, comp: Component, namespace: str, configmaps: set[str]) -> dict[str, Path]:
        out = {}
        for config_file, (cm, _mount) in comp.mounts.items():
            if cm not in configmaps:
                continue
            obj = self.stack.cluster.find(_CONFIGMAPS, namespace, cm)
            if obj is None:
                raise EnvironmentError_(f"{comp.name}: configmap {cm!r} not found (the pod cannot mount it)")
            for key, text in (obj.get("data") or {}).items():
                path = self.root / comp.name / _mount.lstrip("/") / key
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            out[config_file] = comp.rendered(self.root, config_file)
        return out

    def _start(self, comp: Component, state: _Pod, namespace: str, volumes: dict[str, str]) -> None:
        try:
            log = self.stack.log_path(comp.name)
            state.log_offset = log.stat().st_size if log is not None and log.exists() else 0
            files = self._render(comp, namespace, {v for v in volumes.values() if v})
            with self._lock:
                self.current[comp.name] = state.uid
            self.stack.start_component(comp.name, state.name, files)
            n = self.starts[comp.name] = self.starts.get(comp.name, 0) + 1
            if n > 1:
                self.stack.count_restart(comp.name)
            state.started = state.healthy = True
        except Exception as e:  # noqa: BLE001 - a pod that cannot start stays not ready, with the reason
            state.error = str(e)
            return
        by = self._before.pop(comp.name, None)
        if by is not None:
            for o in list(self.stack.restart_observers):
                o.after_restart(comp.name, by, None)

    def _stop_pod(self, comp: Component, uid: str) -> None:
        with self._lock:
            state = self.pods.pop(uid, None)
            running = self.current.get(comp.name) == uid
            if running:
                self.current.pop(comp.name, None)
        if not running or state is None or not state.started:
            return
        by = self.rolled_by.get(comp.name, "agent")
        if not self._stop.is_set():
            for o in list(self.stack.restart_observers):
                o.before_restart(comp.name, by)
            self._before[comp.name] = by
        self.stack.stop_component(comp.name)

    def _probe_loop(self) -> None:
        while not self._stop.wait(self.probe_s):
            for state in list(self.pods.values()):
                if state.started and self.current.get(state.component) == state.uid:
                    state.healthy = self.stack.component_ready(state.component, state.name)

    def start_error(self, component: str) -> str:
        """Why the component's current pod failed to start ('' when it did not fail)."""
        return next((p.error for p in list(self.pods.values()) if p.component == component and p.error), "")

    def stop(self) -> None:
        self._stop.set()
        for w in self._workers.values():
            w.shutdown(wait=True, cancel_futures=True)


class LiveCluster:
    """The emulated API server for one live stack, with its kubeconfigs and the chart's objects."""

    def __init__(self, endpoint: Endpoint, directory: Path, *, clock=None):
        self.endpoint = endpoint
        self.dir = Path(directory)
        self.api = KubeAPI(clock=clock, host=endpoint.address, port=endpoint.port, ready_delay_s=0.0)
        # A reconcile pass on every change, else four a second: enough to see a process become ready.
        self.api.controller.interval_s = 0.25
        self.api.read_only_users.add(AGENT_USER)
        self.kubeconfig = self.dir / "kubeconfig"
        self.agent_kubeconfig = self.dir / "kubeconfig.agent"
        self.pods: StackPods | None = None

    @property
    def url(self) -> str:
        return f"http://{self.endpoint.address}:{self.endpoint.port}"

    @property
    def store(self):
        return self.api.store

    def start(self, pods: StackPods, namespaces: list[str]) -> None:
        self.pods = pods
        self.api.controller.runtime = pods
        self.api.start()
        for ns in dict.fromkeys(namespaces):
            if ns != "default":  # the store starts with default, kube-system and kube-public
                self.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        self._kubeconfig(self.kubeconfig, namespaces[0], {})
        self._kubeconfig(self.agent_kubeconfig, namespaces[0], {"as": AGENT_USER})

    def _kubeconfig(self, path: Path, namespace: str, user: dict[str, Any]) -> None:
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "live",
            "clusters": [{"name": "live", "cluster": {"server": self.url}}],
            "users": [{"name": "live", "user": user}],
            "contexts": [{"name": "live", "context": {"cluster": "live", "user": "live", "namespace": namespace}}]}))

    def stop(self) -> None:
        self.api.stop()
        if self.pods is not None:
            self.pods.stop()

    # -- objects -------------------------------------------------------------------------------------------------
    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.api.create(obj, obj["metadata"].get("namespace", "default"))

    def find(self, res, namespace: str, name: str) -> dict[str, Any] | None:
        with self.store.lock:
            return self.store.find(res, namespace, name)

    def configmap_data(self, namespace: str, name: str) -> dict[str, str]:
        obj = self.find(_CONFIGMAPS, namespace, name)
        if obj is None:
            raise EnvironmentError_(f"no configmap {namespace}/{name}")
        return dict(obj.get("data") or {})

    def put_configmap(self, namespace: str, name: str, data: dict[str, str]) -> None:
        """Create the ConfigMap, or replace the keys given in the one there (as `kubectl patch` would)."""
        with self.store.lock:
            cur = self.store.find(_CONFIGMAPS, namespace, name)
            if cur is None:
                self.api.create({"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": name, "namespace": namespace}, "data": dict(data)}, namespace)
                return
            cur = json.loads(json.dumps(cur))
            cur.setdefault("data", {}).update(data)
            self.store.update(_CONFIGMAPS, namespace, name, cur, check_rv=False)

    # -- Helm 3 release Secrets ----------------------------------------------------------------------------------
    def helm_values(self, namespace: str, release: str) -> tuple[dict[str, Any], int]:
        """The deployed revision's user-supplied values (`helm get values`) and its revision number."""
        with self.store.lock:
            items, _ = self.store.list(_SECRETS, namespace, f"owner=helm,name={release},status=deployed")
        if not items:
            raise EnvironmentError_(f"no deployed Helm release {release} in namespace {namespace}")
        newest = max(items, key=lambda s: int(s["metadata"]["labels"].get("version", 0)))
        raw = gzip.decompress(base64.b64decode(base64.b64decode(newest["data"]["release"])))
        return dict(json.loads(raw).get("config") or {}), int(newest["metadata"]["labels"]["version"])

    def helm_release(self, namespace: str, release: str, values: dict[str, Any], *, chart: str) -> int:
        """Record a new deployed revision of `release` with these values (the previous one superseded), as
        `helm upgrade` writes it: a Secret sh.helm.release.v1.<release>.v<N>. Returns N."""
        with self.store.lock:
            items, _ = self.store.list(_SECRETS, namespace, f"owner=helm,name={release}")
            version = 1 + max((int(s["metadata"]["labels"].get("version", 0)) for s in items), default=0)
            for s in items:
                if s["metadata"]["labels"].get("status") == "deployed":
                    s = json.loads(json.dumps(s))
                    s["metadata"]["labels"]["status"] = "superseded"
                    self.store.update(_SECRETS, namespace, s["metadata"]["name"], s, check_rv=False)
            body = {"name": release, "namespace": namespace, "version": version, "config": values,
                    "info": {"status": "deployed"}, "chart": {"metadata": {"name": chart}}}
            blob = base64.b64encode(gzip.compress(json.dumps(body).encode()))
            self.api.create({"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
                             "metadata": {"name": f"sh.helm.release.v1.{release}.v{version}", "namespace": namespace,
                                          "labels": {"owner": "helm", "name": release, "status": "deployed",
                                                     "version": str(version)}},
                             "data": {"release": base64.b64encode(blob).decode()}}, namespace)
        return version
