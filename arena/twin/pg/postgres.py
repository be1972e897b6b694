"""The twin's PostgreSQL server: settings in layers, backends, transactions with row locks, the catalog and tables.

Shared by the substrates that run PostgreSQL (lifted from the Saleor substrate): the SQL front end
(`arena.twin.pg.sql`), psql (`arena.twin.pg.psql`), the saleor-api pool (`arena.twin.saleor.pool`) and the
slack-spine message store (`arena.twin.slack.pgstore`) call it; the substrates read it for the gates' truth.

How a setting reaches a backend, as in PostgreSQL:

    boot default < postgresql.conf < postgresql.auto.conf (ALTER SYSTEM)       file layers: live after reload
                 < ALTER DATABASE d SET < ALTER ROLE r SET < ALTER ROLE r IN DATABASE d SET   catalog: at connect
                 < SET (session)

The file layers are re-read by `pg_reload_conf()` and every backend sees the new value, unless a catalog or
session value overrides it. The catalog (pg_db_role_setting) is durable at once, but a backend copies what
applies to it only when it connects: that is why a role setting reaches fresh sessions and never long-lived
ones, and why terminating the pool's backends recycles them onto the new setting.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

__all__ = [
    "GucSpec",
    "GUCS",
    "SettingError",
    "ConnectError",
    "Role",
    "Database",
    "Backend",
    "Table",
    "WritableRelation",
    "PostgresServer",
    "parse_guc_value",
    "format_guc_value",
]


class SettingError(Exception):
    """A setting statement PostgreSQL would reject (unknown parameter, bad value, wrong context)."""


class ConnectError(Exception):
    """A connection PostgreSQL would refuse (FATAL at connect time)."""


@dataclass(frozen=True)
class GucSpec:
    """One configuration parameter as PostgreSQL 15 defines it: type, base unit, boot value, and when a change
    takes effect (`context`): user (any session), superuser (SET only by a superuser), sighup (the files, live
    at reload), postmaster (the files, live at restart)."""

    name: str
    vartype: str  # integer | real | string | bool | enum
    boot: str
    unit: str | None = None  # ms | s | kB | 8kB | MB | None
    context: str = "user"  # user | superuser | sighup | postmaster
    category: str = ""
    enumvals: tuple[str, ...] = ()
    min_val: float | None = None
    max_val: float | None = None


_STMT = "Client Connection Defaults / Statement Behavior"
_ISOLATION = ("serializable", "repeatable read", "read committed", "read uncommitted")

GUCS: dict[str, GucSpec] = {
    g.name: g
    for g in (
        GucSpec("statement_timeout", "integer", "0", "ms", "user", _STMT, min_val=0, max_val=2147483647),
        GucSpec("lock_timeout", "integer", "0", "ms", "user", _STMT, min_val=0, max_val=2147483647),
        GucSpec("idle_in_transaction_session_timeout", "integer", "0", "ms", "user", _STMT, min_val=0,
                max_val=2147483647),
        GucSpec("idle_session_timeout", "integer", "0", "ms", "user", _STMT, min_val=0, max_val=2147483647),
        GucSpec("default_transaction_isolation", "enum", "read committed", None, "user", _STMT,
                enumvals=_ISOLATION),
        GucSpec("work_mem", "integer", "4096", "kB", "user", "Resource Usage / Memory", min_val=64,
                max_val=2147483647),
        GucSpec("maintenance_work_mem", "integer", "65536", "kB", "user", "Resource Usage / Memory", min_val=1024,
                max_val=2147483647),
        GucSpec("temp_buffers", "integer", "1024", "8kB", "user", "Resource Usage / Memory", min_val=100,
                max_val=1073741823),
        GucSpec("shared_buffers", "integer", "16384", "8kB", "postmaster", "Resource Usage / Memory", min_val=16,
                max_val=1073741823),
        GucSpec("temp_file_limit", "integer", "-1", "kB", "superuser", "Resource Usage / Disk", min_val=-1,
                max_val=2147483647),
        GucSpec("max_connections", "integer", "100", None, "postmaster", "Connections and Authentication",
                min_val=1, max_val=262143),
        GucSpec("superuser_reserved_connections", "integer", "3", None, "postmaster",
                "Connections and Authentication", min_val=0, max_val=262143),
        GucSpec("listen_addresses", "string", "localhost", None, "postmaster", "Connections and Authentication"),
        GucSpec("log_min_duration_statement", "integer", "-1", "ms", "superuser", "Reporting and Logging",
                min_val=-1, max_val=2147483647),
        GucSpec("log_statement", "enum", "none", None, "superuser", "Reporting and Logging",
                enumvals=("none", "ddl", "mod", "all")),
        GucSpec("log_lock_waits", "bool", "off", None, "superuser", "Reporting and Logging"),
        GucSpec("deadlock_timeout", "integer", "1000", "ms", "superuser", "Lock Management", min_val=1,
                max_val=2147483647),
        GucSpec("application_name", "string", "", None, "user", "Reporting and Logging"),
        GucSpec("search_path", "string", '"$user", public', None, "user", "Client Connection Defaults"),
        GucSpec("TimeZone", "string", "UTC", None, "user", "Client Connection Defaults"),
        GucSpec("synchronous_commit", "enum", "on", None, "user", "Write-Ahead Log / Settings",
                enumvals=("local", "remote_write", "remote_apply", "on", "off")),
        GucSpec("fsync", "bool", "on", None, "sighup", "Write-Ahead Log / Settings"),
        GucSpec("full_page_writes", "bool", "on", None, "sighup", "Write-Ahead Log / Settings"),
        GucSpec("wal_level", "enum", "replica", None, "postmaster", "Write-Ahead Log / Settings",
                enumvals=("minimal", "replica", "logical")),
        GucSpec("wal_buffers", "integer", "-1", "8kB", "postmaster", "Write-Ahead Log / Settings", min_val=-1,
                max_val=262143),
        GucSpec("checkpoint_timeout", "integer", "300", "s", "sighup", "Write-Ahead Log / Checkpoints",
                min_val=30, max_val=86400),
        GucSpec("checkpoint_completion_target", "real", "0.9", None, "sighup", "Write-Ahead Log / Checkpoints",
                min_val=0, max_val=1),
        GucSpec("max_wal_size", "integer", "1024", "MB", "sighup", "Write-Ahead Log / Checkpoints", min_val=2,
                max_val=2147483647),
        GucSpec("min_wal_size", "integer", "80", "MB", "sighup", "Write-Ahead Log / Checkpoints", min_val=2,
                max_val=2147483647),
        GucSpec("max_wal_senders", "integer", "10", None, "postmaster", "Replication / Sending Servers",
                min_val=0, max_val=262143),
        GucSpec("autovacuum", "bool", "on", None, "sighup", "Autovacuum"),
        GucSpec("autovacuum_naptime", "integer", "60", "s", "sighup", "Autovacuum", min_val=1, max_val=2147483),
        GucSpec("autovacuum_max_workers", "integer", "3", None, "postmaster", "Autovacuum", min_val=1,
                max_val=262143),
        GucSpec("autovacuum_vacuum_scale_factor", "real", "0.2", None, "sighup", "Autovacuum", min_val=0,
                max_val=100),
        GucSpec("effective_cache_size", "integer", "524288", "8kB", "user", "Query Tuning / Planner Cost Constants",
                min_val=1, max_val=2147483647),
        GucSpec("random_page_cost", "real", "4", None, "user", "Query Tuning / Planner Cost Constants", min_val=0,
                max_val=1.79769e+308),
        GucSpec("max_worker_processes", "integer", "8", None, "postmaster", "Resource Usage / Asynchronous Behavior",
                min_val=0, max_val=262143),
        GucSpec("max_parallel_workers", "integer", "8", None, "user", "Resource Usage / Asynchronous Behavior",
                min_val=0, max_val=1024),
    )
}

_CASE = {k.lower(): k for k in GUCS}

_TIME_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "min": 60_000.0, "h": 3_600_000.0, "d": 86_400_000.0}
_MEM_UNITS = {"b": 1 / 1024, "kb": 1.0, "mb": 1024.0, "gb": 1024.0 ** 2, "tb": 1024.0 ** 3}
_MEM_BASE_KB = {"kB": 1.0, "8kB": 8.0, "MB": 1024.0}  # a memory parameter's base unit, in kB


def guc(name: str) -> GucSpec:
    """The spec of a parameter, by its case-insensitive name, or the error PostgreSQL prints."""
    key = _CASE.get(name.lower())
    if key is None:
        raise SettingError(f'unrecognized configuration parameter "{name}"')
    return GUCS[key]


def _bound(spec: GucSpec, x: float | None) -> str:
    if x is None:
        return ""
    return str(int(x)) if spec.vartype == "integer" else f"{x:g}"


def _range_error(spec: GucSpec, shown: str) -> SettingError:
    # As PostgreSQL words it: the value in the parameter's base unit ("-1 ms"), the bounds bare.
    unit = f" {spec.unit}" if spec.unit else ""
    return SettingError(f'{shown}{unit} is outside the valid range for parameter "{spec.name}" '
                        f'({_bound(spec, spec.min_val)} .. {_bound(spec, spec.max_val)})')


def parse_guc_value(spec: GucSpec, raw: str) -> str:
    """Normalise a value as PostgreSQL stores it for display in pg_settings.setting (base units, text); refuse
    what PostgreSQL refuses (bad units, out of range, not one of an enum's values)."""
    text = raw.strip()
    if spec.vartype == "integer":
        m = re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*([a-zA-Z]*)", text)
        if not m:
            raise SettingError(f'invalid value for parameter "{spec.name}": "{raw}"')
        num, unit = float(m.group(1)), m.group(2)
        if unit:
            if spec.unit in ("ms", "s"):
                factor = _TIME_UNITS.get(unit)
                if factor is None:
                    raise SettingError(f'invalid value for parameter "{spec.name}": "{raw}"\n'
                                       'HINT:  Valid units for this parameter are "us", "ms", "s", "min", "h", and "d".')
                num = num * factor / (1000.0 if spec.unit == "s" else 1.0)
            elif spec.unit in _MEM_BASE_KB:
                factor = _MEM_UNITS.get(unit.lower())
                if unit not in ("B", "kB", "MB", "GB", "TB"):  # case-sensitive, as in PostgreSQL
                    raise SettingError(f'invalid value for parameter "{spec.name}": "{raw}"\n'
                                       'HINT:  Valid units for this parameter are "B", "kB", "MB", "GB", and "TB".')
                num = num * factor / _MEM_BASE_KB[spec.unit]
            else:
                raise SettingError(f'invalid value for parameter "{spec.name}": "{raw}"')
        n = int(round(num))
        if (spec.min_val is not None and n < spec.min_val) or (spec.max_val is not None and n > spec.max_val) or \
                (spec.min_val is None and n < -1):
            raise _range_error(spec, str(n))
        return str(n)
    if spec.vartype == "real":
        try:
            x = float(text)
        except ValueError:
            raise SettingError(f'parameter "{spec.name}" requires a numeric value') from None
        if (spec.min_val is not None and x < spec.min_val) or (spec.max_val is not None and x > spec.max_val):
            raise _range_error(spec, f"{x:g}")
        return f"{x:g}"
    if spec.vartype == "bool":
        low = text.lower()
        if low in ("on", "true", "yes", "1"):
            return "on"
        if low in ("off", "false", "no", "0"):
            return "off"
        raise SettingError(f'parameter "{spec.name}" requires a Boolean value')
    if spec.vartype == "enum":
        low = text.lower()
        if low not in spec.enumvals:
            raise SettingError(f'invalid value for parameter "{spec.name}": "{raw}"\n'
                               f'HINT:  Available values: {", ".join(spec.enumvals)}.')
        return low
    return text


def format_guc_value(spec: GucSpec, setting: str) -> str:
    """What SHOW prints: the value with its unit, like PostgreSQL (150ms, 5s, 5min, 4MB, 1GB)."""
    if spec.vartype != "integer" or spec.unit is None:
        return setting
    n = int(setting)
    if n <= 0 and spec.unit in ("ms", "s"):
        return str(n)
    if spec.unit in ("ms", "s"):
        ms = n * (1000 if spec.unit == "s" else 1)
        for unit, factor in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
            if ms % factor == 0:
                return f"{ms // factor}{unit}"
        return f"{ms}ms"
    if n < 0:
        return str(n)
    kb = int(n * _MEM_BASE_KB[spec.unit])
    for unit, factor in (("TB", 1024 ** 3), ("GB", 1024 ** 2), ("MB", 1024)):
        if kb % factor == 0:
            return f"{kb // factor}{unit}"
    return f"{kb}kB"


def setting_ms(spec_name: str, setting: str) -> float:
    """A time setting's value in milliseconds (0 = disabled)."""
    spec = guc(spec_name)
    n = float(setting)
    return n * 1000.0 if spec.unit == "s" else n


@dataclass
class Role:
    """A pg_roles row."""

    name: str
    oid: int
    superuser: bool = False
    login: bool = True
    connlimit: int = -1
    password: str = ""


@dataclass
class Database:
    """A pg_database row."""

    name: str
    oid: int
    connlimit: int = -1


@dataclass
class Backend:
    """One server process: who connected, when, and the catalog settings it copied at connect time."""

    pid: int
    role: str
    database: str
    application_name: str
    client_addr: str
    backend_start: float
    # name -> (value, source) copied from pg_db_role_setting when it connected ("database" | "user")
    inherited: dict[str, tuple[str, str]] = field(default_factory=dict)
    session: dict[str, str] = field(default_factory=dict)  # SET in this session
    state: str = "idle"
    query: str = ""
    query_start: float | None = None
    state_change: float = 0.0
    alive: bool = True
    terminated_by_admin: bool = False
    xact_start: float | None = None  # an open transaction block
    # When an idle-in-transaction backend is terminated: armed from its effective timeout at the moment it went
    # idle, as PostgreSQL arms the timer; a later ALTER SYSTEM + reload does not re-arm an already idle one.
    idle_tx_deadline: float | None = None
    locks: list[tuple[str, str]] = field(default_factory=list)  # (relation, row key) locked FOR UPDATE
    waiting_for: tuple[str, str] | None = None  # a row lock this backend waits on


class WritableRelation:
    """An application table a substrate keeps as live rows (lists); the SQL front end reads and changes them."""

    columns: tuple[str, ...] = ()

    def rows(self) -> list[list[object]]:
        raise NotImplementedError

    def update(self, changes: list[tuple[list[object], list[object]]]) -> None:
        """Apply (old row, new row) pairs; raise SettingError-free SQL-level errors as ValueError."""
        raise NotImplementedError

    def delete(self, rows: list[list[object]]) -> None:
        raise NotImplementedError

    def insert(self, rows: list[list[object]]) -> None:
        raise NotImplementedError


@functools.lru_cache(maxsize=65536)
def _row_digest(row: tuple[str, ...]) -> str:
    # Rows are immutable tuples: the gates' repeated truth reads hash each one once.
    return hashlib.sha256("\x1f".join(row).encode()).hexdigest()


@dataclass
class Table:
    """A protected application table: column names and rows (tuples of text), hashed for the data checks."""

    name: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]] = field(default_factory=list)
    indexes: tuple[str, ...] = ()

    def row_digest(self, row: tuple[str, ...]) -> str:
        return _row_digest(row)

    def checksum(self, limit: int | None = None) -> str:
        h = hashlib.sha256()
        for row in self.rows[:limit]:
            h.update(self.row_digest(row).encode())
        return h.hexdigest()


