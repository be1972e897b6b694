"""The Saleor substrate of the twin (Incident-Arena task 006): saleor-api, its worker, PostgreSQL and the rest.

Registered as substrate "saleor"; `arena.twin.engine.build_twin` builds it from a scenario's `twin.spec`
(validated by `SaleorSpec` below). It wires:

- `postgres` (StatefulSet): a `PostgresServer` with settings in layers (arena/twin/saleor/postgres.py), the
  Saleor roles and database, the protected tables and replication slots. Its catalog and files are durable; a
  restart kills every backend.
- `saleor-api` (Deployment): the GraphQL API and its connection pool of saleor_app sessions
  (arena/twin/saleor/pool.py). It serves the load: each request holds a pooled connection for its statements,
  and a statement longer than the connection's inherited statement_timeout is cancelled (SQLSTATE 57014).
- `saleor-worker` (a saleor_worker_db pool), `valkey`, `rabbitmq`: present and observable, healthy.
- The operator's `psql` (also through `kubectl exec postgres-0 -- psql`).

The fault of ia-006 lands in `inject` by running the faultInit job's SQL through the same SQL front end the
operator uses. Nothing here knows what the fix is: requests fail or succeed by the timeout each connection
carries, which comes from the catalog at the moment that connection was opened.
"""

from __future__ import annotations

import hashlib
import math
import random
from typing import Any, Callable, Mapping

from pydantic import BaseModel, ConfigDict, Field

from arena.twin.ledger import bucket_of
from arena.twin.load import Phase
from arena.twin.mech import ERROR, OK, Mode, chain
from arena.twin.saleor.pool import ApiConnectionPool
from arena.twin.pg.postgres import PostgresServer, Table, setting_ms
from arena.twin.pg.psql import run_psql
from arena.twin.pg.sql import SqlSession
from arena.twin.shell import Invocation
from arena.twin.world import Component, Substrate, register_substrate

__all__ = ["SaleorSpec", "SaleorSubstrate", "PostgresComponent", "SaleorApi", "probe_fresh_session"]


# ------------------------------------------------------------------------------------------------ the spec
class RoleSpec(BaseModel):
    """A PostgreSQL role of the deployment."""

    model_config = ConfigDict(extra="forbid")

    name: str
    password: str = ""
    superuser: bool = False
    connlimit: int = -1


class PostgresSpec(BaseModel):
    """The database server: postgresql.conf, roles, databases, catalog settings, data and slots."""

    model_config = ConfigDict(extra="forbid")

    conf: dict[str, str] = Field(default_factory=dict)
    roles: list[RoleSpec]
    databases: list[str]
    # Healthy catalog settings present before the incident: {database, role, name, value} ('' = all).
    db_role_settings: list[dict[str, str]] = Field(default_factory=list)
    replication_slots: list[dict[str, Any]] = Field(default_factory=list)
    orders: int = 400
    products: int = 60
    variants_per_product: int = 3
    boot_s: float = 8.0


class PoolSpec(BaseModel):
    """saleor-api's pool of application sessions."""

    model_config = ConfigDict(extra="forbid")

    role: str = "saleor_app"
    database: str = "saleor"
    min_size: int = 3
    max_size: int = 20
    idle_timeout_s: float = 20.0
    max_lifetime_s: float | None = None
    spill: float = 0.002


class StatementSpec(BaseModel):
    """One database statement of a request: lognormal duration (median, sigma) as the database runs it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    median_ms: float
    sigma: float = 0.4


class RequestSpec(BaseModel):
    """What one driver's request does: app time outside the database, then its statements in order."""

    model_config = ConfigDict(extra="forbid")

    endpoint: str
    app_ms: float
    app_sigma: float = 0.2
    statements: list[StatementSpec]
    creates_order: bool = False


