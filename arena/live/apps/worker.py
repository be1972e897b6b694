"""frappe-worker: RQ-style workers of ia-004 that BLPOP jobs from the Redis queue and mark them finished.

Run by the supervisor as `python -m arena.live.apps.worker`. `workers` threads each dequeue with BLMOVE into the
queue's intermediate list, as RQ (1.15+) does, so that a job taken off the queue is always on some list until it is
recorded; a job's hash goes queued -> started -> finished, as RQ's does, and keeps its data (RQ's result TTL), so
the queue's memory grows with the work done until its maxmemory. A worker that cannot reach Redis retries after
0.5 s. One that is refused (NOPERM, or OOM on its heartbeat or a status write; RQ writes a heartbeat before each
dequeue, so at maxmemory it pops nothing) stops, as RQ's loop crashes, and runs again after `retry_s`, doubling
while it keeps being refused up to `backoff_max_s` (CrashLoopBackOff); a finished job resets it. Producers, which
try far more often, take any memory that frees, as in the twin (arena/twin/frappe/rq.py). If the broker refuses
the `started` write of a job it has just moved (the cap reached between heartbeat and dequeue), the thread keeps
that job and records it first on its next turn; at boot, jobs left on the intermediate list still `queued` go
back to the head of the queue (RQ's intermediate-queue cleanup). SIGTERM is a warm shutdown: the job in hand is finished. Serves /healthz and
/metrics (jobs done, `backlog{queue}`).
"""

from __future__ import annotations

import threading
import time

import pymysql
import redis
from prometheus_client import Counter, Gauge

from arena.live.apps.base import AppService, refusal, rq_keys


class QueueWorkers:
    """A pool of BLPOP workers on one RQ queue."""

    def __init__(self, app: AppService):
        self.app = app
        q = app.runtime["queue"]
        self.queue = q.get("name", "default")
        self.key, self.intermediate = rq_keys(self.queue)
        self.redis = redis.Redis(host=app.resolve(q.get("host", "redis-queue")), port=int(q.get("port", 6379)),
                                 socket_timeout=5, socket_connect_timeout=2)
        self.work_s = float(q.get("job_work_ms", 20)) / 1000
        # RQ's loop raises on a refused write and supervisord restarts it after `retry_s`, doubling while it keeps
        # failing (up to `backoff_max_s`), back to `retry_s` after a job it finishes: one back-off for the process.
        self.retry_s = float(q.get("retry_s", 0.5))
        self.backoff_max_s = float(q.get("backoff_max_s", self.retry_s))
        self.in_a_row = 0
        self.blocked_until = 0.0
        self._lock = threading.Lock()
        self.done = Counter("rq_jobs_done_total", "jobs finished", ["queue"], registry=app.registry)
        self.failed = Counter("rq_worker_errors_total", "worker errors", ["reason"], registry=app.registry)
        backlog = Gauge("backlog", "jobs waiting on the queue", ["queue"], registry=app.registry)
        backlog.labels(self.queue).set_function(self._length)
        self.stop = threading.Event()

    def _length(self) -> float:
        try:
            return float(self.redis.llen(self.key))
        except redis.exceptions.RedisError:
            return float("nan")

    def _refused(self) -> float:
        """A write was refused: the loop crashes; how long until it runs again (a crash already backing off, as
        another thread's, does not count twice)."""
        with self._lock:
            now = time.monotonic()
            if now >= self.blocked_until:
                self.in_a_row += 1
                self.blocked_until = now + min(self.retry_s * 2 ** (self.in_a_row - 1), self.backoff_max_s)
            return self.blocked_until - now

    def requeue_left_over(self) -> None:
        """At boot: jobs a previous process moved but never recorded as started go back to the queue's head."""
        try:
            for raw in reversed(self.redis.lrange(self.intermediate, 0, -1)):
                if self.redis.hget(f"rq:job:{raw.decode()}", "status") in (b"queued", None):
                    pipe = self.redis.pipeline(transaction=True)
                    pipe.lrem(self.intermediate, 1, raw)
                    pipe.lpush(self.key, raw)
                    pipe.execute()
        except redis.exceptions.RedisError:
            self.failed.labels("cleanup").inc()

    def run_one(self) -> None:
        me = f"rq:worker:{self.app.instance}.{threading.current_thread().name}"
        held: str | None = None  # a job moved off the queue whose `started` write the broker refused
        while not self.stop.is_set():
            wait = self.blocked_until - time.monotonic()
            if wait > 0:
                self.stop.wait(wait)
                continue
            try:
                # RQ's heartbeat before each dequeue: a write, so a broker at maxmemory (noeviction) refuses it and
                # the worker backs off before it takes a job it could not record as started.
                self.redis.hset(me, mapping={"state": "idle", "last_heartbeat": time.time()})
                if held is None:
                    raw = self.redis.blmove(self.key, self.intermediate, 1, "LEFT", "RIGHT")
                    if raw is None:
                        continue
                    held = raw.decode()
                job = held
                self.redis.hset(f"rq:job:{job}", mapping={"status": "started", "started_at": time.time()})
                held = None
                # The job's own work, to its end even in a warm shutdown (a fresh Event: no time.sleep here).
                threading.Event().wait(self.work_s)
                # A Prepared Report's generation job records its status on the site: refused (a revoked UPDATE,
                # read_only, the connection cap), the job fails and the report never reads Completed.
                status = "finished" if self._report_done(job) else "failed"
                self.redis.hset(f"rq:job:{job}", mapping={"status": status, "ended_at": time.time()})
                self.redis.lrem(self.intermediate, 1, job)
                self.done.labels(self.queue).inc()
                self.in_a_row = 0
            except redis.exceptions.ResponseError as e:
                self.failed.labels(refusal(e)).inc()
                self.stop.wait(self._refused())
            except redis.exceptions.RedisError:
                self.failed.labels("connection").inc()
                self.stop.wait(0.5)

    def _report_done(self, job: str) -> bool:
        db = self.app.runtime.get("database")
        if not db:
            return True
        try:
            conn = pymysql.connect(host=self.app.resolve(db.get("host", "mariadb")), port=int(db.get("port", 3306)),
                                   user=db["user"], password=db.get("password", ""), database=db["name"],
                                   connect_timeout=3, read_timeout=5, write_timeout=5, autocommit=True,
                                   ssl_disabled=True)
        except pymysql.err.MySQLError:
            self.failed.labels("db_connect").inc()
            return False
        try:
            with conn.cursor() as cur:
                # A job that is no report (the history fill, the challenge probe) updates no row: still done.
                cur.execute("UPDATE `tabPrepared Report` SET status = 'Completed', modified = NOW(6) WHERE name = %s",
                            (job,))
            return True
        except pymysql.err.MySQLError:
            self.failed.labels("db_write").inc()
            return False
        finally:
            conn.close()

    def start(self, n: int) -> None:
        self.threads = [threading.Thread(target=self.run_one, name=f"worker-{i}", daemon=True) for i in range(n)]
        for t in self.threads:
            t.start()

    def drain(self, timeout_s: float = 2.5) -> None:
        """RQ's warm shutdown: take no new job, let each worker finish (record) the one it holds."""
        self.stop.set()
        for t in getattr(self, "threads", []):
            t.join(timeout_s / max(len(self.threads), 1))


def main() -> None:
    app = AppService()
    workers = QueueWorkers(app)
    workers.requeue_left_over()
    workers.start(int(app.runtime["queue"].get("workers", 2)))
    app.on_shutdown = workers.drain
    app.serve()


if __name__ == "__main__":
    main()
