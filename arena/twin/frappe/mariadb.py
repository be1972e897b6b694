"""The Frappe twin's MariaDB: system variables in layers, accounts with grants and limits, connection admission.

Built by `arena.twin.frappe.substrate.FrappeSubstrate`; its SQL front end is `arena.twin.frappe.sql` (the
`mysql` client). The web tier (`arena.twin.frappe.web`) asks `admission()` what share of its connection attempts
the server refuses, and `privilege_error()` whether a statement class is allowed.

Layers, as in the real server: a variable's declared value comes from my.cnf (the chart's
`mariadb.primary.configuration`, a DeclaredStore) or the compiled default; SET GLOBAL writes the runtime layer,
which a restart drops. Grants and per-account limits live in the privilege catalog (mysql.global_priv): durable,
so they are a DeclaredStore too, and GRANT/REVOKE change them at once for new statements.

Connections: the Desk API opens one connection per request and holds it for the request, so the account's
concurrent connections are an Erlang loss system. A connection attempt over the account's limit
(max_user_connections: the account's own, else the global) fails with ERROR 1226 at once; over max_connections
with ERROR 1040. The refused share is the Erlang-B blocking probability for the offered load.
"""

from __future__ import annotations

import hashlib
import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from arena.twin.state import UNSET, DeclaredStore
from arena.twin.world import Component
from guardrail.errors import ScenarioError
from guardrail.yamlio import load_model

__all__ = ["VariableSpec", "VariableCatalogue", "erlang_b", "SqlError", "Account", "MariaDB", "PRIVILEGES"]

_CATALOGUE = Path(__file__).with_name("mariadb_variables.yaml")

# Privileges a GRANT ALL PRIVILEGES on a schema expands to (the ones SHOW GRANTS lists individually when partial).
PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "REFERENCES", "INDEX", "ALTER",
              "CREATE TEMPORARY TABLES", "LOCK TABLES", "EXECUTE", "CREATE VIEW", "SHOW VIEW", "CREATE ROUTINE",
              "ALTER ROUTINE", "EVENT", "TRIGGER", "DELETE HISTORY")


class VariableSpec(BaseModel):
    """One system variable: its type, compiled default, bounds and whether SET GLOBAL may change it."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["int", "bool", "enum", "str"]
    default: Any
    min: int | None = None
    max: int | None = None
    values: list[str] = Field(default_factory=list)
    dynamic: bool = True
    scope: Literal["global", "both", "global_ro_session"] = "global"


class VariableCatalogue(BaseModel):
    """The variables the twin models (mariadb_variables.yaml)."""

    model_config = ConfigDict(extra="forbid")

    variables: dict[str, VariableSpec]


@lru_cache(maxsize=1)
def catalogue() -> VariableCatalogue:
    return load_model(VariableCatalogue, _CATALOGUE, error=ScenarioError)


@lru_cache(maxsize=4096)
def _erlang_b_int(n: int, a: float) -> float:
    b = 1.0
    for k in range(1, n + 1):
        b = a * b / (k + a * b)
    return b


def erlang_b(servers: float, erlangs: float) -> float:
    """Blocking probability of an M/G/n/n loss system (insensitive to the hold-time distribution)."""
    if erlangs <= 0:
        return 0.0
    if servers <= 0:
        return 1.0
    # Far above the load the blocking is nil; skip the recursion (max_connections can be large).
    if servers > erlangs + 12 * math.sqrt(erlangs) + 30:
        return 0.0
    a = round(erlangs, 3)
    return _erlang_b_int(int(servers), a)


class SqlError(Exception):
    """A server error as the client shows it: ERROR code (SQLSTATE): message."""

    def __init__(self, code: int, state: str, message: str):
        super().__init__(message)
        self.code, self.state, self.message = code, state, message


class Account:
    """A view of one account's catalog entry (grants and its own MAX_USER_CONNECTIONS)."""

    def __init__(self, store: DeclaredStore, key: str):
        self._store, self.key = store, key

    @property
    def user(self) -> str:
        return self.key.split("@", 1)[0]

    @property
    def host(self) -> str:
        return self.key.split("@", 1)[1]

    @property
    def _entry(self) -> dict[str, Any]:
        return (self._store.get("accounts", {}) or {}).get(self.key, {}) or {}

    @property
    def grants(self) -> dict[str, list[str]]:
        """object ('*.*' or '`db`.*') -> privileges."""
        return self._entry.get("grants") or {}

    @property
    def max_user_connections(self) -> int:
        return int(self._entry.get("max_user_connections", 0) or 0)


