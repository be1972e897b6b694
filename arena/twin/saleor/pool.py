"""saleor-api's database connection pool: long-lived connections, fresh ones opened at peaks, idle reaping.

Owned by the saleor-api component (`arena.twin.saleor.substrate`); the substrate's `serve` asks it, per load
segment, which share of requests lands on which connection and what statement_timeout that connection carries.

The model, per segment with constant offered load:
- Requests hold a connection for their statements; the concurrency offered is C = sum(rate x hold).
- The pool hands out idle connections in a fixed order (a LIFO idle stack), so connection k carries the share
  B(k, C) - B(k+1, C) of requests, where B is Erlang's loss formula (ordered hunting in an M/M/inf system). The
  `min_size` long-lived connections come first; overflow connections carry only what spills past them, which is
  why the overflow is busy at peaks and nearly idle in troughs.
- When a segment needs more connections than are open (to carry all but `spill` of the load), the pool opens
  fresh ones. A fresh connection is a new PostgreSQL backend: it copies the role/database settings in force now.
- An overflow connection idle for `idle_timeout_s` is closed; long-lived ones are kept for `max_lifetime_s`
  (None: for ever, like Django's persistent connections with CONN_MAX_AGE=None).
- A connection whose backend was terminated (pg_terminate_backend, a postgres restart) is dropped and the pool
  reconnects, again inheriting what is in force at that moment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from arena.twin.pg.postgres import Backend, ConnectError, PostgresServer

__all__ = ["PooledConnection", "ApiConnectionPool", "erlang_b"]


def erlang_b(n: int, load: float) -> float:
    """Erlang's loss formula B(n, A): the share of arrivals that find n ordered servers all busy."""
    b = 1.0
    for k in range(1, n + 1):
        b = load * b / (k + load * b)
    return b


@dataclass
class PooledConnection:
    """One pool slot and the backend behind it."""

    backend: Backend
    long_lived: bool
    opened_at: float
    last_used: float
    busy: float = 0.0  # the probability it is serving a request (its carried load), for in-flight losses


class ApiConnectionPool:
    """The saleor-api pool of saleor_app connections to the saleor database."""

    def __init__(self, server: PostgresServer, *, role: str, database: str, min_size: int, max_size: int,
                 idle_timeout_s: float, max_lifetime_s: float | None, spill: float = 0.002,
                 application_name: str = "saleor-api", client_addr: str = "10.42.0.21"):
        self.server = server
        self.role = role
        self.database = database
        self.min_size = int(min_size)
        self.max_size = int(max_size)
        self.idle_timeout_s = float(idle_timeout_s)
        self.max_lifetime_s = max_lifetime_s
        self.spill = spill
        self.application_name = application_name
        self.client_addr = client_addr
        self.conns: list[PooledConnection] = []
        self.connect_errors: list[tuple[float, str]] = []
        self.opened = 0
        self.inflight_lost = 0.0  # expected requests lost with killed sessions, not yet booked

    # ------------------------------------------------------------------ lifecycle
    def close_all(self) -> None:
        for c in self.conns:
            self.server.disconnect(c.backend.pid)
        self.conns = []

    def _open(self, now: float, long_lived: bool) -> bool:
        try:
            b = self.server.connect(self.role, self.database, now=now, application_name=self.application_name,
                                    client_addr=self.client_addr)
        except ConnectError as e:
            self.connect_errors.append((now, str(e)))
            return False
        self.conns.append(PooledConnection(b, long_lived, now, now))
        self.opened += 1
        return True

    def sync(self, now: float) -> None:
        """Drop dead or expired connections and keep `min_size` long-lived ones open."""
        keep = []
        for c in self.conns:
            expired = (self.max_lifetime_s is not None and now - c.opened_at >= self.max_lifetime_s)
            idle = (not c.long_lived) and now - c.last_used >= self.idle_timeout_s - 1e-9
            if not c.backend.alive:
                # Killed under the pool (pg_terminate_backend, a postgres restart): the request it was serving
                # fails with "terminating connection due to administrator command".
                self.inflight_lost += c.busy
                continue
            if expired or idle:
                self.server.disconnect(c.backend.pid)
                continue
            keep.append(c)
        self.conns = keep
        # Long-lived slots come first in the hand-out order; a lost one is reopened in its place.
        missing = self.min_size - sum(c.long_lived for c in self.conns)
        for _ in range(max(0, missing)):
            if not self._open(now, long_lived=True):
                break
        if missing > 0:
            self.conns.sort(key=lambda c: (not c.long_lived, c.opened_at, c.backend.pid))

    # ------------------------------------------------------------------ serving
    def shares(self, concurrency: float, now: float, t1: float,
               total_rps: float) -> tuple[list[tuple[Backend, float]], float, float]:
        """Open what this segment needs and hand out the load.

        Returns ([(backend, share of requests)], fresh, unserved): `fresh` is the rare spill past every open
        session, for which the pool opens one more connection on the spot (it inherits what is in force now);
        `unserved` is the share that finds the pool at max_size or PostgreSQL refusing connections.
        """
        self.sync(now)
        window = max(min(t1 - now, self.idle_timeout_s), 1e-6)
        # A slot is opened when at least one arrival in the window is expected to spill onto it.
        need = self.min_size
        while need < self.max_size and total_rps * erlang_b(need, concurrency) * window >= 0.5:
            need += 1
        refused = False
        while len(self.conns) < need:
            if not self._open(now, long_lived=False):
                refused = True
                break
        out: list[tuple[Backend, float]] = []
        prev = 1.0
        for k, c in enumerate(self.conns):
            nxt = erlang_b(k + 1, concurrency)
            share = prev - nxt
            prev = nxt
            out.append((c.backend, share))
            c.busy = min(1.0, share * concurrency)
            # Used at least once per idle window: not reaped this segment.
            if share * total_rps * self.idle_timeout_s >= 1.0:
                c.last_used = t1
        if refused or len(self.conns) >= self.max_size:
            return out, 0.0, prev
        return out, prev, 0.0

    def take_inflight_lost(self) -> float:
        lost, self.inflight_lost = self.inflight_lost, 0.0
        return lost

    def next_change(self, now: float) -> float:
        """When the next overflow connection will be reaped or a long-lived one expire."""
        t = math.inf
        for c in self.conns:
            if not c.long_lived:
                t = min(t, c.last_used + self.idle_timeout_s)
            if self.max_lifetime_s is not None:
                t = min(t, c.opened_at + self.max_lifetime_s)
        return t if t > now + 1e-9 else math.inf

    def describe(self) -> dict[str, object]:
        return {"open": len(self.conns), "long_lived": sum(c.long_lived for c in self.conns),
                "pids": [c.backend.pid for c in self.conns]}
