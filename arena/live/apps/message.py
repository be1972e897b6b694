"""svc-message: slack-spine's message service (ia-018), on real PostgreSQL with a bounded connection pool.

Run by the supervisor as `python -m arena.live.apps.message`. A send allocates the channel's next seq by
`UPDATE channel_seq ... RETURNING last_seq` (a row lock held to commit), inserts the message and one outbox row.
The pool is `roles.message.db` of the app.yaml ConfigMap: pool_size + max_overflow connections, and a request
that waits longer than pool_timeout_s for one gets 503 `pool_timeout`.

The image's boot hook: when HOLD_SEQ_LOCK names a channel (an image env var, not config), the process opens its
own session at boot, locks that channel's `channel_seq` row FOR UPDATE and stays idle in transaction. Sends on
that channel block behind it, hold their pooled connections, and the pool starves. Every start re-arms it;
PostgreSQL's idle_in_transaction_session_timeout, or terminating the backend, ends it.

Routes: POST /messages {channel_id, client_msg_id, body}, GET /channels/<id>/messages?after_seq=&limit=.
"""

from __future__ import annotations

import os

import psycopg
from prometheus_client import Counter, Gauge
from psycopg_pool import ConnectionPool, PoolTimeout

from arena.live.apps.base import AppService, HttpError, Request, Response
from arena.live.apps.checkout import conninfo


class MessageService:
    """Sends and reads channel messages with per-channel dense sequence numbers."""

    def __init__(self, app: AppService):
        self.app = app
        self.pool: ConnectionPool | None = None
        self.holder: psycopg.Connection | None = None
        self.pool_timeouts = Counter("db_pool_timeouts_total", "requests refused for want of a connection",
                                     registry=app.registry)
        self.pool_size = Gauge("db_pool_connections", "connections in the pool", registry=app.registry)
        app.route("POST", r"/messages", self.send)
        app.route("GET", r"/channels/([\w-]+)/messages", self.read)
        app.on_reload = self.open_pool
        app.healthy = lambda: self.pool is not None

    def _role(self, config: dict) -> dict:
        return config.get("roles", {}).get("message", {}).get("db", {})

    def open_pool(self, config: dict) -> None:
        db = self._role(config)
        size, overflow = int(db.get("pool_size", 20)), int(db.get("max_overflow", 10))
        old = self.pool
        self.pool = ConnectionPool(conninfo(self.app, config["database"]), min_size=size,
                                   max_size=size + overflow, timeout=float(db.get("pool_timeout_s", 2)),
                                   open=True, name=self.app.name)
        self.pool.wait(timeout=10)
        self.pool_size.set_function(lambda: self.pool.get_stats().get("pool_size", 0) if self.pool else 0)
        if old is not None:
            old.close(timeout=1)

    def hold_seq_lock(self, channel: str) -> None:
        """The image's boot transaction: lock one channel_seq row and never finish."""
        self.holder = psycopg.connect(conninfo(self.app, self.app.runtime["database"]) + " application_name=boot")
        self.holder.execute("SELECT last_seq FROM channel_seq WHERE channel_id = %s FOR UPDATE", (channel,))
        # No commit: the session now sits idle in transaction, holding the row lock.

    def _conn(self):
        try:
            return self.pool.connection()
        except PoolTimeout as e:
            self.pool_timeouts.inc()
            raise HttpError(503, "pool_timeout") from e

    def send(self, req: Request) -> Response:
        body = req.body or {}
        channel, cid, text = body.get("channel_id"), body.get("client_msg_id"), body.get("body", "")
        if not channel or not cid:
            raise HttpError(400, "bad_request", detail="channel_id and client_msg_id are required")
        hold_ms = int(self._role(self.app.runtime).get("hold_ms", 0))
        try:
            with self._conn() as c, c.transaction():
                dup = c.execute("SELECT id, seq FROM messages WHERE client_msg_id = %s", (cid,)).fetchone()
                if dup:
                    return 200, {"id": dup[0], "seq": dup[1], "channel_id": channel, "deduped": True}
                seq = c.execute("UPDATE channel_seq SET last_seq = last_seq + 1 WHERE channel_id = %s "
                                "RETURNING last_seq", (channel,)).fetchone()
                if seq is None:
                    raise HttpError(404, "unknown_channel", channel_id=channel)
                mid = c.execute(
                    "INSERT INTO messages (channel_id, client_msg_id, seq, body, org_id) VALUES (%s, %s, %s, %s, "
                    "%s) RETURNING id", (channel, cid, seq[0], text, f"org-{channel}")).fetchone()[0]
                c.execute("INSERT INTO message_dispatch_outbox (message_id, seq, kind) VALUES (%s, %s, "
                          "'publish-dispatch')", (mid, seq[0]))
                if hold_ms:
                    # The role's configured hold: the work a real send does while its connection is checked out.
                    c.execute("SELECT pg_sleep(%s)", (hold_ms / 1000,))
        except PoolTimeout as e:
            self.pool_timeouts.inc()
            raise HttpError(503, "pool_timeout") from e
        except psycopg.Error as e:
            raise HttpError(500, "database_error", sqlstate=e.sqlstate, detail=str(e).strip()) from e
        return 201, {"id": mid, "seq": seq[0], "channel_id": channel, "client_msg_id": cid, "deduped": False}

    def read(self, req: Request) -> Response:
        after, limit = int(req.query.get("after_seq", 0)), min(int(req.query.get("limit", 50)), 500)
        try:
            with self._conn() as c:
                rows = c.execute("SELECT id, client_msg_id, seq, body FROM messages WHERE channel_id = %s AND "
                                 "seq > %s AND deleted_at IS NULL ORDER BY seq LIMIT %s",
                                 (req.params[0], after, limit)).fetchall()
        except PoolTimeout as e:
            self.pool_timeouts.inc()
            raise HttpError(503, "pool_timeout") from e
        return 200, {"messages": [{"id": r[0], "client_msg_id": r[1], "seq": r[2], "body": r[3]} for r in rows]}


def main() -> None:
    app = AppService()
    svc = MessageService(app)
    svc.open_pool(app.runtime)
    if os.environ.get("HOLD_SEQ_LOCK"):
        svc.hold_seq_lock(os.environ["HOLD_SEQ_LOCK"])
    app.serve()


if __name__ == "__main__":
    main()
