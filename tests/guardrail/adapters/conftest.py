"""Fixtures for the adapter tests: a real redis-server on a free loopback port, the guardrail CLI, free ports."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ports import free_port

REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")
GUARDRAIL = str(Path(sys.executable).parent / "guardrail")


class Redis:
    """A throwaway redis-server; `cli(...)` talks to it directly, bypassing any guard."""

    def __init__(self, port: int, proc: subprocess.Popen):
        self.port, self.proc = port, proc

    def cli(self, *args: str) -> str:
        out = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port), *args], capture_output=True,
                             text=True, timeout=120)
        return out.stdout.strip()


@pytest.fixture
def redis_server(tmp_path):
    if not REDIS_SERVER or not REDIS_CLI:
        pytest.skip("redis-server / redis-cli are not installed")
    port = free_port()
    proc = subprocess.Popen([REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = Redis(port, proc)
    try:
        deadline = time.monotonic() + 120  # generous: a busy machine starts a server slowly
        while r.cli("PING") != "PONG":
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("redis-server did not start")
            time.sleep(0.05)
        yield r
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def guardrail_cmd():
    if not os.access(GUARDRAIL, os.X_OK):
        pytest.skip("the guardrail console script is not installed in this venv")
    return GUARDRAIL


@pytest.fixture
def free_port_factory():
    return free_port


@pytest.fixture
def session_secret(tmp_path):
    """A guard session's secret and the 0600 file a shim reads it from (as `guardrail shell` writes them)."""
    secret = os.urandom(32).hex().encode()
    path = tmp_path / "secret"
    path.write_bytes(secret + b"\n")
    path.chmod(0o600)
    return secret, path


@pytest.fixture
def prod(tmp_path, guardrail_cmd):
    """Issue #23's production set-up (tests/guardrail/prodcluster.py): emulated cluster, redis pod,
    Prometheus, SLO file."""
    from tests.guardrail.prodcluster import production_cluster

    with production_cluster(tmp_path, guardrail_cmd) as p:
        yield p
