"""A stand-in for an OPA server: OPA's REST Data API on loopback, answered by the embedded OPA engine.

This is NOT an OPA server. It stands in for one in the tests (tests/guardrail/policy/test_server.py) and in
the latency bench, so that OPAServer and opa-python-client are exercised over real HTTP without an `opa`
binary. It speaks the subset of the API they use, with OPA's shapes:

    GET  /health                       200 {}
    PUT  /v1/policies/<id>             200 {} | 400 {"code", "message", "errors": [{"code", "message", "location"}]}
    GET  /v1/policies                  200 {"result": [{"id", "raw"}]}
    PUT  /v1/data[/<path>]             204 (the value is stored at that path of the data document)
    POST /v1/data/<path>               200 {"result": value} | 200 {} when undefined | 500 on an evaluation error

Policies compile as OPA compiles them: a module is accepted only if the whole set compiles with it. Tests
inject `before_answer` (called before each data query) to delay or break answers; it is how a slow server is
simulated without sleeping in library code.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from opa_bindings import OpaEngine, OpaError

from guardrail.policy.loader import opa_error_location

__all__ = ["StandInOPAServer"]


class StandInOPAServer:
    """OPA's Data API over loopback HTTP, backed by the embedded engine (a test stand-in, not OPA)."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0,
                 before_answer: Callable[[str], None] | None = None):
        self.modules: dict[str, str] = {}
        self.data: dict[str, Any] = {}
        self.before_answer = before_answer
        self.requests = 0
        self._lock = threading.RLock()
        self._engine = OpaEngine()
        self._httpd = ThreadingHTTPServer((host, port), self._handler())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "StandInOPAServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="standin-opa", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop as a killed server would: no listener, and every kept-alive connection cut."""
        self._httpd.shutdown()
        self._httpd.server_close()
        for conn in list(self._connections):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._engine.close()

    def __enter__(self) -> "StandInOPAServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- the engine behind the API -------------------------------------------------------------------------------

    def _rebuild(self, modules: dict[str, str], data: dict[str, Any]) -> OpaEngine:
        engine = OpaEngine()
        try:
            for pid, src in modules.items():
                engine.add_policy(pid, src)
            if data:
                engine.add_data(data)
            engine.eval_query("x := true")
        except OpaError:
            engine.close()
            raise
        return engine

    def put_policy(self, pid: str, source: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            candidate = {**self.modules, pid: source}
            try:
                engine = self._rebuild(candidate, self.data)
            except OpaError as e:
                path, line, msg = opa_error_location(e.message)
                err = {"code": "rego_parse_error" if e.code == "parse_error" else "rego_compile_error",
                       "message": msg, "location": {"file": path or pid, "row": line or 0, "col": 0}}
                return 400, {"code": "invalid_parameter", "message": "error(s) occurred while compiling module(s)",
                             "errors": [err]}
            self._engine.close()
            self._engine, self.modules = engine, candidate
            return 200, {}

    def put_data(self, path: str, value: Any) -> tuple[int, dict[str, Any]]:
        with self._lock:
            parts = [p for p in path.split("/") if p]
            if not parts:
                if not isinstance(value, dict):
                    return 400, {"code": "invalid_parameter", "message": "root data must be an object"}
                data = json.loads(json.dumps(value))
            else:
                data = json.loads(json.dumps(self.data))
                node = data
                for p in parts[:-1]:
                    node = node.setdefault(p, {})
                node[parts[-1]] = value
            try:
                engine = self._rebuild(self.modules, data)
            except OpaError as e:
                return 400, {"code": "invalid_parameter", "message": e.message}
            self._engine.close()
            self._engine, self.data = engine, data
            return 204, {}

    def query(self, path: str, input: Any) -> tuple[int, dict[str, Any]]:
        ref = ".".join(["data", *[p for p in path.split("/") if p]])
        with self._lock:
            try:
                rows = self._engine.eval_query(f"result := {ref}", input=input)
            except OpaError as e:
                return 500, {"code": "internal_error", "message": e.message}
        return 200, ({"result": rows[0]["result"]} if rows else {})

    # -- HTTP --------------------------------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in separate writes; without NODELAY, Nagle plus delayed ACK adds 40 ms.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                server._connections.add(self.connection)

            def finish(self) -> None:
                server._connections.discard(self.connection)
                super().finish()

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def _body(self) -> bytes:
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _send(self, status: int, doc: dict[str, Any] | None) -> None:
                body = b"" if status == 204 else json.dumps(doc or {}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if body:
                    self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                server.requests += 1
                if self.path.split("?")[0] == "/health":
                    return self._send(200, {})
                if self.path.rstrip("/") == "/v1/policies":
                    return self._send(200, {"result": [{"id": k, "raw": v} for k, v in server.modules.items()]})
                self._send(404, {"code": "resource_not_found", "message": self.path})

            def do_PUT(self) -> None:  # noqa: N802
                server.requests += 1
                body = self._body()
                path = self.path.split("?")[0]
                if path.startswith("/v1/policies/"):
                    return self._send(*server.put_policy(path[len("/v1/policies/"):], body.decode()))
                if path == "/v1/data" or path.startswith("/v1/data/"):
                    try:
                        value = json.loads(body or b"null")
                    except ValueError as e:
                        return self._send(400, {"code": "invalid_parameter", "message": str(e)})
                    return self._send(*server.put_data(path[len("/v1/data"):], value))
                self._send(404, {"code": "resource_not_found", "message": path})

            def do_POST(self) -> None:  # noqa: N802
                server.requests += 1
                body = self._body()
                path = self.path.split("?")[0]
                if not path.startswith("/v1/data/"):
                    return self._send(404, {"code": "resource_not_found", "message": path})
                try:
                    doc = json.loads(body or b"{}")
                except ValueError as e:
                    return self._send(400, {"code": "invalid_parameter", "message": str(e)})
                if server.before_answer is not None:
                    server.before_answer(path)
                self._send(*server.query(path[len("/v1/data/"):], doc.get("input")))

        return Handler
