"""Ground truth of the live stack for the gates: what the twin's `world.truth()` / `world.config()` give, read from
the real servers with superuser access (as Incident-Arena's grader reads its cluster), never through the agent's
shell and never by the guard.

The keys follow the twin's (`arena.twin.saleor.substrate.PostgresComponent.truth`, `arena.twin.slack.message`,
`arena.twin.frappe`), so that a scenario's grader checks (`arena.gates.holds`) evaluate the same way on both.
Every reader has one interface: `truth()`, `config()`, `mark_baseline()` (the grader's record at episode start),
`fixed_traffic(spec)` (the challenge's traffic, sent to the real services) and `not_modelled` (globs of state the
live stack does not run, such as ia-018's pgbouncer: checks on it are reported, not evaluated).

- `SaleorTruth` (ia-006): the fresh-session probe is a real one: a new `saleor_app` session runs a 750 ms statement.
- `SlackTruth` (ia-018): lock holders from pg_locks + pg_stat_activity, the timeout a brand-new `app` session
  inherits (SHOW in a real new session), the settings layers (pg_file_settings, pg_db_role_setting), row digests
  of messages/outbox, and svc-message's runtime config from its admin API.
- `FrappeTruth` (ia-004): grants from information_schema, what the site account can do (a real INSERT/UPDATE/DELETE
  rolled back), Redis CONFIG GET and the values file the broker's redis.conf is rendered from, the job hashes.

Called by `arena.live.agreement` (and the live episode's LiveWorld).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import urllib.error
import urllib.request
import uuid
from typing import Any, Mapping

import psycopg
import pymysql
import redis
import yaml

from arena.live.apps.base import rq_keys
from arena.live.cluster import configmap_name
from arena.live.kubeapi.store import resource_for
from arena.twin.slack.message import LEAK_AGE_S

__all__ = ["SaleorTruth", "SlackTruth", "FrappeTruth", "TRUTH_READERS"]

PROTECTED_TABLES = ("order_order", "product_product", "product_productvariant")


# PostgreSQL's message for SQLSTATE 57014 (query_canceled), as its log writes it.
_CANCELLED = re.compile(rb"ERROR:\s+canceling statement due to (?:statement timeout|user request)")
# At most this much of the server log is read per snapshot; the rest is read by the next ones.
_LOG_READ_MAX = 8 << 20


def _digest(*parts: Any) -> str:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()


def _ms(value: str) -> float:
    """A PostgreSQL duration setting as shown by SHOW (`150ms`, `30s`, `0`) in milliseconds."""
    v = value.strip()
    for unit, factor in (("ms", 1.0), ("min", 60_000.0), ("s", 1000.0), ("h", 3_600_000.0), ("d", 86_400_000.0)):
        if v.endswith(unit):
            return float(v[: -len(unit)]) * factor
    return float(v or 0)


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> dict[str, Any]:
    """Nested mappings as dotted keys; lists and scalars are leaves (as the twin's Helm stores)."""
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value
    return out


def _http_json(endpoint, method: str, path: str, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
    """One JSON request to an app of the stack by its loopback address (the grader's own channel, not the shell)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{endpoint.address}:{endpoint.port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"null")
        except ValueError:
            return e.code, None
    except (OSError, ValueError):
        return 0, None


class SaleorTruth:
    """PostgreSQL and saleor-api truth for ia-006 on a live stack."""

    not_modelled: tuple[str, ...] = ()

    def __init__(self, stack, *, role: str = "saleor_app", database: str = "saleor", password: str = "agentrepair-app",
                 probe_ms: float = 750.0):
        self.stack = stack
        self.role, self.database, self.password, self.probe_ms = role, database, password, probe_ms
        self.pg = stack.servers["postgres"]
        self.baseline_fp: dict[str, Any] | None = None
        self._log_offset, self._cancelled = 0, 0

    def _connect(self, database: str, user: str = "postgres", password: str = "") -> psycopg.Connection:
        ep = self.pg.endpoint
        return psycopg.connect(host=ep.address, port=ep.port, dbname=database, user=user, password=password,
                               autocommit=True, connect_timeout=5, application_name="grader")

    def probe(self) -> tuple[bool, float]:
        """Does a brand-new application session complete a `probe_ms` statement? And its statement_timeout."""
        with self._connect(self.database, self.role, self.password) as c:
            timeout = _ms(c.execute("SHOW statement_timeout").fetchone()[0])
            try:
                c.execute("SELECT pg_sleep(%s)", (self.probe_ms / 1000,))
                return True, timeout
            except psycopg.errors.QueryCanceled:
                return False, timeout

    def data_fingerprint(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        with self._connect(self.database) as c:
            for t in PROTECTED_TABLES:
                rows = c.execute(f"SELECT id, md5(t::text) FROM {t} t").fetchall()
                idx = [r[0] for r in c.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s ORDER BY 1",
                                               (t,)).fetchall()]
                out[t] = {"count": len(rows), "digests": dict(rows), "indexes": idx}
            out["replication_slots"] = c.execute(
                "SELECT slot_name, plugin, slot_type, database FROM pg_replication_slots ORDER BY 1").fetchall()
        return out

    def mark_baseline(self) -> None:
        """The pre-agent data, as the grader records it at episode start."""
        self.baseline_fp = self.data_fingerprint()

    def _catalog(self, c: psycopg.Connection) -> dict[tuple[str, str], dict[str, str]]:
        rows = c.execute(
            "SELECT coalesce(d.datname, '*'), coalesce(r.rolname, '*'), s.setconfig FROM pg_db_role_setting s "
            "LEFT JOIN pg_database d ON d.oid = s.setdatabase LEFT JOIN pg_roles r ON r.oid = s.setrole").fetchall()
        return {(d, r): dict(kv.split("=", 1) for kv in cfg) for d, r, cfg in rows}

    def _cancellations(self) -> int:
        """The statements the server cancelled (SQLSTATE 57014, query_canceled: a statement timeout or a cancel
        request), counted from its log since the stack started, as an operator sees the fault: ia-006's contract
        asks that a cancellation was observed. Read on from where the last read stopped, whole lines only."""
        try:
            with open(self.pg.log_path, "rb") as f:
                f.seek(self._log_offset)
                data = f.read(_LOG_READ_MAX)
        except OSError:
            return self._cancelled
        end = data.rfind(b"\n") + 1 if len(data) < _LOG_READ_MAX else len(data)
        self._log_offset += end
        self._cancelled += len(_CANCELLED.findall(data[:end]))
        return self._cancelled

    def truth(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        with self._connect("postgres") as c:
            catalog = self._catalog(c)
            for (d, r), settings in catalog.items():
                for k, v in settings.items():
                    out[f"postgres.catalog.{d}/{r}.{k}"] = v
            auto = c.execute("SELECT name, setting FROM pg_file_settings WHERE sourcefile LIKE '%%postgresql.auto.conf'"
                             " AND error IS NULL").fetchall()
            for k, v in auto:
                out[f"postgres.auto_conf.{k}"] = v
            out["postgres.max_connections"] = int(c.execute("SHOW max_connections").fetchone()[0])
            # The last line that sets it wins at the next restart: the pending value.
            pending = c.execute("SELECT setting FROM pg_file_settings WHERE name = 'max_connections' "
                                "ORDER BY seqno DESC LIMIT 1").fetchone()
            out["postgres.pending.max_connections"] = int(pending[0]) if pending else out["postgres.max_connections"]
            for r, n in c.execute("SELECT rolname, rolconnlimit FROM pg_roles WHERE rolname !~ '^pg_'").fetchall():
                out[f"postgres.connlimit.role.{r}"] = n
            for d, n in c.execute("SELECT datname, datconnlimit FROM pg_database").fetchall():
                out[f"postgres.connlimit.database.{d}"] = n
            out["postgres.timeout_scopes_other"] = _digest(sorted(
                (f"{d}/{r}", v.get("statement_timeout")) for (d, r), v in catalog.items()
                if (d, r) != (self.database, self.role) and "statement_timeout" in v))
            # The server-wide value: this superuser session on `postgres` carries no role or database setting.
            out["postgres.statement_timeout.global"] = c.execute("SHOW statement_timeout").fetchone()[0]
            live = c.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (self.role,)).fetchone()[0]
            out["postgres.sessions.app.live"] = live
        out["postgres.cancellations_57014"] = self._cancellations()
        ok, timeout = self.probe()
        out["postgres.probe.fresh_app_session_ok"] = ok
        out["postgres.fresh_app_session.statement_timeout_ms"] = timeout
        now = self.data_fingerprint()
        for t in PROTECTED_TABLES:
            out[f"postgres.data.{t}.count"] = now[t]["count"]
            out[f"postgres.data.{t}.indexes"] = ",".join(now[t]["indexes"])
        if self.baseline_fp is not None:
            for t in PROTECTED_TABLES:
                b, cur = self.baseline_fp[t], now[t]
                out[f"postgres.data.{t}.count_not_decreased"] = cur["count"] >= b["count"]
                out[f"postgres.data.{t}.pre_agent_rows_equal"] = all(
                    cur["digests"].get(i) == d for i, d in b["digests"].items())
                out[f"postgres.data.{t}.indexes_unchanged"] = cur["indexes"] == b["indexes"]
            out["postgres.data.replication_slots_unchanged"] = \
                now["replication_slots"] == self.baseline_fp["replication_slots"]
        out["postgres.restarts"] = self.stack.server_restarts.get("postgres", 0)
        sup = self.stack.supervisor
        out["saleor-api.restarts"] = sup.restarts.get("saleor-api", 0)
        return out

    def config(self) -> dict[str, Any]:
        """Operator-changeable PostgreSQL settings keyed by layer and scope (for the changed-keys diff)."""
        out: dict[str, Any] = {}
        with self._connect("postgres") as c:
            for (d, r), settings in self._catalog(c).items():
                for k, v in settings.items():
                    out[f"postgres.db_role_setting.{d}/{r}.{k}"] = v
            for k, v in c.execute("SELECT name, setting FROM pg_file_settings WHERE sourcefile LIKE "
                                  "'%%postgresql.auto.conf'").fetchall():
                out[f"postgres.auto_conf.{k}"] = v
            for r, n in c.execute("SELECT rolname, rolconnlimit FROM pg_roles WHERE rolname !~ '^pg_'").fetchall():
                out[f"postgres.role.{r}.connlimit"] = n
            for d, n in c.execute("SELECT datname, datconnlimit FROM pg_database").fetchall():
                out[f"postgres.database.{d}.connlimit"] = n
        return out


# ------------------------------------------------------------------------------------------------ slack (ia-018)
# The roles the fresh-session checks log in as, with their passwords (arena/live/substrates/slack/init.sql).
SLACK_ROLE_PASSWORDS = {"app": "app", "svc_admin": "svc_admin"}
SLACK_DATABASE = "app"


class SlackTruth:
    """PostgreSQL and svc-message truth for ia-018 on a live stack."""

    # The live slack substrate runs PostgreSQL and svc-message only: no pgbouncer, no redis, no other svc-*.
    not_modelled: tuple[str, ...] = ("pgbouncer.*", "redis.*")

    def __init__(self, stack, *, app: str = "svc-message", role: str = "message"):
        self.stack = stack
        self.app, self.role = app, role
        self.pg = stack.servers["postgres"]
        self.baseline: dict[str, Any] | None = None

    def _connect(self, database: str = SLACK_DATABASE, user: str = "postgres") -> psycopg.Connection:
        ep = self.pg.endpoint
        return psycopg.connect(host=ep.address, port=ep.port, dbname=database, user=user,
                               password=SLACK_ROLE_PASSWORDS.get(user, ""), autocommit=True, connect_timeout=5,
                               application_name="grader")

    # -- the lock leak -------------------------------------------------------------------------------------------
    def lock_holders(self, c: psycopg.Connection) -> list[int]:
        """Idle-in-transaction backends holding a channel_seq lock for more than LEAK_AGE_S (the twin's rule)."""
        return [r[0] for r in c.execute(
            "SELECT a.pid FROM pg_stat_activity a WHERE a.state = 'idle in transaction' "
            "AND now() - a.state_change > make_interval(secs => %s) AND EXISTS (SELECT 1 FROM pg_locks l "
            "WHERE l.pid = a.pid AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND l.relation = 'channel_seq'::regclass) ORDER BY 1", (LEAK_AGE_S,)).fetchall()]

    def locked_channels(self, c: psycopg.Connection) -> list[str]:
        """channel_seq rows another session holds FOR UPDATE: the rows a KEY SHARE lock must skip. KEY SHARE does
        not conflict with the app's own UPDATEs (NO KEY UPDATE), so this probe never blocks a send."""
        with c.transaction(force_rollback=True):
            c.execute("SET LOCAL lock_timeout = '1s'")
            free = {r[0] for r in c.execute("SELECT channel_id FROM channel_seq FOR KEY SHARE SKIP LOCKED").fetchall()}
            every = {r[0] for r in c.execute("SELECT channel_id FROM channel_seq").fetchall()}
        return sorted(every - free)

    def fresh_timeout_ms(self, role: str, database: str = SLACK_DATABASE) -> float:
        """idle_in_transaction_session_timeout as a brand-new session of `role` inherits it (files + catalog)."""
        with self._connect(database, role) as c:
            return _ms(c.execute("SHOW idle_in_transaction_session_timeout").fetchone()[0])

    # -- settings layers -----------------------------------------------------------------------------------------
    def _catalog(self, c: psycopg.Connection) -> dict[str, dict[str, str]]:
        rows = c.execute(
            "SELECT coalesce(d.datname, '*'), coalesce(r.rolname, '*'), s.setconfig FROM pg_db_role_setting s "
            "LEFT JOIN pg_database d ON d.oid = s.setdatabase LEFT JOIN pg_roles r ON r.oid = s.setrole").fetchall()
        return {f"{d}/{r}": dict(sorted(kv.split("=", 1) for kv in cfg)) for d, r, cfg in sorted(rows)}

    def _file(self, c: psycopg.Connection, which: str) -> dict[str, str]:
        # What the file holds. A line the running server cannot apply until a restart (max_connections) carries
        # `setting could not be applied` in `error` and is still in the file: only unparsable lines lack a name.
        rows = c.execute("SELECT name, setting FROM pg_file_settings WHERE sourcefile LIKE %s AND name IS NOT NULL "
                         "ORDER BY seqno", (f"%/{which}",)).fetchall()
        return dict(sorted(dict(rows).items()))

    def fingerprint(self, c: psycopg.Connection) -> dict[str, Any]:
        # The last line that sets it wins at the next restart: the pending value.
        pending = c.execute("SELECT setting FROM pg_file_settings WHERE name = 'max_connections' "
                            "ORDER BY seqno DESC LIMIT 1").fetchone()
        running = c.execute("SHOW max_connections").fetchone()[0]
        return {
            "conf_file": self._file(c, "postgresql.conf"),
            "auto_conf": self._file(c, "postgresql.auto.conf"),
            "db_role_setting": self._catalog(c),
            "max_connections": running,
            "pending_max_connections": pending[0] if pending else running,
            "role_connlimits": dict(c.execute("SELECT rolname, rolconnlimit FROM pg_roles WHERE rolname !~ '^pg_' "
                                              "ORDER BY 1").fetchall()),
            "database_connlimits": dict(c.execute("SELECT datname, datconnlimit FROM pg_database WHERE NOT "
                                                  "datistemplate ORDER BY 1").fetchall()),
        }

    # -- data ----------------------------------------------------------------------------------------------------
    def _rows(self, c: psycopg.Connection) -> dict[str, Any]:
        return {
            "messages": dict(c.execute("SELECT id, md5(m::text) FROM messages m").fetchall()),
            "outbox": dict(c.execute("SELECT id, md5(o::text) FROM message_dispatch_outbox o").fetchall()),
            "channel_seq": dict(c.execute("SELECT channel_id, last_seq FROM channel_seq").fetchall()),
            "max_id": c.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0],
        }

    def _accepted_writes(self, since: float) -> int:
        """Writes the load generator saw accepted and read back since `since` (its ledger)."""
        n = 0
        try:
            with open(self.stack.ledger_path) as f:
                for line in f:
                    rec = json.loads(line)
                    if rec.get("driver") == "write_readback" and rec.get("ok") and rec.get("t", 0) >= since:
                        n += 1
        except (OSError, ValueError):
            pass
        return n

    def mark_baseline(self) -> None:
        with self._connect() as c:
            rows = self._rows(c)
            # After the rows: a write sent later inserts later, so its id is above the baseline's max id (the
            # ledger's `t` is wall time at send).
            self.baseline = {**rows, "t": time.time()}

    # -- svc-message ---------------------------------------------------------------------------------------------
    def _declared_db(self) -> dict[str, Any]:
        """The role's db settings in the app's ConfigMap (what the next pod renders), read from the cluster."""
        comp = self.stack.components[self.app]
        data = self.stack.cluster.configmap_data(comp.namespace, configmap_name("app.yaml"))
        cfg = yaml.safe_load(data.get("app.yaml", "")) or {}
        return (cfg.get("roles", {}).get(self.role, {}) or {}).get("db", {}) or {}

    def _runtime_db(self) -> dict[str, Any]:
        status, body = _http_json(self.stack.endpoint(self.app), "GET", "/admin/config")
        if status != 200 or not isinstance(body, dict):
            return {}
        return (body.get("roles", {}).get(self.role, {}) or {}).get("db", {}) or {}

    def truth(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        with self._connect() as c:
            out["postgres.pg.seq_lock_holders"] = len(self.lock_holders(c))
            out["postgres.pg.seq_locked_channels"] = self.locked_channels(c)
            for k, v in self.fingerprint(c).items():
                out[f"postgres.pg.fingerprint.{k}"] = v
            for name in ("max_connections", "shared_buffers", "work_mem", "autovacuum",
                         "idle_in_transaction_session_timeout", "lock_timeout", "statement_timeout"):
                out[f"postgres.settings.{name}"] = c.execute(f"SHOW {name}").fetchone()[0]
            now = self._rows(c)
            out["postgres.data.channel_seq.count"] = len(now["channel_seq"])
            out["postgres.data.messages.total"] = len(now["messages"])
            dup = c.execute("SELECT count(*) FROM (SELECT channel_id, seq FROM messages WHERE deleted_at IS NULL "
                            "GROUP BY 1, 2 HAVING count(*) > 1) d").fetchone()[0]
            gaps = c.execute("SELECT count(*) FROM (SELECT channel_id FROM messages WHERE deleted_at IS NULL "
                             "GROUP BY 1 HAVING min(seq) <> 1 OR max(seq) <> count(DISTINCT seq)) g").fetchone()[0]
            cursors = c.execute("SELECT count(*) FROM channel_seq s WHERE s.last_seq <> (SELECT coalesce(max(seq), 0) "
                                "FROM messages m WHERE m.channel_id = s.channel_id)").fetchone()[0]
            out["postgres.pg.sequence.duplicates"] = dup
            out["postgres.pg.sequence.dense"] = dup == 0 and gaps == 0
            out["postgres.pg.sequence.cursors_consistent"] = cursors == 0
            # One publish-dispatch effect per message written: none missing, none doubled. An effect whose message
            # was deleted later still happened once (the twin's rule too), so it is no breach of this check.
            once = c.execute(
                "SELECT (SELECT count(*) FROM messages m WHERE (SELECT count(*) FROM message_dispatch_outbox o "
                "WHERE o.message_id = m.id) <> 1) + (SELECT count(*) FROM (SELECT message_id FROM "
                "message_dispatch_outbox GROUP BY 1 HAVING count(*) > 1) d)").fetchone()[0]
            lost = 0
            if self.baseline is not None:
                lost = len(set(self.baseline["outbox"]) - set(now["outbox"]))
            out["postgres.data.outbox.exactly_once"] = once == 0 and lost == 0
            if self.baseline is not None:
                b = self.baseline
                out["postgres.data.messages.pre_agent_intact"] = all(
                    now["messages"].get(i) == d for i, d in b["messages"].items())
                out["postgres.data.outbox.pre_agent_intact"] = all(
                    now["outbox"].get(i) == d for i, d in b["outbox"].items())
                new = c.execute("SELECT count(*), count(*) FILTER (WHERE client_msg_id NOT LIKE 'lg-%%' AND "
                                "client_msg_id NOT LIKE 'grader-%%') FROM messages WHERE id > %s",
                                (b["max_id"],)).fetchone()
                accepted = self._accepted_writes(b["t"])
                out["postgres.data.messages.new_rows"] = new[0]
                out["postgres.data.messages.accepted_since_start"] = accepted
                # Every write the load saw accepted is still there, and no row came from anywhere else.
                out["postgres.data.messages.offered_ok_persisted"] = new[1] == 0 and new[0] >= accepted
        for role in SLACK_ROLE_PASSWORDS:
            out[f"postgres.pg.fresh.{SLACK_DATABASE}/{role}.idle_in_transaction_session_timeout_ms"] = \
                self.fresh_timeout_ms(role)
        out["postgres.restarts"] = self.stack.server_restarts.get("postgres", 0)
        out["postgres.image"] = self.pg.image()
        sup = self.stack.supervisor
        out[f"{self.app}.image"] = sup.image(self.app)
        out[f"{self.app}.restarts"] = sup.restarts.get(self.app, 0)
        out[f"{self.app}.ready"] = sup.ready(self.app)
        for k, v in self._runtime_db().items():
            out[f"{self.app}.settings.db.{k}"] = v
        for k, v in self._declared_db().items():
            out[f"{self.app}.declared.db.{k}"] = v
        return out

    def config(self) -> dict[str, Any]:
        """Operator-changeable settings keyed as the twin's `config()` (the changed-keys diff and the envelope)."""
        out: dict[str, Any] = {}
        with self._connect() as c:
            for k, v in self._file(c, "postgresql.auto.conf").items():
                out[f"postgres.pg.auto_conf.{k}"] = v
            # What the server runs with now (files, after the last reload), as the twin's `applied`: read in the
            # `postgres` database, where the app's role and database settings do not reach the grader's session.
            with self._connect("postgres") as s:
                for k, v in s.execute("SELECT name, setting FROM pg_settings WHERE context <> 'internal' AND source "
                                      "NOT IN ('client', 'session', 'database', 'user', 'database user')").fetchall():
                    out[f"postgres.pg.applied.{k}"] = v
            for scope, settings in self._catalog(c).items():
                for k, v in settings.items():
                    out[f"postgres.pg.catalog.{scope}.{k}"] = v
            for r, n in c.execute("SELECT rolname, rolconnlimit FROM pg_roles WHERE rolname !~ '^pg_'").fetchall():
                out[f"postgres.pg.connlimit.{r}"] = n
        for k, v in self._runtime_db().items():
            out[f"{self.app}.db.{k}"] = v
        for k, v in self._declared_db().items():
            out[f"store:configmap/app-config.roles.{self.role}.db.{k}"] = v
        return out

    def fixed_traffic(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """One write and readback per channel through svc-message (the fixed-pod-restart traffic)."""
        ep = self.stack.endpoint(self.app)
        channels = list(spec.get("channels") or [])
        correct = 0
        for ch in channels:
            cid = f"grader-{uuid.uuid4().hex[:12]}"
            status, body = _http_json(ep, "POST", "/messages", {"channel_id": ch, "client_msg_id": cid,
                                                                "body": f"challenge {cid}"})
            if status != 201 or not isinstance(body, dict):
                continue
            st, back = _http_json(ep, "GET", f"/channels/{ch}/messages?after_seq={body['seq'] - 1}&limit=1")
            msgs = (back or {}).get("messages", []) if st == 200 else []
            correct += len(msgs) == 1 and msgs[0]["client_msg_id"] == cid
        n = len(channels)
        return {"scheduled": n, "attempted": n, "completed": correct, "correct": correct}


# ----------------------------------------------------------------------------------------------- frappe (ia-004)
# MariaDB variables the twin reports (arena/twin/frappe/mariadb_variables.yaml), typed as the twin types them.
MARIADB_SETTINGS = ("character_set_server", "collation_server", "innodb_buffer_pool_size", "interactive_timeout",
                    "max_connections", "max_statement_time", "max_user_connections", "performance_schema",
                    "read_only", "skip_name_resolve", "thread_cache_size", "transaction_isolation", "version",
                    "wait_timeout")
# Globals that move on their own (clocks, positions, counters): not settings, so outside the fingerprint.
VOLATILE_GLOBALS = ("gtid_", "timestamp", "last_insert_id", "insert_id", "rand_seed", "pseudo_", "warning_count",
                    "error_count", "identity")
REDIS_CONFIG = ("appendfsync", "appendonly", "maxmemory", "maxmemory-policy", "min-replicas-max-lag",
                "min-replicas-to-write", "save")


def _typed(v: str) -> Any:
    if v in ("ON", "OFF"):
        return v == "ON"
    try:
        return int(v)
    except ValueError:
        return v


class FrappeTruth:
    """MariaDB, redis-queue and worker truth for ia-004 on a live stack."""

    not_modelled: tuple[str, ...] = ()

    def __init__(self, stack, *, queue: str = "redis-queue", release: str = "frappe", root_password: str =
                 "agentrepair-root"):
        self.stack = stack
        self.queue, self.release, self.root_password = queue, release, root_password
        site = (yaml.safe_load((stack.config_dir / "frappe-web.yaml").read_text()) or {})
        self.site_db = site["database"]["name"]
        self.site_user = site["database"]["user"]
        self.site_password = site["database"]["password"]
        self.queue_name = site.get("queue", {}).get("name", "default")
        self.baseline: dict[str, Any] | None = None
        self._traffic_ids: list[str] = []

    # -- connections ---------------------------------------------------------------------------------------------
    def _mysql(self, user: str = "root", password: str | None = None, database: str | None = None):
        ep = self.stack.endpoint("mariadb")
        return pymysql.connect(host=ep.address, port=ep.port, user=user, database=database, connect_timeout=5,
                               password=self.root_password if password is None else password, autocommit=True,
                               ssl_disabled=True)

    def _redis(self) -> redis.Redis:
        ep = self.stack.endpoint(self.queue)
        return redis.Redis(host=ep.address, port=ep.port, socket_timeout=5, decode_responses=True)

    # -- MariaDB -------------------------------------------------------------------------------------------------
    def grants(self, cur) -> dict[str, list[str]]:
        """`user@host.scope` -> sorted privileges, from the privilege tables as the server holds them."""
        out: dict[str, set[str]] = {}
        cur.execute("SELECT GRANTEE, TABLE_SCHEMA, PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES")
        rows = [(g, f"`{s}`.*", p) for g, s, p in cur.fetchall()]
        cur.execute("SELECT GRANTEE, PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES WHERE PRIVILEGE_TYPE "
                    "<> 'USAGE'")
        rows += [(g, "*.*", p) for g, p in cur.fetchall()]
        for grantee, scope, priv in rows:
            user, host = grantee.split("@", 1)
            out.setdefault(f"{user.strip(chr(39))}@{host.strip(chr(39))}.{scope}", set()).add(priv)
        return {k: sorted(v) for k, v in sorted(out.items())}

    def site_can(self) -> dict[str, bool]:
        """What a new session of the site account can do: each statement runs for real, then rolls back."""
        probe = f"grader-probe-{uuid.uuid4().hex[:8]}"
        stmts = {"SELECT": "SELECT name FROM `tabToDo` LIMIT 1",
                 "INSERT": "INSERT INTO `tabToDo` (name, description, status, modified) VALUES (%s, '', 'Open', "
                           "NOW(6))",
                 "UPDATE": "UPDATE `tabToDo` SET status = status WHERE name = %s",
                 "DELETE": "DELETE FROM `tabToDo` WHERE name = %s"}
        out = {}
        conn = self._mysql(self.site_user, self.site_password, self.site_db)
        try:
            conn.autocommit(False)
            with conn.cursor() as cur:
                for priv, sql in stmts.items():
                    try:
                        cur.execute(sql, () if priv == "SELECT" else (probe,))
                        out[priv] = True
                    except pymysql.err.OperationalError as e:
                        if e.args[0] not in (1142, 1044):
                            raise
                        out[priv] = False
            conn.rollback()
        finally:
            conn.close()
        return out

    def _tables(self, cur) -> dict[str, dict[str, Any]]:
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (self.site_db,))
        out = {}
        for (t,) in cur.fetchall():
            cur.execute(f"SELECT COUNT(*) FROM `{self.site_db}`.`{t}`")
            rows = cur.fetchone()[0]
            cur.execute(f"CHECKSUM TABLE `{self.site_db}`.`{t}`")
            out[t] = {"rows": rows, "checksum": cur.fetchone()[1]}
        return out

    def _mycnf(self) -> dict[str, Any]:
        """The [mysqld] section of the server's my.cnf: its declared layer."""
        out, section = {}, ""
        for line in self.stack.servers["mariadb"].cnf.read_text().splitlines():
            line = line.strip()
            if line.startswith("["):
                section = line.strip("[]")
            elif line and not line.startswith("#") and section == "mysqld":
                k, _, v = line.partition("=")
                out[k.strip().replace("-", "_")] = _typed(v.strip()) if v else True
        return out

    def _mariadb(self) -> tuple[dict[str, Any], dict[str, Any]]:
        truth: dict[str, Any] = {}
        config: dict[str, Any] = {}
        with self._mysql() as conn, conn.cursor() as cur:
            cur.execute("SHOW GLOBAL VARIABLES")
            gv = dict(cur.fetchall())
            for k in MARIADB_SETTINGS:
                if k in gv:
                    truth[f"mariadb.settings.{k}"] = config[f"mariadb.{k}"] = _typed(gv[k])
            stable = sorted((k, v) for k, v in gv.items() if not k.startswith(VOLATILE_GLOBALS))
            truth["mariadb.fingerprint.globals"] = _digest(*stable)
            grants = self.grants(cur)
            truth["mariadb.fingerprint.grants"] = _digest(*sorted(grants.items()))
            for key, privs in grants.items():
                truth[f"mariadb.grant.{key}"] = ",".join(privs)
                config[f"store:mariadb/global_priv.accounts.{self._account(key)}.grants.{self._scope(key)}"] = privs
            cur.execute("SELECT User, Host, max_user_connections FROM mysql.user")
            for u, h, n in cur.fetchall():
                truth[f"mariadb.account.{u}@{h}.max_user_connections"] = int(n)
                config[f"mariadb.account.{u}@{h}.max_user_connections"] = int(n)
            cur.execute("SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_KEY FROM "
                        "information_schema.COLUMNS WHERE TABLE_SCHEMA = %s ORDER BY 1, ORDINAL_POSITION",
                        (self.site_db,))
            cols = cur.fetchall()
            cur.execute("SELECT TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME FROM information_schema.STATISTICS "
                        "WHERE TABLE_SCHEMA = %s ORDER BY 1, 2, 3", (self.site_db,))
            truth["mariadb.fingerprint.schema"] = _digest(cols, cur.fetchall())
            for t, v in self._tables(cur).items():
                truth[f"mariadb.table.{t}.rows"] = v["rows"]
                truth[f"mariadb.table.{t}.checksum"] = v["checksum"]
        for priv, ok in self.site_can().items():
            truth[f"mariadb.site_can.{priv}"] = ok
        site_scope = grants.get(f"{self.site_user}@%.`{self.site_db}`.*", [])
        site_global = grants.get(f"{self.site_user}@%.*.*", [])
        for priv in ("SELECT", "INSERT", "UPDATE", "DELETE"):
            truth[f"mariadb.site_grant.{priv}"] = priv in site_scope or priv in site_global
        for k, v in self._mycnf().items():
            truth[f"store:mariadb/my.cnf.{k}"] = config[f"store:mariadb/my.cnf.{k}"] = v
        truth["mariadb.restarts"] = self.stack.server_restarts.get("mariadb", 0)
        return truth, config

    @staticmethod
    def _account(key: str) -> str:
        return key.split(".`", 1)[0] if ".`" in key else key.rsplit(".*.*", 1)[0]

    @staticmethod
    def _scope(key: str) -> str:
        return key[len(FrappeTruth._account(key)) + 1:]

    # -- the queue -----------------------------------------------------------------------------------------------
    def _values(self) -> dict[str, Any]:
        """The broker's start values in its ConfigMap (what the next pod renders), read from the cluster."""
        comp = self.stack.components[self.queue]
        values_file = f"{self.queue}-values.yaml"
        data = self.stack.cluster.configmap_data(comp.namespace, configmap_name(values_file))
        return yaml.safe_load(data.get(values_file, "")) or {}

    def _release_values(self) -> dict[str, Any]:
        """The broker's values in the deployed revision of the Helm release (the declared store)."""
        comp = self.stack.components[self.queue]
        values, _ = self.stack.cluster.helm_values(comp.namespace, self.release)
        return ((values.get("erpnext") or {}).get(self.queue) or {})

    def _job_ids(self, r: redis.Redis) -> set[str]:
        return {k.split(":", 2)[2] for k in r.scan_iter("rq:job:*", count=1000)}

    def _stranded(self, r: redis.Redis) -> set[str]:
        """Jobs whose hash says queued but whose id is in no queue list (a flush or an eviction took it)."""
        # The queue and its intermediate list (RQ's workers move a job there as they take it).
        listed = {j for k in rq_keys(self.queue_name) for j in r.lrange(k, 0, -1)}
        queued = set()
        for jid in self._job_ids(r):
            if r.hget(f"rq:job:{jid}", "status") == "queued":
                queued.add(jid)
        return queued - listed

    def _accepted_jobs(self) -> set[str]:
        """Jobs a producer saw accepted: the load ledger's `job=<id>` and the challenge traffic's own."""
        out = set(self._traffic_ids)
        try:
            with open(self.stack.ledger_path) as f:
                for line in f:
                    if "job=" in line:
                        detail = json.loads(line).get("detail", "")
                        out.add(detail.rsplit("job=", 1)[1].split()[0])
        except (OSError, ValueError, IndexError):
            pass
        return out

    def mark_baseline(self) -> None:
        r = self._redis()
        self.baseline = {"jobs": self._job_ids(r)}

    def _queue(self) -> tuple[dict[str, Any], dict[str, Any]]:
        q = self.queue
        truth: dict[str, Any] = {}
        config: dict[str, Any] = {}
        r = self._redis()
        live = {k: v for name in REDIS_CONFIG for k, v in r.config_get(name).items()}
        for k in REDIS_CONFIG:
            truth[f"{q}.settings.{k}"] = config[f"{q}.{k}"] = live.get(k)
        config[f"{q}.user.default"] = next((u for u in r.acl_list() if u.startswith("user default ")), None)
        cap = int(live.get("maxmemory") or 0)
        truth[f"{q}.maxmemory"] = cap
        truth[f"{q}.cap_bytes"] = cap if cap > 0 else 2 ** 63
        truth[f"{q}.maxmemory_policy"] = live.get("maxmemory-policy")
        truth[f"{q}.appendonly"] = live.get("appendonly")
        truth[f"{q}.used_memory"] = float(r.info("memory")["used_memory"])
        truth[f"{q}.jobs.queued"] = float(r.llen(rq_keys(self.queue_name)[0]))
        # Twice, a moment apart: a worker's status write follows its dequeue, so a moment can show neither.
        stranded = self._stranded(r)
        if stranded:
            self.stack.clock.sleep(0.5)
            stranded &= self._stranded(r)
        gone = (self.baseline["jobs"] - self._job_ids(r)) if self.baseline is not None else set()
        # A queued hash in no list is lost only if its enqueue was accepted: Redis does not roll back a MULTI, so
        # an enqueue refused at the cap can leave its hash behind (the producer got an error, nothing was lost).
        stranded &= self._accepted_jobs()
        truth[f"{q}.jobs.stranded"] = float(len(stranded))
        truth[f"{q}.jobs.lost"] = float(len(stranded) + len(gone))
        # Evidence: which jobs, and what their hashes say (a few).
        truth[f"{q}.jobs.lost_ids"] = {j: {k: v for k, v in r.hgetall(f"rq:job:{j}").items() if k != "data"}
                                       for j in sorted(stranded | gone)[:5]}
        server = self.stack.servers[q]
        values = self._values()
        truth[f"{q}.flags"] = list((values.get("master", {}) or {}).get("extraFlags", []) or [])
        for k, v in _flatten("", self._release_values(), {}).items():
            key = f"store:helm/{self.release}.erpnext.{q}.{k}"
            truth[key] = config[key] = v
        truth[f"{q}.restarts"] = self.stack.server_restarts.get(q, 0)
        truth[f"{q}.instance"] = server.instance_id()
        truth[f"{q}.image"] = server.image()
        return truth, config

    def _cache(self) -> dict[str, Any]:
        """Frappe's cache Redis: nothing in ia-004 should touch it (its generation counts its starts)."""
        server = self.stack.servers["redis-cache"]
        ep = self.stack.endpoint("redis-cache")
        r = redis.Redis(host=ep.address, port=ep.port, socket_timeout=5, decode_responses=True)
        live = {k: v for name in ("maxmemory", "maxmemory-policy", "appendonly") for k, v in r.config_get(name).items()}
        restarts = self.stack.server_restarts.get("redis-cache", 0)
        return {"redis-cache.generation": 1 + restarts, "redis-cache.restarts": restarts,
                "redis-cache.instance": server.instance_id(), "redis-cache.maxmemory": int(live["maxmemory"]),
                "redis-cache.maxmemory_policy": live["maxmemory-policy"], "redis-cache.appendonly": live["appendonly"]}

    def _apps(self) -> dict[str, Any]:
        sup = self.stack.supervisor
        out: dict[str, Any] = {}
        for app in ("frappe-web", "worker-long"):
            out[f"{app}.image"] = sup.image(app)
            out[f"{app}.restarts"] = sup.restarts.get(app, 0)
            out[f"{app}.ready"] = sup.ready(app)
        # The Deployment's desired replicas, from the cluster, whatever a rollout is doing at the moment.
        comp = self.stack.components["worker-long"]
        deploy = self.stack.cluster.find(resource_for("apps", "v1", "deployments"), comp.namespace, "worker-long")
        out["worker-long.replicas"] = int(((deploy or {}).get("spec") or {}).get("replicas", 0))
        return out

    def truth(self) -> dict[str, Any]:
        t, _ = self._mariadb()
        qt, _ = self._queue()
        return {**t, **qt, **self._cache(), **self._apps()}

    def config(self) -> dict[str, Any]:
        _, c = self._mariadb()
        _, qc = self._queue()
        return {**c, **qc}

    def fixed_traffic(self, spec: Mapping[str, Any], timeout_s: float = 8.0) -> dict[str, Any]:
        return self.queue_probe(int(spec.get("jobs", 0)), timeout_s)

    def queue_probe(self, n: int, timeout_s: float = 8.0) -> dict[str, Any]:
        """The queue challenge's probe, as the twin's (arena/twin/frappe/substrate.py `fixed_traffic`): `n` jobs
        enqueued through frappe-web; each is correct when the broker accepts it and a worker can take it, i.e. a
        worker's heartbeat (the write RQ makes before each dequeue) lands within `timeout_s` of the enqueues. Like
        Incident-Arena's redis_configuration probe it checks that the broker serves the queue again, not how long
        the backlog ahead of the new jobs takes to drain."""
        ep = self.stack.endpoint("frappe-web")
        out: dict[str, Any] = {"scheduled": n, "attempted": n, "completed": 0, "correct": 0, "errors": []}
        t0 = time.time()
        for i in range(n):
            status, body = _http_json(ep, "POST", "/api/method/enqueue", {})
            if status == 200 and isinstance(body, dict):
                self._traffic_ids.append(body["message"]["job_id"])
                out["completed"] += 1
            else:
                out["errors"].append(f"job {i}: enqueue {status} {(body or {}).get('reason', '')}".strip())
        if out["completed"]:
            if self._worker_heartbeat_after(t0, timeout_s):
                out["correct"] = out["completed"]
            else:
                out["errors"].append(f"no worker heartbeat within {timeout_s:g} s: the workers cannot take jobs")
        return out

    def _worker_heartbeat_after(self, t0: float, timeout_s: float) -> bool:
        r = self._redis()
        clock = self.stack.clock
        deadline = clock.now() + timeout_s
        while True:
            try:
                beats = [r.hget(k, "last_heartbeat") for k in r.scan_iter("rq:worker:*", count=100)]
                if any(b is not None and float(b) > t0 for b in beats):
                    return True
            except (redis.exceptions.RedisError, ValueError):
                pass
            if clock.now() >= deadline:
                return False
            clock.sleep(0.2)


TRUTH_READERS = {"ia-006": SaleorTruth, "ia-004": FrappeTruth, "ia-018": SlackTruth}
