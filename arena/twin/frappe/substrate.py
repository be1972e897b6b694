"""The Frappe/ERPNext substrate of the twin (Incident-Arena tasks 000-005): wiring, request paths, shell programs.

`arena.twin.engine.build_twin` finds it through `@register_substrate` (name "frappe") and calls `build()`,
`inject(0)`, then `serve()` once per segment. The scenario's `twin.spec` is validated by `FrappeSpec` here.

Components: `frappe-web` (gunicorn behind nginx: the Desk API, one DB connection per request), `worker-long`
(RQ, 1 replica), `mariadb` (variables, grants, admission: arena.twin.frappe.mariadb), `redis-queue` and
`redis-cache` (Bitnami Redis re-rendered from Helm values: arena.twin.frappe.redis). One Helm release holds the
values (arena.twin.frappe.helm). Drivers, as Incident-Arena's `frappe_jobs` profile has them (SW
substrates/frappe/loadgen_frappe/drivers.py): `desk` (desk_work: Desk API reads), `rq_enqueue` (creates a Prepared
Report: an INSERT, then its generation job onto the `long` queue; ok when both succeed) and `rq_complete` (reads
the status of the oldest report at least `rq_complete_budget_s` old from the load generator's ledger,
arena.twin.frappe.reports: correct when it is Completed, an error when no report is old enough).

Where the faults live (spec section 7.1): a MariaDB leg applied by the faultInit job at episode start (`inject`:
SQL statements run as root through the same SQL engine an operator uses, so SET GLOBAL lands in the runtime layer
and a REVOKE in the catalog), and a queue leg shipped in the Helm values (extraFlags, present from bring-up).
Task 005 adds a seeded backlog of Prepared Reports and emails with a mail sink (arena.twin.frappe.backlog), and
the operator's `reconfigure-infra.sh`, which persists a Redis server's flags and applies them in place.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Mapping

from pydantic import BaseModel, ConfigDict, Field

from arena.twin.frappe.admin import USAGE, helper_refuses, queue_runtime_change, rewrite_queue_flags, split_dsn
from arena.twin.frappe.backlog import BacklogSpec, MailSink, SeededBacklog
from arena.twin.frappe.helm import HelmRelease, helm_program
from arena.twin.frappe.mariadb import MariaDB, SqlError
from arena.twin.frappe.reports import PollResult, ReportLedger
from arena.twin.frappe.redis import JobStore, RedisError, RedisServer, conf_text, start_script
from arena.twin.frappe.rediscli import redis_cli
from arena.twin.frappe.rq import Worker, step_queue
from arena.twin.frappe.sql import SqlSession, mysql_client, split_statements
from arena.twin.load import Phase
from arena.twin.mech import ERROR, WRONG, Mode
from arena.twin.shell import Invocation
from arena.twin.world import Component, Substrate, _ts, register_substrate
from guardrail.errors import ScenarioError
from guardrail.yamlio import validate

__all__ = ["FrappeSpec", "FrappeSubstrate", "FrappeWeb"]


# The frappe-main image runs gunicorn and the workers; the stores are the chart's Bitnami subcharts.
_FRAPPE_IMAGE = "ghcr.io/abundant-ai/sre-world/frappe-main@sha256:5d1c0f7a2b9e4c8d6f3a1b0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c"
_MARIADB_IMAGE = "docker.io/bitnami/mariadb:11.4.4-debian-12-r1"
_REDIS_IMAGE = "docker.io/bitnami/redis:7.2.4-debian-12-r9"
_MAILSINK_IMAGE = "docker.io/axllent/mailpit:v1.20.4"


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeskAction(_M):
    """One kind of Desk request: its share, the privilege its statement needs, the table, its latency."""

    weight: float = 1.0
    privilege: str = "SELECT"
    table: str = "tabToDo"
    latency_ms: float = 180.0


class WebSpec(_M):
    """The Desk API path: per-request DB connection hold times and latencies per driver."""

    hold_s: dict[str, float] = Field(default_factory=lambda: {"desk": 0.17, "rq_enqueue": 0.06,
                                                              "rq_complete": 0.06})
    latency_ms: dict[str, float] = Field(default_factory=lambda: {"rq_enqueue": 70.0, "rq_complete": 70.0})
    refused_ms: float = 25.0  # a refused connection fails fast (the error page)
    desk_actions: dict[str, DeskAction] = Field(default_factory=lambda: {"browse": DeskAction(weight=1.0)})
    # rq_enqueue's statement before it enqueues (make_prepared_report inserts the report row; its after_insert
    # hook enqueues the job, so a refused INSERT enqueues nothing), and rq_complete's status read.
    report_insert: DeskAction = Field(default_factory=lambda: DeskAction(privilege="INSERT",
                                                                       table="tabPrepared Report"))
    report_poll: DeskAction = Field(default_factory=lambda: DeskAction(privilege="SELECT",
                                                                     table="tabPrepared Report"))
    boot_s: float = 20.0


class MariaDBSpec(_M):
    mycnf: dict[str, Any] = Field(default_factory=dict)  # the chart's my.cnf [mysqld] keys (declared layer)
    accounts: dict[str, dict[str, Any]]  # user@host -> {grants: {object: [privs]}, max_user_connections}
    tables: dict[str, dict[str, Any]] = Field(default_factory=dict)
    root_password: str
    boot_s: float = 25.0


class RedisSpec(_M):
    values_path: str  # where this server's Bitnami values sit in the release (erpnext.redis-queue)
    base_bytes: int = 1_050_000  # used_memory of an idle server with RQ's bookkeeping keys
    job_bytes: int = 2048
    result_ttl_s: float = 600.0
    boot_s: float = 12.0


class WorkerSpec(_M):
    replicas: int = 1
    service_s: float = 0.33
    retry_s: float = 10.0
    backoff_max_s: float = 300.0  # the kubelet's CrashLoopBackOff ceiling
    boot_s: float = 15.0
    # The job's own write: generate_report sets the report's status (Completed) on the site schema; refused, the
    # job fails and the report never reads Completed.
    job_write: DeskAction = Field(default_factory=lambda: DeskAction(privilege="UPDATE", table="tabPrepared Report"))


class FaultInit(_M):
    """The faultInit.mariadb Job: statements run as root after the site boots (at episode start)."""

    kind: str
    sql: list[str]


class HelmSpec(_M):
    release: str = "frappe"
    chart: str = "frappe-0.4.2"
    chart_defaults: dict[str, Any] = Field(default_factory=dict)
    values: dict[str, Any] = Field(default_factory=dict)  # the task's user-supplied values
    writable: bool = True  # whether the operator may `helm upgrade`


class FrappeSpec(_M):
    """A Frappe scenario's `twin.spec`."""

    namespace: str = "default"
    site: str = "erp.cluster.local"
    site_db: str
    site_user: str
    rq_deadline_s: float = 30.0
    # RQ_COMPLETE_BUDGET_S: rq_complete claims only reports at least this old.
    rq_complete_budget_s: float = Field(default=15.0, gt=0)
    web: WebSpec = Field(default_factory=WebSpec)
    mariadb: MariaDBSpec
    redis_queue: RedisSpec
    redis_cache: RedisSpec
    worker_long: WorkerSpec = Field(default_factory=WorkerSpec)
    helm: HelmSpec = Field(default_factory=HelmSpec)
    fault_init: FaultInit | None = None
    # 005: the seeded Prepared Reports and emails (arena.twin.frappe.backlog) and the mail sink they go to.
    backlog: BacklogSpec | None = None


