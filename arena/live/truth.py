"""Ground truth of the live stack for the gates: what the twin's `world.truth()` / `world.config()` give, read from
the real servers with superuser access (as Incident-Arena's grader reads its cluster), never through the agent's
shell and never by the guard.

The keys follow the twin's (`arena.twin.saleor.substrate.PostgresComponent.truth`), so that a scenario's grader
checks (`arena.gates.holds`) evaluate the same way on both. `SaleorTruth` covers ia-006; the fresh-session probe
is a real one: a new `saleor_app` session runs a 750 ms statement. Called by `arena.live.agreement`.
"""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg

__all__ = ["SaleorTruth"]

PROTECTED_TABLES = ("order_order", "product_product", "product_productvariant")


def _digest(*parts: Any) -> str:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()


def _ms(value: str) -> float:
    """A PostgreSQL duration setting as shown by SHOW (`150ms`, `30s`, `0`) in milliseconds."""
    v = value.strip()
    for unit, factor in (("ms", 1.0), ("min", 60_000.0), ("s", 1000.0), ("h", 3_600_000.0), ("d", 86_400_000.0)):
        if v.endswith(unit):
            return float(v[: -len(unit)]) * factor
    return float(v or 0)


class SaleorTruth:
    """PostgreSQL and saleor-api truth for ia-006 on a live stack."""

    def __init__(self, stack, *, role: str = "saleor_app", database: str = "saleor", password: str = "agentrepair-app",
                 probe_ms: float = 750.0):
        self.stack = stack
        self.role, self.database, self.password, self.probe_ms = role, database, password, probe_ms
        self.pg = stack.servers["postgres"]
        self.baseline_fp: dict[str, Any] | None = None

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
