"""saleor-api: the checkout API of ia-006, on real PostgreSQL through a pool of `saleor_app` sessions.

Run by the supervisor as `python -m arena.live.apps.checkout`. The pool keeps `min_size` long-lived sessions and
opens fresh ones when a peak needs more; idle extras close after `max_idle_s`, so every peak opens new sessions.
A fresh session inherits the role's settings at connect time (`ALTER ROLE ... IN DATABASE ... SET`), an existing
one keeps what it had: the session layer of ia-006, by PostgreSQL's own rules. The checkout's pricing statement
runs `pricing_ms` on the server; a session with a shorter statement_timeout cancels it with SQLSTATE 57014.

Routes: GET /products, POST /checkout {client_ref, variant_id, qty}, GET /orders/<id>.
"""

from __future__ import annotations

import psycopg
from prometheus_client import Counter, Gauge
from psycopg_pool import ConnectionPool, PoolTimeout

from arena.live.apps.base import AppService, HttpError, Request, Response


def conninfo(app: AppService, db: dict) -> str:
    return psycopg.conninfo.make_conninfo(
        host=db.get("host", "postgres"), hostaddr=app.resolve(db.get("host", "postgres")),
        port=db.get("port", 5432), dbname=db["name"], user=db["user"], password=db.get("password", ""),
        application_name=app.instance)


class CheckoutAPI:
    """The checkout API: browse products, place an order, read it back."""

    def __init__(self, app: AppService):
        self.app = app
        self.pool: ConnectionPool | None = None
        self.cancels = Counter("checkout_statement_cancels_total", "checkouts cancelled by statement_timeout",
                               registry=app.registry)
        self.pool_size = Gauge("db_pool_connections", "connections in the pool", registry=app.registry)
        self.pool_opened = Counter("db_pool_connections_opened_total", "sessions opened by the pool",
                                   registry=app.registry)
        app.route("GET", r"/products", self.products)
        app.route("POST", r"/checkout", self.checkout)
        app.route("GET", r"/orders/(\d+)", self.order)
        app.on_reload = self.open_pool
        app.healthy = lambda: self.pool is not None

    def open_pool(self, config: dict) -> None:
        p = config.get("pool", {})
        old = self.pool
        self.pool = ConnectionPool(
            conninfo(self.app, config["database"]), min_size=int(p.get("min_size", 2)),
            max_size=int(p.get("max_size", 10)), max_idle=float(p.get("max_idle_s", 4)),
            max_lifetime=float(p.get("max_lifetime_s", 3600)), timeout=float(p.get("timeout_s", 2)),
            configure=lambda _c: self.pool_opened.inc(), open=True, name=self.app.name)
        self.pool.wait(timeout=10)
        self.pool_size.set_function(lambda: self.pool.get_stats().get("pool_size", 0) if self.pool else 0)
        if old is not None:
            old.close()

    def _conn(self):
        try:
            return self.pool.connection()
        except PoolTimeout as e:
            raise HttpError(503, "pool_timeout") from e

    def products(self, req: Request) -> Response:
        limit = min(int(req.query.get("limit", 20)), 100)
        try:
            with self._conn() as c:
                rows = c.execute(
                    "SELECT v.id, p.name, v.sku, v.price FROM product_productvariant v "
                    "JOIN product_product p ON p.id = v.product_id ORDER BY v.id LIMIT %s", (limit,)).fetchall()
        except PoolTimeout as e:
            raise HttpError(503, "pool_timeout") from e
        return 200, [{"variant_id": r[0], "name": r[1], "sku": r[2], "price": str(r[3])} for r in rows]

    def checkout(self, req: Request) -> Response:
        body = req.body or {}
        ref, variant, qty = body.get("client_ref"), body.get("variant_id"), int(body.get("qty", 1))
        if not ref or variant is None:
            raise HttpError(400, "bad_request", detail="client_ref and variant_id are required")
        pricing_ms = int(self.app.runtime.get("checkout", {}).get("pricing_ms", 250))
        try:
            with self._conn() as c, c.transaction():
                total = c.execute("SELECT checkout_totals(%s, %s, %s)", (variant, qty, pricing_ms)).fetchone()[0]
                oid = c.execute(
                    "INSERT INTO order_order (client_ref, variant_id, qty, total) VALUES (%s, %s, %s, %s) "
                    "ON CONFLICT (client_ref) DO UPDATE SET client_ref = EXCLUDED.client_ref RETURNING id",
                    (ref, variant, qty, total)).fetchone()[0]
        except psycopg.errors.QueryCanceled as e:
            self.cancels.inc()
            raise HttpError(500, "statement_timeout", sqlstate=e.sqlstate, detail=str(e).strip()) from e
        except PoolTimeout as e:
            raise HttpError(503, "pool_timeout") from e
        except psycopg.Error as e:
            raise HttpError(500, "database_error", sqlstate=e.sqlstate, detail=str(e).strip()) from e
        return 201, {"order_id": oid, "client_ref": ref, "total": str(total)}

    def order(self, req: Request) -> Response:
        try:
            with self._conn() as c:
                row = c.execute("SELECT id, client_ref, variant_id, qty, total FROM order_order WHERE id = %s",
                                (int(req.params[0]),)).fetchone()
        except PoolTimeout as e:
            raise HttpError(503, "pool_timeout") from e
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
