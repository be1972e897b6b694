"""The `mysql` client of the Frappe operator shell, and the SQL subset the twin's MariaDB answers.

Registered by `arena.twin.frappe.substrate.FrappeSubstrate.commands()` as `mysql` and `mariadb`; also used by
`kubectl exec mariadb-0 -- mysql ...` and by the faultInit job (`FrappeSubstrate.inject`). Statements act on
`arena.twin.frappe.mariadb.MariaDB` only through its methods, so a SET GLOBAL lands in the runtime layer and a
GRANT in the catalog, exactly where the real server would put them.

Output follows the mariadb client: with `-e` and no terminal it prints tab-separated batch output with a header
line (`-N` drops it, `-t` draws the table, `-E` prints vertically); errors read
`ERROR 1226 (42000) at line 1: ...` and exit 1. Credentials: `-u`/`-p`/`--password=`, else MYSQL_PWD and the
login user (root in the operator pod); host from `-h` or MYSQL_HOST.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from typing import Any, Callable

from arena.twin.frappe.mariadb import PRIVILEGES, MariaDB, SqlError, catalogue

__all__ = ["Result", "SqlSession", "mysql_client", "split_statements"]

Result = tuple[list[str], list[list[str]]] | str | None  # (columns, rows) | "Query OK..." | None


def split_statements(sql: str) -> list[str]:
    """Split on `;` outside quotes and backticks; drop `--` and `#` comment lines."""
    out, buf, q = [], [], None
    for line in sql.splitlines(keepends=True):
        s = line.strip()
        if q is None and (s.startswith("--") or s.startswith("#")):
            continue
        for ch in line:
            if q:
                buf.append(ch)
                if ch == q:
                    q = None
                continue
            if ch in "'\"`":
                q = ch
                buf.append(ch)
            elif ch == ";":
                out.append("".join(buf).strip())
                buf = []
            else:
                buf.append(ch)
    if "".join(buf).strip():
        out.append("".join(buf).strip())
    return [s for s in out if s]


def _like(pattern: str, s: str) -> bool:
    rx = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, s, re.I) is not None


def _unq(s: str) -> str:
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"`":
        return s[1:-1]
    return s


def _account(spec: str) -> str:
    """'user'@'host' (any quoting) -> user@host."""
    m = re.fullmatch(r"\s*([`'\"]?)([^`'\"@]+)\1\s*(?:@\s*([`'\"]?)([^`'\"]+)\3)?\s*", spec)
    if not m:
        raise SqlError(1064, "42000", _syntax(spec))
    return f"{m.group(2)}@{m.group(4) or '%'}"


def _syntax(near: str) -> str:
    near = near.strip()[:80]
    return ("You have an error in your SQL syntax; check the manual that corresponds to your MariaDB server "
            f"version for the right syntax to use near '{near}' at line 1")


class SqlSession:
    """One client connection: a user, a current database, session variables, and the statements it can run."""

    def __init__(self, db: MariaDB, user: str, database: str | None, now: float):
        self.db, self.user, self.database, self.now = db, user, database, now
        self.session: dict[str, Any] = {}
        self._handlers: list[tuple[re.Pattern[str], Callable[[re.Match[str]], Result]]] = [
            (re.compile(r"show\s+(global\s+|session\s+)?variables(?:\s+(like|where)\s+(.+))?", re.I | re.S),
             self._show_vars),
            (re.compile(r"show\s+(global\s+|session\s+)?status(?:\s+like\s+(.+))?", re.I | re.S), self._show_status),
            (re.compile(r"select\s+(.+?)(?:\s+from\s+(.+?))?(?:\s+where\s+(.+?))?", re.I | re.S), self._select),
            (re.compile(r"set\s+(.+)", re.I | re.S), self._set),
            (re.compile(r"grant\s+(.+?)\s+on\s+(\S+)\s+to\s+(.+?)(?:\s+with\s+(.*))?", re.I | re.S), self._grant),
            (re.compile(r"revoke\s+(.+?)\s+on\s+(\S+)\s+from\s+(.+)", re.I | re.S), self._revoke),
            (re.compile(r"show\s+grants(?:\s+for\s+(.+))?", re.I | re.S), self._show_grants),
            (re.compile(r"alter\s+user\s+(.+?)\s+with\s+max_user_connections\s+(\d+)", re.I | re.S),
             self._alter_user),
            (re.compile(r"show\s+databases", re.I), self._show_databases),
            (re.compile(r"show\s+tables", re.I), self._show_tables),
            (re.compile(r"show\s+(full\s+)?processlist", re.I), self._processlist),
            (re.compile(r"use\s+(\S+)", re.I), self._use),
            (re.compile(r"checksum\s+table\s+(.+)", re.I), self._checksum),
            (re.compile(r"flush\s+(privileges|status|tables|hosts)", re.I), lambda m: "Query OK, 0 rows affected"),
            (re.compile(r"(insert|update|delete|truncate)\b(.*)", re.I | re.S), self._dml),
            (re.compile(r"(create|drop|alter)\s+(table|database|index|schema)\b.*", re.I | re.S), self._ddl),
            (re.compile(r"(shutdown|restart)", re.I), self._shutdown),
        ]

    # --- dispatch -------------------------------------------------------------------------------------------
    def execute(self, stmt: str) -> Result:
        s = stmt.strip().rstrip(";").strip()
        if s.endswith("\\G"):
            s = s[:-2]
        for rx, h in self._handlers:
            m = rx.fullmatch(s)
            if m:
                return h(m)
        word = s.split(None, 1)[0] if s else ""
        raise SqlError(1064, "42000", _syntax(s if word.lower() not in ("selec", "sett") else s))

    # --- variables ------------------------------------------------------------------------------------------
    def _var_rows(self, scope: str) -> list[tuple[str, str]]:
        rows = []
        for k in sorted(catalogue().variables):
            v = self.session.get(k, self.db.var(k)) if scope == "session" else self.db.var(k)
            rows.append((k, MariaDB.show(k, v)))
        return rows

    def _system_variable_rows(self) -> list[list[str]]:
        """information_schema.SYSTEM_VARIABLES: each variable's session and global values, where the global one
        came from (GLOBAL_VALUE_ORIGIN: COMPILE-TIME, CONFIG for my.cnf, SQL for SET GLOBAL) and its compiled
        DEFAULT_VALUE, as MariaDB reports them."""
        rows = []
        for k, spec in sorted(catalogue().variables.items()):
            g = self.db.var(k)
            sess = self.session.get(k, g) if spec.scope != "global" else None
            rtype = {"int": "BIGINT UNSIGNED", "bool": "BOOLEAN", "enum": "ENUM", "str": "VARCHAR"}[spec.type]
            rows.append([k.upper(), None if sess is None else MariaDB.show(k, sess), MariaDB.show(k, g),
                         self.db.origin(k), MariaDB.show(k, spec.default),
                         "GLOBAL" if spec.scope == "global" else "SESSION", rtype,
                         None if spec.min is None else str(spec.min), None if spec.max is None else str(spec.max),
                         ",".join(spec.values) or None, "NO" if spec.dynamic else "YES"])
        return rows

    def _show_vars(self, m: re.Match[str]) -> Result:
        scope = "global" if (m.group(1) or "").strip().lower() == "global" else "session"
        rows = self._var_rows(scope)
        if m.group(2):
            rows = self._filter(rows, m.group(2).lower(), m.group(3), "variable_name")
        return ["Variable_name", "Value"], [list(r) for r in rows]

    def _filter(self, rows: list[tuple[str, str]], how: str, expr: str, col: str) -> list[tuple[str, str]]:
        expr = expr.strip()
        if how == "like":
            pat = _unq(expr)
            return [r for r in rows if _like(pat, r[0])]
        m = re.fullmatch(rf"`?{col}`?\s*(=|like)\s*(.+)", expr, re.I)
        if m:
            pat = _unq(m.group(2))
            return [r for r in rows if (_like(pat, r[0]) if m.group(1).lower() == "like" else r[0].lower() == pat.lower())]
        m = re.fullmatch(rf"`?{col}`?\s+in\s*\((.+)\)", expr, re.I)
        if m:
            names = {_unq(x).lower() for x in m.group(1).split(",")}
            return [r for r in rows if r[0].lower() in names]
        raise SqlError(1064, "42000", _syntax(expr))

    def _status_rows(self) -> list[tuple[str, str]]:
        st = dict(self.db.status)
        return sorted((k, str(int(round(v)))) for k, v in st.items())

    def _show_status(self, m: re.Match[str]) -> Result:
        rows = self._status_rows()
        if m.group(2):
            pat = _unq(m.group(2))
            rows = [r for r in rows if _like(pat, r[0])]
        return ["Variable_name", "Value"], [list(r) for r in rows]

    def _set(self, m: re.Match[str]) -> Result:
        body = m.group(1).strip()
        if re.match(r"(password|names|character\s+set|transaction|role|default\s+role)\b", body, re.I):
            return None
        for part in _split_commas(body):
            pm = re.fullmatch(r"(?:(global|session|local)\s+|@@(global|session|local)\.|@@)?([a-z_][a-z0-9_]*)\s*:?=\s*(.+)",
                              part.strip(), re.I | re.S)
            if not pm:
                raise SqlError(1064, "42000", _syntax(part))
            scope = (pm.group(1) or pm.group(2) or "session").lower()
            name, raw = pm.group(3).lower(), pm.group(4).strip()
            cat = catalogue().variables
            if name not in cat:
                raise SqlError(1193, "HY000", f"Unknown system variable '{name}'")
            spec = cat[name]
            if scope == "global":
                if not self.db.is_super(self.user):
                    raise SqlError(1227, "42000", "Access denied; you need (at least one of) the SUPER, "
                                                  "SYSTEM VARIABLES ADMIN privilege(s) for this operation")
                self.db.set_global(name, raw)
            else:
                if spec.scope == "global":
                    raise SqlError(1229, "HY000", f"Variable '{name}' is a GLOBAL variable and should be set "
                                                  "with SET GLOBAL")
                if spec.scope == "global_ro_session" or not spec.dynamic:
                    raise SqlError(1238, "HY000", f"Variable '{name}' is a read only variable")
                self.session[name] = self.db.coerce(name, raw)
        return None

    # --- SELECT ---------------------------------------------------------------------------------------------
    def _select(self, m: re.Match[str]) -> Result:
        cols_txt, frm, where = m.group(1), m.group(2), m.group(3)
        if frm is None:
            cols, row = [], []
            for item in _split_commas(cols_txt):
                expr, alias = _alias(item)
                cols.append(alias or expr)
                row.append(self._scalar(expr))
            return cols, [row]
        dm = re.fullmatch(r"(?:`?(\w+)`?\.)?`(tab[^`]+)`", frm.strip())
        if dm and self.db.doc_tables is not None and self.db.doc_tables(dm.group(2)) is not None:
            err = self.db.privilege_error(self.user, "SELECT", dm.group(2))
            if err:
                raise err
            cols, rows = self.db.doc_tables(dm.group(2))
            return self._project(cols_txt, cols, rows, where)
        table = _unq(frm.strip().split()[0]).lower().replace("`", "")
        if table in ("mysql.user", "mysql.global_priv"):
            return self._select_users(cols_txt, where)
        if table in ("information_schema.global_variables", "information_schema.session_variables"):
            rows = self._var_rows("global" if "global" in table else "session")
            if where:
                rows = self._filter(rows, "where", where, "variable_name")
            return self._project(cols_txt, ["VARIABLE_NAME", "VARIABLE_VALUE"],
                                 [[k.upper(), v] for k, v in rows])
        if table == "information_schema.system_variables":
            return self._project(cols_txt, _SYSVAR_COLS, self._system_variable_rows(), where)
        if table in ("information_schema.global_status",):
            rows = self._status_rows()
            if where:
                rows = self._filter(rows, "where", where, "variable_name")
            return self._project(cols_txt, ["VARIABLE_NAME", "VARIABLE_VALUE"], [[k.upper(), v] for k, v in rows])
        if table == "information_schema.processlist":
            cols, rows = self._processlist_rows()
            return self._project(cols_txt, [c.upper() for c in cols], rows, where)
        name = table.split(".")[-1]
        if name in self.db.tables:
            err = self.db.privilege_error(self.user, "SELECT", name)
            if err:
                raise err
            if re.fullmatch(r"count\(\s*(\*|1|name)\s*\)", cols_txt.strip(), re.I):
                return [cols_txt.strip()], [[str(self.db.tables[name].get("rows", 0))]]
            raise SqlError(1064, "42000", _syntax(cols_txt))
        db = table.split(".")[0] if "." in table else (self.database or "")
        raise SqlError(1146, "42S02", f"Table '{db}.{table.split('.')[-1]}' doesn't exist")

    def _scalar(self, expr: str) -> str:
        e = expr.strip()
        vm = re.fullmatch(r"@@(?:(global|session|local)\.)?([a-z_][a-z0-9_]*)", e, re.I)
        if vm:
            name = vm.group(2).lower()
            if name not in catalogue().variables:
                raise SqlError(1193, "HY000", f"Unknown system variable '{name}'")
            scope = (vm.group(1) or "session").lower()
            v = self.db.var(name) if scope == "global" else self.session.get(name, self.db.var(name))
            return _num(v)
        low = e.lower()
        if low in ("version()",):
            return str(self.db.var("version"))
        if low in ("user()", "current_user()", "current_user"):
            return f"{self.user}@%"
        if low in ("database()", "schema()"):
            return self.database or "NULL"
        if low in ("now()", "current_timestamp()", "sysdate()"):
            from arena.twin.world import _ts

            return _ts(self.now)[:19].replace("T", " ")
        if re.fullmatch(r"-?\d+(\.\d+)?", e):
            return e
        if re.fullmatch(r"'[^']*'", e):
            return e[1:-1]
        raise SqlError(1054, "42S22", f"Unknown column '{_unq(e)}' in 'SELECT'")

    def _select_users(self, cols_txt: str, where: str | None) -> Result:
        if not self.db.is_super(self.user):
            raise SqlError(1142, "42000", f"SELECT command denied to user '{self.user}'@'%' for table `mysql`.`user`")
        cols = ["Host", "User", "max_user_connections", "max_connections", "Super_priv"]
        rows = [[a.host, a.user, str(a.max_user_connections), "0",
                 "Y" if "SUPER" in a.grants.get("*.*", []) else "N"] for a in self.db.accounts()]
        return self._project(cols_txt, cols, rows, where)

    def _project(self, cols_txt: str, cols: list[str], rows: list[list[str]], where: str | None = None) -> Result:
        if where:
            wm = re.fullmatch(r"`?(\w+)`?\s*(=|like)\s*(.+)", where.strip(), re.I)
            if not wm:
                raise SqlError(1064, "42000", _syntax(where))
            low = [c.lower() for c in cols]
            if wm.group(1).lower() not in low:
                raise SqlError(1054, "42S22", f"Unknown column '{wm.group(1)}' in 'WHERE'")
            i = low.index(wm.group(1).lower())
            pat = _unq(wm.group(3))
            rows = [r for r in rows if (_like(pat, r[i]) if wm.group(2).lower() == "like" else r[i].lower() == pat.lower())]
        if cols_txt.strip() == "*":
            return cols, rows
        if re.fullmatch(r"count\(\s*\*\s*\)", cols_txt.strip(), re.I):
            return ["COUNT(*)"], [[str(len(rows))]]
        want, heads = [], []
        low = [c.lower() for c in cols]
        for item in _split_commas(cols_txt):
            expr, alias = _alias(item)
            name = _unq(expr).lower()
            if name not in low:
                raise SqlError(1054, "42S22", f"Unknown column '{_unq(expr)}' in 'SELECT'")
            want.append(low.index(name))
            heads.append(alias or _unq(expr))
        return heads, [[r[i] for i in want] for r in rows]

    # --- grants and accounts --------------------------------------------------------------------------------
    def _privs(self, text: str) -> list[str]:
        out = []
        for p in _split_commas(text):
            p = re.sub(r"\s+", " ", p.strip().upper())
            if p in ("ALL", "ALL PRIVILEGES"):
                out.append("ALL PRIVILEGES")
            elif p in PRIVILEGES or p in ("SUPER", "RELOAD", "PROCESS", "USAGE", "GRANT OPTION", "FILE",
                                          "REPLICATION SLAVE", "REPLICATION CLIENT", "SHUTDOWN", "CREATE USER"):
                out.append(p)
            else:
                raise SqlError(1064, "42000", _syntax(p))
        return [p for p in out if p != "USAGE"]

    def _object(self, text: str) -> str:
        t = text.strip().replace("`", "").replace("'", "")
        if t in ("*.*",):
            return "*.*"
        m = re.fullmatch(r"([A-Za-z0-9_$]+)\.\*", t)
        if m:
            return f"`{m.group(1)}`.*"
        m = re.fullmatch(r"([A-Za-z0-9_$]+)\.([A-Za-z0-9_$]+)", t)
        if m:
            return f"`{m.group(1)}`.`{m.group(2)}`"
        if t == "*":
            return f"`{self.database}`.*" if self.database else "*.*"
        raise SqlError(1064, "42000", _syntax(text))

    def _need_grant_option(self) -> None:
        if not self.db.is_super(self.user):
            raise SqlError(1044, "42000", f"Access denied for user '{self.user}'@'%' to database 'mysql'")

    def _grant(self, m: re.Match[str]) -> Result:
        self._need_grant_option()
        privs, obj = self._privs(m.group(1)), self._object(m.group(2))
        # WITH GRANT OPTION is a privilege of its own (mysql.db Grant_priv: the account may pass its privileges
        # on); WITH MAX_USER_CONNECTIONS n sets the account's limit, as ALTER USER does.
        limit = None
        for opt in re.findall(r"grant\s+option|max_\w+\s+\d+|\S+", m.group(4) or "", re.I):
            if re.fullmatch(r"grant\s+option", opt, re.I):
                privs = privs + ["GRANT OPTION"]
            elif re.fullmatch(r"max_user_connections\s+\d+", opt, re.I):
                limit = int(opt.split()[-1])
            elif re.fullmatch(r"max_(queries|updates|connections)_per_hour\s+\d+|max_statement_time\s+\d+", opt,
                              re.I):
                raise SqlError(1235, "42000", f"The twin does not model the resource limit '{opt.split()[0]}'")
            else:
                raise SqlError(1064, "42000", _syntax(opt))
        for acc in _split_commas(m.group(3)):
            key = _account(re.split(r"\s+identified\s+", acc, flags=re.I)[0])
            self.db.grant(key, privs, obj)
            if limit is not None:
                self.db.set_account_limit(key, limit)
        return "Query OK, 0 rows affected"

    def _revoke(self, m: re.Match[str]) -> Result:
        self._need_grant_option()
        privs, obj = self._privs(m.group(1)), self._object(m.group(2))
        for acc in _split_commas(m.group(3)):
            self.db.revoke(_account(acc), privs, obj)
        return "Query OK, 0 rows affected"

    def _show_grants(self, m: re.Match[str]) -> Result:
        key = _account(m.group(1)) if m.group(1) and m.group(1).strip().lower() not in ("current_user",
                                                                                        "current_user()") \
            else self.db.account_key(self.user)
        acc = next((a for a in self.db.accounts() if a.key == key), None)
        if acc is None:
            u, h = (key or "@").split("@", 1)
            raise SqlError(1141, "42000", f"There is no such grant defined for user '{u}' on host '{h}'")
        lines = []
        g = acc.grants
        base = g.get("*.*", [])
        head = _grant_text(base) if base else "USAGE"
        limit = f" WITH MAX_USER_CONNECTIONS {acc.max_user_connections}" if acc.max_user_connections else ""
        lines.append(f"GRANT {head} ON *.* TO `{acc.user}`@`{acc.host}`" + (
            " IDENTIFIED BY PASSWORD '*" + hashlib.sha1(acc.user.encode()).hexdigest()[:40].upper() + "'")
            + limit)
        if "GRANT OPTION" in base:
            lines[0] += " WITH GRANT OPTION"
        for obj, privs in sorted(g.items()):
            if obj != "*.*" and privs:
                lines.append(f"GRANT {_grant_text(privs)} ON {obj} TO `{acc.user}`@`{acc.host}`"
                             + (" WITH GRANT OPTION" if "GRANT OPTION" in privs else ""))
        return [f"Grants for {acc.user}@{acc.host}"], [[x] for x in lines]

    def _alter_user(self, m: re.Match[str]) -> Result:
        self._need_grant_option()
        self.db.set_account_limit(_account(m.group(1)), int(m.group(2)))
        return "Query OK, 0 rows affected"

    # --- catalog reads and data ---------------------------------------------------------------------------
    def _show_databases(self, m: re.Match[str]) -> Result:
        dbs = ["information_schema", "mysql", "performance_schema", "sys"]
        if self.db.is_super(self.user) or self.db.has_privilege(self.user, "SELECT", self.db.site_db):
            dbs.append(self.db.site_db)
        return ["Database"], [[d] for d in sorted(dbs)]

    def _show_tables(self, m: re.Match[str]) -> Result:
        if not self.database:
            raise SqlError(1046, "3D000", "No database selected")
        if self.database != self.db.site_db:
            return [f"Tables_in_{self.database}"], []
        return [f"Tables_in_{self.database}"], [[t] for t in sorted(self.db.tables)]

    def _use(self, m: re.Match[str]) -> Result:
        name = _unq(m.group(1))
        if name not in (self.db.site_db, "mysql", "information_schema", "performance_schema", "sys"):
            raise SqlError(1049, "42000", f"Unknown database '{name}'")
        self.database = name
        return None

    def _processlist_rows(self) -> tuple[list[str], list[list[str]]]:
        cols = ["Id", "User", "Host", "db", "Command", "Time", "State", "Info", "Progress"]
        rows = [["7", self.user, "10.42.0.9:51234", self.database or "NULL", "Query", "0", "starting",
                 "SHOW PROCESSLIST", "0.000"]]
        n = 100
        for user, busy in sorted(self.db.threads_by_user.items()):
            for _ in range(int(round(busy))):
                n += 1
                rows.append([str(n), user, f"10.42.0.{20 + n % 7}:{40000 + n}", self.db.site_db, "Sleep", "0", "",
                             "NULL", "0.000"])
        return cols, rows

    def _processlist(self, m: re.Match[str]) -> Result:
        return self._processlist_rows()

    def _checksum(self, m: re.Match[str]) -> Result:
        rows = []
        for t in _split_commas(m.group(1)):
            name = _unq(t.strip()).split(".")[-1].replace("`", "")
            tab = self.db.tables.get(name)
            full = f"{self.database or self.db.site_db}.{name}"
            rows.append([full, str(tab["checksum"]) if tab else "NULL"])
        return ["Table", "Checksum"], rows

    def _dml(self, m: re.Match[str]) -> Result:
        verb = m.group(1).upper()
        rest = m.group(2)
        tm = re.match(r"\s*(?:into\s+|from\s+|table\s+)?`?([\w.]+)`?", rest, re.I)
        name = (tm.group(1) if tm else "").split(".")[-1]
        if name not in self.db.tables:
            raise SqlError(1146, "42S02", f"Table '{self.database or self.db.site_db}.{name}' doesn't exist")
        priv = {"TRUNCATE": "DROP"}.get(verb, verb)
        err = self.db.privilege_error(self.user, priv, name)
        if err:
            raise err
        tab = self.db.tables[name]
        before = int(tab.get("rows", 0))
        if verb == "TRUNCATE" or (verb == "DELETE" and not re.search(r"\bwhere\b", rest, re.I)):
            tab["rows"] = 0
            n = before
        elif verb == "INSERT":
            n = max(1, len(re.findall(r"\)\s*,\s*\(", rest)) + 1)
            tab["rows"] = before + n
        else:
            # The twin does not evaluate predicates: a filtered write touches one row.
            n = min(1, before)
            if verb == "DELETE":
                tab["rows"] = before - n
        if n:
            tab["checksum"] = int(hashlib.sha256(f"{tab['checksum']}/{verb}/{rest}".encode()).hexdigest()[:9], 16)
        return f"Query OK, {n} row{'s' if n != 1 else ''} affected"

    def _ddl(self, m: re.Match[str]) -> Result:
        raise SqlError(1142, "42000", f"{m.group(1).upper()} command denied to user '{self.user}'@'%' for table "
                                      f"`{self.db.site_db}`.`*` (DDL is not modelled by this twin)")

    def _shutdown(self, m: re.Match[str]) -> Result:
        raise SqlError(1227, "42000", "Access denied; you need (at least one of) the SHUTDOWN privilege(s) for "
                                      "this operation")


_SYSVAR_COLS = ["VARIABLE_NAME", "SESSION_VALUE", "GLOBAL_VALUE", "GLOBAL_VALUE_ORIGIN", "DEFAULT_VALUE",
                "VARIABLE_SCOPE", "VARIABLE_TYPE", "NUMERIC_MIN_VALUE", "NUMERIC_MAX_VALUE", "ENUM_VALUE_LIST",
                "READ_ONLY"]


def _grant_text(privs: list[str]) -> str:
    ps = set(privs)
    if set(PRIVILEGES) <= ps:
        return "ALL PRIVILEGES"
    order = list(PRIVILEGES) + ["SUPER", "RELOAD", "PROCESS"]  # GRANT OPTION is shown as WITH GRANT OPTION
    return ", ".join(p for p in order if p in ps) or "USAGE"


def _split_commas(text: str) -> list[str]:
    out, buf, depth, q = [], [], 0, None
    for ch in text:
        if q:
            buf.append(ch)
            if ch == q:
                q = None
            continue
        if ch in "'\"`":
            q = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(buf))
            buf = []
            continue
        buf.append(ch)
    out.append("".join(buf))
    return [x.strip() for x in out if x.strip()]


def _alias(item: str) -> tuple[str, str | None]:
    m = re.fullmatch(r"(.+?)\s+(?:as\s+)?([`'\"]?[A-Za-z_][\w]*[`'\"]?)", item.strip(), re.I)
    if m and not m.group(1).strip().endswith((".", "@")) and "(" not in m.group(2):
        return m.group(1).strip(), _unq(m.group(2))
    return item.strip(), None


def _num(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


# --- the client program -----------------------------------------------------------------------------------

def _table_fmt(cols: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+\n"
    out = line + "|" + "|".join(f" {c.ljust(w)} " for c, w in zip(cols, widths)) + "|\n" + line
    for r in rows:
        out += "|" + "|".join(f" {v.ljust(w) if not v.lstrip('-').isdigit() else v.rjust(w)} "
                              for v, w in zip(r, widths)) + "|\n"
    return out + (line if rows else "")


def _vertical(cols: list[str], rows: list[list[str]]) -> str:
    w = max(len(c) for c in cols)
    out = ""
    for i, r in enumerate(rows, 1):
        out += f"{'*' * 27} {i}. row {'*' * 27}\n"
        out += "".join(f"{c.rjust(w)}: {v}\n" for c, v in zip(cols, r))
    return out


def mysql_client(argv: list[str], stdin: str, env: dict[str, str], resolve: Callable[[str], MariaDB | None],
                 now: float, default_host: str | None = None) -> tuple[str, str, int, float]:
    """Run the mariadb client: parse options, connect, execute, format. Returns (out, err, code, seconds)."""
    prog = argv[0].rsplit("/", 1)[-1]
    host = env.get("MYSQL_HOST") or default_host or "localhost"
    user = env.get("USER", "root")
    password = env.get("MYSQL_PWD")
    database = None
    execute = None
    fmt = "batch"
    header = True
    force = False
    args = argv[1:]
    i = 0
    while i < len(args):
        a = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else None
        if a in ("-h", "--host") and nxt is not None:
            host, i = nxt, i + 2
            continue
        if a in ("-u", "--user") and nxt is not None:
            user, i = nxt, i + 2
            continue
        if a in ("-e", "--execute") and nxt is not None:
            execute, i = nxt, i + 2
            continue
        if a in ("-D", "--database") and nxt is not None:
            database, i = nxt, i + 2
            continue
        if a in ("-P", "--port") and nxt is not None:
            i += 2
            continue
        if a.startswith("--host="):
            host = a.split("=", 1)[1]
        elif a.startswith("--user="):
            user = a.split("=", 1)[1]
        elif a.startswith("--password="):
            password = a.split("=", 1)[1]
        elif a.startswith("--execute="):
            execute = a.split("=", 1)[1]
        elif a.startswith("--database="):
            database = a.split("=", 1)[1]
        elif a.startswith("--port=") or a.lower() == "--protocol=tcp" or a in ("--ssl=0", "--skip-ssl", "--no-auto-rehash", "-A",
                                               "--silent", "--batch", "-B", "-r", "--raw", "--unbuffered", "-n"):
            pass
        elif a.startswith("-h") and len(a) > 2:
            host = a[2:]
        elif a.startswith("-u") and len(a) > 2:
            user = a[2:]
        elif a.startswith("-p") and len(a) > 2:
            password = a[2:]
        elif a in ("-p", "--password"):
            return "", f"{prog}: Cannot read the password: no terminal in this shell; use -pPASSWORD or MYSQL_PWD\n", \
                1, 0.0
        elif a in ("-t", "--table"):
            fmt = "table"
        elif a in ("-E", "--vertical"):
            fmt = "vertical"
        elif a in ("-N", "--skip-column-names"):
            header = False
        elif a in ("-s",):
            header = False
        elif a in ("-f", "--force"):
            force = True
        elif a.startswith("-e") and len(a) > 2:
            execute = a[2:]
        elif a.startswith("-") and a != "-":
            return "", f"{prog}: unknown option '{a}'\n", 7, 0.0
        else:
            database = a
        i += 1
    sql = execute if execute is not None else stdin
    server = resolve(host)
    if server is None and host in ("localhost", ""):
        return "", ("ERROR 2002 (HY000): Can't connect to local server through socket '/run/mysqld/mysqld.sock' "
                    "(2)\n"), 1, 0.05
    if server is None:
        return "", f"ERROR 2005 (HY000): Unknown server host '{host}' (-2)\n", 1, 0.05
    if not server.ready(now):
        return "", f"ERROR 2002 (HY000): Can't connect to server on '{host}' (115)\n", 1, 1.0
    ok_user = (user == "root" and password == server.root_password)
    if not ok_user:
        used = "YES" if password else "NO"
        return "", f"ERROR 1045 (28000): Access denied for user '{user}'@'10.42.0.9' (using password: {used})\n", \
            1, 0.05
    if database and database not in (server.site_db, "mysql", "information_schema", "performance_schema", "sys"):
        return "", f"ERROR 1049 (42000): Unknown database '{database}'\n", 1, 0.05
    sess = SqlSession(server, user, database, now)
    out: list[str] = []
    err = ""
    code = 0
    stmts = split_statements(sql)
    for n, stmt in enumerate(stmts, 1):
        vertical = fmt == "vertical" or stmt.rstrip().rstrip(";").endswith("\\G")
        try:
            res = sess.execute(stmt)
        except SqlError as e:
            line = f" at line {n}" if execute is not None or stdin else ""
            err += f"ERROR {e.code} ({e.state}){line}: {e.message}\n"
            code = 1
            if not force:
                break
            continue
        if isinstance(res, tuple):
            cols, rows = res
            if vertical:
                out.append(_vertical(cols, rows))
            elif fmt == "table":
                if rows:
                    out.append(_table_fmt(cols, rows))
            else:
                if header and rows:
                    out.append("\t".join(cols) + "\n")
                out += ["\t".join(r) + "\n" for r in rows]
    return "".join(out), err, code, 0.05 + 0.01 * len(stmts)


def resolve_by(hosts: dict[str, MariaDB]) -> Callable[[str], MariaDB | None]:
    def resolve(host: str) -> MariaDB | None:
        for pat, db in hosts.items():
            if fnmatch.fnmatchcase(host, pat):
                return db
        return None

    return resolve