class FaultSpec(BaseModel):
    """The faultInit job: SQL run as the admin role at `at_s`, and the sentinel table it writes."""

    model_config = ConfigDict(extra="forbid")

    at_s: float = 0.0
    sql: list[str] = Field(default_factory=list)
    sentinel_table: str = "sre_world_fault_ready"


class SaleorSpec(BaseModel):
    """A scenario's `twin.spec` for the Saleor substrate."""

    model_config = ConfigDict(extra="forbid")

    namespace: str = "saleor"
    admin_role: str = "postgres"
    postgres: PostgresSpec
    api_pool: PoolSpec = Field(default_factory=PoolSpec)
    worker_pool_size: int = 2
    api_boot_s: float = 20.0
    requests: dict[str, RequestSpec]
    fault: FaultSpec | None = None
    probe_ms: float = 750.0  # the grader's fresh-session probe statement (truth only)


# ------------------------------------------------------------------------------------------------ helpers
_Z = (-1.645, -0.755, 0.0, 0.674, 1.282, 1.881, 2.576)  # quantiles at 0.05 .225 .5 .75 .9 .97 .995
_W = (0.10, 0.25, 0.30, 0.20, 0.10, 0.04, 0.01)  # the probability mass each point stands for
_Z3 = (-1.15, 0.0, 1.15)
_W3 = (0.25, 0.5, 0.25)


def _lognormal_points(median: float, sigma: float, z=_Z, w=_W) -> list[tuple[float, float]]:
    return [(wi, median * math.exp(sigma * zi)) for zi, wi in zip(z, w)]


def _stmt_modes(st: StatementSpec, timeout_ms: float) -> list[Mode]:
    """A statement on a session with statement_timeout: done after its duration, or cancelled at the timeout."""
    out = []
    for w, d in _lognormal_points(st.median_ms, st.sigma):
        if timeout_ms > 0 and d > timeout_ms:
            out.append(Mode(w, timeout_ms, ERROR, "57014 canceling statement due to statement timeout"))
        else:
            out.append(Mode(w, d))
    return out


_LAST_QUERY = {
    False: 'SELECT "product_product"."id", "product_product"."name" FROM "product_product" WHERE '
           '"product_product"."channel_id" = $1 ORDER BY "product_product"."slug" LIMIT 21',
    True: 'INSERT INTO "order_order" ("id", "number", "status", "user_email", "total_gross_amount", '
          '"created_at") VALUES ($1, $2, $3, $4, $5, $6)',
}


def _digest(*parts: Any) -> str:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()


def probe_fresh_session(server: PostgresServer, role: str, database: str, statement_ms: float) -> bool:
    """Would a brand-new session of role on database complete a statement of `statement_ms`?"""
    value, _ = server.fresh_effective(role, database, "statement_timeout")
    t = setting_ms("statement_timeout", value)
    return t <= 0 or t > statement_ms


