"""A free loopback port for a server a test starts on 127.0.0.1 (MariaDB, PostgreSQL, Redis, Prometheus, a guard
daemon); shared by the tests' server fixtures and helpers."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
