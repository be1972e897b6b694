"""A control-plane stand-in for the live stack: the little of the Kubernetes API that the tasks' kubectl uses.

Served by the controlling process (the one that owns the supervisor) on its own loopback address as
`kubernetes:6443` (plain HTTP); `arena.live.kubectl`, on the shell's PATH as `kubectl`, is its client. It lists
the workloads as pods (a pod name is the process's instance id), restarts one (a rollout restart or a pod delete:
a new process, a new name), and serves a component's log. Which verbs the agent may use is the stack's `rbac`
list, as the tasks' RBAC decides; a refused verb gets Kubernetes' Forbidden answer. Started by
`arena.live.stack.LiveStack`.

Routes: GET /pods, POST /restart/<component>?verb=<rollout|delete>, GET /logs/<component>?tail=N.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from arena.live.names import Endpoint
from guardrail.errors import EnvironmentError_

__all__ = ["ControlPlane", "ALL_VERBS"]

ALL_VERBS = ("get", "logs", "delete", "rollout")


class ControlPlane:
    """Pods, restarts and logs of one live stack over HTTP."""

    def __init__(self, stack, endpoint: Endpoint, *, rbac: tuple[str, ...] = ALL_VERBS, namespace: str = "default"):
        self.stack = stack
        self.endpoint = endpoint
        self.rbac = tuple(rbac)
        self.namespace = namespace
        self._httpd: ThreadingHTTPServer | None = None

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
            out.append({"name": server.instance_id() or f"{name}-0", "component": name, "kind": "StatefulSet",
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
                if parts.path.startswith("/logs/"):
                    return self._send(*cp.logs(parts.path[len("/logs/"):], int(q.get("tail", "-1"))))
                self._send(404, {"reason": "NotFound"})

            def do_POST(self) -> None:
                parts = urlsplit(self.path)
                q = {k: v[-1] for k, v in parse_qs(parts.query).items()}
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