class FrappeWeb(Component):
    """gunicorn (frappe-web) serving the Desk API; it keeps no state of its own worth layering."""

    container = "frappe-web"

    def __init__(self, name: str, **kw: Any):
        super().__init__(name, **kw)
        self.pod_env = {"DB_HOST": "mariadb", "DB_PORT": "3306", "REDIS_QUEUE": "redis://redis-queue:6379",
                        "REDIS_CACHE": "redis://redis-cache:6379", "WORKER_CLASS": "gthread"}
        self._last_err = ""
        self.backlog: SeededBacklog | None = None

    def truth(self) -> dict[str, Any]:
        out = super().truth()
        if self.backlog is not None:
            # The site's documents live in MariaDB; frappe-web is the site, so its truth carries them.
            out.update({f"backlog.{k}": v for k, v in self.backlog.truth().items()})
        return out

    def error_line(self, now: float, what: str, n: float) -> None:
        # One line per segment and cause: an aggregate of what the real log repeats per request.
        if n >= 0.5 and (what != self._last_err or len(self.log) < 3):
            self.say(now, f"ERROR [frappe.app] {what} (x{int(round(n))})")
            self._last_err = what
        elif n < 0.5:
            self._last_err = ""


@register_substrate
class FrappeSubstrate(Substrate):
    """Frappe/ERPNext: frappe-web, worker-long, mariadb, redis-queue, redis-cache, one Helm release."""

    name = "frappe"

    def build(self) -> None:
        # The scenario loader keeps twin.spec as a mapping; a bad field still names its path, as `twin.spec.<field>`.
        spec = validate(FrappeSpec, dict(self.spec), path="<scenario twin section>", error=ScenarioError,
                        loc_prefix=("twin", "spec"))
        self.s = spec
        w = self.world
        ns = spec.namespace
        store = w.store(f"helm/{spec.helm.release}", spec.helm.values)
        self.release = HelmRelease(spec.helm.release, spec.helm.chart, spec.helm.chart_defaults, store, ns)
        mycnf = w.store("mariadb/my.cnf", spec.mariadb.mycnf)
        catalog = w.store("mariadb/global_priv", {"accounts": spec.mariadb.accounts})
        self.db = w.add(MariaDB("mariadb", mycnf=mycnf, catalog=catalog, site_db=spec.site_db,
                                site_user=spec.site_user, tables=spec.mariadb.tables,
                                root_password=spec.mariadb.root_password, namespace=ns, restartable=False,
                                image=_MARIADB_IMAGE,
                                boot_s=spec.mariadb.boot_s, hosts=("mariadb", "mariadb:3306", "localhost")))
        q, c = spec.redis_queue, spec.redis_cache
        self.queue = w.add(RedisServer("redis-queue", values=self.release, values_path=q.values_path,
                                       base_bytes=q.base_bytes, jobs=JobStore(q.job_bytes, q.result_ttl_s),
                                       image=_REDIS_IMAGE, namespace=ns, restartable=False, boot_s=q.boot_s,
                                       hosts=("redis-queue", "redis-queue:6379", "redis-queue-master")))
        self.cache = w.add(RedisServer("redis-cache", values=self.release, values_path=c.values_path,
                                       base_bytes=c.base_bytes, image=_REDIS_IMAGE, namespace=ns, restartable=False, boot_s=c.boot_s,
                                       hosts=("redis-cache", "redis-cache:6379", "redis-cache-master")))
        # frappe-admin is a sidecar in every Frappe workload pod, behind the `frappe-admin` Service; frappe-web's
        # pod answers for it (SW substrates/frappe/frappe-admin-sidecar/server.py).
        self.web = w.add(FrappeWeb("frappe-web", image=_FRAPPE_IMAGE, namespace=ns, boot_s=spec.web.boot_s,
                                   hosts=("frappe-web", "frappe-web:8000", "frappe-admin", "frappe-admin:8000")))
        self.web.http = self._admin_http  # type: ignore[method-assign]
        wl = spec.worker_long
        self.worker = w.add(Worker("worker-long", replicas=wl.replicas, service_s=wl.service_s, retry_s=wl.retry_s,
                                   backoff_max_s=wl.backoff_max_s, image=_FRAPPE_IMAGE, namespace=ns, boot_s=wl.boot_s))
        for r in (self.queue, self.cache):
            r.exec = self._redis_exec(r)  # type: ignore[method-assign]
        self.db.exec = self._mysql_exec  # type: ignore[method-assign]
        self._worker_util = 0.0
        self.reports = ReportLedger(spec.rq_complete_budget_s)
        self.seeded: SeededBacklog | None = None
        if spec.backlog is not None:
            sink = None
            if spec.backlog.emails:
                sink = w.add(MailSink("mail-sink", image=_MAILSINK_IMAGE, namespace=ns, boot_s=3.0,
                                      hosts=("mail-sink", "mail-sink:8025", "mail-sink:1025")))
            assert self.queue.jobs is not None
            self.seeded = SeededBacklog(spec.backlog, self.queue.jobs, self.db, sink, spec.site_user)
            self.seeded.seed()
            self.web.backlog = self.seeded
            self.db.doc_tables = self.seeded.table
            self.db.doc_write = self.seeded.write

    # --- faults at episode start ---------------------------------------------------------------------------
    def inject(self, now: float) -> None:
        fi = self.s.fault_init
        if fi is None:
            return
        sess = SqlSession(self.db, "root", None, now)
        for stmt in fi.sql:
            for s in split_statements(stmt):
                try:
                    sess.execute(s)
                except SqlError as e:
                    raise ScenarioError(f"faultInit statement failed: {s}: ERROR {e.code}: {e.message}",
                                        path="<twin.spec.fault_init>") from e
        self.db.say(now, f"[Note] faultInit.mariadb ({fi.kind}) applied {len(fi.sql)} statement(s)")

    # --- load ---------------------------------------------------------------------------------------------
    def serve(self, rates: Mapping[str, float], phase: Phase, t0: float, t1: float) -> dict[str, list[Mode]]:
        spec = self.s.web
        desk = rates.get("desk", 0.0)
        enq = rates.get("rq_enqueue", 0.0)
        cmp_ = rates.get("rq_complete", 0.0)
        out: dict[str, list[Mode]] = {}
        if not self.web.ready(t0):
            down = [Mode(1.0, 5.0, ERROR, "502 Bad Gateway", conn=True)]
            out = {d: list(down) for d in rates}
            self._queue_only(t0, t1)
            return out
        if not self.db.ready(t0):
            p_block, reason = 1.0, "(2003, \"Can't connect to MySQL server on 'mariadb' ([Errno 111] Connection refused)\")"
            code = 2003
        else:
            load = (desk * spec.hold_s.get("desk", 0.17) + enq * spec.hold_s.get("rq_enqueue", 0.06)
                    + cmp_ * spec.hold_s.get("rq_complete", 0.06) + self._worker_util)
            p_block, code, msg = self.db.admission(self.s.site_user, load)
            reason = f"({code}, \"{msg}\")"
            self.db.record_load(self.s.site_user, load, p_block,
                                p_block * (desk + enq + cmp_) * (t1 - t0), code)
        refused = Mode(p_block, spec.refused_ms, ERROR, f"OperationalError {code}", conn=True)
        # Desk: each action's statement needs its privilege on the site schema.
        modes = [refused] if p_block > 0 else []
        total_w = sum(a.weight for a in spec.desk_actions.values()) or 1.0
        for name, a in sorted(spec.desk_actions.items()):
            share = (1.0 - p_block) * a.weight / total_w
            err = self.db.privilege_error(self.s.site_user, a.privilege, a.table) if self.db.ready(t0) else None
            if err is not None:
                modes.append(Mode(share, a.latency_ms * 0.4, ERROR, f"{err.code}"))
                self.web.error_line(t0, f"pymysql.err.{'OperationalError' if err.code == 1290 else 'ProgrammingError'}"
                                        f": ({err.code}, \"{err.message}\")", share * desk * (t1 - t0))
            else:
                modes.append(Mode(share, a.latency_ms))
        out["desk"] = modes
        if p_block > 0:
            self.web.error_line(t0, f"pymysql.err.OperationalError: {reason}", p_block * (desk + enq + cmp_) * (t1 - t0))
        db_up = self.db.ready(t0)
        # rq_enqueue: the report row first (make_prepared_report), then its job onto the broker (after_insert).
        ins = spec.report_insert
        ins_err = self.db.privilege_error(self.s.site_user, ins.privilege, ins.table) if db_up else None
        if ins_err is not None and enq > 0:
            self.web.error_line(t0, f"pymysql.err.{'OperationalError' if ins_err.code == 1290 else 'ProgrammingError'}"
                                    f": ({ins_err.code}, \"{ins_err.message}\")", (1.0 - p_block) * enq * (t1 - t0))
        attempts = 0.0 if ins_err is not None else enq * (1.0 - p_block)
        # The worker's job writes the report's status: refused (a revoked UPDATE, read_only), every job fails.
        jw = self.s.worker_long.job_write
        job_err = self.db.privilege_error(self.s.site_user, jw.privilege, jw.table) if db_up else None
        job_fail = 1.0 if job_err is not None else p_block
        jobs = self.queue.jobs
        assert jobs is not None
        head0, tail0 = jobs.head_seq, jobs.tail_seq
        qs = step_queue(self.queue, self.worker, attempts, t0, t1, job_db_block=job_fail,
                        db_error_reason=(f"{job_err.code}" if job_err is not None else f"OperationalError {code}"),
                        deadline_s=self.s.rq_deadline_s)
        if self.seeded is not None:
            self.seeded.run_popped(t0)
        taken = qs.processed + qs.failed_jobs
        self.reports.ran(head0, jobs.head_seq, qs.processed / taken if taken > 1e-12 else 0.0)
        demand = attempts * (t1 - t0)
        acc = (qs.accepted / demand) if demand > 0 else (0.0 if qs.refused_reason else 1.0)
        if qs.refused_reason and demand > 0:
            self.web.error_line(t0, f"redis.exceptions.ResponseError: {qs.refused_reason}", demand - qs.accepted)
        busy_s = taken * self.worker.service_s
        self._worker_util = min(1.0, busy_s / max(t1 - t0, 1e-9))
        ok_lat = spec.latency_ms.get("rq_enqueue", ins.latency_ms)
        enq_modes = [refused] if p_block > 0 else []
        if ins_err is not None:
            enq_modes.append(Mode(1.0 - p_block, ok_lat * 0.4, ERROR, f"{ins_err.code}"))
        else:
            enq_modes.append(Mode((1.0 - p_block) * acc, ok_lat))
            if acc < 1.0:
                enq_modes.append(Mode((1.0 - p_block) * (1.0 - acc), ok_lat * 0.5, ERROR, _short(qs.refused_reason)))
        out["rq_enqueue"] = enq_modes
        out["rq_complete"] = self._polls(cmp_, qs.accepted, tail0, t0, t1, p_block, refused, db_up)
        return {d: out.get(d, [Mode(1.0, 0.0, "dropped")]) for d in rates}

    def _polls(self, rate: float, accepted: float, tail0: float, t0: float, t1: float, p_block: float,
               refused: Mode, db_up: bool) -> list[Mode]:
        """This segment's reports into the ledger and rq_complete's arrivals against it, at sub-steps of at most
        2.5 s (a report turns eligible budget_s after its creation, in the middle of a long segment)."""
        dt = t1 - t0
        k = max(1, min(24, math.ceil(dt / 2.5)))
        polls: list[PollResult] = []
        for i in range(k):
            t = t0 + (i + 0.5) * dt / k
            self.reports.created(t, accepted / k, tail0 + accepted * i / k, tail0 + accepted * (i + 1) / k)
            polls.append(self.reports.poll(t, rate * dt / k))
        want = sum(p.demand for p in polls)
        if want <= 0:
            return [Mode(1.0, 0.0, ERROR, "no report old enough")]
        empty = sum(p.empty for p in polls) / want
        done = sum(p.completed for p in polls) / want
        pend = sum(p.pending for p in polls) / want
        rp = self.s.web.report_poll
        lat = self.s.web.latency_ms.get("rq_complete", rp.latency_ms)
        err = self.db.privilege_error(self.s.site_user, rp.privilege, rp.table) if db_up else None
        # A poll that finds no report old enough sends nothing: status 0, no latency (the real sentinel).
        modes = [Mode(empty, 0.5, ERROR, "no report old enough")] if empty > 0 else []
        claimed = 1.0 - empty
        if p_block > 0:
            modes.append(Mode(claimed * p_block, refused.latency_ms, ERROR, refused.reason, conn=True))
        if err is not None:
            modes.append(Mode(claimed * (1.0 - p_block), lat * 0.4, ERROR, f"{err.code}"))
            return modes
        if done > 0:
            modes.append(Mode(done * (1.0 - p_block), lat))
        if pend > 0:
            modes.append(Mode(pend * (1.0 - p_block), lat, WRONG, "report not Completed"))
        return modes

    def begin_soak(self, now: float) -> None:
        self.reports.begin_soak()

    def _queue_only(self, t0: float, t1: float) -> None:
        jobs = self.queue.jobs
        assert jobs is not None
        head0 = jobs.head_seq
        qs = step_queue(self.queue, self.worker, 0.0, t0, t1, job_db_block=0.0, db_error_reason="",
                        deadline_s=self.s.rq_deadline_s)
        taken = qs.processed + qs.failed_jobs
        self.reports.ran(head0, jobs.head_seq, qs.processed / taken if taken > 1e-12 else 0.0)
        if self.seeded is not None:
            self.seeded.run_popped(t0)

    def fixed_traffic(self, spec: Mapping[str, Any], now: float) -> dict[str, Any]:
        """The queue challenge's probe after the broker restart: N jobs enqueued through frappe-web.

        A probe is correct when the broker accepts the enqueue and the worker can take it (its status writes and
        its dequeue are allowed: no OOM, NOPERM or NOREPLICAS). Like Incident-Arena's redis_configuration probe
        it checks that the broker serves the queue again, not how long the backlog takes to drain.
        """
        n = int(spec.get("jobs", 4))
        res: dict[str, Any] = {"scheduled": n, "attempted": 0, "completed": 0, "correct": 0, "errors": []}
        if not self.web.ready(now):
            res["errors"].append("frappe-web not ready")
            return res
        res["attempted"] = n
        load = self.db.threads_by_user.get(self.s.site_user, 0.0)
        limit = self.db.user_limit(self.s.site_user) or int(self.db.var("max_connections"))
        if not self.db.ready(now) or load + 1 > limit:
            res["errors"].append("web request refused a DB connection")
            return res
        for _ in range(n):
            why = self.queue.write_error(now, cmd="rpush")
            if why is not None:
                res["errors"].append(f"enqueue: {why}")
                continue
            self.queue.jobs.enqueue(1.0)
            self.queue.admit_bytes(self.queue.jobs.job_bytes)
            res["completed"] += 1
            blocked = self.queue.write_error(now, cmd="hset") or self.queue.write_error(now, cmd="blpop")
            if blocked is not None:
                res["errors"].append(f"worker: {blocked}")
                continue
            res["correct"] += 1
        return res

    def backlog(self) -> float:
        """The queue's length as an operator's metric reads it (LLEN of the job list): queued and orphaned ids are
        in the list; stranded jobs (popped, their hash still `queued`) are not, so they are not counted."""
        j = self.queue.jobs
        return 0.0 if j is None else j.queued + j.orphan_ids

    # --- the operator's programs -----------------------------------------------------------------------------
    def commands(self) -> dict[str, Callable[[Invocation], tuple[str, str, int, float]]]:
        now = self.world.clock.now

        def mysql(inv: Invocation) -> tuple[str, str, int, float]:
            return mysql_client(inv.argv, inv.stdin, dict(inv.env), self._resolve_db, now())

        def rcli(inv: Invocation) -> tuple[str, str, int, float]:
            return redis_cli(inv.argv, inv.stdin, self._resolve_redis, now())

        helm = helm_program(self.release, now=now, on_upgrade=self._after_upgrade, timestamp=_helm_ts,
                            allowed=self.s.helm.writable)
        return {"mysql": mysql, "mariadb": mysql, "redis-cli": rcli,
                "helm": lambda inv: helm(list(inv.argv), inv.stdin),
                "reconfigure-infra.sh": self._reconfigure_infra}

    def _reconfigure_infra(self, inv: Invocation) -> tuple[str, str, int, float]:
        """`reconfigure-infra.sh <mariadb|redis-cache|redis-queue> <key> <value>`, as the real foothold's helper
        (SW substrates/frappe/main/reconfigure-infra.sh): positional arguments checked by the script (exit 2), then
        mariadb -> `SET GLOBAL key = value` with DB_ADMIN_DSN (runtime), redis-cache -> CONFIG SET (runtime),
        redis-queue -> frappe-admin's POST /admin/redis-queue-repair (`_queue_repair`: the runtime change, then the
        start script rewritten; no pod roll). Under `set -e`, a refused repair ends with curl's exit 22."""
        args = list(inv.argv[1:])
        kind, key, value = (args + ["", "", ""])[:3]
        usage = USAGE + "\n"
        if kind not in ("mariadb", "redis-cache", "redis-queue"):
            return "", usage, 2, 0.0
        if not key:
            return "", "key required\n", 2, 0.0
        if not value:
            return "", "value required\n", 2, 0.0
        refused = helper_refuses(kind, key, value)
        if refused:
            return "", refused + "\n", 2, 0.0
        now = self.world.clock.now()
        done = f"{kind} reconfigured: {key}={value}\n"
        if kind == "mariadb":
            dsn = inv.env.get("DB_ADMIN_DSN", "")
            if not dsn:
                return "", "DB_ADMIN_DSN not set (should be exported by the chart)\n", 2, 0.0
            user, pw, host, port, db = split_dsn(dsn)
            o, e, code, dur = mysql_client(["mysql", "--protocol=TCP", "-h", host, "-P", port, "-u", user,
                                            f"-p{pw}", "-D", db, "-e", f"SET GLOBAL {key} = {value};"], "",
                                           dict(inv.env), self._resolve_db, now)
            return (o, e, code, dur + 0.2) if code else (o + done, e, 0, dur + 0.5)
        if kind == "redis-cache":
            try:
                self.cache.command(["CONFIG", "SET", key, value], now)
            except RedisError as err:
                return "", f"CONFIG SET {key} {value} refused: b'-{err}\\r\\n'\n", 1, 0.3
            got = self.cache.command(["CONFIG", "GET", key], now)
            resp = f"*{len(got)} " + " ".join(f"${len(str(x))} {x}" for x in got)
            return f"CONFIG GET {key} -> {resp}\n" + done, "", 0, 0.5
        payload = {"operation": key} if key == "dequeue-acl" else {"operation": key, "value": value}
        target = self.world.component("frappe-admin")
        if target is None or not target.ready(now):
            return "", "curl: (7) Failed to connect to frappe-admin port 8000: Connection refused\n", 7, 0.1
        status, body = target.http("POST", "/admin/redis-queue-repair", json.dumps(payload), now)
        dur = 3.0 if key == "appendonly" and status < 300 else 1.0
        if status >= 400:
            return "", f"curl: (22) The requested URL returned error: {status}\n", 22, dur
        return body + "\n" + done, "", 0, dur + 0.5

    def _admin_http(self, method: str, path: str, body: str, now: float) -> tuple[int, str]:
        """frappe-admin's routes that touch the queue broker: POST /admin/redis-queue-repair (the helper's),
        POST /admin/redis-queue-restart (the harness's challenge restart, reachable from the foothold too) and
        GET /admin/redis-config (the settings and the default user's ACL)."""
        route = path.split("?", 1)[0]
        if route == "/healthz" and method == "GET":
            return 200, json.dumps({"ok": True})
        if route == "/admin/redis-queue-repair" and method == "POST":
            try:
                doc = json.loads(body or "")
            except ValueError as e:
                return 400, json.dumps({"ok": False, "error": f"invalid JSON body: {e}"})
            if not isinstance(doc, dict) or set(doc) - {"operation", "value"}:
                return 400, json.dumps({"ok": False, "error": "body must contain only operation and optional value"})
            op, value = doc.get("operation"), doc.get("value")
            if not isinstance(op, str) or (value is not None and not isinstance(value, str)):
                return 400, json.dumps({"ok": False, "error": "operation and value must be strings"})
            status, out, _ = self._queue_repair(op, value, now)
            return status, out
        if route == "/admin/redis-queue-restart" and method == "POST":
            if not self.queue.ready(now):
                return 500, json.dumps({"ok": False, "error": "RuntimeError: queue pod is not ready"})
            rec = self.world.restart(self.queue.name, by="agent")
            self.queue.say(now, "Redis is starting (pod deleted by frappe-admin /admin/redis-queue-restart)")
            return 200, json.dumps({"ok": True, "restart": {"old_uid": rec.old_uid, "new_uid": rec.new_uid}})
        if route == "/admin/redis-config" and method == "GET":
            if not (self.queue.ready(now) and self.cache.ready(now)):
                return 500, json.dumps({"ok": False, "error": "ConnectionRefusedError: redis not ready"})
            keys = ("appendfsync", "appendonly", "maxmemory", "maxmemory-policy", "min-replicas-to-write")
            acl = self.queue.acl.get("default")
            return 200, json.dumps({
                "schema_version": 1, "engine": "redis", "service": "redis-queue",
                "settings": {k: self.queue.get(k) for k in keys},
                "cache_settings": {k: self.cache.get(k) for k in keys},
                "acl_state": {"user": "default", "command_rules": sorted(acl.rules) if acl else []}})
        return 404, json.dumps({"detail": "Not Found"})

    def _queue_repair(self, operation: str, value: str | None, now: float) -> tuple[int, str, float]:
        """frappe-admin's POST /admin/redis-queue-repair (SW substrates/frappe/frappe-admin-sidecar/server.py): one
        allowlisted queue repair, applied to the running broker (CONFIG SET / ACL SETUSER), then persisted by
        rewriting that flag in the queue's start script (here: the extraFlags it is rendered from). Returns
        (status, JSON body, seconds)."""
        q = self.queue
        try:
            runtime = queue_runtime_change(operation, value)
        except ValueError as e:
            return 400, json.dumps({"ok": False, "error": str(e)}), 0.1
        if not q.ready(now):
            return 500, json.dumps({"ok": False, "error": "ConnectionRefusedError: [Errno 111] Connect call "
                                    "failed ('redis-queue', 6379)"}), 2.0
        try:
            q.command(runtime, now)
        except RedisError as e:
            return 500, json.dumps({"ok": False, "error": f"RuntimeError: Redis command failed: {e}"}), 0.3
        # The runtime change has landed; a start script the rewrite cannot apply to leaves it runtime-only, as
        # the real sidecar does (it persists after applying).
        flags = [str(f) for f in (self.release.get(f"{q.values_path}.master.extraFlags", []) or [])]
        try:
            rewritten = rewrite_queue_flags(flags, operation, value)
        except RuntimeError as e:
            return 500, json.dumps({"ok": False, "error": f"RuntimeError: {e}"}), 0.5
        node: dict[str, Any] = {}
        cur = node
        for part in f"{q.values_path}.master".split("."):
            cur = cur.setdefault(part, {})
        cur["extraFlags"] = rewritten
        self.release.upgrade(node, reuse=True, reset=False, now=now,
                             description=f"frappe-admin redis-queue-repair {operation}")
        q.say(now, f"frappe-admin: {operation} repaired and persisted in start-master.sh (no restart)")
        # appendonly waits for the AOF base rewrite before it answers.
        dur = 3.0 if operation == "appendonly" else 1.0
        return 200, json.dumps({"ok": True, "operation": operation, "value": value, "persisted": True}), dur

    def _resolve_db(self, host: str) -> MariaDB | None:
        return self.db if host in ("mariadb", "mariadb.default.svc.cluster.local", self.db.pod) else None

    def _resolve_redis(self, host: str) -> RedisServer | None:
        for r in (self.queue, self.cache):
            if host in r.hosts or host == r.pod or host == f"{r.name}-headless":
                return r
        return None

    def _mysql_exec(self, argv: list[str], stdin: str, now: float) -> tuple[str, str, int]:
        if argv and argv[0].rsplit("/", 1)[-1] in ("mysql", "mariadb"):
            o, e, c, _ = mysql_client(argv, stdin, {"USER": "root"}, lambda h: self.db if h in (
                "localhost", "127.0.0.1", "mariadb") else None, now, default_host="localhost")
            return o, e, c
        if argv[:2] == ["cat", "/opt/bitnami/mariadb/conf/my.cnf"]:
            body = "[mysqld]\n" + "".join(f"{k}={v}\n" for k, v in sorted(self.db.mycnf.data.items()))
            return body, "", 0
        return Component.exec(self.db, argv, stdin, now)

    def _redis_exec(self, r: RedisServer) -> Callable[[list[str], str, float], tuple[str, str, int]]:
        def run(argv: list[str], stdin: str, now: float) -> tuple[str, str, int]:
            prog = argv[0].rsplit("/", 1)[-1] if argv else ""
            if prog == "redis-cli":
                o, e, c, _ = redis_cli(argv, stdin, lambda h: r if h in ("127.0.0.1", "localhost") or h in r.hosts
                                       else self._resolve_redis(h), now)
                return o, e, c
            if prog == "cat" and len(argv) == 2:
                if argv[1] == "/opt/bitnami/scripts/start-scripts/start-master.sh":
                    return start_script(r), "", 0
                if argv[1] == "/opt/bitnami/redis/etc/redis.conf":
                    return conf_text(r.container_conf), "", 0
                if argv[1] == "/opt/bitnami/redis/mounted-etc/redis.conf":
                    return conf_text(r.render()[0]), "", 0
                return "", f"cat: {argv[1]}: No such file or directory\n", 1
            return Component.exec(r, argv, stdin, now)

        return run

    def _after_upgrade(self, wait: bool) -> float:
        """Roll every pod whose rendered input changed; with --wait, how long until they are ready."""
        now = self.world.clock.now()
        longest = 0.0
        for r in (self.queue, self.cache):
            conf, flags = r.render()
            if flags != r.rendered_flags or conf != _rendered_conf(r) or r.rendered_replicas() != r.replica_count:
                self.world.restart(r.name, by="agent")
                r.say(now, f"Redis is starting (rolled by helm upgrade to revision {self.release.revision})")
                longest = max(longest, r.ready_at - now)
        return longest if wait else 0.0


def _rendered_conf(r: RedisServer) -> dict[str, str]:
    # What the pod booted with is what the ConfigMap held then; CONFIG REWRITE edits do not count.
    return r.booted_conf


def _short(reason: str) -> str:
    return reason.split(" ", 1)[0] if reason else ""


def _helm_ts(t: float) -> str:
    return _ts(t).replace("T", " ")[:19] + " +0000 UTC"
