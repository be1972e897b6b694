"""arena.clients.http against a real HTTP/1.1 server on loopback (the standard library's, as the live apps use)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from arena.clients.http import AsyncHttp, HttpConnectError, HttpTimeout


class Server:
    """A keep-alive JSON server that counts the connections it accepted; routes pick odd replies on purpose."""

    def __init__(self, port: int = 0, name: str = "s1"):
        self.connections = 0
        self.name = name
        self.socks: list[socket.socket] = []
        self.released = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                outer.connections += 1
                outer.socks.append(self.request)
                super().setup()

            def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.startswith("/slow"):
                    # Answers only once the test is over (stop()): a client's timeout always comes first, however
                    # slowly a busy machine runs the client.
                    outer.released.wait(60)
                if self.path == "/chunked":
                    self.send_response(200)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for part in (b'{"a": ', b'[1, 2]}'):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    self.wfile.write(b"0\r\n\r\n")
                    return
                if self.path == "/text":
                    return self._reply(503, b"busy", {"Content-Length": "4", "Content-Type": "text/plain"})
                if self.path == "/close":
                    self.close_connection = True
                    return self._reply(200, b"{}", {"Content-Length": "2", "Connection": "close"})
                body = json.dumps({"path": self.path, "server": outer.name}).encode()
                self._reply(200, body, {"Content-Length": str(len(body))})

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                got = json.loads(self.rfile.read(n)) if n else None
                body = json.dumps({"got": got, "type": self.headers.get("Content-Type")}).encode()
                self._reply(201, body, {"Content-Length": str(len(body))})

            def log_message(self, *_a) -> None:
                pass

        class Srv(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, *_a) -> None:  # a client that gave up (the timeout test) is expected here
                pass

        self.httpd = Srv(("127.0.0.1", port), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        """Stop, and close every connection, kept-alive ones too (as a process that exits does)."""
        self.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        for sock in self.socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def server():
    s = Server()
    yield s
    s.stop()


def run(coro):
    return asyncio.run(coro)


def test_get_and_post_json_reuse_one_connection(server):
    async def go():
        http = AsyncHttp()
        try:
            a = await http.get(server.url("/x?y=1"))
            b = await http.post(server.url("/api"), {"k": [1, "two"]})
            c = await http.get(server.url("/again"))
            return a, b, c
        finally:
            await http.aclose()

    a, b, c = run(go())
    assert (a.status, a.body) == (200, {"path": "/x?y=1", "server": "s1"})
    assert (b.status, b.body) == (201, {"got": {"k": [1, "two"]}, "type": "application/json"})
    assert c.body["path"] == "/again"
    assert server.connections == 1  # keep-alive: the three requests shared one connection


def test_concurrent_requests_each_get_their_own_reply(server):
    async def go():
        http = AsyncHttp(max_connections=8)
        try:
            return await asyncio.gather(*(http.get(server.url(f"/n{i}")) for i in range(40)))
        finally:
            await http.aclose()

    replies = run(go())
    assert [r.body["path"] for r in replies] == [f"/n{i}" for i in range(40)]
    assert 1 <= server.connections <= 8  # never more connections than the limit


def test_non_json_and_chunked_and_connection_close_replies(server):
    async def go():
        http = AsyncHttp()
        try:
            return (await http.get(server.url("/text")), await http.get(server.url("/chunked")),
                    await http.get(server.url("/close")), await http.get(server.url("/after")))
        finally:
            await http.aclose()

    text, chunked, close, after = run(go())
    assert (text.status, text.body) == (503, None)
    assert chunked.body == {"a": [1, 2]}
    assert close.body == {} and after.body["path"] == "/after"
    assert server.connections == 2  # the server said close: the next request opened a new connection


def test_a_pooled_connection_the_server_dropped_is_retried_on_a_fresh_one():
    """An app restart closes every kept-alive connection: the next request must not fail for it."""
    s = Server()
    port = s.port

    async def go():
        http = AsyncHttp()
        try:
            first = await http.get(s.url("/one"))
            s.stop()  # the server goes away with the client's connection in the pool...
            s2 = Server(port, name="s2")  # ...and comes back on the same port
            try:
                second = await http.get(s2.url("/two"))
            finally:
                s2.stop()
            return first, second, s2.connections
        finally:
            await http.aclose()

    first, second, fresh = run(go())
    assert first.body == {"path": "/one", "server": "s1"} and second.body == {"path": "/two", "server": "s2"}
    assert fresh == 1


def test_timeout_and_refused_connection_raise_our_own_errors(server):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]

    async def go():
        http = AsyncHttp()
        try:
            with pytest.raises(HttpTimeout):
                await http.get(server.url("/slow"), timeout_s=0.2)
            with pytest.raises(HttpConnectError):
                await http.get(f"http://127.0.0.1:{dead}/")
            with pytest.raises(HttpConnectError):
                await http.get("https://127.0.0.1/")
            # The connection the timeout abandoned mid-reply is not reused: the next reply is the right one.
            return await http.get(server.url("/fine"))
        finally:
            await http.aclose()

    assert run(go()).body["path"] == "/fine"


def test_a_server_that_is_not_http_is_a_connect_error():
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen()
    port = lsock.getsockname()[1]

    def answer():
        conn, _ = lsock.accept()
        conn.recv(1024)
        conn.sendall(b"SSH-2.0-OpenSSH\r\n\r\n")
        conn.close()

    t = threading.Thread(target=answer, daemon=True)
    t.start()

    async def go():
        http = AsyncHttp()
        try:
            with pytest.raises(HttpConnectError, match="not an HTTP reply"):
                await http.get(f"http://127.0.0.1:{port}/")
        finally:
            await http.aclose()

    run(go())
    t.join(2)
    lsock.close()
