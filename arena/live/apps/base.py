"""What every app service of the live stack shares: config loading, name resolution, routing, metrics, serving.

An app module builds an `AppService` with its routes and calls `serve()`. The supervisor passes:
APP_NAME (the service's task name), APP_LISTEN (address:port), APP_CONFIG (the config file its pod's ConfigMap
rendered, read once at boot: a new pod re-renders and re-reads it; a PUT /admin/config writes it, and its
ConfigMap at APP_CONFIGMAP_URL, only where the config says `admin.put_persists`), LIVE_HOSTS_FILE (the stack's
hosts file) and APP_INSTANCE (this process's instance id: its pod's name).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

import yaml
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from arena.live.names import HostsFile

__all__ = ["Request", "Response", "AppService", "HttpError", "load_config", "rq_keys", "refusal"]

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0)


class HttpError(Exception):
    """An error the handler turns into a JSON response with this status."""

    def __init__(self, status: int, error: str, **detail: Any):
        super().__init__(error)
        self.status = status
        self.body = {"error": error, **detail}


class Request:
    """One parsed HTTP request: method, path, query, JSON body and the regex groups of its route."""

    def __init__(self, method: str, path: str, query: dict[str, str], body: Any, params: tuple[str, ...]):
        self.method, self.path, self.query, self.body, self.params = method, path, query, body, params


Response = tuple[int, Any]
Route = Callable[[Request], Response]


def rq_keys(queue: str) -> tuple[str, str]:
    """RQ's Redis keys for a queue: its list, and the intermediate list a worker moves a job to as it takes it."""
    key = f"rq:queue:{queue}"
    return key, f"{key}:intermediate"


def refusal(error: Exception) -> str:
    """Why Redis refused a command: "oom" (at maxmemory under noeviction; outside MULTI Redis says "OOM command not
    allowed...", inside it "...used memory > 'maxmemory'"), "noperm" (an ACL), else "error"."""
    msg = str(error)
    return "oom" if "OOM" in msg or "maxmemory" in msg else "noperm" if "NOPERM" in msg else "error"


