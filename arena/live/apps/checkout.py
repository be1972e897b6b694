"""saleor-api: the checkout API of ia-006, on real PostgreSQL through a pool of `saleor_app` sessions.

Run by the supervisor as `python -m arena.live.apps.checkout`. Its session pool keeps `min_size` long-lived
sessions and opens fresh ones when a peak needs more; extras close after `max_idle_s` unused, so every peak
opens new sessions.
A fresh session inherits the role's settings at connect time (`ALTER ROLE ... IN DATABASE ... SET`), an existing
one keeps what it had: the session layer of ia-006, by PostgreSQL's own rules. The checkout's pricing statement
runs on the server for a lognormal time around `pricing_ms` (`pricing_sigma`, as the twin's order insert and
stock allocation: median 300 ms, sigma 0.4); a session with a shorter statement_timeout cancels it with SQLSTATE
57014, so a 300 ms timeout cancels about half the checkouts and 150 ms nearly all.

Routes: GET /products, POST /checkout {client_ref, variant_id, qty}, GET /orders/<id>.
"""

from __future__ import annotations

import math
import random
import threading
import time
from contextlib import contextmanager

import psycopg
from prometheus_client import Counter, Gauge

from arena.live.apps.base import AppService, HttpError, Request, Response


def conninfo(app: AppService, db: dict) -> str:
    return psycopg.conninfo.make_conninfo(
        host=db.get("host", "postgres"), hostaddr=app.resolve(db.get("host", "postgres")),
        port=db.get("port", 5432), dbname=db["name"], user=db["user"], password=db.get("password", ""),
        application_name=app.instance)


class PoolTimeout(Exception):
    """No session became free within the pool's timeout."""


class SessionPool:
    """A pool of PostgreSQL sessions: `core` opened at boot and kept, overflow opened on demand and closed after
    `idle_s` unused. Core sessions serve first, so at low load the overflow ones idle out."""

    def __init__(self, dsn: str, *, core: int, max_size: int, idle_s: float, timeout_s: float,
                 on_open=lambda: None):
        self.dsn, self.core, self.max_size = dsn, core, max(max_size, core)
        self.idle_s, self.timeout_s, self.on_open = idle_s, timeout_s, on_open
        self._idle: list[tuple[psycopg.Connection, float, bool]] = []  # (session, last used, is core), a stack
        self._size = 0
        self._core_open = 0
        self._cond = threading.Condition()
        self._closed = threading.Event()
        for _ in range(core):
            self._release(*self._open_reserved(), broken=False)
        threading.Thread(target=self._reaper, daemon=True).start()

    @property
    def size(self) -> int:
        return self._size

    def _reserve(self) -> bool:
        """Claim a slot for a new session; whether it is a core one (replacing a core session that died)."""
        self._size += 1
        is_core = self._core_open < self.core
        if is_core:
            self._core_open += 1
        return is_core

    def _open_reserved(self, is_core: bool | None = None) -> tuple[psycopg.Connection, bool]:
        if is_core is None:
            with self._cond:
                is_core = self._reserve()
        try:
            conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
        except psycopg.Error:
            with self._cond:
                self._forget(is_core)
            raise
        self.on_open()
        return conn, is_core

    def _forget(self, is_core: bool) -> None:
        self._size -= 1
        if is_core:
            self._core_open -= 1
        self._cond.notify()

    def _acquire(self) -> tuple[psycopg.Connection, bool]:
        deadline = time.monotonic() + self.timeout_s
        with self._cond:
            while True:
                while self._idle:
                    # Core sessions serve first (the most recently used of them); overflow only when none is free.
                    i = next((k for k in range(len(self._idle) - 1, -1, -1) if self._idle[k][2]), len(self._idle) - 1)
                    conn, _, is_core = self._idle.pop(i)
                    if not conn.closed:
                        return conn, is_core
                    self._forget(is_core)
                if self._size < self.max_size:
                    is_core = self._reserve()
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PoolTimeout()
                self._cond.wait(left)
        return self._open_reserved(is_core)

    def _release(self, conn: psycopg.Connection, is_core: bool, *, broken: bool) -> None:
        if broken or conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.close()
            with self._cond:
                self._forget(is_core)
            return
        with self._cond:
            self._idle.append((conn, time.monotonic(), is_core))
            self._cond.notify()

    @contextmanager
    def connection(self):
        conn, is_core = self._acquire()
        broken = False
        try:
            yield conn
        except psycopg.OperationalError:
            # A terminated or lost session: the request that found it fails, the pool replaces it.
            broken = True
            raise
        finally:
            self._release(conn, is_core, broken=broken)

    def _reaper(self) -> None:
        while not self._closed.wait(min(1.0, self.idle_s / 2)):
            now = time.monotonic()
            with self._cond:
                keep, drop = [], []
                for item in self._idle:
                    conn, last, is_core = item
                    (drop if (not is_core and now - last > self.idle_s) or conn.closed else keep).append(item)
                self._idle = keep
                for _, _, is_core in drop:
                    self._forget(is_core)
            for conn, _, _ in drop:
                conn.close()

    def close(self) -> None:
        self._closed.set()
        with self._cond:
            idle, self._idle = self._idle, []
        for conn, _, _ in idle:
            conn.close()