# ------------------------------------------------------------------------------------------------ components
class PostgresComponent(Component):
    """The postgres StatefulSet: the server model; a restart kills every backend and applies postmaster settings."""

    kind = "StatefulSet"
    container = "postgres"

    def __init__(self, server: PostgresServer, spec: SaleorSpec, **kw):
        super().__init__("postgres", hosts=("postgres", "postgres:5432"), stateful=True, restartable=False,
                         boot_s=spec.postgres.boot_s, namespace=spec.namespace, **kw)
        self.server = server
        self.spec = spec
        server.log_sink = lambda t, line: self.say(t, line)
        self.baseline_fp: dict[str, Any] | None = None
        self.cancellations = 0.0

    def reset_runtime(self) -> None:
        if self.generation > 0 and self.world is not None:
            self.server.restart(self.world.clock.now())

    def ready(self, now: float) -> bool:
        return now >= self.ready_at

    def exec(self, argv: list[str], stdin: str, now: float) -> tuple[str, str, int]:
        if argv and argv[0] == "psql":
            # Inside the pod psql reaches the local socket, where pg_hba trusts local connections.
            o = run_psql(argv[1:], self.server, now=lambda: now, stdin=stdin, passwords_required=False,
                         client_addr="[local]", local_socket=True)
            return o.stdout, o.stderr, o.exit_code
        if argv and argv[0] in ("cat",) and len(argv) > 1 and argv[1].endswith("postgresql.auto.conf"):
            lines = ["# Do not edit this file manually!", "# It will be overwritten by the ALTER SYSTEM command."]
            lines += [f"{k} = '{v}'" for k, v in sorted(self.server.auto_conf.items())]
            return "\n".join(lines) + "\n", "", 0
        if argv and argv[0] in ("env", "printenv"):
            return "POSTGRES_DB=saleor\nPGDATA=/var/lib/postgresql/data\n", "", 0
        return super().exec(argv, stdin, now)

    def truth(self) -> dict[str, Any]:
        out = super().truth()
        s = self.server
        fp = s.settings_fingerprint()
        for (d, r), settings in s.db_role_setting.items():
            for k, v in settings.items():
                out[f"catalog.{d or '*'}/{r or '*'}.{k}"] = v
        for k, v in s.auto_conf.items():
            out[f"auto_conf.{k}"] = v
        for k, (v, _) in s.applied.items():
            out[f"applied.{k}"] = v
        out["max_connections"] = fp["max_connections"]
        out["pending.max_connections"] = fp["pending_max_connections"]
        for r, n in fp["role_connlimits"].items():  # type: ignore[union-attr]
            out[f"connlimit.role.{r}"] = n
        for d, n in fp["database_connlimits"].items():  # type: ignore[union-attr]
            out[f"connlimit.database.{d}"] = n
        out["settings_fingerprint"] = _digest(sorted(fp.items()))
        # Timeout scopes other than the fault's own (role saleor_app in database saleor) and the global value.
        out["timeout_scopes_other"] = _digest(sorted(
            (f"{d}/{r}", v.get("statement_timeout")) for (d, r), v in s.db_role_setting.items()
            if (d, r) != (self.spec.api_pool.database, self.spec.api_pool.role) and "statement_timeout" in v))
        out["statement_timeout.global"] = s._file_value("statement_timeout")[0]
        data = s.data_fingerprint()
        for name, t in s.tables.items():
            out[f"data.{name}.count"] = len(t.rows)
            out[f"data.{name}.indexes"] = ",".join(t.indexes)
        if self.baseline_fp is not None:
            out.update(self._data_checks(data))
        out["replication_slots"] = _digest(data["replication_slots"])
        pool = self.spec.api_pool
        out["probe.fresh_app_session_ok"] = probe_fresh_session(s, pool.role, pool.database, self.spec.probe_ms)
        out["fresh_app_session.statement_timeout_ms"] = setting_ms(
            "statement_timeout", s.fresh_effective(pool.role, pool.database, "statement_timeout")[0])
        live = [b for b in s.live_backends() if b.role == pool.role]
        short = [b for b in live if 0 < s.statement_timeout_ms(b) <= self.spec.probe_ms]
        out["sessions.app.live"] = len(live)
        out["sessions.app.below_probe"] = len(short)
        out["cancellations_57014"] = round(self.cancellations, 3)
        out["sentinel_rows"] = len(s.extra_tables.get(self.spec.fault.sentinel_table, Table("x", ())).rows) \
            if self.spec.fault else 0
        return out

    def _data_checks(self, now_fp: dict[str, Any]) -> dict[str, Any]:
        """Protected data vs the pre-agent baseline: counts never drop, pre-agent rows byte-equal."""
        out: dict[str, Any] = {}
        base = self.baseline_fp or {}
        for name, b in base.items():
            if name == "replication_slots":
                continue
            cur = now_fp.get(name, {"count": 0, "digests": {}, "indexes": []})
            out[f"data.{name}.count_not_decreased"] = cur["count"] >= b["count"]
            same = all(cur["digests"].get(i) == d for i, d in b["digests"].items())
            out[f"data.{name}.pre_agent_rows_equal"] = same
            out[f"data.{name}.indexes_unchanged"] = cur["indexes"] == b["indexes"]
        out["data.replication_slots_unchanged"] = now_fp["replication_slots"] == base.get("replication_slots")
        return out

    def config(self) -> dict[str, Any]:
        """Operator-changeable PostgreSQL settings, keyed by layer and scope (the changed-keys diff reads them)."""
        s = self.server
        out: dict[str, Any] = {}
        for (d, r), settings in s.db_role_setting.items():
            for k, v in settings.items():
                out[f"db_role_setting.{d or '*'}/{r or '*'}.{k}"] = v
        for k, v in s.auto_conf.items():
            out[f"auto_conf.{k}"] = v
        for r in s.roles.values():
            out[f"role.{r.name}.connlimit"] = r.connlimit
        for d in s.databases.values():
            out[f"database.{d.name}.connlimit"] = d.connlimit
        return out