def _patch_configmap(key: str, text: str) -> bool:
    """Write `key` of the app's ConfigMap (APP_CONFIGMAP_URL, on the stack's emulated API server) with a merge
    patch, as the real broker does through its service account: what the next pod renders. True when written."""
    import urllib.request

    url = os.environ.get("APP_CONFIGMAP_URL")
    if not url:
        return True  # no cluster: the config file is the declared layer
    req = urllib.request.Request(url, data=json.dumps({"data": {key: text}}).encode(), method="PATCH",
                                 headers={"Content-Type": "application/merge-patch+json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status == 200
    except OSError:
        return False


def load_config(path: str | None = None) -> dict[str, Any]:
    path = path or os.environ["APP_CONFIG"]
    with open(path) as f:
        return yaml.safe_load(f) or {}


class AppService:
    """An HTTP service on its loopback endpoint with routes, /healthz, /metrics and the runtime config API."""

    def __init__(self, name: str | None = None):
        self.name = name or os.environ.get("APP_NAME", "app")
        self.instance = os.environ.get("APP_INSTANCE", f"{self.name}-{os.getpid()}")
        self.config_path = os.environ.get("APP_CONFIG", "")
        self.hosts = HostsFile(os.environ["LIVE_HOSTS_FILE"]) if os.environ.get("LIVE_HOSTS_FILE") else None
        # The declared layer, read once at boot; `runtime` is what PUT /admin/config changes until the next boot.
        self.declared = load_config(self.config_path) if self.config_path else {}
        self.runtime = json.loads(json.dumps(self.declared))
        self.started_at = time.time()
        self.routes: list[tuple[str, re.Pattern, Route]] = []
        self.registry = CollectorRegistry()
        self.requests = Counter("app_requests_total", "HTTP requests served", ["route", "code"],
                                registry=self.registry)
        self.latency = Histogram("app_request_duration_seconds", "HTTP request latency", ["route"],
                                 buckets=LATENCY_BUCKETS_S, registry=self.registry)
        Gauge("app_start_time_seconds", "When this process started", registry=self.registry).set(self.started_at)
        self.healthy: Callable[[], bool] = lambda: True
        self.on_reload: Callable[[dict[str, Any]], None] | None = None
        # A reload rebuilds the app's engine: for the config's `reload_s` after POST /admin/reload the pod fails
        # readiness and serves no traffic (503), as the twin's roles do (arena/twin/slack/roles.py).
        self.reloading_until = 0.0
        # Run on SIGTERM once the HTTP server has stopped, within the 3 s grace before the process exits.
        self.on_shutdown: Callable[[], None] | None = None
        self.route("GET", r"/healthz", self._healthz)
        self.route("GET", r"/metrics", self._metrics)
        self.route("GET", r"/admin/config", lambda r: (200, self.runtime))
        self.route("PUT", r"/admin/config", self._put_config)
        self.route("POST", r"/admin/reload", self._reload)

    def resolve(self, host: str) -> str:
        return self.hosts.resolve(host) if self.hosts else host

    def route(self, method: str, pattern: str, fn: Route) -> None:
        self.routes.append((method, re.compile(pattern + r"$"), fn))

    def reloading(self) -> bool:
        return time.time() < self.reloading_until

    def _healthz(self, _req: Request) -> Response:
        ok = self.healthy() and not self.reloading()
        return (200 if ok else 503), {"status": "ok" if ok else "unhealthy", "instance": self.instance}

    def _metrics(self, _req: Request) -> Response:
        return 200, generate_latest(self.registry)

    def _put_config(self, req: Request) -> Response:
        if not isinstance(req.body, dict):
            raise HttpError(400, "bad_request", detail="expected a JSON object")
        _merge(self.runtime, req.body)
        if (self.declared.get("admin") or {}).get("put_persists") and self.config_path:
            # A runtime-config broker (slack-spine's) writes the patch through to the ConfigMap too: the next
            # boot reads it. Still live only after POST /admin/reload.
            _merge(self.declared, req.body)
            text = "# written through by PUT /admin/config\n" + yaml.safe_dump(self.declared, sort_keys=False)
            tmp = f"{self.config_path}.tmp"
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, self.config_path)
            persisted = _patch_configmap(os.path.basename(self.config_path), text)
            return 200, {"status": "staged", "persisted": persisted, "config": self.runtime}
        return 200, {"status": "staged", "config": self.runtime}

    def _reload(self, _req: Request) -> Response:
        reload_s = float(self.runtime.get("reload_s", 0) or 0)
        self.reloading_until = time.time() + reload_s
        if self.on_reload:
            self.on_reload(self.runtime)
        return 200, {"status": "reloaded", "instance": self.instance, "not_ready_s": reload_s}

    # -- serving ------------------------------------------------------------------------------------------------
    def dispatch(self, method: str, raw_path: str, body: bytes) -> tuple[int, bytes, str]:
        parts = urlsplit(raw_path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        if self.reloading() and not parts.path.startswith(("/admin/", "/metrics", "/healthz")):
            self.requests.labels("not_ready", "503").inc()
            return 503, json.dumps({"error": "not_ready", "detail": "reloading"}).encode(), "application/json"
        for m, rx, fn in self.routes:
            match = rx.match(parts.path)
            if match and m == method:
                label = rx.pattern.rstrip("$")
                t0 = time.perf_counter()
                try:
                    payload = json.loads(body) if body else None
                    status, out = fn(Request(method, parts.path, query, payload, match.groups()))
                except HttpError as e:
                    status, out = e.status, e.body
                except json.JSONDecodeError:
                    status, out = 400, {"error": "bad_json"}
                except Exception as e:  # a handler bug is a 500, as in any web framework, and is logged
                    traceback.print_exc()
                    status, out = 500, {"error": "internal", "detail": f"{type(e).__name__}: {e}"}
                if label != "/metrics":
                    self.requests.labels(label, str(status)).inc()
                    self.latency.labels(label).observe(time.perf_counter() - t0)
                if isinstance(out, bytes):
                    return status, out, CONTENT_TYPE_LATEST
                return status, json.dumps(out, default=str).encode(), "application/json"
        return 404, json.dumps({"error": "not_found", "path": parts.path}).encode(), "application/json"

    def serve(self) -> None:
        addr, port = os.environ["APP_LISTEN"].rsplit(":", 1)
        app = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                status, body, ctype = app.dispatch(self.command, self.path, self.rfile.read(n) if n else b"")
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _handle

            def log_message(self, *_a) -> None:  # access logs would drown the service log
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 128

        httpd = Server((addr, int(port)), Handler)
        def _terminate(*_a) -> None:
            threading.Thread(target=httpd.shutdown, daemon=True).start()
            # Handlers blocked in the database (a send waiting on a row lock) must not keep the process alive.
            timer = threading.Timer(3.0, os._exit, (0,))
            timer.daemon = True
            timer.start()

        signal.signal(signal.SIGTERM, _terminate)
        print(f"{self.name} {self.instance} listening on {addr}:{port}", flush=True)
        try:
            httpd.serve_forever(poll_interval=0.2)
        finally:
            httpd.server_close()
            if self.on_shutdown is not None:
                self.on_shutdown()
        sys.exit(0)


def _merge(into: dict, patch: dict) -> None:
    for k, v in patch.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v
