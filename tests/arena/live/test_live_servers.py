"""A server that fails to start says which and where its log is; Redis' config is re-rendered on every start.

Uses the real redis-server (about a second in all); skips when the Debian package is not installed.
"""

from __future__ import annotations

import os
import random
import socket
import tempfile
from pathlib import Path

import pytest

from arena.live.names import AddressPlan
from arena.live.servers import REDIS_SERVER, RedisServer, ServerStartError
from guardrail.errors import EnvironmentError_

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not os.access(REDIS_SERVER, os.X_OK), reason=f"{REDIS_SERVER} not installed"),
]


def _redis(tmp: Path, values: str) -> RedisServer:
    (tmp / "values.yaml").write_text(values)
    plan = AddressPlan(random.Random())
    return RedisServer(plan.add("redis-queue", 6379), tmp / "redis", values_path=tmp / "values.yaml",
                       start_timeout_s=60)  # generous: ends as soon as redis answers


def _cmd(server: RedisServer, *args: str) -> bytes:
    with socket.create_connection((server.endpoint.address, server.endpoint.port), timeout=30) as s:
        s.sendall(("*%d\r\n" % len(args) + "".join(f"${len(a)}\r\n{a}\r\n" for a in args)).encode())
        return s.recv(4096)


def test_a_server_that_fails_to_start_names_itself_and_its_log():
    with tempfile.TemporaryDirectory() as d:
        server = _redis(Path(d), "master:\n  extraFlags: ['--maxmemory-policy no-such-policy']\n")
        with pytest.raises(ServerStartError) as e:
            server.start()
        assert isinstance(e.value, EnvironmentError_)
        msg = str(e.value)
        assert "redis (redis-queue) failed to start" in msg and str(server.log_path) in msg
        assert "maxmemory-policy" in msg  # the log's tail comes with it
        assert not server.alive()


def test_redis_config_rewrite_does_not_survive_a_restart_but_the_values_file_does():
    with tempfile.TemporaryDirectory() as d:
        server = _redis(Path(d), "master:\n  extraFlags: ['--maxmemory 3mb', '--maxmemory-policy noeviction']\n")
        server.start()
        try:
            assert b"3145728" in _cmd(server, "CONFIG", "GET", "maxmemory")
            assert _cmd(server, "CONFIG", "SET", "maxmemory", "64mb").startswith(b"+OK")
            assert _cmd(server, "CONFIG", "REWRITE").startswith(b"+OK")
            server.stop()
            server.start()
            # Rendered again from the values file: the runtime fix and its rewrite are gone.
            assert b"3145728" in _cmd(server, "CONFIG", "GET", "maxmemory")
            server.values_path.write_text("master:\n  extraFlags: ['--maxmemory 64mb']\n")
            server.stop()
            server.start()
            assert b"67108864" in _cmd(server, "CONFIG", "GET", "maxmemory")
        finally:
            server.stop()
        assert not server.alive()