class SaleorApi(Component):
    """saleor-api: GraphQL over a pool of saleor_app sessions; pod restarts reopen every connection."""

    def __init__(self, server: PostgresServer, spec: SaleorSpec, **kw):
        super().__init__("saleor-api", hosts=("saleor-api", "saleor-api:8000"), restartable=False,
                         boot_s=spec.api_boot_s, namespace=spec.namespace, **kw)
        p = spec.api_pool
        self.pool = ApiConnectionPool(server, role=p.role, database=p.database, min_size=p.min_size,
                                      max_size=p.max_size, idle_timeout_s=p.idle_timeout_s,
                                      max_lifetime_s=p.max_lifetime_s, spill=p.spill)
        password = next((r.password for r in spec.postgres.roles if r.name == p.role), "")
        self.pod_env = {"DATABASE_URL": f"postgres://{p.role}:{password}@postgres:5432/{p.database}",
                        "DB_CONN_MAX_AGE": "None" if p.max_lifetime_s is None else str(int(p.max_lifetime_s)),
                        "DATABASE_CONNECTION_POOL_MIN": str(p.min_size),
                        "DATABASE_CONNECTION_POOL_MAX": str(p.max_size)}

    def reset_runtime(self) -> None:
        self.pool.close_all()

    def next_change(self, now: float) -> float:
        return min(super().next_change(now), self.pool.next_change(now))

    def exec(self, argv: list[str], stdin: str, now: float) -> tuple[str, str, int]:
        if argv and argv[0] in ("env", "printenv"):
            env = {"HOME": "/home/saleor", "PYTHONUNBUFFERED": "1", "DJANGO_SETTINGS_MODULE": "saleor.settings",
                   **self.pod_env}
            if len(argv) > 1:
                v = env.get(argv[1])
                return (v + "\n", "", 0) if v is not None else ("", "", 1)
            return "".join(f"{k}={v}\n" for k, v in sorted(env.items())), "", 0
        return super().exec(argv, stdin, now)

    def http(self, method: str, path: str, body: str, now: float) -> tuple[int, str]:
        if path.startswith("/health"):
            return 200, '{"status":"ok"}'
        if path.startswith("/graphql"):
            return 200, '{"data":{"shop":{"name":"Saleor e-commerce"}}}'
        return 404, '{"detail":"Not Found"}'


class QuietComponent(Component):
    """A healthy workload the incident does not touch (valkey, rabbitmq, the loadgen)."""