def _parse_bool(v: Any) -> bool | None:
    s = str(v).strip().strip("'\"").upper()
    if s in ("1", "ON", "TRUE", "YES"):
        return True
    if s in ("0", "OFF", "FALSE", "NO"):
        return False
    return None


_SUFFIX = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}


class MariaDB(Component):
    """The MariaDB StatefulSet: variables (my.cnf + SET GLOBAL), the privilege catalog, and admission."""

    kind = "StatefulSet"
    container = "mariadb"

    def __init__(self, name: str, *, mycnf: DeclaredStore, catalog: DeclaredStore, site_db: str,
                 site_user: str, tables: dict[str, dict[str, Any]], root_password: str, **kw: Any):
        kw.setdefault("stateful", True)
        kw.setdefault("boot_s", 20.0)
        super().__init__(name, **kw)
        self.mycnf = mycnf
        self.catalog = catalog
        self.site_db = site_db
        self.site_user = site_user
        self.root_password = root_password
        # Table data is durable (InnoDB on the PVC): name -> {rows, checksum}.
        self.tables: dict[str, dict[str, Any]] = {k: dict(v) for k, v in tables.items()}
        self.status: dict[str, float] = {}
        self.threads_by_user: dict[str, float] = {}
        self._cat_version = -1
        self._cat_cache: dict[str, Any] = {}
        # Document tables whose rows another model owns (arena.twin.frappe.backlog): name -> (columns, rows).
        self.doc_tables: Any = None
        self._expand_all()

    def _expand_all(self) -> None:
        """Store `ALL PRIVILEGES` as the privileges it stands for, so a later REVOKE of one of them bites."""
        accs = self.catalog.get("accounts", {}) or {}
        for acc in accs.values():
            g = acc.get("grants") or {}
            for obj, privs in list(g.items()):
                if "ALL PRIVILEGES" in privs:
                    extra = ("SUPER", "RELOAD", "PROCESS") if obj == "*.*" else ()
                    g[obj] = sorted((set(privs) - {"ALL PRIVILEGES"}) | set(PRIVILEGES) | set(extra))
        self.catalog.data["accounts"] = accs

    # --- layers -------------------------------------------------------------------------------------------
    def load_declared(self) -> None:
        cat = catalogue().variables
        for k, spec in cat.items():
            v = self.mycnf.get(k.replace("_", "-"), UNSET)
            if v is UNSET:
                v = self.mycnf.get(k, UNSET)
            self.settings.declare(k, self.coerce(k, v) if v is not UNSET else spec.default)

    def reset_runtime(self) -> None:
        self.status = {"Aborted_connects": 0, "Connection_errors_max_connections": 0, "Max_used_connections": 0,
                       "Threads_connected": 1, "Uptime": 0, "Questions": 0}
        self.threads_by_user = {}

    def var(self, name: str) -> Any:
        return self.settings.get(name)

    def coerce(self, name: str, raw: Any) -> Any:
        """Parse a value as SET GLOBAL or my.cnf would; raises SqlError 1231/1232 on a bad one."""
        spec = catalogue().variables[name]
        s = str(raw).strip()
        if spec.type == "bool":
            b = _parse_bool(s)
            if b is None:
                raise SqlError(1231, "42000", f"Variable '{name}' can't be set to the value of '{s.strip(chr(39))}'")
            return b
        if spec.type == "int":
            t = s.strip("'\"").upper()
            mult = 1
            if t and t[-1] in _SUFFIX:
                mult, t = _SUFFIX[t[-1]], t[:-1]
            try:
                n = int(float(t)) * mult
            except ValueError:
                raise SqlError(1232, "42000", f"Incorrect argument type to variable '{name}'") from None
            # The server clamps out-of-range integers (with a warning), as MariaDB does.
            if spec.min is not None:
                n = max(spec.min, n)
            if spec.max is not None:
                n = min(spec.max, n)
            return n
        if spec.type == "enum":
            t = s.strip("'\"").upper()
            for v in spec.values:
                if v.upper() == t or v.upper().replace("-", "_") == t.replace("-", "_"):
                    return v
            raise SqlError(1231, "42000", f"Variable '{name}' can't be set to the value of '{s.strip(chr(39))}'")
        return s.strip("'\"")

    def set_global(self, name: str, raw: Any) -> None:
        cat = catalogue().variables
        if name not in cat:
            raise SqlError(1193, "HY000", f"Unknown system variable '{name}'")
        spec = cat[name]
        if not spec.dynamic:
            raise SqlError(1238, "HY000", f"Variable '{name}' is a read only variable")
        if str(raw).strip().upper() == "DEFAULT":
            # SET GLOBAL x = DEFAULT restores the compiled default, not the my.cnf value.
            self.settings.set_runtime(name, spec.default)
            return
        self.settings.set_runtime(name, self.coerce(name, raw))

    def origin(self, name: str) -> str:
        """Where the running global value came from, as SYSTEM_VARIABLES.GLOBAL_VALUE_ORIGIN names it: SQL (SET
        GLOBAL, also = DEFAULT), CONFIG (my.cnf) or COMPILE-TIME."""
        if self.settings.layered(name).layer == "runtime":
            return "SQL"
        if self.mycnf.get(name.replace("_", "-"), UNSET) is not UNSET or self.mycnf.get(name, UNSET) is not UNSET:
            return "CONFIG"
        return "COMPILE-TIME"

    @staticmethod
    def show(name: str, v: Any) -> str:
        if isinstance(v, bool):
            return "ON" if v else "OFF"
        return str(v)

    # --- the privilege catalog ----------------------------------------------------------------------------
    def _catalog(self) -> dict[str, Any]:
        """The accounts as stored, read-only; cached per catalog write (a deep copy per request is too slow)."""
        if self._cat_version != self.catalog.writes:
            self._cat_cache = self.catalog.get("accounts", {}) or {}
            self._cat_version = self.catalog.writes
        return self._cat_cache

    def accounts(self) -> list[Account]:
        acc = self.catalog.get("accounts", {}) or {}
        return [Account(self.catalog, k) for k in sorted(acc)]

    def account(self, user: str, host: str = "%") -> Account | None:
        for a in self.accounts():
            if a.user == user and (a.host == host or host == "%" or a.host == "%"):
                return a
        return None

    def grant(self, key: str, privs: list[str], obj: str) -> None:
        if not self._exists(key):
            raise SqlError(1133, "28000", "Can't find any matching row in the user table")
        g = self._grants(key)
        have = set(g.get(obj, []))
        for p in privs:
            if p == "ALL PRIVILEGES":
                have |= set(PRIVILEGES if obj != "*.*" else PRIVILEGES + ("SUPER", "RELOAD", "PROCESS"))
            else:
                have.add(p)
        g[obj] = sorted(have)
        self._set_grants(key, g)

    def revoke(self, key: str, privs: list[str], obj: str) -> None:
        if not self._exists(key):
            raise SqlError(1141, "42000", f"There is no such grant defined for user '{key.split('@')[0]}' on "
                                          f"host '{key.split('@')[1]}'")
        g = self._grants(key)
        have = set(g.get(obj, []))
        if not have:
            raise SqlError(1141, "42000", f"There is no such grant defined for user '{key.split('@')[0]}' on "
                                          f"host '{key.split('@')[1]}'")
        for p in privs:
            if p == "ALL PRIVILEGES":
                have &= {"GRANT OPTION"}  # REVOKE ALL at one level leaves the grant option: it is revoked by name
            else:
                have.discard(p)
        if have:
            g[obj] = sorted(have)
        else:
            g.pop(obj, None)
        self._set_grants(key, g)

    def set_account_limit(self, key: str, n: int) -> None:
        if not self._exists(key):
            raise SqlError(1396, "HY000", f"Operation ALTER USER failed for '{key.split('@')[0]}'@"
                                          f"'{key.split('@')[1]}'")
        accs = self.catalog.get("accounts", {}) or {}
        accs[key]["max_user_connections"] = int(n)
        self.catalog.set("accounts", accs)

    def _exists(self, key: str) -> bool:
        return key in (self.catalog.get("accounts", {}) or {})

    def _grants(self, key: str) -> dict[str, list[str]]:
        acc = (self.catalog.get("accounts", {}) or {}).get(key, {})
        return {k: list(v) for k, v in (acc.get("grants") or {}).items()}

    def _set_grants(self, key: str, g: dict[str, list[str]]) -> None:
        accs = self.catalog.get("accounts", {}) or {}
        accs.setdefault(key, {})["grants"] = g
        self.catalog.set("accounts", accs)

    def account_key(self, user: str) -> str | None:
        for k in sorted(self._catalog()):
            if k.split("@", 1)[0] == user:
                return k
        return None

    def has_privilege(self, user: str, priv: str, db: str) -> bool:
        key = self.account_key(user)
        if key is None:
            return False
        g = self._catalog()[key].get("grants") or {}
        for obj in ("*.*", f"`{db}`.*"):
            if priv in g.get(obj, []) or "ALL PRIVILEGES" in g.get(obj, []):
                return True
        return False

    def is_super(self, user: str) -> bool:
        key = self.account_key(user)
        return key is not None and "SUPER" in (self._catalog()[key].get("grants") or {}).get("*.*", [])

    def privilege_error(self, user: str, priv: str, table: str) -> SqlError | None:
        """Why a statement of class `priv` on the site schema fails for `user`, or None.

        The server refuses a write under read_only before it checks privileges (sql_parse.cc's
        deny_updates_if_read_only_option runs first), so read_only=ON hides a revoked write privilege."""
        if priv in ("INSERT", "UPDATE", "DELETE") and self.var("read_only") and not self.is_super(user):
            return SqlError(1290, "HY000", "The MariaDB server is running with the --read-only option so it "
                                           "cannot execute this statement")
        if not self.has_privilege(user, priv, self.site_db):
            return SqlError(1142, "42000", f"{priv} command denied to user '{user}'@'%' for table "
                                           f"`{self.site_db}`.`{table}`")
        return None

    # --- connection admission -------------------------------------------------------------------------------
    def user_limit(self, user: str) -> int:
        """The connection limit that applies to `user` (0 = none): its own, else the global one."""
        key = self.account_key(user)
        own = int(self._catalog()[key].get("max_user_connections", 0) or 0) if key else 0
        return own or int(self.var("max_user_connections") or 0)

    def admission(self, user: str, erlangs: float) -> tuple[float, int, str]:
        """The share of `user`'s connection attempts refused at this offered load, with the error it gets."""
        limit = self.user_limit(user)
        # One slot above max_connections is kept for SUPER, so the app account sees max_connections.
        total = int(self.var("max_connections"))
        if limit and limit < total:
            return erlang_b(limit, erlangs), 1226, (
                f"User '{user}' has exceeded the 'max_user_connections' resource (current value: {limit})")
        return erlang_b(total, erlangs), 1040, "Too many connections"

    def record_load(self, user: str, erlangs: float, blocked: float, refused: float, code: int) -> None:
        """Book a segment's connection load: the carried load (Little's law) and the refused attempts."""
        limit = self.user_limit(user) or int(self.var("max_connections"))
        carried = erlangs * (1.0 - blocked)
        self.threads_by_user[user] = carried
        self.status["Threads_connected"] = 1 + sum(self.threads_by_user.values())
        peak = min(limit, math.ceil(carried + 3 * math.sqrt(max(carried, 0.0))))
        self.status["Max_used_connections"] = max(self.status["Max_used_connections"], peak + 1)
        if refused > 0:
            self.status["Aborted_connects"] += refused
            if code == 1040:
                self.status["Connection_errors_max_connections"] += refused

    def advance(self, t0: float, t1: float) -> None:
        if self.ready(t1):
            self.status["Uptime"] = self.status.get("Uptime", 0) + (t1 - t0)

    # --- fingerprints and truth -------------------------------------------------------------------------
    def globals_fingerprint(self) -> str:
        eff = {k: self.show(k, v) for k, v in self.settings.effective().items()}
        return _sha(eff)

    def grants_fingerprint(self) -> str:
        return _sha(self.catalog.get("accounts", {}))

    def schema_fingerprint(self) -> str:
        return _sha(sorted(self.tables))

    def truth(self) -> dict[str, Any]:
        out = super().truth()
        # The per-user connection limit the global variable enforces (0 means only max_connections binds).
        out["global_user_limit"] = int(self.var("max_user_connections") or 0) or int(self.var("max_connections"))
        out["site_user_limit"] = self.user_limit(self.site_user) or int(self.var("max_connections"))
        out["fingerprint.globals"] = self.globals_fingerprint()
        out["fingerprint.grants"] = self.grants_fingerprint()
        out["fingerprint.schema"] = self.schema_fingerprint()
        for name, t in sorted(self.tables.items()):
            out[f"table.{name}.rows"] = t.get("rows", 0)
            out[f"table.{name}.checksum"] = t.get("checksum", 0)
        # What the site account may do on its schema right now (grants, then read_only): the Desk's view.
        for priv in ("SELECT", "INSERT", "UPDATE", "DELETE"):
            out[f"site_can.{priv}"] = self.privilege_error(self.site_user, priv, "tabDocType") is None
            out[f"site_grant.{priv}"] = self.has_privilege(self.site_user, priv, self.site_db)
        out["read_only"] = bool(self.var("read_only"))
        for a in self.accounts():
            out[f"account.{a.key}.max_user_connections"] = a.max_user_connections
            for obj, privs in sorted(a.grants.items()):
                out[f"grant.{a.key}.{obj}"] = ",".join(sorted(privs))
        return out

    def config(self) -> dict[str, Any]:
        out = dict(self.settings.effective())
        for a in self.accounts():
            out[f"account.{a.key}.max_user_connections"] = a.max_user_connections
        return out


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()
