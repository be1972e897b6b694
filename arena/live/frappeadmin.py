"""frappe-admin on the live stack: the Frappe foothold's only durable path to the queue broker's settings.

`reconfigure-infra.sh redis-queue <key> <value>` (arena.live.infra) POSTs one operation to
`frappe-admin:8000/admin/redis-queue-repair`, as the real sidecar's (SW yuekai/sre-world
substrates/frappe/frappe-admin-sidecar/server.py): the allow-listed change is applied to the running broker first
(CONFIG SET / ACL SETUSER), then that flag is rewritten in the broker's start arguments without a restart. The real
sidecar rewrites the start script's ConfigMap; here the start arguments are the chart's Redis values, so the
rewrite goes to both places that declare them on the emulated cluster: the ConfigMap the broker's pod mounts (what
a restart renders) and a new revision of the Helm release that ships it (what `helm get values` and the guard's
declared-layer read show), as the twin's frappe-admin does (arena.twin.frappe.admin holds the allow-list and the
rewrite, shared with the twin). Served by the controlling process on its own loopback address; started by
`arena.live.stack.LiveStack` for a stack with a Redis queue.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import yaml

from arena.live.cluster import configmap_name
from arena.live.names import Endpoint
from arena.twin.frappe.admin import queue_runtime_change, rewrite_queue_flags

__all__ = ["FrappeAdmin"]


class FrappeAdmin:
    """POST /admin/redis-queue-repair {"operation": ..., "value": ...} for one live stack's queue broker."""

    def __init__(self, stack, endpoint: Endpoint, queue: str = "redis-queue"):
        self.stack, self.endpoint, self.queue = stack, endpoint, queue
        self._httpd: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()

    def repair(self, body: Any) -> tuple[int, dict[str, Any]]:
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
        comp = self.stack.components.get(self.queue)
        if comp is None:
            return 500, {"ok": False, "error": f"RuntimeError: no {self.queue} on this stack"}
        ep = self.stack.endpoint(self.queue)
        try:
            redis.Redis(host=ep.address, port=ep.port, socket_timeout=5).execute_command(*command)
        except redis.RedisError as e:
            return 500, {"ok": False, "error": f"RuntimeError: Redis command failed: {e}"}
        with self._lock:
            try:
                self._persist(comp, op, value)
            except RuntimeError as e:
                return 500, {"ok": False, "error": f"RuntimeError: {e}"}
        return 200, {"ok": True, "operation": op, "value": value, "persisted": True}

    def _persist(self, comp, op: str, value: str | None) -> None:
        cluster, ns = self.stack.cluster, comp.namespace
        values_file = f"{self.queue}-values.yaml"
        cm = configmap_name(values_file)
        doc = yaml.safe_load(cluster.configmap_data(ns, cm).get(values_file, "")) or {}
        master = doc.setdefault("master", {})
        master["extraFlags"] = rewrite_queue_flags([str(f) for f in master.get("extraFlags") or []], op, value)
        cluster.put_configmap(ns, cm, {values_file: f"# the broker's start arguments, rewritten by frappe-admin "
                                                    f"({op})\n" + yaml.safe_dump(doc, sort_keys=False)})
        if comp.helm_release:
            values, _rev = cluster.helm_values(ns, comp.helm_release)
            node = values
            for spec, _ in self.stack.specs:
                for prefix, where in (spec.helm.values.items() if spec.helm is not None else ()):
                    if where.file.endswith(values_file) or where.file == f"{self.queue}-values.yaml":
                        for key in prefix.split("."):
                            node = node.setdefault(key, {})
            node.setdefault("master", {})["extraFlags"] = master["extraFlags"]
            chart = next((s.helm.chart for s, _ in self.stack.specs if s.helm is not None
                          and s.helm.release == comp.helm_release), "chart")
            cluster.helm_release(ns, comp.helm_release, values, chart=chart)

    # -- serving -------------------------------------------------------------------------------------------------
    def start(self) -> None:
        admin = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                if self.path.split("?")[0] != "/admin/redis-queue-repair":
                    return self._send(404, {"ok": False, "error": "not found"})
                n = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(n) or b"null")
                except ValueError as e:
                    return self._send(400, {"ok": False, "error": f"invalid JSON body: {e}"})
                self._send(*admin.repair(body))

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