class PostgresServer:
    """One PostgreSQL instance and its catalog; every setting layer is inspectable for the gates."""

    def __init__(self, *, conf_file: dict[str, str] | None = None, pid_seed: int = 4000, app_database: str = "saleor",
                 table_owner: str = "saleor_app", hostnames: tuple[str, ...] = (
                     "postgres", "localhost", "127.0.0.1", "postgres.saleor", "postgres.saleor.svc",
                     "postgres.saleor.svc.cluster.local", "/var/run/postgresql")):
        self.app_database = app_database  # the database that holds the application tables
        self.table_owner = table_owner
        self.hostnames = hostnames
        self.conf_file: dict[str, str] = {}  # postgresql.conf (from the chart; declared)
        self.auto_conf: dict[str, str] = {}  # postgresql.auto.conf (ALTER SYSTEM; declared, live after reload)
        for k, v in (conf_file or {}).items():
            self.conf_file[guc(k).name] = parse_guc_value(guc(k), v)
        self.applied: dict[str, tuple[str, str]] = {}  # name -> (value, source) the server runs with now
        self.pending_restart: set[str] = set()
        self.db_role_setting: dict[tuple[str, str], dict[str, str]] = {}  # (database|"", role|"") -> settings
        self.roles: dict[str, Role] = {}
        self.databases: dict[str, Database] = {}
        self.backends: dict[int, Backend] = {}
        self.tables: dict[str, Table] = {}
        self.replication_slots: list[dict[str, str]] = []
        self.extra_tables: dict[str, Table] = {}  # unprotected bookkeeping tables (the fault's sentinel)
        self.row_locks: dict[tuple[str, str], int] = {}  # (relation, row key) -> pid holding it FOR UPDATE
        # Application relations a substrate computes from its own state: name -> () -> (columns, rows)
        self.views: dict[str, Callable[[], tuple[list[str], list[list[object]]]]] = {}
        # Application relations with rows the SQL front end may change (UPDATE/DELETE/INSERT): name -> relation
        self.writable: dict[str, "WritableRelation"] = {}
        self.table_locks: dict[str, int] = {}  # relation -> pid holding an explicit LOCK TABLE
        # Connections an application pool holds that the twin models as a count, not as sessions: () -> backends
        # shown in pg_stat_activity beside the modelled ones (a substrate's pools; read-only, never terminable).
        self.pool_activity: Callable[[], list[Backend]] | None = None
        self._next_pid = pid_seed
        self._next_oid = 16384
        self.relation_oids: dict[str, int] = {}  # relation name -> oid, given out by relation_oid()
        self.starts = 1
        # Where the postgres container's log lines go (the component's `say`); a list when standalone.
        self.log: list[tuple[float, str]] = []
        self.log_sink: "Callable[[float, str], None] | None" = None
        self._start(initial=True)

    # ---------------------------------------------------------------- lifecycle
    def _start(self, *, initial: bool = False) -> None:
        self.applied = {}
        for name, spec in GUCS.items():
            value, source = self._file_value(name)
            self.applied[name] = (value, source)
        self.pending_restart.clear()

    def _file_value(self, name: str) -> tuple[str, str]:
        if name in self.auto_conf:
            return self.auto_conf[name], "configuration file"
        if name in self.conf_file:
            return self.conf_file[name], "configuration file"
        return GUCS[name].boot, "default"

    def _log(self, entry: tuple[float, str]) -> None:
        if self.log_sink is not None:
            self.log_sink(*entry)
        else:
            self.log.append(entry)

    def restart(self, now: float) -> None:
        """A pod restart: every backend dies, postmaster settings apply, the catalog and files survive."""
        for b in self.backends.values():
            b.alive = False
        self.backends.clear()
        self.row_locks.clear()
        self.starts += 1
        self._start()
        self._log((now, "LOG:  database system is ready to accept connections"))

    def reload(self, now: float) -> None:
        """pg_reload_conf(): re-read both files; postmaster-context changes wait for a restart."""
        for name, spec in GUCS.items():
            value, source = self._file_value(name)
            if spec.context == "postmaster":
                if value != self.applied[name][0]:
                    self.pending_restart.add(name)
                    self._log((now, f'LOG:  parameter "{name}" cannot be changed without restarting the server'))
                else:
                    self.pending_restart.discard(name)
                continue
            if (value, source) != self.applied[name]:
                if value != self.applied[name][0]:
                    self._log((now, f'LOG:  parameter "{name}" changed to "{format_guc_value(spec, value)}"'))
                self.applied[name] = (value, source)
        self._log((now, "LOG:  received SIGHUP, reloading configuration files"))

    # ---------------------------------------------------------------- catalog
    def add_role(self, name: str, **kw) -> Role:
        role = Role(name=name, oid=self._oid(), **kw)
        self.roles[name] = role
        return role

    def add_database(self, name: str, **kw) -> Database:
        db = Database(name=name, oid=self._oid(), **kw)
        self.databases[name] = db
        return db

    def _oid(self) -> int:
        self._next_oid += 1
        return self._next_oid

    def relation_oid(self, name: str) -> int | None:
        """The oid of an application relation by name (`channel_seq`, `public."channel_seq"`), as `::regclass`
        resolves it; None when no such relation exists. Oids are given out on first use and kept."""
        n = name.strip()
        if n.lower().startswith("public."):
            n = n[7:]
        n = n[1:-1] if len(n) > 1 and n[0] == n[-1] == '"' else n.lower()
        known = set(self.tables) | set(self.extra_tables) | set(self.views) | set(self.writable) | \
            {r for r, _ in self.row_locks} | set(self.table_locks)
        if n not in known:
            return None
        if n not in self.relation_oids:
            self.relation_oids[n] = self._oid()
        return self.relation_oids[n]

    def relation_name(self, oid: int) -> str | None:
        return next((n for n, o in self.relation_oids.items() if o == oid), None)

    def set_catalog(self, database: str, role: str, name: str, value: str | None) -> None:
        """ALTER ROLE/DATABASE ... SET (value) or RESET (None). database/role '' mean 'all'."""
        spec = guc(name)
        if spec.context == "postmaster":
            raise SettingError(f'parameter "{spec.name}" cannot be changed without restarting the server')
        if spec.context == "sighup":
            raise SettingError(f'parameter "{spec.name}" cannot be changed now')
        key = (database, role)
        entry = self.db_role_setting.setdefault(key, {})
        if value is None:
            entry.pop(spec.name, None)
        else:
            entry[spec.name] = parse_guc_value(spec, value)
        if not entry:
            del self.db_role_setting[key]

    def reset_catalog_all(self, database: str, role: str) -> None:
        self.db_role_setting.pop((database, role), None)

    def alter_system(self, name: str, value: str | None) -> None:
        """ALTER SYSTEM SET/RESET: written to postgresql.auto.conf at once, applied by reload or restart."""
        spec = guc(name)
        if value is None:
            self.auto_conf.pop(spec.name, None)
        else:
            self.auto_conf[spec.name] = parse_guc_value(spec, value)

    def catalog_for(self, role: str, database: str) -> dict[str, tuple[str, str]]:
        """What a new session of `role` on `database` copies from pg_db_role_setting, most specific last."""
        out: dict[str, tuple[str, str]] = {}
        for key, source in (((database, ""), "database"), (("", role), "user"), ((database, role), "database user")):
            for name, value in self.db_role_setting.get(key, {}).items():
                out[name] = (value, source)
        return out

    # ---------------------------------------------------------------- sessions
    def connect(self, role: str, database: str, *, now: float, application_name: str = "",
                client_addr: str = "10.42.0.15", password: str | None = None) -> Backend:
        """Open a backend; it copies the catalog settings that apply to it, as PostgreSQL does at connect."""
        r = self.roles.get(role)
        if r is None:
            raise ConnectError(f'FATAL:  role "{role}" does not exist')
        if password is not None and r.password and password != r.password:
            raise ConnectError(f'FATAL:  password authentication failed for user "{role}"')
        db = self.databases.get(database)
        if db is None:
            raise ConnectError(f'FATAL:  database "{database}" does not exist')
        live = [b for b in self.backends.values() if b.alive]
        max_conn = int(self.applied["max_connections"][0])
        reserved = int(self.applied["superuser_reserved_connections"][0])
        if len(live) >= max_conn or (not r.superuser and len(live) >= max_conn - reserved):
            raise ConnectError("FATAL:  sorry, too many clients already")
        if not r.superuser and r.connlimit >= 0 and sum(b.role == role for b in live) >= r.connlimit:
            raise ConnectError(f'FATAL:  too many connections for role "{role}"')
        if db.connlimit >= 0 and sum(b.database == database for b in live) >= db.connlimit:
            raise ConnectError(f'FATAL:  too many connections for database "{database}"')
        self._next_pid += 1 + (self._next_pid * 7919) % 13  # pids look like a busy host's, deterministically
        b = Backend(pid=self._next_pid, role=role, database=database, application_name=application_name,
                    client_addr=client_addr, backend_start=now, inherited=self.catalog_for(role, database),
                    state_change=now)
        self.backends[b.pid] = b
        return b

    def disconnect(self, pid: int) -> None:
        b = self.backends.pop(pid, None)
        if b is not None:
            b.alive = False
            self._release(b)

    def terminate(self, pid: int, now: float) -> bool:
        """pg_terminate_backend: the backend exits with FATAL 57P01; its client sees a broken connection."""
        b = self.backends.pop(pid, None)
        if b is None:
            return False
        b.alive = False
        b.terminated_by_admin = True
        self._release(b)
        self._log((now, f"FATAL:  terminating connection due to administrator command (pid {pid})"))
        return True

    # ---------------------------------------------------------------- transactions and row locks
    def begin(self, b: Backend, now: float) -> None:
        if b.xact_start is None:
            b.xact_start = now

    def lock_row(self, b: Backend, relation: str, key: str, now: float) -> int | None:
        """SELECT ... FOR UPDATE of one row inside `b`'s transaction; the holder's pid if another backend has it."""
        self.begin(b, now)
        holder = self.row_locks.get((relation, key))
        if holder is not None and holder != b.pid:
            b.waiting_for = (relation, key)
            return holder
        self.row_locks[(relation, key)] = b.pid
        if (relation, key) not in b.locks:
            b.locks.append((relation, key))
        b.waiting_for = None
        return None

    def idle_in_transaction(self, b: Backend, now: float, query: str = "") -> None:
        """The client stops sending inside an open transaction: the idle-in-transaction timer is armed now."""
        b.state, b.state_change = "idle in transaction", now
        if query:
            b.query, b.query_start = query, now
        ms = setting_ms("idle_in_transaction_session_timeout",
                        self.effective(b, "idle_in_transaction_session_timeout")[0])
        b.idle_tx_deadline = now + ms / 1000.0 if ms > 0 else None

    def end_transaction(self, b: Backend, now: float) -> None:
        """COMMIT or ROLLBACK: row locks are released."""
        self._release(b)
        b.xact_start, b.idle_tx_deadline = None, None
        b.state, b.state_change = "idle", now

    def lock_table(self, b: Backend, relation: str, now: float) -> None:
        """LOCK TABLE inside b's transaction: concurrent writers of the relation wait until it ends."""
        self.begin(b, now)
        self.table_locks[relation] = b.pid
        if (relation, "*") not in b.locks:
            b.locks.append((relation, "*"))

    def _release(self, b: Backend) -> None:
        for rel, pid in list(self.table_locks.items()):
            if pid == b.pid:
                del self.table_locks[rel]
        for key in b.locks:
            if self.row_locks.get(key) == b.pid:
                del self.row_locks[key]
        b.locks = []
        b.waiting_for = None

    def lock_holder(self, relation: str, key: str) -> Backend | None:
        pid = self.row_locks.get((relation, key))
        return self.backends.get(pid) if pid is not None else None

    def expire_idle(self, now: float) -> list[int]:
        """idle_in_transaction_session_timeout: end the backends whose armed timer ran out (FATAL 25P03)."""
        gone = []
        for b in list(self.backends.values()):
            if b.idle_tx_deadline is not None and b.state == "idle in transaction" and now >= b.idle_tx_deadline:
                self.backends.pop(b.pid, None)
                b.alive = False
                self._release(b)
                self._log((b.idle_tx_deadline, "FATAL:  terminating connection due to idle-in-transaction timeout "
                                               f"(pid {b.pid})"))
                gone.append(b.pid)
        return gone

    def next_idle_deadline(self, now: float) -> float:
        ts = [b.idle_tx_deadline for b in self.backends.values()
              if b.idle_tx_deadline is not None and b.state == "idle in transaction" and b.idle_tx_deadline > now]
        return min(ts) if ts else float("inf")

    def effective(self, backend: Backend | None, name: str) -> tuple[str, str]:
        """(value, source) of a setting as `backend` sees it now; None = a fresh session's view without a role."""
        spec = guc(name)
        if backend is not None:
            if spec.name in backend.session:
                return backend.session[spec.name], "session"
            if spec.name in backend.inherited:
                return backend.inherited[spec.name]
        return self.applied[spec.name]

    def fresh_effective(self, role: str, database: str, name: str) -> tuple[str, str]:
        """The value a brand-new session of role on database would run with (the grader's probe view)."""
        spec = guc(name)
        inherited = self.catalog_for(role, database)
        if spec.name in inherited:
            return inherited[spec.name]
        return self.applied[spec.name]

    def statement_timeout_ms(self, backend: Backend) -> float:
        return setting_ms("statement_timeout", self.effective(backend, "statement_timeout")[0])

    def live_backends(self) -> Iterable[Backend]:
        return (b for b in self.backends.values() if b.alive)

    # ---------------------------------------------------------------- ground truth snapshots (gates)
    def settings_fingerprint(self) -> dict[str, object]:
        """Every durable settings layer, for the scope checks: files, catalog, capacity."""
        return {
            "conf_file": dict(sorted(self.conf_file.items())),
            "auto_conf": dict(sorted(self.auto_conf.items())),
            "db_role_setting": {f"{d or '*'}/{r or '*'}": dict(sorted(v.items()))
                                for (d, r), v in sorted(self.db_role_setting.items())},
            "max_connections": self.applied["max_connections"][0],
            "pending_max_connections": self._file_value("max_connections")[0],
            "role_connlimits": {r.name: r.connlimit for r in sorted(self.roles.values(), key=lambda r: r.name)},
            "database_connlimits": {d.name: d.connlimit for d in sorted(self.databases.values(), key=lambda d: d.name)},
        }

    def data_fingerprint(self, order_limit: int = 10_000) -> dict[str, object]:
        """Row counts, row digests and indexes of the protected tables, and the replication slots."""
        out: dict[str, object] = {}
        for name, t in sorted(self.tables.items()):
            out[name] = {"count": len(t.rows), "ids": [r[0] for r in t.rows],
                         "digests": {r[0]: t.row_digest(r) for r in t.rows[:order_limit]},
                         "indexes": list(t.indexes)}
        out["replication_slots"] = [dict(s) for s in self.replication_slots]
        return out
