"""The emulated Kubernetes API server's HTTP side: discovery, OpenAPI skeleton, REST verbs, patches, tables,
subresources (status, scale, log, exec) and watch, over `arena.live.kubeapi.store`.

Started by `arena.live.kubeapi.KubeAPI` (tests' fixtures, the live stack). It speaks JSON only; see the package
docstring for what the real kubectl and the kubernetes client can and cannot do against it.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

import yaml

from arena.live.kubeapi.exec import ExecRequest, PodProcess, serve_exec
from arena.live.kubeapi.openapi import openapi_document, openapi_index
from arena.live.kubeapi.patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from arena.live.kubeapi.store import (RESOURCES, ApiError, FieldSelector, LabelSelector, Resource, Store,
                                      resource_for)
from arena.live.kubeapi.tables import table

__all__ = ["ApiHandler", "ApiServer", "apply_defaults", "MAX_WATCH_S"]

# A watch ends after the client's timeoutSeconds, or this (the real server's default is 30-60 min).
MAX_WATCH_S = 300.0
MAX_BODY = 8 * 1024 * 1024


def _groups() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in RESOURCES:
        if r.group and r.version not in out.setdefault(r.group, []):
            out[r.group].append(r.version)
    return out


def resource_list(group: str, version: str) -> dict[str, Any]:
    res = []
    for r in RESOURCES:
        if r.group != group or r.version != version:
            continue
        verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        entry: dict[str, Any] = {"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
                                 "kind": r.kind, "verbs": verbs}
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        res.append(entry)
        for sub in r.subresources:
            kind, sverbs = r.kind, ["get", "patch", "update"]
            if sub == "scale":
                kind = "Scale"
                res.append({"name": f"{r.plural}/scale", "singularName": "", "namespaced": r.namespaced,
                            "group": "autoscaling", "version": "v1", "kind": kind, "verbs": sverbs})
                continue
            if sub == "log":
                kind, sverbs = "Pod", ["get"]
            res.append({"name": f"{r.plural}/{sub}", "singularName": "", "namespaced": r.namespaced,
                        "kind": kind, "verbs": sverbs})
        if r.kind == "Pod":
            res.append({"name": "pods/exec", "singularName": "", "namespaced": True, "kind": "PodExecOptions",
                        "verbs": ["create", "get"]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}" if group else version,
            "resources": res}


def apply_defaults(res: Resource, obj: dict[str, Any], store: Store) -> None:
    """The API server's defaulting for the fields controllers and kubectl read (replicas, strategies ...)."""
    spec = obj.setdefault("spec", {}) if res.kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet",
                                                       "Pod", "Service") else None
    if spec is None:
        return
    if res.kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        if spec.get("replicas") is None:
            spec["replicas"] = 1
    if res.kind == "Deployment":
        spec.setdefault("strategy", {"type": "RollingUpdate",
                                     "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
    if res.kind == "StatefulSet":
        spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("revisionHistoryLimit", 10)
    if res.kind == "DaemonSet":
        spec.setdefault("updateStrategy", {"type": "RollingUpdate",
                                           "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        spec.setdefault("revisionHistoryLimit", 10)
    pod_spec = spec if res.kind == "Pod" else (spec.get("template") or {}).get("spec")
    if isinstance(pod_spec, dict):
        pod_spec.setdefault("restartPolicy", "Always")
        pod_spec.setdefault("terminationGracePeriodSeconds", 30)
        pod_spec.setdefault("dnsPolicy", "ClusterFirst")
        for c in pod_spec.get("containers") or []:
            if isinstance(c, dict):
                c.setdefault("imagePullPolicy", "IfNotPresent")
                c.setdefault("terminationMessagePath", "/dev/termination-log")
    if res.kind == "Service":
        spec.setdefault("type", "ClusterIP")
        if spec.get("clusterIP") in (None, ""):
            spec["clusterIP"] = f"10.96.{(store.rv // 250) % 250}.{store.rv % 250 + 1}"
        for p in spec.get("ports") or []:
            if isinstance(p, dict):
                p.setdefault("protocol", "TCP")
                p.setdefault("targetPort", p.get("port"))


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], store: Store, logs: Callable[[dict[str, Any], str], str]):
        super().__init__(addr, ApiHandler)
        self.store = store
        self.logs = logs
        self.stopping = threading.Event()
        # Every REST request as RBAC sees it: (verb, API group, resource[/subresource]); the RBAC example's test
        # holds the guard's requests to examples/k8s/rbac.yaml with it.
        self.audit: list[tuple[str, str, str]] = []
        # Read-only users, named by the request's Impersonate-User header (a kubeconfig's `as:`; kubectl sends no
        # bearer token over plain HTTP): the live stack's agent, whose real foothold has no Kubernetes write
        # authority. Anything but GET is refused with 403 Forbidden, as RBAC would. Every other request is allowed.
        self.read_only_users: set[str] = set()
        # Which process on this host is a pod's container (kubectl exec runs beside it); None: nothing to exec into.
        self.pod_process: PodProcess | None = None


class ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ApiServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # requests are not logged: tests and the live stack read the API, not its access log

    # -- plumbing ------------------------------------------------------------------------------------------------

    def _send(self, code: int, body: Any, ctype: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else (body.encode() if isinstance(body, str)
                                                     else json.dumps(body).encode())
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise ApiError(413, "RequestEntityTooLarge", "request body too large")
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return None
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if "protobuf" in ctype:
            raise ApiError(415, "UnsupportedMediaType", "this emulated API server speaks JSON only, not protobuf")
        try:
            return yaml.safe_load(raw) if "yaml" in ctype else json.loads(raw)
        except (ValueError, yaml.YAMLError) as e:
            raise ApiError(400, "BadRequest", f"cannot decode the body: {e}") from e

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        try:
            user = self.headers.get("Impersonate-User") or ""
            if method != "GET" and user in self.server.read_only_users:
                raise ApiError(403, "Forbidden", f'{url.path} is forbidden: User "{user}" cannot '
                                                 f'{method.lower()} it (it has get, list and watch only)')
            if "dryRun" in q:
                raise ApiError(400, "BadRequest", "dry runs are not supported by this emulated API server")
            body = self._body() if method in ("POST", "PUT", "PATCH", "DELETE") else None
            if self._discovery(method, url.path):
                return
            if method in ("GET", "POST") and self._exec(url.path, url.query):
                return
            self._rest(method, url.path, q, body)
        except ApiError as e:
            self._send(e.code, e.status())
        except (BrokenPipeError, ConnectionResetError):
            pass

    # -- discovery and OpenAPI -----------------------------------------------------------------------------------

    def _discovery(self, method: str, path: str) -> bool:
        if method != "GET":
            return False
        path = path.rstrip("/") or "/"
        host = f"{self.server.server_address[0]}:{self.server.server_address[1]}"
        if path == "/version":
            self._send(200, {"major": "1", "minor": "37", "gitVersion": "v1.37.0-emulated", "platform": "linux/amd64",
                             "goVersion": "go1.24", "compiler": "gc"})
        elif path == "/api":
            self._send(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": host}]})
        elif path == "/apis":
            groups = [{"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                       "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}}
                      for g, vs in _groups().items()]
            self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        elif path.startswith("/apis/") and path.count("/") == 2 and path.split("/")[2] in _groups():
            g = path.split("/")[2]
            vs = _groups()[g]
            self._send(200, {"kind": "APIGroup", "apiVersion": "v1", "name": g,
                             "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                             "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}})
        elif path == "/api/v1":
            self._send(200, resource_list("", "v1"))
        elif path.startswith("/apis/") and path.count("/") == 3 and path.split("/")[2] in _groups() \
                and path.split("/")[3] in _groups()[path.split("/")[2]]:
            self._send(200, resource_list(path.split("/")[2], path.split("/")[3]))
        elif path == "/openapi/v3":
            self._send(200, openapi_index())
        elif path.startswith("/openapi/v3/"):
            doc = openapi_document(path[len("/openapi/v3/"):])
            if doc is None:
                raise ApiError(404, "NotFound", f"no OpenAPI document at {path}")
            self._send(200, doc)
        elif path in ("/healthz", "/readyz", "/livez"):
            self._send(200, "ok", "text/plain")
        else:
            return False
        return True

    # -- exec (arena.live.kubeapi.exec) ---------------------------------------------------------------------------

    def _exec(self, path: str, query: str) -> bool:
        parts = [p for p in path.split("/") if p]
        if len(parts) != 7 or parts[:3] != ["api", "v1", "namespaces"] or parts[4] != "pods" or parts[6] != "exec":
            return False
        # RBAC asks for `create` on pods/exec, whichever method the upgrade came on.
        self.server.audit.append(("create", "", "pods/exec"))
        pod = self.server.store.get(resource_for("", "v1", "pods"), parts[3], parts[5])  # type: ignore[arg-type]
        serve_exec(self, pod, ExecRequest(parse_qs(query, keep_blank_values=True)), self.server.pod_process)
        return True

    # -- REST ----------------------------------------------------------------------------------------------------

    def _route(self, path: str) -> tuple[Resource, str, str, str]:
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        ns = ""
        if len(rest) >= 3 and rest[0] == "namespaces" and resource_for(group, version, rest[2]) is not None:
            ns, rest = rest[1], rest[2:]
        if not rest:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        res = resource_for(group, version, rest[0])
        if res is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if sub and sub not in res.subresources:
            raise ApiError(404, "NotFound", f"{res.qualified} has no subresource {sub!r}")
        return res, ns, name, sub

    def _wants_table(self) -> bool:
        return "as=Table" in (self.headers.get("Accept") or "")

    def _rest(self, method: str, path: str, q: dict[str, str], body: Any) -> None:
        store = self.server.store
        res, ns, name, sub = self._route(path)
        verb = {"GET": "get" if name else ("watch" if q.get("watch") in ("true", "1") else "list"),
                "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
        self.server.audit.append((verb, res.group, f"{res.plural}/{sub}" if sub else res.plural))
        now = store.clock.now()
        if method == "GET" and not name:
            if q.get("watch") in ("true", "1"):
                return self._watch(res, ns, q)
            items, rv = store.list(res, ns or None, q.get("labelSelector"), q.get("fieldSelector"))
            if self._wants_table():
                return self._send(200, table(res.kind, items, now, str(rv), q.get("includeObject", "Object")))
            return self._send(200, {"kind": f"{res.kind}List", "apiVersion": res.api_version,
                                    "metadata": {"resourceVersion": str(rv)}, "items": items})
        if method == "GET":
            obj = store.get(res, ns, name)
            if sub == "log":
                text = self.server.logs(obj, q.get("container", ""))
                return self._send(200, self._tail(text, q["tailLines"]) if q.get("tailLines") else text.encode(),
                                  "text/plain")
            if sub == "scale":
                return self._send(200, self._scale(res, obj))
            if self._wants_table() and not sub:
                return self._send(200, table(res.kind, [obj], now, obj["metadata"]["resourceVersion"],
                                             q.get("includeObject", "Object")))
            return self._send(200, obj)
        if method == "POST":
            if name:
                raise ApiError(405, "MethodNotAllowed", "POST to a named object is not allowed")
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the body must be an object")
            apply_defaults(res, body, store)
            return self._send(201, store.create(res, ns, body))
        if method == "DELETE":
            if not name:
                raise ApiError(405, "MethodNotAllowed", "deletecollection is not supported by this emulator")
            return self._send(200, store.delete(res, ns, name))
        if method in ("PUT", "PATCH"):
            with store.lock:
                cur = store.get(res, ns, name)
                if sub == "scale":
                    scale = self._scale(res, cur)
                    new_scale = body if method == "PUT" else self._patched(scale, body)
                    replicas = ((new_scale or {}).get("spec") or {}).get("replicas")
                    if not isinstance(replicas, int) or replicas < 0:
                        raise ApiError(422, "Invalid", "Scale.spec.replicas: must be a non-negative integer")
                    cur["spec"]["replicas"] = replicas
                    if method == "PUT":
                        cur["metadata"]["resourceVersion"] = (new_scale.get("metadata") or {}).get(
                            "resourceVersion") or cur["metadata"]["resourceVersion"]
                    saved = store.update(res, ns, name, cur)
                    return self._send(200, self._scale(res, saved))
                if method == "PUT":
                    if not isinstance(body, dict):
                        raise ApiError(400, "BadRequest", "the body must be an object")
                    new = body
                else:
                    new = self._patched(cur, body)
                    new.setdefault("metadata", {})["resourceVersion"] = (
                        ((body or {}).get("metadata") or {}).get("resourceVersion") if isinstance(body, dict)
                        else None) or cur["metadata"]["resourceVersion"]
                apply_defaults(res, new, store)
                return self._send(200, store.update(res, ns, name, new, subresource=sub))
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed here")

    def _patched(self, cur: dict[str, Any], body: Any) -> dict[str, Any]:
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        try:
            if ctype == "application/json-patch+json":
                return json_patch(cur, body)
            if ctype == "application/merge-patch+json":
                return merge_patch(cur, body)
            if ctype == "application/strategic-merge-patch+json":
                return strategic_merge_patch(cur, body)
        except PatchError as e:
            raise ApiError(422, "Invalid", f"the patch cannot be applied: {e}") from e
        raise ApiError(415, "UnsupportedMediaType", f"the patch type {ctype!r} is not supported by this emulator "
                                                    "(server-side apply is not emulated)")

    @staticmethod
    def _tail(text: str, n: str) -> bytes:
        lines = text.splitlines(keepends=True)
        return "".join(lines[-int(n):] if int(n) > 0 else []).encode()

    @staticmethod
    def _scale(res: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        sel = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: obj["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion",
                                                              "creationTimestamp") if k in obj["metadata"]},
                "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
                "status": {"replicas": (obj.get("status") or {}).get("replicas", 0),
                           "selector": ",".join(f"{k}={v}" for k, v in sel.items())}}

    # -- watch ---------------------------------------------------------------------------------------------------

    def _chunk(self, obj: dict[str, Any]) -> None:
        data = (json.dumps(obj) + "\n").encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, res: Resource, ns: str, q: dict[str, str]) -> None:
        store = self.server.store
        ls, fs = LabelSelector(q.get("labelSelector")), FieldSelector(q.get("fieldSelector"))
        timeout = min(float(q.get("timeoutSeconds") or MAX_WATCH_S), MAX_WATCH_S)
        start = q.get("resourceVersion") or ""
        with store.lock:
            if start not in ("", "0") and int(start) < store.oldest_rv() - 1:
                gone = {"type": "ERROR", "object": ApiError(410, "Expired", f"too old resource version: {start}")
                        .status()}
                initial: list[dict[str, Any]] = []
                last = store.rv
            else:
                gone = None
                if start in ("", "0") or q.get("sendInitialEvents") == "true":
                    items, last = store.list(res, ns or None, q.get("labelSelector"), q.get("fieldSelector"))
                    initial = [{"type": "ADDED", "object": o} for o in items]
                else:
                    initial, last = [], int(start)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            if gone:
                self._chunk(gone)
                return
            for ev in initial:
                self._chunk(ev)
            if q.get("sendInitialEvents") == "true":
                # A watch-list (client-go's streaming list) waits for this bookmark to end its initial list.
                self._chunk({"type": "BOOKMARK", "object": {
                    "kind": res.kind, "apiVersion": res.api_version,
                    "metadata": {"resourceVersion": str(last),
                                 "annotations": {"k8s.io/initial-events-end": "true"}}}})
            deadline = time.monotonic() + timeout
            while not self.server.stopping.is_set():
                with store.lock:
                    evs = [e for e in store.events_since(last)
                           if e.res == res and (not ns or e.obj["metadata"].get("namespace") == ns)
                           and ls.matches(e.obj["metadata"].get("labels")) and fs.matches(e.obj)]
                    newest = store.rv
                    left = deadline - time.monotonic()
                    if not evs and left > 0:
                        store.changed.wait(timeout=min(left, 1.0))
                        evs = [e for e in store.events_since(last)
                               if e.res == res and (not ns or e.obj["metadata"].get("namespace") == ns)
                               and ls.matches(e.obj["metadata"].get("labels")) and fs.matches(e.obj)]
                        newest = store.rv
                last = newest
                for e in evs:
                    self._chunk({"type": e.type, "object": copy.deepcopy(e.obj)})
                if time.monotonic() >= deadline:
                    break
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
