"""frappe-web: the Desk API of ia-004, one MariaDB connection per request plus RQ-style enqueue into Redis.

Run by the supervisor as `python -m arena.live.apps.desk`. Every request opens its own connection as the site
account (so `max_user_connections` and the account's grants apply exactly as MariaDB enforces them) and closes
it. Enqueue writes an RQ-like job hash `rq:job:<id>` and pushes the id on `rq:queue:<queue>`; a Redis at its
`maxmemory` with `noeviction` refuses the write (OOM), and the API answers 503.

Routes: GET /api/resource/ToDo, POST /api/resource/ToDo {description, client_ref}, GET /api/resource/ToDo/<name>,
POST /api/method/enqueue {job_id?}, GET /api/job/<id>; and the frappe_jobs load's: GET
/api/method/frappe.auth.get_logged_user and /api/resource/DocType (Desk reads), POST .../make_prepared_report (the
report's row INSERTed, then its job enqueued, in one transaction: a refused enqueue rolls the row back), GET
/api/method/frappe.client.get_value?doctype=Prepared Report&name= (its status).
"""

from __future__ import annotations

import json
import time
import uuid

import pymysql
import redis
from prometheus_client import Counter

from arena.live.apps.base import AppService, HttpError, Request, Response, refusal, rq_keys


def job_payload(queue_cfg: dict) -> str:
    """RQ stores the pickled call in the job hash; this payload stands in for it, sized by the site's config."""
    return "x" * int(queue_cfg.get("job_payload_bytes", 2048))


def enqueue_job(r: redis.Redis, queue: str, job_id: str, payload: str) -> None:
    """RQ's enqueue: the job hash (`queued`) and its id on the queue's list, in one MULTI. Redis errors propagate."""
    pipe = r.pipeline(transaction=True)
    pipe.hset(f"rq:job:{job_id}", mapping={"status": "queued", "enqueued_at": time.time(), "data": payload,
                                           "origin": queue})
    pipe.rpush(rq_keys(queue)[0], job_id)
    pipe.execute()


def fill_to_cap(r: redis.Redis, queue_cfg: dict, *, hold_s: float = 1.0, limit: int = 100_000) -> int:
    """Enqueue jobs, as the site's producers do, until the broker refuses them (OOM at its maxmemory under
    noeviction), and keep trying every few milliseconds until it has refused them for `hold_s` (producers take any
    memory that frees, as clients' buffers shrink). Returns how many it accepted; raises RuntimeError if `limit`
    jobs all fit (no cap to reach)."""
    queue, payload = queue_cfg.get("name", "default"), job_payload(queue_cfg)
    accepted, refused_since = 0, None
    while accepted < limit:
        try:
            enqueue_job(r, queue, f"history-{uuid.uuid4().hex}", payload)
            accepted, refused_since = accepted + 1, None
        except redis.exceptions.ResponseError as e:
            if refusal(e) != "oom":
                raise
            now = time.monotonic()
            refused_since = refused_since or now
            if now - refused_since >= hold_s:
                return accepted
            time.sleep(0.005)
    raise RuntimeError(f"{limit} jobs of {len(payload)} bytes fit on queue {queue!r}: the broker has no cap to reach")