class CheckoutAPI:
    """The checkout API: browse products, place an order, read it back."""

    def __init__(self, app: AppService):
        self.app = app
        self.pool: SessionPool | None = None
        self.cancels = Counter("checkout_statement_cancels_total", "checkouts cancelled by statement_timeout",
                               registry=app.registry)
        self.pool_opened = Counter("db_pool_connections_opened_total", "sessions opened by the pool",
                                   registry=app.registry)
        Gauge("db_pool_connections", "sessions in the pool", registry=app.registry).set_function(
            lambda: self.pool.size if self.pool else 0)
        app.route("GET", r"/products", self.products)
        app.route("POST", r"/checkout", self.checkout)
        app.route("GET", r"/orders/(\d+)", self.order)
        app.on_reload = self.open_pool
        app.healthy = lambda: self.pool is not None

    def open_pool(self, config: dict) -> None:
        p = config.get("pool", {})
        old = self.pool
        self.pool = SessionPool(conninfo(self.app, config["database"]), core=int(p.get("min_size", 2)),
                                max_size=int(p.get("max_size", 10)), idle_s=float(p.get("max_idle_s", 4)),
                                timeout_s=float(p.get("timeout_s", 3)), on_open=self.pool_opened.inc)
        if old is not None:
            old.close()

    @contextmanager
    def _session(self):
        try:
            with self.pool.connection() as c:
                yield c
        except PoolTimeout as e:
            raise HttpError(503, "pool_timeout") from e
        except psycopg.errors.QueryCanceled as e:
            self.cancels.inc()
            raise HttpError(500, "statement_timeout", sqlstate=e.sqlstate, detail=str(e).strip()) from e
        except psycopg.Error as e:
            raise HttpError(500, "database_error", sqlstate=e.sqlstate, detail=str(e).strip()) from e

    def products(self, req: Request) -> Response:
        limit = min(int(req.query.get("limit", 20)), 100)
        with self._session() as c:
            rows = c.execute(
                "SELECT v.id, p.name, v.sku, v.price FROM product_productvariant v "
                "JOIN product_product p ON p.id = v.product_id ORDER BY v.id LIMIT %s", (limit,)).fetchall()
        return 200, [{"variant_id": r[0], "name": r[1], "sku": r[2], "price": str(r[3])} for r in rows]

    def checkout(self, req: Request) -> Response:
        body = req.body or {}
        ref, variant, qty = body.get("client_ref"), body.get("variant_id"), int(body.get("qty", 1))
        if not ref or variant is None:
            raise HttpError(400, "bad_request", detail="client_ref and variant_id are required")
        cfg = self.app.runtime.get("checkout", {})
        median, sigma = float(cfg.get("pricing_ms", 300)), float(cfg.get("pricing_sigma", 0.0))
        pricing_ms = int(round(random.lognormvariate(math.log(median), sigma) if sigma > 0 else median))
        with self._session() as c, c.transaction():
            total = c.execute("SELECT checkout_totals(%s, %s, %s)", (variant, qty, pricing_ms)).fetchone()[0]
            oid = c.execute(
                "INSERT INTO order_order (client_ref, variant_id, qty, total) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (client_ref) DO UPDATE SET client_ref = EXCLUDED.client_ref RETURNING id",
                (ref, variant, qty, total)).fetchone()[0]
        return 201, {"order_id": oid, "client_ref": ref, "total": str(total)}

    def order(self, req: Request) -> Response:
        with self._session() as c:
            row = c.execute("SELECT id, client_ref, variant_id, qty, total FROM order_order WHERE id = %s",
                            (int(req.params[0]),)).fetchone()
        if row is None:
            raise HttpError(404, "not_found")
        return 200, {"order_id": row[0], "client_ref": row[1], "variant_id": row[2], "qty": row[3],
                     "total": str(row[4])}


def main() -> None:
    app = AppService()
    api = CheckoutAPI(app)
    api.open_pool(app.runtime)
    app.serve()


if __name__ == "__main__":
    main()
