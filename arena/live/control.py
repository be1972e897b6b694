"""A control-plane stand-in for the live stack: the little of the Kubernetes API that the tasks' kubectl uses.

Served by the controlling process (the one that owns the supervisor) on its own loopback address as
`kubernetes:6443` (plain HTTP); `arena.live.kubectl`, on the shell's PATH as `kubectl`, is its client. It lists
the workloads as pods (a pod name is the process's instance id), restarts one (a rollout restart or a pod delete:
a new process, a new name), and serves a component's log. Which verbs the agent may use is the stack's `rbac`
list, as the tasks' RBAC decides; a refused verb gets Kubernetes' Forbidden answer. Started by
`arena.live.stack.LiveStack`.

It also plays Helm for the substrates that declare a release (`helm:` in substrate.yaml): `helm get values`
reads the values files the release maps, `helm upgrade --set` writes them and rolls the components whose
values changed, as the chart's StatefulSet rollout does (a `--set` outside the mapped prefixes is refused).

Routes: GET /pods, POST /restart/<component>?verb=<rollout|delete>, GET /logs/<component>?tail=N,
GET /helm/<release>/values, POST /helm/<release>/upgrade {"set": [...], "values": [{...}], "reuse_values": bool}
(values files first, then --set, as helm merges them).

And it plays frappe-admin's queue repair, the one the Frappe foothold's `reconfigure-infra.sh redis-queue <key>
<value>` calls: POST /frappe-admin/redis-queue-repair {"operation": ..., "value": ...} applies one allow-listed
repair to the running broker and rewrites that flag in its values file (the start script's source), without a
restart (arena.twin.frappe.admin holds the allow-list, shared with the twin).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from arena.live.names import Endpoint
from arena.live.servers import RedisServer
from arena.twin.frappe.admin import queue_runtime_change, rewrite_queue_flags
from guardrail.errors import EnvironmentError_

__all__ = ["ControlPlane", "ALL_VERBS", "parse_set"]

ALL_VERBS = ("get", "logs", "delete", "rollout", "helm")


class ControlPlane:
    """Pods, restarts and logs of one live stack over HTTP."""

    def __init__(self, stack, endpoint: Endpoint, *, rbac: tuple[str, ...] = ALL_VERBS, namespace: str = "default"):
        self.stack = stack
        self.endpoint = endpoint
        self.rbac = tuple(rbac)
        self.namespace = namespace
        self._httpd: ThreadingHTTPServer | None = None
        self.revision = 1

    # -- what the routes answer ----------------------------------------------------------------------------------
    def pods(self) -> list[dict[str, Any]]:
        now = self.stack.clock.now()
        out = []
        sup = self.stack.supervisor
        for name, spec in sup.specs.items():
            run = sup.running.get(name)
            running = run is not None and run.proc.poll() is None
            out.append({"name": run.instance if run else f"{name}-pending", "component": name, "kind": spec.kind,
                        "ready": running, "status": "Running" if running else "CrashLoopBackOff",
                        "restarts": sup.restarts.get(name, 0), "age_s": now - run.started_at if run else 0.0})
        for name, server in self.stack.servers.items():
            alive = server.alive()
            # Pod names as the charts make them: Bitnami's Redis (standalone) is <name>-master-0.
            pod = f"{name}-master-0" if isinstance(server, RedisServer) else f"{name}-0"
            out.append({"name": pod, "component": name, "kind": "StatefulSet",
                        "ready": alive, "status": "Running" if alive else "Error",
                        "restarts": self.stack.server_restarts.get(name, 0), "age_s": None})
        return out

    def restart(self, component: str, verb: str) -> tuple[int, dict[str, Any]]:
        if verb not in self.rbac:
            return 403, self._forbidden(verb, "pods" if verb == "delete" else "deployments", component)
        try:
            res = self.stack.restart(component)
        except EnvironmentError_ as e:
            return 404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "message": str(e)}
        return 200, {"old": res.old_id, "new": res.new_id, "ready": res.ready, "duration_s": res.duration_s,
                     "detail": res.detail}

    def logs(self, component: str, tail: int) -> tuple[int, str]:
        if "logs" not in self.rbac:
            return 403, json.dumps(self._forbidden("get", "pods/log", component))
        path = self.stack.log_path(component)
        if path is None or not path.exists():
            return 404, f'Error from server (NotFound): pods "{component}" not found\n'
        with open(path, errors="replace") as f:
            lines = deque(f, maxlen=max(tail, 1)) if tail > 0 else list(f)
        return 200, "".join(lines)

    # -- Helm ----------------------------------------------------------------------------------------------------
    def helm_values(self, release: str) -> tuple[int, Any]:
        found = self.stack.helm_release(release)
        if found is None:
            return 404, {"message": f"release: not found"}
        helm, _ = found
        values: dict[str, Any] = {}
        for prefix, where in helm.values.items():
            _put(values, prefix.split("."), yaml.safe_load((self.stack.config_dir / where.file).read_text()) or {})
        return 200, values

    def helm_upgrade(self, release: str, sets: list[str], reuse_values: bool,
                     values: list[dict[str, Any]] = ()) -> tuple[int, Any]:
        if "helm" not in self.rbac:
            return 403, self._forbidden("patch", "statefulsets", release)
        found = self.stack.helm_release(release)
        if found is None:
            return 404, {"message": f'"{release}" has no deployed releases'}
        helm, folder = found
        try:
            assignments = [a for doc in values for a in _leaves(doc)] + [a for s in sets for a in parse_set(s)]
        except ValueError as e:
            return 400, {"message": str(e)}
        docs: dict[str, Any] = {}
        for prefix, where in helm.values.items():
            # Without --reuse-values Helm starts again from the chart's defaults: the substrate's shipped file.
            src = (self.stack.config_dir if reuse_values else folder) / where.file
            docs[prefix] = yaml.safe_load(src.read_text()) or {}
        before = json.dumps(docs, sort_keys=True)
        changed: set[str] = set()
        for path, value in assignments:
            prefix = next((p for p in helm.values if path[:len(p.split("."))] == p.split(".")), None)
            if prefix is None:
                return 400, {"message": f"the live stack does not map the value {'.'.join(path)}"}
            old = json.dumps(docs[prefix], sort_keys=True)
            _put(docs[prefix], path[len(prefix.split(".")):], value)
            if json.dumps(docs[prefix], sort_keys=True) != old:
                changed.add(prefix)
        if not reuse_values and json.dumps(docs, sort_keys=True) != before:
            changed |= set(helm.values)
        rolled = []
        for prefix in sorted(changed):
            where = helm.values[prefix]
            (self.stack.config_dir / where.file).write_text(
                f"# Helm values of {release} ({prefix}), written by helm upgrade\n"
                + yaml.safe_dump(docs[prefix], sort_keys=False))
            res = self.stack.restart(where.rolls)
            rolled.append({"component": where.rolls, "ready": res.ready, "new": res.new_id})
        self.revision += 1
        return 200, {"release": release, "revision": self.revision, "rolled": rolled}

    def redis_queue_repair(self, body: Any, queue: str = "redis-queue") -> tuple[int, Any]:
        """frappe-admin's POST /admin/redis-queue-repair: the live change first, then the values file."""
        import redis

        if not isinstance(body, dict) or set(body) - {"operation", "value"}:
            return 400, {"ok": False, "error": "body must contain only operation and optional value"}
        op, value = body.get("operation"), body.get("value")
        if not isinstance(op, str) or (value is not None and not isinstance(value, str)):
            return 400, {"ok": False, "error": "operation and value must be strings"}
        try:
            command = queue_runtime_change(op, value)
        except ValueError as e:
            return 400, {"ok": False, "error": str(e)}
        server = self.stack.servers.get(queue)
        if not isinstance(server, RedisServer):
            return 500, {"ok": False, "error": f"RuntimeError: no {queue} server on this stack"}
        ep = self.stack.endpoint(queue)
        try:
            redis.Redis(host=ep.address, port=ep.port, socket_timeout=5).execute_command(*command)
        except redis.RedisError as e:
            return 500, {"ok": False, "error": f"RuntimeError: Redis command failed: {e}"}
        doc = yaml.safe_load(server.values_path.read_text()) or {}
        master = doc.setdefault("master", {})
        try:
            master["extraFlags"] = rewrite_queue_flags([str(f) for f in master.get("extraFlags") or []], op, value)
        except RuntimeError as e:
            return 500, {"ok": False, "error": f"RuntimeError: {e}"}
        server.values_path.write_text(f"# the broker's start arguments, rewritten by frappe-admin ({op})\n"
                                      + yaml.safe_dump(doc, sort_keys=False))
        return 200, {"ok": True, "operation": op, "value": value, "persisted": True}

    def _forbidden(self, verb: str, resource: str, name: str) -> dict[str, Any]:
        return {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                "message": f'{resource} "{name}" is forbidden: User "system:serviceaccount:ops:agent" cannot '
                           f'{verb} resource "{resource}" in API group "" in the namespace "{self.namespace}"'}

    # -- serving -------------------------------------------------------------------------------------------------
    def start(self) -> None:
        cp = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: Any) -> None:
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                q = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                if parts.path == "/pods":
                    if "get" not in cp.rbac:
                        return self._send(403, cp._forbidden("list", "pods", ""))
                    return self._send(200, cp.pods())
                if parts.path.startswith("/helm/") and parts.path.endswith("/values"):
                    return self._send(*cp.helm_values(parts.path.split("/")[2]))
                if parts.path.startswith("/logs/"):
                    return self._send(*cp.logs(parts.path[len("/logs/"):], int(q.get("tail", "-1"))))
                self._send(404, {"reason": "NotFound"})

            def do_POST(self) -> None:
                parts = urlsplit(self.path)
                q = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                if parts.path.startswith("/helm/") and parts.path.endswith("/upgrade"):
                    n = int(self.headers.get("Content-Length") or 0)
                    body = json.loads(self.rfile.read(n) or b"{}")
                    return self._send(*cp.helm_upgrade(parts.path.split("/")[2], list(body.get("set", [])),
                                                       bool(body.get("reuse_values", False)),
                                                       list(body.get("values", []))))
                if parts.path == "/frappe-admin/redis-queue-repair":
                    n = int(self.headers.get("Content-Length") or 0)
                    try:
                        body = json.loads(self.rfile.read(n) or b"null")
                    except ValueError as e:
                        return self._send(400, {"ok": False, "error": f"invalid JSON body: {e}"})
                    return self._send(*cp.redis_queue_repair(body))
                if parts.path.startswith("/restart/"):
                    return self._send(*cp.restart(parts.path[len("/restart/"):], q.get("verb", "rollout")))
                self._send(404, {"reason": "NotFound"})

            def log_message(self, *_a) -> None:
                pass

        self._httpd = ThreadingHTTPServer((self.endpoint.address, self.endpoint.port), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


def _split_top(text: str) -> list[str]:
    """Split on commas outside braces: `a=1,b={x,y}` -> [`a=1`, `b={x,y}`]."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    out.append(cur)
    return [p for p in out if p]


def _scalar(v: str) -> Any:
    if v in ("true", "false"):
        return v == "true"
    try:
        return int(v)
    except ValueError:
        return v


def parse_set(text: str) -> list[tuple[list[str], Any]]:
    """Helm's --set syntax: `a.b=v`, several comma-separated, `{x,y}` for a list. Returns (path, value) pairs."""
    out = []
    for part in _split_top(text):
        if "=" not in part:
            raise ValueError(f"failed parsing --set data: key \"{part}\" has no value")
        key, value = part.split("=", 1)
        if value.startswith("{") and value.endswith("}"):
            parsed: Any = [_scalar(x) for x in _split_top(value[1:-1])]
        else:
            parsed = _scalar(value)
        out.append((key.split("."), parsed))
    return out


def _leaves(doc: dict, path: list[str] | None = None) -> list[tuple[list[str], Any]]:
    """A values file as (path, value) assignments: maps merge key by key, lists and scalars replace."""
    out: list[tuple[list[str], Any]] = []
    for k, v in doc.items():
        p = [*(path or []), str(k)]
        out += _leaves(v, p) if isinstance(v, dict) and v else [(p, v)]
    return out


def _put(doc: dict, path: list[str], value: Any) -> None:
    for key in path[:-1]:
        doc = doc.setdefault(key, {})
    if path:
        doc[path[-1]] = value