class DeskAPI:
    """The Desk API of the Frappe site: ToDo records in MariaDB and jobs on the Redis queue."""

    def __init__(self, app: AppService):
        self.app = app
        self.db_errors = Counter("desk_db_errors_total", "MariaDB errors by code", ["code"], registry=app.registry)
        self.enqueue_errors = Counter("rq_enqueue_errors_total", "enqueue failures", ["reason"],
                                      registry=app.registry)
        app.route("GET", r"/api/resource/ToDo", self.list_todo)
        app.route("POST", r"/api/resource/ToDo", self.create_todo)
        app.route("GET", r"/api/resource/ToDo/([\w-]+)", self.get_todo)
        app.route("POST", r"/api/method/enqueue", self.enqueue)
        app.route("GET", r"/api/job/([\w-]+)", self.job)
        app.route("GET", r"/api/method/frappe\.auth\.get_logged_user", self.logged_user)
        app.route("GET", r"/api/resource/DocType", self.list_doctype)
        app.route("POST", r"/api/method/frappe\.core\.doctype\.prepared_report\.prepared_report\.make_prepared_report",
                  self.make_prepared_report)
        app.route("GET", r"/api/method/frappe\.client\.get_value", self.get_value)
        self.redis = self._redis(app.runtime)
        app.on_reload = lambda cfg: setattr(self, "redis", self._redis(cfg))

    def _redis(self, cfg: dict) -> redis.Redis:
        q = cfg["queue"]
        return redis.Redis(host=self.app.resolve(q.get("host", "redis-queue")), port=int(q.get("port", 6379)),
                           socket_timeout=3, socket_connect_timeout=2)

    def _db(self):
        db = self.app.runtime["database"]
        try:
            return pymysql.connect(host=self.app.resolve(db.get("host", "mariadb")), port=int(db.get("port", 3306)),
                                   user=db["user"], password=db.get("password", ""), database=db["name"],
                                   connect_timeout=3, read_timeout=5, write_timeout=5, autocommit=True,
                                   # pymysql 2.2 tries TLS on every connection unless told not to: its
                                   # per-connection SSL context (the CA bundle read) cost ~25 ms CPU.
                                   ssl_disabled=True)
        except pymysql.err.MySQLError as e:
            raise self._db_error(e) from e

    def _db_error(self, e: pymysql.err.MySQLError) -> HttpError:
        code = e.args[0] if e.args else 0
        self.db_errors.labels(str(code)).inc()
        # 1142: a revoked grant is a permission error to the client; 1226/1040: connection caps are a 503.
        status = 403 if code in (1142, 1044, 1045) else 503 if code in (1226, 1040, 2003) else 500
        return HttpError(status, "database_error", code=code, detail=str(e.args[1] if len(e.args) > 1 else e))

    def list_todo(self, req: Request) -> Response:
        conn = self._db()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT name, description, status FROM `tabToDo` ORDER BY modified DESC LIMIT %s",
                            (min(int(req.query.get("limit", 20)), 100),))
                rows = cur.fetchall()
        except pymysql.err.MySQLError as e:
            raise self._db_error(e) from e
        finally:
            conn.close()
        return 200, {"data": [{"name": r[0], "description": r[1], "status": r[2]} for r in rows]}

    def create_todo(self, req: Request) -> Response:
        body = req.body or {}
        name = str(body.get("client_ref") or uuid.uuid4().hex[:10])
        conn = self._db()
        try:
            with conn.cursor() as cur:
                cur.execute("INSERT INTO `tabToDo` (name, description, status, modified) VALUES (%s, %s, 'Open', "
                            "NOW(6))", (name, str(body.get("description", ""))))
        except pymysql.err.MySQLError as e:
            raise self._db_error(e) from e
        finally:
            conn.close()
        return 200, {"data": {"name": name}}

    def get_todo(self, req: Request) -> Response:
        conn = self._db()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT name, description, status FROM `tabToDo` WHERE name = %s", (req.params[0],))
                row = cur.fetchone()
        except pymysql.err.MySQLError as e:
            raise self._db_error(e) from e
        finally:
            conn.close()
        if row is None:
            raise HttpError(404, "not_found")
        return 200, {"data": {"name": row[0], "description": row[1], "status": row[2]}}

    def _read(self, sql: str, args: tuple = ()) -> list[tuple]:
        conn = self._db()
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return list(cur.fetchall())
        except pymysql.err.MySQLError as e:
            raise self._db_error(e) from e
        finally:
            conn.close()

    def logged_user(self, req: Request) -> Response:
        # The session check: a connection as the site account and a read (Frappe validates the sid on the site).
        self._read("SELECT 1")
        return 200, {"message": "Administrator"}

    def list_doctype(self, req: Request) -> Response:
        rows = self._read("SELECT name FROM `tabDocType` ORDER BY name LIMIT %s",
                          (min(int(req.query.get("limit_page_length", 50)), 100),))
        return 200, {"data": [{"name": r[0]} for r in rows]}

    def make_prepared_report(self, req: Request) -> Response:
        q = self.app.runtime["queue"]
        name = uuid.uuid4().hex[:10]
        conn = self._db()
        try:
            conn.autocommit(False)
            with conn.cursor() as cur:
                cur.execute("INSERT INTO `tabPrepared Report` (name, report_name, status, modified) VALUES "
                            "(%s, %s, 'Queued', NOW(6))", (name, str((req.body or {}).get("report_name", ""))))
            try:
                enqueue_job(self.redis, q.get("name", "default"), name, job_payload(q))
            except redis.exceptions.ResponseError as e:
                conn.rollback()
                reason = refusal(e)
                self.enqueue_errors.labels(reason).inc()
                raise HttpError(503, "enqueue_failed", reason=reason, detail=str(e)) from e
            except redis.exceptions.ConnectionError as e:
                conn.rollback()
                self.enqueue_errors.labels("connection").inc()
                raise HttpError(503, "enqueue_failed", reason="connection", detail=str(e)) from e
            conn.commit()
        except pymysql.err.MySQLError as e:
            raise self._db_error(e) from e
        finally:
            conn.close()
        return 200, {"message": {"name": name}}

    def get_value(self, req: Request) -> Response:
        rows = self._read("SELECT status FROM `tabPrepared Report` WHERE name = %s", (req.query.get("name", ""),))
        if not rows:
            raise HttpError(404, "not_found")
        return 200, {"message": {"status": rows[0][0]}}

    def enqueue(self, req: Request) -> Response:
        body = req.body or {}
        q = self.app.runtime["queue"]
        job_id = str(body.get("job_id") or uuid.uuid4().hex)
        payload = job_payload(q)
        try:
            enqueue_job(self.redis, q.get("name", "default"), job_id, payload)
        except redis.exceptions.ResponseError as e:
            reason = refusal(e)
            self.enqueue_errors.labels(reason).inc()
            raise HttpError(503, "enqueue_failed", reason=reason, detail=str(e)) from e
        except redis.exceptions.ConnectionError as e:
            self.enqueue_errors.labels("connection").inc()
            raise HttpError(503, "enqueue_failed", reason="connection", detail=str(e)) from e
        return 200, {"message": {"job_id": job_id}}

    def job(self, req: Request) -> Response:
        try:
            h = self.redis.hmget(f"rq:job:{req.params[0]}", "status", "ended_at")
        except redis.exceptions.RedisError as e:
            raise HttpError(503, "queue_unavailable", detail=str(e)) from e
        if h[0] is None:
            raise HttpError(404, "not_found")
        return 200, {"job_id": req.params[0], "status": h[0].decode(), "ended_at": json.loads(h[1] or "null")}


def main() -> None:
    app = AppService()
    DeskAPI(app)
    app.serve()


if __name__ == "__main__":
    main()