class SaleorWorker(Component):
    """saleor-worker: Celery consumers holding long-lived saleor_worker_db sessions."""

    def __init__(self, server: PostgresServer, size: int, **kw):
        super().__init__("saleor-worker", **kw)
        self.server = server
        self.size = size
        self.pids: list[int] = []

    def reset_runtime(self) -> None:
        for pid in self.pids:
            self.server.disconnect(pid)
        self.pids = []

    def keep_connected(self, now: float) -> None:
        if len(self.pids) == self.size and all(p in self.server.backends for p in self.pids):
            return
        self.pids = [p for p in self.pids if p in self.server.backends]
        while len(self.pids) < self.size:
            try:
                b = self.server.connect("saleor_worker_db", "saleor", now=now, application_name="celery",
                                        client_addr="10.42.0.31")
            except Exception:  # noqa: BLE001 - a refused connection is retried next segment
                return
            self.pids.append(b.pid)


# ------------------------------------------------------------------------------------------------ substrate
@register_substrate
class SaleorSubstrate(Substrate):
    """saleor-api + saleor-worker + postgres + valkey + rabbitmq, serving browse and checkout_readback."""

    name = "saleor"

    def build(self) -> None:
        spec = SaleorSpec.model_validate(dict(self.spec))
        self.model = spec
        server = PostgresServer(conf_file=spec.postgres.conf)
        for r in spec.postgres.roles:
            server.add_role(r.name, superuser=r.superuser, password=r.password, connlimit=r.connlimit)
        for d in spec.postgres.databases:
            server.add_database(d)
        for s in spec.postgres.db_role_settings:
            server.set_catalog(s.get("database", ""), s.get("role", ""), s["name"], s["value"])
        server.replication_slots = [{k: str(v) if not isinstance(v, bool) else v for k, v in sl.items()}
                                    for sl in spec.postgres.replication_slots]
        self._seed_data(server, spec)
        self.server = server
        ns = spec.namespace
        self.pg = self.world.add(PostgresComponent(server, spec))
        self.api = self.world.add(SaleorApi(server, spec))
        self.worker = self.world.add(SaleorWorker(server, spec.worker_pool_size, namespace=ns, restartable=False))
        for name, hosts in (("valkey", ("valkey", "valkey:6379")), ("rabbitmq", ("rabbitmq", "rabbitmq:5672")),
                            ("loadgen", ("loadgen", "loadgen:9100"))):
            self.world.add(QuietComponent(name, hosts=hosts, namespace=ns, restartable=False,
                                          stateful=name != "loadgen"))
        self._order_carry = 0.0
        self._mode_cache: dict[tuple[str, float], list[Mode]] = {}
        self._holds = {d: self._mean_hold(r) for d, r in spec.requests.items()}
        self._next_order = len(server.tables["order_order"].rows) + 1

    def _seed_data(self, server: PostgresServer, spec: SaleorSpec) -> None:
        # The shop's catalogue and order history, derived from a fixed seed: the data the incident must keep.
        rng = random.Random("saleor-catalogue")
        products = Table("product_product", ("id", "name", "slug", "product_type_id", "updated_at"),
                         indexes=("product_product_pkey", "product_product_slug_key",
                                  "product_product_search_gin"))
        variants = Table("product_productvariant", ("id", "product_id", "sku", "name", "price_amount"),
                         indexes=("product_productvariant_pkey", "product_productvariant_sku_key"))
        for i in range(1, spec.postgres.products + 1):
            products.rows.append((str(i), f"Product {i:03d}", f"product-{i:03d}", str(1 + i % 5),
                                  "2026-10-01 09:00:00+00"))
            for j in range(spec.postgres.variants_per_product):
                vid = (i - 1) * spec.postgres.variants_per_product + j + 1
                variants.rows.append((str(vid), str(i), f"SKU-{i:03d}-{j}", ["S", "M", "L", "XL"][j % 4],
                                      f"{rng.randint(500, 9900) / 100:.2f}"))
        orders = Table("order_order", ("id", "number", "status", "user_email", "total_gross_amount", "created_at"),
                       indexes=("order_order_pkey", "order_order_number_key", "order_order_user_email_idx"))
        for i in range(1, spec.postgres.orders + 1):
            orders.rows.append((str(i), str(1000 + i), rng.choice(["fulfilled", "unfulfilled", "fulfilled"]),
                                f"customer{rng.randint(1, 300)}@example.com", f"{rng.randint(1000, 40000) / 100:.2f}",
                                "2026-10-13 12:00:00+00"))
        server.tables = {t.name: t for t in (orders, products, variants)}

    # ---------------------------------------------------------------- fault
    def inject(self, now: float) -> None:
        f = self.model.fault
        if f is None:
            return
        if f.at_s > now:
            raise ValueError("the Saleor fault lands at episode start; at_s must be 0")
        self.pg.baseline_fp = None
        admin = self.server.connect(self.model.admin_role, "saleor", now=now, application_name="fault-init")
        session = SqlSession(self.server, admin, lambda: now)
        for stmt in f.sql:
            session.execute(stmt)
        self.server.disconnect(admin.pid)
        # The job's ready sentinel (row count >= 1), outside the protected tables.
        self.server.extra_tables[f.sentinel_table] = Table(f.sentinel_table, ("ready", "at"), [("1", str(now))])
        self.pg.baseline_fp = self.server.data_fingerprint()

    # ---------------------------------------------------------------- load
    def serve(self, rates: Mapping[str, float], phase: Phase, t0: float, t1: float) -> dict[str, list[Mode]]:
        now = t0
        pg_up = self.pg.ready(now)
        api_up = self.api.ready(now)
        if pg_up:
            self.worker.keep_connected(now)
        if not api_up:
            return {d: [Mode(1.0, 3.0, ERROR, "503 saleor-api not ready", conn=True)] for d in rates}
        if not pg_up:
            self.api.pool.close_all()
            return {d: [Mode(1.0, 25.0, ERROR, "OperationalError: connection refused", conn=True)] for d in rates}
        # Concurrency offered to the pool: every request holds its connection for its whole duration.
        holds = {d: self._holds[d] for d in rates if d in self._holds}
        total_rps = sum(rates.get(d, 0.0) for d in holds)
        conc = sum(rates[d] * holds[d] / 1000.0 for d in holds)
        shares, fresh, unserved = self.api.pool.shares(conc, now, t1, total_rps)
        groups: dict[float, float] = {}
        for backend, share in shares:
            # What pg_stat_activity shows for the pool: a session busy more than half the time reads as active.
            busy = share * conc
            backend.state = "active" if busy >= 0.5 else "idle"
            backend.query = _LAST_QUERY[busy >= 0.3]
            backend.query_start = backend.state_change = t0
            if share <= 0:
                continue
            t = self.server.statement_timeout_ms(backend)
            groups[t] = groups.get(t, 0.0) + share
        if fresh > 0:
            pool = self.model.api_pool
            t = setting_ms("statement_timeout", self.server.fresh_effective(pool.role, pool.database,
                                                                           "statement_timeout")[0])
            groups[t] = groups.get(t, 0.0) + fresh
        # Requests in flight on sessions killed since the last segment fail once; spread over this segment, and
        # what a short segment's arrivals cannot carry over the next ones (a kill's losses never vanish with it).
        lost = self.api.pool.take_inflight_lost()
        arrivals = total_rps * (t1 - t0)
        lost_share = min(1.0, lost / arrivals) if arrivals > 0 else 0.0
        self.api.pool.inflight_lost += max(0.0, lost - lost_share * arrivals)
        out: dict[str, list[Mode]] = {}
        cancelled_rps = 0.0
        for d, rate in rates.items():
            req = self.model.requests.get(d)
            if req is None:
                out[d] = [Mode(1.0, 2.0, ERROR, "404 unknown endpoint")]
                continue
            modes: list[Mode] = []
            for timeout_ms, share in sorted(groups.items()):
                for m in self._request_modes(d, req, timeout_ms):
                    modes.append(Mode(m.weight * share, m.latency_ms, m.status, m.reason, m.conn))
            if lost_share > 0:
                modes = [Mode(m.weight * (1.0 - lost_share), m.latency_ms, m.status, m.reason, m.conn) for m in modes]
                modes.append(Mode(lost_share, 40.0, ERROR, "OperationalError: terminating connection due to "
                                                           "administrator command", conn=True))
            if unserved > 0:
                # No connection could be opened (connection limits): Django raises at connect.
                modes.append(Mode(unserved, 20.0, ERROR, "OperationalError: too many connections", conn=True))
            out[d] = modes
            bad = sum(m.weight for m in modes if m.reason.startswith("57014"))
            cancelled_rps += rate * bad
            if req.creates_order:
                ok = sum(m.weight for m in modes if m.status == OK)
                self._add_orders(rate * ok * (t1 - t0), t1)
        if cancelled_rps > 0:
            n = cancelled_rps * (t1 - t0)
            self.pg.cancellations += n
            if n >= 0.5:
                self.pg.say(t0, 'ERROR:  canceling statement due to statement timeout')
                self.pg.say(t0, 'STATEMENT:  INSERT INTO "order_order" ("private_metadata", "metadata", "token", '
                                '"number", "status", "user_email", ...) VALUES (...)')
                self.api.say(t0, f"ERROR django.request Internal Server Error: /graphql/ (checkoutComplete) "
                                 f"django.db.utils.OperationalError: canceling statement due to statement timeout "
                                 f"[x{max(1, int(round(n)))} over {t1 - t0:.0f}s]")
        return out

    def _request_modes(self, driver: str, req: RequestSpec, timeout_ms: float) -> list[Mode]:
        """How one request ends on a session with this statement_timeout (cached: it depends on nothing else).

        Modes whose latencies fall in the same histogram bucket are merged, so a segment records a handful of
        modes however many statements a request runs.
        """
        key = (driver, timeout_ms)
        hit = self._mode_cache.get(key)
        if hit is not None:
            return hit
        hops = [[Mode(w, v) for w, v in _lognormal_points(req.app_ms, req.app_sigma, _Z3, _W3)]]
        hops += [_stmt_modes(st, timeout_ms) for st in req.statements]
        merged: dict[tuple, list[float]] = {}
        for m in chain(*hops):
            k = (bucket_of(m.latency_ms) // 2, m.status, m.reason)
            acc = merged.setdefault(k, [0.0, 0.0])
            acc[0] += m.weight
            acc[1] += m.weight * m.latency_ms
        out = [Mode(w, lw / w, status, reason) for (_, status, reason), (w, lw) in sorted(merged.items()) if w > 0]
        self._mode_cache[key] = out
        return out

    def _mean_hold(self, req: RequestSpec) -> float:
        app = req.app_ms * math.exp(req.app_sigma ** 2 / 2)
        return app + sum(st.median_ms * math.exp(st.sigma ** 2 / 2) for st in req.statements)

    def _add_orders(self, expected: float, t: float) -> None:
        # New orders from successful checkouts (allowed by the incident); appended after the pre-agent rows.
        self._order_carry += expected
        n = int(self._order_carry)
        if n <= 0:
            return
        self._order_carry -= n
        first = self._next_order
        self._next_order += n
        stamp = f"t={t:.1f}"
        self.server.tables["order_order"].rows.extend(
            (str(i), str(1000 + i), "unfulfilled", "loadgen@example.com", "42.00", stamp) for i in range(first, first + n))

    # ---------------------------------------------------------------- operator programs
    def commands(self) -> dict[str, Callable]:
        return {"psql": self._psql}

    def _psql(self, inv: Invocation) -> tuple[str, str, int, float]:
        o = run_psql(inv.argv[1:], self.server, now=self.world.clock.now, stdin=inv.stdin, env=inv.env,
                     client_addr="10.42.0.9")
        # pg_sleep and cancelled statements take their time on the world's clock; a connect costs a little.
        return o.stdout, o.stderr, o.exit_code, 0.05 + o.duration_s
