"""A PostgreSQL SQL subset over the twin's `PostgresServer`, with psql-shaped results.

Sits between the psql front end (`arena.twin.pg.psql`) and the server model (`arena.twin.pg.postgres`).
It parses what an operator types during the Saleor and slack-spine incidents: SELECT over the system views (pg_stat_activity,
pg_settings, pg_db_role_setting, pg_roles, pg_database, pg_replication_slots, pg_file_settings) and the Saleor
tables, with WHERE, JOIN ... ON, ORDER BY, LIMIT and the admin functions (pg_terminate_backend, pg_reload_conf,
pg_sleep, current_setting, set_config); SHOW, SET, RESET; ALTER ROLE / ALTER DATABASE / ALTER SYSTEM; BEGIN and
COMMIT. Anything else gets the error PostgreSQL prints. Semantics come from the server model, never from the
text of a statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from arena.twin.pg.postgres import (
    GUCS,
    Backend,
    PostgresServer,
    SettingError,
    format_guc_value,
    guc,
    setting_ms,
)

__all__ = ["SQLError", "SelfTerminated", "Result", "SqlSession", "split_statements"]


class SQLError(Exception):
    """An ERROR PostgreSQL would return; `sqlstate` as in the protocol (42601 syntax, 57014 cancel, ...)."""

    def __init__(self, message: str, sqlstate: str = "42601", position: int | None = None, hint: str = "",
                 duration_s: float = 0.0):
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate
        self.position = position
        self.hint = hint
        self.duration_s = duration_s  # how long the statement ran before it failed (a timeout's wait)


@dataclass
class Result:
    """One statement's result: a row set (columns + rows) or a command tag, and the virtual time it took."""

    tag: str = ""
    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    duration_s: float = 0.0
    notices: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------ tokenizer
_TOKEN = re.compile(
    r"""
    (?P<ws>\s+|--[^\n]*)
  | (?P<str>'(?:[^']|'')*')
  | (?P<ident>"(?:[^"]|"")+")
  | (?P<num>\d+(?:\.\d+)?)
  | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
  | (?P<op><>|!=|<=|>=|::|\|\||[=<>(),.*;+\-/\[\]])
    """,
    re.X,
)


@dataclass(frozen=True)
class Tok:
    kind: str  # str | ident | num | word | op | end
    text: str
    pos: int

    @property
    def up(self) -> str:
        return self.text.upper() if self.kind == "word" else self.text


def tokenize(sql: str) -> list[Tok]:
    out: list[Tok] = []
    i = 0
    while i < len(sql):
        m = _TOKEN.match(sql, i)
        if not m:
            raise SQLError(f'syntax error at or near "{sql[i]}"', position=i + 1)
        kind = m.lastgroup or "ws"
        if kind != "ws":
            text = m.group()
            if kind == "str":
                text = text[1:-1].replace("''", "'")
            elif kind == "ident":
                text = text[1:-1].replace('""', '"')
            out.append(Tok(kind, text, m.start()))
        i = m.end()
    out.append(Tok("end", "", len(sql)))
    return out


def split_statements(text: str) -> list[str]:
    """Split on semicolons outside quotes and comments (what psql sends as separate statements)."""
    parts, buf, i, n = [], [], 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"":
            j = i + 1
            while j < n:
                if text[j] == c:
                    if j + 1 < n and text[j + 1] == c:
                        j += 2
                        continue
                    break
                j += 1
            buf.append(text[i:j + 1])
            i = j + 1
            continue
        if c == "-" and text.startswith("--", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if c == ";":
            stmt = "".join(buf).strip()
            if stmt:
                parts.append(stmt)
            buf = []
            i += 1
            continue
        buf.append(c)
        i += 1
    stmt = "".join(buf).strip()
    if stmt:
        parts.append(stmt)
    return parts


# ------------------------------------------------------------------------------------------------ expressions
@dataclass
class Expr:
    op: str  # lit | col | func | bin | not | neg | in | isnull | star | cast | array
    args: list[Any] = field(default_factory=list)
    name: str = ""  # column or function name, or operator


class Parser:
    """Recursive descent over tokens: statements and expressions of the supported subset."""

    def __init__(self, sql: str):
        self.sql = sql
        self.toks = tokenize(sql)
        self.i = 0

    # -- cursor helpers
    @property
    def tok(self) -> Tok:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def error(self, tok: Tok | None = None) -> SQLError:
        t = tok or self.tok
        if t.kind == "end":
            return SQLError("syntax error at end of input", position=t.pos + 1)
        return SQLError(f'syntax error at or near "{t.text}"', position=t.pos + 1)

    def accept(self, *words: str) -> bool:
        if self.tok.up in words and self.tok.kind in ("word", "op"):
            self.i += 1
            return True
        return False

    def expect(self, *words: str) -> Tok:
        t = self.tok
        if t.up in words and t.kind in ("word", "op"):
            self.i += 1
            return t
        raise self.error()

    def name(self) -> str:
        t = self.tok
        if t.kind in ("word", "ident"):
            self.i += 1
            return t.text if t.kind == "ident" else t.text.lower()
        raise self.error()

    def value_text(self) -> str:
        """A setting value as SET/ALTER accept it: a number, a string, a word; DEFAULT is None handled by caller."""
        t = self.tok
        if t.kind in ("str", "num", "word", "ident"):
            self.i += 1
            text = t.text
            # 150 ms written as two tokens: 150 ms is not valid SQL, but '150ms' and 150 are.
            return text
        if t.kind == "op" and t.text == "-" and self.peek().kind == "num":
            self.i += 2
            return "-" + self.toks[self.i - 1].text
        raise self.error()

    def subquery_text(self) -> str:
        """A parenthesised SELECT: its text, re-parsed where it is evaluated (it may refer to the outer row)."""
        self.expect("(")
        start, depth = self.tok.pos, 1
        while depth:
            t = self.tok
            if t.kind == "end":
                raise self.error()
            if t.kind == "op" and t.text == "(":
                depth += 1
            elif t.kind == "op" and t.text == ")":
                depth -= 1
            self.i += 1
        return self.sql[start:self.toks[self.i - 1].pos]

    def window(self, fn: Expr) -> Expr:
        """fn OVER ([PARTITION BY e, ...] [ORDER BY e [ASC|DESC], ...])"""
        self.expect("(")
        part: list[Expr] = []
        order: list[tuple[Expr, bool]] = []
        if self.accept("PARTITION"):
            self.expect("BY")
            part.append(self.expr())
            while self.accept(","):
                part.append(self.expr())
        if self.accept("ORDER"):
            self.expect("BY")
            while True:
                e = self.expr()
                desc = bool(self.accept("DESC"))
                if not desc:
                    self.accept("ASC")
                order.append((e, desc))
                if not self.accept(","):
                    break
        self.expect(")")
        if fn.name not in ("row_number", "rank", "dense_rank"):
            raise SQLError(f"the twin does not model window function {fn.name}", sqlstate="0A000")
        return Expr("window", [fn, part, order], fn.name)

    def at_end(self) -> bool:
        return self.tok.kind == "end"

    def done(self) -> None:
        if not self.at_end():
            raise self.error()

    # -- expressions (precedence: OR < AND < NOT < comparison < additive < unary < primary)
    def expr(self) -> Expr:
        left = self.and_expr()
        while self.accept("OR"):
            left = Expr("bin", [left, self.and_expr()], "OR")
        return left

    def and_expr(self) -> Expr:
        left = self.not_expr()
        while self.accept("AND"):
            left = Expr("bin", [left, self.not_expr()], "AND")
        return left

    def not_expr(self) -> Expr:
        if self.accept("NOT"):
            return Expr("not", [self.not_expr()])
        return self.cmp_expr()

    def cmp_expr(self) -> Expr:
        left = self.add_expr()
        t = self.tok
        if t.kind == "op" and t.text in ("=", "<>", "!=", "<", ">", "<=", ">="):
            self.i += 1
            return Expr("bin", [left, self.add_expr()], "<>" if t.text == "!=" else t.text)
        if self.accept("IS"):
            neg = self.accept("NOT")
            self.expect("NULL")
            e = Expr("isnull", [left])
            return Expr("not", [e]) if neg else e
        neg = False
        if t.up == "NOT" and self.peek().up in ("IN", "LIKE", "ILIKE"):
            self.i += 1
            neg = True
        if self.accept("IN"):
            if self.tok.kind == "op" and self.tok.text == "(" and self.peek().up == "SELECT":
                e = Expr("in", [left, Expr("subquery", [self.subquery_text()], "set")])
                return Expr("not", [e]) if neg else e
            self.expect("(")
            items = [self.expr()]
            while self.accept(","):
                items.append(self.expr())
            self.expect(")")
            e = Expr("in", [left, *items])
            return Expr("not", [e]) if neg else e
        if self.tok.up in ("LIKE", "ILIKE"):
            op = self.tok.up
            self.i += 1
            e = Expr("bin", [left, self.add_expr()], op)
            return Expr("not", [e]) if neg else e
        return left

    def add_expr(self) -> Expr:
        left = self.unary()
        while self.tok.kind == "op" and self.tok.text in ("+", "-", "*", "/", "||"):
            op = self.tok.text
            self.i += 1
            left = Expr("bin", [left, self.unary()], op)
        return left

    def unary(self) -> Expr:
        if self.tok.kind == "op" and self.tok.text == "-":
            self.i += 1
            return Expr("neg", [self.unary()])
        e = self.primary()
        while self.accept("::"):
            e = Expr("cast", [e], self.name())
        return e

    def primary(self) -> Expr:
        t = self.tok
        if t.kind == "num":
            self.i += 1
            return Expr("lit", [float(t.text) if "." in t.text else int(t.text)])
        if t.kind == "str":
            self.i += 1
            return Expr("lit", [t.text])
        if t.kind == "op" and t.text == "(":
            if self.peek().up == "SELECT":
                return Expr("subquery", [self.subquery_text()])
            self.i += 1
            e = self.expr()
            self.expect(")")
            return e
        if t.kind == "op" and t.text == "*":
            self.i += 1
            return Expr("star")
        if t.kind in ("word", "ident"):
            up = t.up if t.kind == "word" else ""
            if up in ("NULL",):
                self.i += 1
                return Expr("lit", [None])
            if up in ("TRUE", "FALSE"):
                self.i += 1
                return Expr("lit", [up == "TRUE"])
            if up == "INTERVAL" and self.peek().kind == "str":
                self.i += 2
                return Expr("lit", [parse_interval(self.toks[self.i - 1].text)])
            if up in ("CURRENT_TIMESTAMP", "NOW"):
                if up == "CURRENT_TIMESTAMP":
                    self.i += 1
                    return Expr("func", [], "now")
            if up in ("CURRENT_USER", "SESSION_USER", "USER"):
                self.i += 1
                return Expr("func", [], "current_user")
            if up in ("SELECT", "FROM", "WHERE", "AND", "OR", "ORDER", "LIMIT", "GROUP", "JOIN", "ON", "AS"):
                raise self.error()
            name = self.name()
            if self.accept("("):
                args: list[Expr] = []
                if not self.accept(")"):
                    args.append(self.expr())
                    while self.accept(","):
                        args.append(self.expr())
                    self.expect(")")
                fn = Expr("func", args, name)
                if self.accept("OVER"):
                    return self.window(fn)
                return fn
            if self.tok.kind == "op" and self.tok.text == "." and self.peek().kind in ("word", "ident", "op"):
                self.i += 1
                if self.accept("*"):
                    return Expr("star", [], name)
                return Expr("col", [name], self.name())
            return Expr("col", [None], name)
        raise self.error()


# ------------------------------------------------------------------------------------------------ the session
Row = dict[str, Any]
_OUTER = "\x00outer"  # a row's key listing the columns that came from an enclosing query
_NAMES: dict[tuple[str, ...], dict[str, list[str]]] = {}  # row key layout -> bare column name -> keys


def _pg_text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "t" if v else "f"
    if isinstance(v, (Timestamp, Interval)):
        return str(v)
    if isinstance(v, float):
        return f"{v:.6f}".rstrip("0").rstrip(".") if v != int(v) else str(int(v))
    if isinstance(v, (list, tuple)):
        return "{" + ",".join(_pg_text(x) for x in v) + "}"
    return str(v)


class Timestamp(float):
    """A timestamptz value (virtual seconds); prints like PostgreSQL, subtracts to an Interval."""

    def __str__(self) -> str:
        return _timestamp_text(float(self))


class Oid(int):
    """A value of an oid column (pg_locks.relation): text compares with it only as a number, as in PostgreSQL."""


class RegClass(Oid):
    """A relation's oid that prints as the relation's name (`'channel_seq'::regclass`, `relation::regclass`)."""

    def __new__(cls, oid: int, name: str) -> "RegClass":
        v = super().__new__(cls, oid)
        v.relname = name
        return v

    def __str__(self) -> str:
        return self.relname


class Interval(float):
    """An interval in seconds; prints like PostgreSQL (HH:MM:SS.ffffff)."""

    def __str__(self) -> str:
        t = float(self)
        sign = "-" if t < 0 else ""
        t = abs(t)
        h, rem = divmod(t, 3600)
        m, sec = divmod(rem, 60)
        return f"{sign}{int(h):02d}:{int(m):02d}:{sec:09.6f}"


_INTERVAL_UNITS = {"microsecond": 1e-6, "millisecond": 1e-3, "ms": 1e-3, "second": 1.0, "sec": 1.0, "s": 1.0,
                   "minute": 60.0, "min": 60.0, "hour": 3600.0, "h": 3600.0, "day": 86400.0, "d": 86400.0}


def parse_interval(text: str) -> Interval:
    total = 0.0
    for num, unit in re.findall(r"(-?\d+(?:\.\d+)?)\s*([a-z]*)", text.lower()):
        u = unit.rstrip("s") if unit not in ("s", "ms") else unit
        if u == "":
            u = "second"
        if u not in _INTERVAL_UNITS:
            raise SQLError(f'invalid input syntax for type interval: "{text}"', sqlstate="22007")
        total += float(num) * _INTERVAL_UNITS[u]
    return Interval(total)


def _timestamp(t: float) -> Timestamp:
    return Timestamp(t)


def _timestamp_text(t: float) -> str:
    """A virtual second as a timestamptz, on the same epoch as the twin's logs (arena.twin.world._ts)."""
    import datetime as _dt

    d = _dt.datetime.fromtimestamp(_EPOCH + t, _dt.timezone.utc)
    return d.strftime("%Y-%m-%d %H:%M:%S.%f") + "+00"


_EPOCH = 1_790_000_000  # keep in step with arena.twin.world._ts


class SqlSession:
    """One psql connection: statements run against the server as `backend` (its role, database and settings)."""

    def __init__(self, server: PostgresServer, backend: Backend, now: Callable[[], float],
                 on_event: Callable[[str, dict[str, Any]], None] | None = None):
        self.server = server
        self.backend = backend
        self.now = now
        self.on_event = on_event or (lambda kind, detail: None)
        self.in_tx = False
        self.implicit_tx = False  # a multi-statement -c string runs as one implicit transaction
        self._derived = {}  # FROM (SELECT ...) results of the current statement

    # ---------------------------------------------------------------- dispatch
    def execute(self, sql: str) -> Result:
        self._current_query = sql
        self._derived = {}
        p = Parser(sql)
        first = p.tok.up
        if first == "SELECT":
            return self._select(p)
        if first == "SHOW":
            return self._show(p)
        if first == "SET":
            return self._set(p)
        if first == "RESET":
            return self._reset(p)
        if first == "ALTER":
            return self._alter(p)
        if first in ("BEGIN", "START"):
            p.i += 1
            p.accept("TRANSACTION", "WORK")
            p.done()
            self.in_tx = True
            return Result(tag="BEGIN")
        if first in ("COMMIT", "END", "ROLLBACK", "ABORT"):
            self.in_tx = False
            self.server.end_transaction(self.backend, self.now())
            return Result(tag="ROLLBACK" if first in ("ROLLBACK", "ABORT") else "COMMIT")
        if first == "TABLE":
            p.i += 1
            name = p.name()
            p.done()
            return self._select(Parser(f"SELECT * FROM {name}"))
        if first == "UPDATE":
            return self._update(p)
        if first == "DELETE":
            return self._delete(p)
        if first == "INSERT":
            return self._insert(p)
        if first == "LOCK":
            return self._lock(p)
        if first in ("TRUNCATE", "DROP", "CREATE", "GRANT", "REVOKE", "VACUUM",
                     "CHECKPOINT", "ANALYZE"):
            # DDL and writes to relations the twin holds no rows for are outside what it models: refuse loudly
            # rather than pretend they ran.
            raise SQLError(f"the twin does not model {first} statements", sqlstate="0A000")
        raise p.error()

    # ---------------------------------------------------------------- settings statements
    def _show(self, p: Parser) -> Result:
        p.expect("SHOW")
        if p.accept("ALL"):
            p.done()
            rows = [[n, format_guc_value(GUCS[n], self.server.effective(self.backend, n)[0]), ""]
                    for n in sorted(GUCS, key=str.lower)]
            return Result(columns=["name", "setting", "description"], rows=rows)
        name = p.name()
        p.done()
        spec = self._guc(name)
        return Result(columns=[spec.name.lower()],
                      rows=[[format_guc_value(spec, self.server.effective(self.backend, spec.name)[0])]])

    def _set(self, p: Parser) -> Result:
        p.expect("SET")
        local = p.accept("LOCAL")
        p.accept("SESSION")
        name = p.name()
        if not (p.accept("=") or p.accept("TO")):
            raise p.error()
        spec = self._guc(name)
        if p.accept("DEFAULT"):
            p.done()
            self.backend.session.pop(spec.name, None)
            return Result(tag="SET")
        value = p.value_text()
        p.done()
        self._set_session(spec.name, value, local)
        return Result(tag="SET")

    def _set_session(self, name: str, value: str, local: bool = False) -> None:
        spec = self._guc(name)
        if spec.context == "postmaster":
            raise SQLError(f'parameter "{spec.name}" cannot be changed without restarting the server',
                           sqlstate="55P02")
        if spec.context == "sighup":
            raise SQLError(f'parameter "{spec.name}" cannot be changed now', sqlstate="55P02")
        if spec.context == "superuser" and not self.server.roles[self.backend.role].superuser:
            raise SQLError(f'permission denied to set parameter "{spec.name}"', sqlstate="42501")
        try:
            parsed = self._parse(spec, value)
        except SettingError as e:
            raise SQLError(str(e), sqlstate="22023") from e
        if local and not self.in_tx:
            # SET LOCAL outside a transaction block only warns and has no effect, as in PostgreSQL.
            return
        self.backend.session[spec.name] = parsed

    def _reset(self, p: Parser) -> Result:
        p.expect("RESET")
        if p.accept("ALL"):
            p.done()
            self.backend.session.clear()
            return Result(tag="RESET")
        spec = self._guc(p.name())
        p.done()
        self.backend.session.pop(spec.name, None)
        return Result(tag="RESET")

    def _alter(self, p: Parser) -> Result:
        p.expect("ALTER")
        kind = p.expect("ROLE", "USER", "DATABASE", "SYSTEM").up
        if kind == "SYSTEM" and not self.server.roles[self.backend.role].superuser:
            # PostgreSQL names the parameter it refuses: parse as far as it, then refuse.
            p.accept("SET", "RESET")
            shown = f' "{self._guc(p.name()).name}"' if p.tok.kind in ("word", "ident") and p.tok.up != "ALL" \
                else ""
            raise SQLError(f"permission denied to set parameter{shown}", sqlstate="42501")
        self._require_superuser(kind)
        if kind == "SYSTEM":
            if self.in_tx or self.implicit_tx:
                raise SQLError("ALTER SYSTEM cannot run inside a transaction block", sqlstate="25001")
            if p.accept("RESET"):
                if p.accept("ALL"):
                    p.done()
                    for n in list(self.server.auto_conf):
                        self.server.alter_system(n, None)
                    self.on_event("alter_system", {"name": "*", "value": None})
                    return Result(tag="ALTER SYSTEM")
                spec = self._guc(p.name())
                p.done()
                self.server.alter_system(spec.name, None)
                self.on_event("alter_system", {"name": spec.name, "value": None})
                return Result(tag="ALTER SYSTEM")
            p.expect("SET")
            spec = self._guc(p.name())
            if not (p.accept("=") or p.accept("TO")):
                raise p.error()
            value = None if p.accept("DEFAULT") else p.value_text()
            p.done()
            try:
                self.server.alter_system(spec.name, value)
            except SettingError as e:
                raise SQLError(str(e), sqlstate="22023") from e
            self.on_event("alter_system", {"name": spec.name, "value": value})
            return Result(tag="ALTER SYSTEM")
        target = p.name()
        tag = "ALTER ROLE" if kind in ("ROLE", "USER") else "ALTER DATABASE"
        if kind in ("ROLE", "USER"):
            if target not in self.server.roles and target.upper() != "ALL":
                raise SQLError(f'role "{target}" does not exist', sqlstate="42704")
            role, database = ("" if target.upper() == "ALL" else target), ""
            if p.accept("IN"):
                p.expect("DATABASE")
                database = p.name()
                if database not in self.server.databases:
                    raise SQLError(f'database "{database}" does not exist', sqlstate="3D000")
        else:
            if target not in self.server.databases:
                raise SQLError(f'database "{target}" does not exist', sqlstate="3D000")
            role, database = "", target
        p.accept("WITH")
        if p.accept("CONNECTION"):
            p.expect("LIMIT")
            n = int(p.value_text())
            p.done()
            if kind == "DATABASE":
                self.server.databases[target].connlimit = n
            else:
                self.server.roles[target].connlimit = n
            self.on_event("connlimit", {"kind": kind.lower(), "name": target, "value": n})
            return Result(tag=tag)
        if p.accept("RESET"):
            if p.accept("ALL"):
                p.done()
                self.server.reset_catalog_all(database, role)
                self.on_event("catalog", {"database": database, "role": role, "name": "*", "value": None})
                return Result(tag=tag)
            spec = self._guc(p.name())
            p.done()
            self._catalog(database, role, spec.name, None)
            return Result(tag=tag)
        if p.accept("SET"):
            spec = self._guc(p.name())
            if p.accept("FROM"):
                p.expect("CURRENT")
                p.done()
                value: str | None = self.server.effective(self.backend, spec.name)[0]
            else:
                if not (p.accept("=") or p.accept("TO")):
                    raise p.error()
                value = None if p.accept("DEFAULT") else p.value_text()
                p.done()
            self._catalog(database, role, spec.name, value)
            return Result(tag=tag)
        raise p.error()

    def _catalog(self, database: str, role: str, name: str, value: str | None) -> None:
        try:
            self.server.set_catalog(database, role, name, value)
        except SettingError as e:
            raise SQLError(str(e), sqlstate="55P02") from e
        self.on_event("catalog", {"database": database, "role": role, "name": name, "value": value})

    def _require_superuser(self, what: str) -> None:
        if not self.server.roles[self.backend.role].superuser:
            raise SQLError(f"permission denied to alter {what.lower()}" if what != "SYSTEM"
                           else 'permission denied to set parameter', sqlstate="42501")

    def _guc(self, name: str):
        try:
            return guc(name)
        except SettingError as e:
            raise SQLError(str(e), sqlstate="42704") from e

    @staticmethod
    def _parse(spec, value: str) -> str:
        from arena.twin.pg.postgres import parse_guc_value

        return parse_guc_value(spec, value)

    # ---------------------------------------------------------------- SELECT
    def _select(self, p: Parser, outer: Row | None = None) -> Result:
        p.expect("SELECT")
        p.accept("ALL")
        items: list[tuple[Expr, str | None]] = []
        while True:
            e = p.expr()
            alias = None
            if p.accept("AS"):
                alias = p.name()
            elif p.tok.kind in ("word", "ident") and p.tok.up not in ("FROM", "WHERE", "ORDER", "LIMIT", "GROUP",
                                                                        "HAVING"):
                alias = p.name()
            items.append((e, alias))
            if not p.accept(","):
                break
        sources: list[tuple[str, str, Expr | None, bool]] = []  # (table, alias, on, left)
        if p.accept("FROM"):
            sources.append((*self._from_item(p), None, False))
            while True:
                left = False
                if p.accept(","):
                    sources.append((*self._from_item(p), None, False))
                    continue
                if p.tok.up in ("LEFT", "INNER", "JOIN"):
                    if p.accept("LEFT"):
                        left = True
                        p.accept("OUTER")
                    else:
                        p.accept("INNER")
                    p.expect("JOIN")
                    tbl, alias = self._from_item(p)
                    p.expect("ON")
                    sources.append((tbl, alias, p.expr(), left))
                    continue
                break
        where = p.expr() if p.accept("WHERE") else None
        group: list[Expr] = []
        if p.accept("GROUP"):
            p.expect("BY")
            group.append(p.expr())
            while p.accept(","):
                group.append(p.expr())
        order: list[tuple[Expr, bool]] = []
        if p.accept("ORDER"):
            p.expect("BY")
            while True:
                e = p.expr()
                desc = bool(p.accept("DESC"))
                if not desc:
                    p.accept("ASC")
                order.append((e, desc))
                if not p.accept(","):
                    break
        limit = None
        if p.accept("LIMIT"):
            limit = int(p.value_text())
        p.done()

        rows = self._from_rows(sources, p, outer, where)
        if where is not None:
            rows = [r for r in rows if self._truth(self._eval(where, r))]
        for e, _ in items:
            self._windows(e, rows)
        aggregate = bool(group) or any(self._is_aggregate(e) for e, _ in items)
        ctx = _EvalCtx()
        if order and not aggregate:
            for e, desc in reversed(order):
                rows.sort(key=lambda r, e=e: _sort_key(self._eval(e, r, ctx)), reverse=desc)
        if limit is not None and not aggregate:
            rows = rows[:limit]
        columns: list[str] = []
        out_rows: list[list[Any]] = []
        if aggregate:
            columns = [alias or self._label(e) for e, alias in items]
            keys = [self._group_expr(g, items) for g in group]
            groups: dict[tuple, list[Row]] = {}
            for r in rows:
                groups.setdefault(tuple(_pg_text(self._eval(k, r, ctx)) for k in keys), []).append(r)
            if not group:
                groups = {(): rows}
            out_rows = [[self._aggregate(e, g) for e, _ in items] for g in groups.values()]
            for e, desc in reversed(order):
                idx = self._output_index(e, items, columns)
                out_rows.sort(key=lambda r, i=idx: _sort_key(r[i]), reverse=desc)
            if limit is not None:
                out_rows = out_rows[:limit]
        else:
            for r in rows or ([{}] if not sources else []):
                out: list[Any] = []
                for e, alias in items:
                    if e.op == "star":
                        for k, v in r.items():
                            if "." in k and (not e.name or k.startswith(e.name + ".")):
                                out.append(v)
                    else:
                        out.append(self._eval(e, r, ctx))
                # A set-returning unnest() in the select list yields one row per element, as in PostgreSQL.
                srf = [i for i, (e, _) in enumerate(items) if e.op == "func" and e.name == "unnest"]
                if srf and isinstance(out[srf[0]], list):
                    for v in out[srf[0]]:
                        out_rows.append(out[:srf[0]] + [v] + out[srf[0] + 1:])
                    continue
                out_rows.append(out)
            for e, alias in items:
                if e.op == "star":
                    columns.extend(k.split(".", 1)[1] for k in self._star_columns(sources, e.name))
                else:
                    columns.append(alias or self._label(e))
        return Result(columns=columns, rows=out_rows, duration_s=ctx.slept)

    @staticmethod
    def _group_expr(g: Expr, items: list[tuple[Expr, str | None]]) -> Expr:
        """GROUP BY 1 or an output alias means that select item, as in PostgreSQL."""
        if g.op == "lit" and isinstance(g.args[0], int) and 1 <= g.args[0] <= len(items):
            return items[g.args[0] - 1][0]
        if g.op == "col" and g.args[0] is None:
            for e, alias in items:
                if alias == g.name:
                    return e
        return g

    def _output_index(self, e: Expr, items: list[tuple[Expr, str | None]], columns: list[str]) -> int:
        if e.op == "lit" and isinstance(e.args[0], int) and 1 <= e.args[0] <= len(items):
            return e.args[0] - 1
        label = e.name if e.op in ("col", "func") else None
        for i, (item, alias) in enumerate(items):
            if item == e or (label is not None and label in (alias, columns[i])):
                return i
        raise SQLError(f'column "{label or "?"}" must appear in the GROUP BY clause or be used in an aggregate '
                       "function", sqlstate="42803")

    def _from_item(self, p: Parser) -> tuple[str, str]:
        if p.tok.kind == "op" and p.tok.text == "(" and p.peek().up == "SELECT":
            text = p.subquery_text()
            res = self._select(Parser(text))
            key = f"(subquery {len(self._derived)})"
            self._derived[key] = (list(res.columns), [list(r) for r in res.rows])
            p.accept("AS")
            return key, p.name()
        name = p.name()
        if p.accept("."):
            name = p.name()  # pg_catalog.pg_settings, public.order_order
        alias = name
        if p.accept("AS"):
            alias = p.name()
        elif p.tok.kind in ("word", "ident") and p.tok.up not in (
                "WHERE", "ORDER", "LIMIT", "LEFT", "JOIN", "INNER", "ON", "GROUP"):
            alias = p.name()
        return name, alias

    def _star_columns(self, sources, only: str) -> list[str]:
        out = []
        for tbl, alias, _, _ in sources:
            if only and alias != only:
                continue
            out.extend(f"{alias}.{c}" for c in self._relation(tbl)[0])
        return out

    def _from_rows(self, sources, p: Parser, outer: Row | None = None, where: Expr | None = None) -> list[Row]:
        start: Row = {}
        if outer:
            start = dict(outer)
            start[_OUTER] = frozenset(k for k in outer if k != _OUTER)
        if not sources:
            return [start]
        rows: list[Row] = [start]
        for n, (tbl, alias, on, left) in enumerate(sources):
            cols, data = self._relation(tbl)
            if len(sources) == 1 and where is not None:
                data = self._prefilter(data, list(cols), alias, where, start)
            keys = [f"{alias}.{c}" for c in cols]
            right = [dict(zip(keys, r)) for r in data]
            if n == 0 and on is None and not start:
                rows = right  # the first relation with nothing to join to: its rows as they are
                continue
            probe = self._join_probe(on, alias, list(cols), right) if n > 0 and on is not None else None
            joined: list[Row] = []
            for lrow in rows:
                matched = False
                cands = right
                if probe is not None:
                    key_expr, index = probe
                    try:
                        cands = index.get(_join_key(self._eval(key_expr, lrow)), [])
                    except SQLError:
                        cands = right
                for rrow in cands:
                    merged = {**lrow, **rrow}
                    if on is None or self._truth(self._eval(on, merged)):
                        joined.append(merged)
                        matched = True
                if left and not matched:
                    joined.append({**lrow, **{f"{alias}.{c}": None for c in cols}})
            rows = joined
        return rows

    @staticmethod
    def _eq_terms(e: Expr | None) -> list[tuple[Expr, Expr]]:
        """The `a = b` terms among an expression's top-level ANDs."""
        out, stack = [], [e] if e is not None else []
        while stack:
            x = stack.pop()
            if x.op == "bin" and x.name == "AND":
                stack.extend(x.args)
            elif x.op == "bin" and x.name == "=":
                out.append((x.args[0], x.args[1]))
        return out

    def _prefilter(self, data, cols: list[str], alias: str, where: Expr, outer: Row):
        """Keep only the rows that can satisfy `col = literal` or `col = outer.col` terms of the WHERE (an index
        scan); the WHERE itself is still evaluated on what remains."""
        for a, b in self._eq_terms(where):
            for mine, other in ((a, b), (b, a)):
                if mine.op != "col" or mine.args[0] not in (alias, None) or mine.name not in cols:
                    continue
                if other.op == "lit":
                    value = other.args[0]
                elif other.op == "col" and other.args[0] not in (None, alias) and \
                        f"{other.args[0]}.{other.name}" in outer:
                    value = outer[f"{other.args[0]}.{other.name}"]
                else:
                    continue
                i = cols.index(mine.name)
                if isinstance(value, str) and _join_key(value)[0] == "s":
                    # A non-numeric text value equals only the same text (or a value whose text it is).
                    data = [r for r in data if r[i] == value or (type(r[i]) is not str and _eq(r[i], value))]
                else:
                    data = [r for r in data if _eq(r[i], value)]
        return data

    def _join_probe(self, on: Expr, alias: str, cols: list[str], right: list[Row]):
        """A hash index on the joined relation for an `alias.col = other.col` term of ON (a hash join)."""
        for a, b in self._eq_terms(on):
            for mine, other in ((a, b), (b, a)):
                if mine.op == "col" and mine.args[0] == alias and mine.name in cols and other.op == "col" \
                        and other.args[0] not in (None, alias):
                    index: dict[Any, list[Row]] = {}
                    for r in right:
                        index.setdefault(_join_key(r[f"{alias}.{mine.name}"]), []).append(r)
                    return other, index
        return None

    def _relation(self, name: str) -> tuple[list[str], list[list[Any]]]:
        s = self.server
        now = self.now()
        if name in self._derived:
            return self._derived[name]
        rel = s.writable.get(name)
        if rel is not None:
            if self.backend.database != s.app_database:
                raise SQLError(f'relation "{name}" does not exist', sqlstate="42P01")
            return list(rel.columns), rel.rows()
        if name == "pg_stat_activity":
            cols = ["datid", "datname", "pid", "usesysid", "usename", "application_name", "client_addr",
                    "backend_start", "xact_start", "state_change", "query_start", "wait_event_type", "wait_event",
                    "state", "backend_type", "query"]
            rows = []
            pooled = s.pool_activity() if s.pool_activity is not None else []
            for b in sorted([*s.live_backends(), *pooled], key=lambda b: b.pid):
                own = b.pid == self.backend.pid
                if own:
                    wait = (None, None)
                elif b.waiting_for is not None:
                    wait = ("Lock", "transactionid")
                elif b.state == "active":
                    wait = (None, None)
                else:
                    wait = ("Client", "ClientRead")
                rows.append([s.databases[b.database].oid, b.database, b.pid, s.roles[b.role].oid, b.role,
                             b.application_name, b.client_addr, _timestamp(b.backend_start),
                             _timestamp(b.xact_start) if b.xact_start is not None else (_timestamp(now) if own
                                                                                         else None),
                             _timestamp(now if own else b.state_change),
                             _timestamp(now) if own else (_timestamp(b.query_start) if b.query_start is not None
                                                          else None),
                             wait[0], wait[1], "active" if own else b.state, "client backend",
                             "<the current query>" if own else b.query])
            for pid, btype in ((54, "autovacuum launcher"), (55, "logical replication launcher"),
                               (51, "background writer"), (50, "checkpointer"), (53, "walwriter")):
                rows.append([None, None, pid, None, None, "", None, _timestamp(-86400.0), None, None, None,
                             "Activity", None, None, btype, ""])
            for r in rows:
                if r[14] == "client backend" and r[15] == "<the current query>":
                    r[15] = self._current_query
            return cols, rows
        if name == "pg_locks":
            cols = ["locktype", "database", "relation", "page", "tuple", "virtualxid", "transactionid", "pid",
                    "mode", "granted", "waitstart"]
            rows = []
            for b in sorted(s.live_backends(), key=lambda b: b.pid):
                dboid = s.databases[b.database].oid
                xid = 7_000_000 + b.pid  # a stable transaction id per holder, for display
                for rel in dict.fromkeys(r for r, _ in b.locks):
                    rows.append(["relation", dboid, Oid(s.relation_oid(rel)), None, None, None, None, b.pid,
                                 "RowShareLock", True, None])
                if b.locks:
                    rows.append(["transactionid", None, None, None, None, None, xid, b.pid, "ExclusiveLock", True,
                                 None])
                if b.waiting_for is not None:
                    holder = s.row_locks.get(b.waiting_for)
                    waited = Oid(s.relation_oid(b.waiting_for[0]))
                    rows.append(["relation", dboid, waited, None, None, None, None, b.pid, "RowExclusiveLock", True,
                                 None])
                    rows.append(["transactionid", None, None, None, None, None,
                                 7_000_000 + holder if holder is not None else None, b.pid, "ShareLock", False,
                                 _timestamp(b.state_change)])
            return cols, rows
        if name == "pg_settings":
            cols = ["name", "setting", "unit", "category", "context", "vartype", "source", "min_val", "max_val",
                    "enumvals", "boot_val", "reset_val", "sourcefile", "pending_restart"]
            rows = []
            for n in sorted(GUCS, key=str.lower):
                spec = GUCS[n]
                value, source = s.effective(self.backend, n)
                reset_val = value if source != "session" else (
                    self.backend.inherited.get(n) or s.applied[n])[0]
                sourcefile = None
                if source == "configuration file":
                    sourcefile = ("/var/lib/postgresql/data/postgresql.auto.conf" if n in s.auto_conf
                                  else "/etc/postgresql/postgresql.conf")
                bound = (lambda x: None if x is None or spec.vartype not in ("integer", "real")
                         else (str(int(x)) if spec.vartype == "integer" else f"{x:g}"))
                rows.append([n, value, spec.unit, spec.category, spec.context, spec.vartype, source,
                             bound(spec.min_val), bound(spec.max_val), list(spec.enumvals) or None, spec.boot,
                             reset_val, sourcefile, n in s.pending_restart])
            return cols, rows
        if name == "pg_file_settings":
            cols = ["sourcefile", "sourceline", "seqno", "name", "setting", "applied", "error"]
            rows, seq = [], 0
            for fname, layer in (("/etc/postgresql/postgresql.conf", s.conf_file),
                                 ("/var/lib/postgresql/data/postgresql.auto.conf", s.auto_conf)):
                for line, (k, v) in enumerate(sorted(layer.items()), start=3):
                    seq += 1
                    applied = s.applied[k][0] == v and not (layer is s.conf_file and k in s.auto_conf)
                    rows.append([fname, line, seq, k, v, applied, None])
            return cols, rows
        if name == "pg_db_role_setting":
            cols = ["setdatabase", "setrole", "setconfig"]
            rows = []
            for (d, r), settings in sorted(s.db_role_setting.items()):
                rows.append([s.databases[d].oid if d else 0, s.roles[r].oid if r else 0,
                             [f"{k}={format_guc_value(GUCS[k], v)}" for k, v in sorted(settings.items())]])
            return cols, rows
        if name in ("pg_roles", "pg_user", "pg_authid"):
            cols = ["rolname", "rolsuper", "rolcanlogin", "rolconnlimit", "rolconfig", "oid"]
            rows = []
            for r in sorted(s.roles.values(), key=lambda r: r.oid):
                cfg = s.db_role_setting.get(("", r.name))
                rows.append([r.name, r.superuser, r.login, r.connlimit,
                             [f"{k}={format_guc_value(GUCS[k], v)}" for k, v in sorted(cfg.items())] if cfg else None,
                             r.oid])
            if name == "pg_user":
                cols = ["usename", "usesysid", "usesuper", "useconfig"]
                rows = [[r[0], r[5], r[1], r[4]] for r in rows]
            return cols, rows
        if name == "pg_database":
            cols = ["oid", "datname", "datconnlimit", "datallowconn"]
            return cols, [[d.oid, d.name, d.connlimit, True] for d in sorted(s.databases.values(), key=lambda d: d.oid)]
        if name == "pg_replication_slots":
            cols = ["slot_name", "plugin", "slot_type", "database", "active", "restart_lsn"]
            return cols, [[sl.get(c) for c in cols] for sl in s.replication_slots]
        if name == "pg_stat_database":
            cols = ["datname", "numbackends", "xact_commit", "xact_rollback"]
            return cols, [[d.name, sum(b.database == d.name for b in s.live_backends()), 0, 0]
                          for d in s.databases.values()]
        view = s.views.get(name)
        if view is not None:
            if self.backend.database != s.app_database:
                raise SQLError(f'relation "{name}" does not exist', sqlstate="42P01")
            return view()
        table = s.tables.get(name) or s.extra_tables.get(name)
        if table is not None:
            if self.backend.database != s.app_database:
                raise SQLError(f'relation "{name}" does not exist', sqlstate="42P01")
            return list(table.columns), [list(r) for r in table.rows]
        raise SQLError(f'relation "{name}" does not exist', sqlstate="42P01")

    _current_query = ""
    _derived: dict[str, tuple[list[str], list[list[Any]]]] = {}

    # ---------------------------------------------------------------- window functions
    def _windows(self, e: Expr, rows: list[Row]) -> None:
        """Compute every window function in `e` over the filtered rows (stored in each row under its key)."""
        if e.op == "window":
            fn, part, order = e.args
            key = f"__window{id(e)}"
            groups: dict[tuple, list[Row]] = {}
            for r in rows:
                groups.setdefault(tuple(_sort_key(self._eval(x, r)) for x in part), []).append(r)
            for g in groups.values():
                for x, desc in reversed(order):
                    g.sort(key=lambda r, x=x: _sort_key(self._eval(x, r)), reverse=desc)
                prev, rank, dense = None, 0, 0
                for i, r in enumerate(g, start=1):
                    cur = tuple(_sort_key(self._eval(x, r)) for x, _ in order)
                    if cur != prev:
                        rank, dense, prev = i, dense + 1, cur
                    r[key] = {"row_number": i, "rank": rank, "dense_rank": dense}[fn.name]
            return
        for a in e.args:
            if isinstance(a, Expr):
                self._windows(a, rows)

    # ---------------------------------------------------------------- writes to the application's relations
    def _target(self, p: Parser):
        name = p.name()
        if p.accept("."):
            name = p.name()
        rel = self.server.writable.get(name)
        if rel is None or self.backend.database != self.server.app_database:
            if name in self.server.views or name in self.server.tables or name in self.server.extra_tables:
                raise SQLError(f"the twin does not model writes to {name}", sqlstate="0A000")
            raise SQLError(f'relation "{name}" does not exist', sqlstate="42P01")
        if not self.server.roles[self.backend.role].superuser and self.backend.role != self.server.table_owner:
            raise SQLError(f"permission denied for table {name}", sqlstate="42501")
        return name, rel

    def _update(self, p: Parser) -> Result:
        p.expect("UPDATE")
        name, rel = self._target(p)
        alias = name
        if p.accept("AS") or (p.tok.kind in ("word", "ident") and p.tok.up != "SET"):
            alias = p.name()
        p.expect("SET")
        sets: list[tuple[int, Expr]] = []
        cols = list(rel.columns)
        while True:
            col = p.name()
            if col not in cols:
                raise SQLError(f'column "{col}" of relation "{name}" does not exist', sqlstate="42703")
            p.expect("=")
            sets.append((cols.index(col), p.expr()))
            if not p.accept(","):
                break
        sources: list[tuple[str, str, Expr | None, bool]] = []
        if p.accept("FROM"):
            sources.append((*self._from_item(p), None, False))
            while p.accept(","):
                sources.append((*self._from_item(p), None, False))
        where = p.expr() if p.accept("WHERE") else None
        p.done()
        from_rows = self._from_rows(sources, p) if sources else [{}]
        index = self._equi_index(where, alias, cols, from_rows) if sources else None
        live = rel.rows()
        changes: list[tuple[list[Any], list[Any]]] = []
        for row in live:
            mine = {f"{alias}.{c}": v for c, v in zip(cols, row)}
            cands = from_rows
            if index is not None:
                col_i, idx = index
                cands = idx.get(_join_key(row[col_i]), [])
            for other in cands:
                merged = {**other, **mine}
                if where is None or self._truth(self._eval(where, merged)):
                    new = list(row)
                    for i, e in sets:
                        new[i] = self._eval(e, merged)
                    changes.append((row, new))
                    break  # PostgreSQL updates a target row once, with one joined row
        rel.update(changes)
        self.on_event("write", {"relation": name, "kind": "update", "rows": len(changes)})
        return Result(tag=f"UPDATE {len(changes)}")

    def _equi_index(self, where: Expr | None, alias: str, cols: list[str], from_rows: list[Row]):
        """A hash index for `target.col = other.col` in the WHERE's top-level ANDs, as a hash join would use."""
        terms, stack = [], [where] if where is not None else []
        while stack:
            e = stack.pop()
            if e.op == "bin" and e.name == "AND":
                stack.extend(e.args)
            elif e.op == "bin" and e.name == "=" and all(a.op == "col" for a in e.args):
                terms.append(e.args)
        for a, b in terms:
            for mine, other in ((a, b), (b, a)):
                if mine.args[0] == alias and mine.name in cols and other.args[0] not in (None, alias):
                    idx: dict[Any, list[Row]] = {}
                    for r in from_rows:
                        idx.setdefault(_join_key(self._lookup(r, other.args[0], other.name)), []).append(r)
                    return cols.index(mine.name), idx
        return None

    def _delete(self, p: Parser) -> Result:
        p.expect("DELETE")
        p.expect("FROM")
        name, rel = self._target(p)
        alias = name
        if p.accept("AS") or (p.tok.kind in ("word", "ident") and p.tok.up != "WHERE"):
            alias = p.name()
        where = p.expr() if p.accept("WHERE") else None
        p.done()
        cols = list(rel.columns)
        ctx = _EvalCtx()
        gone = [row for row in rel.rows()
                if where is None or self._truth(self._eval(where, {f"{alias}.{c}": v for c, v in zip(cols, row)},
                                                           ctx))]
        rel.delete(gone)
        self.on_event("write", {"relation": name, "kind": "delete", "rows": len(gone)})
        return Result(tag=f"DELETE {len(gone)}")

    def _insert(self, p: Parser) -> Result:
        p.expect("INSERT")
        p.expect("INTO")
        name, rel = self._target(p)
        cols = list(rel.columns)
        given = cols
        if p.accept("("):
            given = [p.name()]
            while p.accept(","):
                given.append(p.name())
            p.expect(")")
            bad = [c for c in given if c not in cols]
            if bad:
                raise SQLError(f'column "{bad[0]}" of relation "{name}" does not exist', sqlstate="42703")
        p.expect("VALUES")
        new_rows = []
        while True:
            p.expect("(")
            vals = [p.expr()]
            while p.accept(","):
                vals.append(p.expr())
            p.expect(")")
            if len(vals) != len(given):
                raise SQLError("INSERT has more expressions than target columns" if len(vals) > len(given)
                               else "INSERT has more target columns than expressions", sqlstate="42601")
            row: list[Any] = [None] * len(cols)
            for c, e in zip(given, vals):
                row[cols.index(c)] = self._eval(e, {})
            new_rows.append(row)
            if not p.accept(","):
                break
        p.done()
        rel.insert(new_rows)
        self.on_event("write", {"relation": name, "kind": "insert", "rows": len(new_rows)})
        return Result(tag=f"INSERT 0 {len(new_rows)}")

    def _lock(self, p: Parser) -> Result:
        p.expect("LOCK")
        p.accept("TABLE")
        names = [self._target(p)[0]]
        while p.accept(","):
            names.append(self._target(p)[0])
        if p.accept("IN"):
            while not p.accept("MODE"):
                if p.at_end():
                    raise p.error()
                p.i += 1
        p.accept("NOWAIT")
        p.done()
        if not (self.in_tx or self.implicit_tx):
            raise SQLError("LOCK TABLE can only be used in transaction blocks", sqlstate="25P01")
        for n in names:
            self.server.lock_table(self.backend, n, self.now())
        return Result(tag="LOCK TABLE")

    # ---------------------------------------------------------------- evaluation
    def _is_aggregate(self, e: Expr) -> bool:
        if e.op == "func" and e.name in ("count", "max", "min", "sum", "array_agg", "string_agg"):
            return True
        return any(isinstance(a, Expr) and self._is_aggregate(a) for a in e.args)

    def _aggregate(self, e: Expr, rows: list[Row]) -> Any:
        if e.op == "func" and e.name == "count":
            if e.args and e.args[0].op != "star":
                return sum(self._eval(e.args[0], r) is not None for r in rows)
            return len(rows)
        if e.op == "func" and e.name in ("max", "min", "sum"):
            vals = [v for v in (self._eval(e.args[0], r) for r in rows) if v is not None]
            if not vals:
                return None
            return {"max": max, "min": min, "sum": sum}[e.name](vals)
        if e.op == "func" and e.name in ("array_agg", "string_agg"):
            vals = [self._eval(e.args[0], r) for r in rows]
            if e.name == "array_agg":
                return vals
            sep = self._eval(e.args[1], {}) if len(e.args) > 1 else ","
            return sep.join(_pg_text(v) for v in vals)
        if e.op == "lit":
            return e.args[0]
        return self._eval(e, rows[0]) if rows else None

    def _label(self, e: Expr) -> str:
        if e.op == "col":
            return e.name
        if e.op == "func":
            return e.name
        if e.op == "cast":
            return self._label(e.args[0]) if e.args[0].op in ("col", "func") else e.name
        return "?column?"

    @staticmethod
    def _truth(v: Any) -> bool:
        return v is True or (v not in (None, False, 0, "") and v is not False)

    def _lookup(self, row: Row, qual: str | None, name: str) -> Any:
        if qual:
            key = f"{qual}.{name}"
            if key in row:
                return row[key]
            raise SQLError(f"column {qual}.{name} does not exist", sqlstate="42703")
        keys = tuple(row)
        names = _NAMES.get(keys)
        if names is None:
            # Rows from the same sources share their keys: resolve each bare name once per key layout.
            names = {}
            for k in keys:
                names.setdefault(k.split(".", 1)[-1], []).append(k)
            if len(_NAMES) > 4096:
                _NAMES.clear()
            _NAMES[keys] = names
        hits = names.get(name, [])
        if len(hits) == 1:
            return row[hits[0]]
        if len(hits) > 1:
            # A subquery's own columns hide the outer query's, as PostgreSQL resolves names innermost first.
            inner = [k for k in hits if k not in row.get(_OUTER, ())]
            if len(inner) == 1:
                return row[inner[0]]
            raise SQLError(f'column reference "{name}" is ambiguous', sqlstate="42702")
        raise SQLError(f'column "{name}" does not exist', sqlstate="42703")

    def _eval(self, e: Expr, row: Row, ctx: "_EvalCtx | None" = None) -> Any:
        op = e.op
        if op == "lit":
            return e.args[0]
        if op == "col":
            return self._lookup(row, e.args[0], e.name)
        if op == "neg":
            return -self._eval(e.args[0], row, ctx)
        if op == "not":
            v = self._eval(e.args[0], row, ctx)
            return None if v is None else not self._truth(v)
        if op == "isnull":
            return self._eval(e.args[0], row, ctx) is None
        if op == "in":
            v = self._eval(e.args[0], row, ctx)
            if len(e.args) == 2 and e.args[1].op == "subquery" and e.args[1].name == "set":
                # An uncorrelated IN (SELECT ...) is evaluated once per statement, as a hashed subplan.
                key = f"__inset{id(e.args[1])}"
                if ctx is None or key not in ctx.cache:
                    res = self._select(Parser(e.args[1].args[0]), outer=row)
                    if len(res.columns) != 1:
                        raise SQLError("subquery has too many columns", sqlstate="42601")
                    vals = {_sort_key(r[0]) for r in res.rows if r[0] is not None}
                    if ctx is None:
                        return _sort_key(v) in vals if v is not None else None
                    ctx.cache[key] = vals
                return _sort_key(v) in ctx.cache[key] if v is not None else None
            return any(_eq(v, self._eval(a, row, ctx)) for a in e.args[1:])
        if op == "cast":
            v = self._eval(e.args[0], row, ctx)
            if e.name in ("int", "integer", "bigint", "int4", "int8"):
                return None if v is None else int(float(v))
            if e.name == "regclass" and v is not None:
                # Text resolves to the relation's oid (or fails, as PostgreSQL's regclass input does).
                if isinstance(v, int) and not isinstance(v, bool):
                    return RegClass(v, self.server.relation_name(v) or str(int(v)))
                oid = self.server.relation_oid(_pg_text(v))
                if oid is None:
                    raise SQLError(f'relation "{_pg_text(v)}" does not exist', sqlstate="42P01")
                return RegClass(oid, self.server.relation_name(oid) or _pg_text(v))
            if e.name == "oid" and v is not None:
                if isinstance(v, int) and not isinstance(v, bool):
                    return Oid(int(v))
                try:
                    return Oid(int(_pg_text(v)))
                except ValueError:
                    raise SQLError(f'invalid input syntax for type oid: "{_pg_text(v)}"', sqlstate="22P02") from None
            if e.name in ("regrole", "regdatabase") and isinstance(v, int):
                if v == 0:
                    return "-"
                names = self.server.roles.values() if e.name == "regrole" else self.server.databases.values()
                return next((x.name for x in names if x.oid == v), str(v))
            if e.name in ("text", "varchar", "name", "regrole", "regdatabase"):
                return None if v is None else _pg_text(v)
            return v
        if op == "bin":
            return self._binop(e, row, ctx)
        if op == "window":
            key = f"__window{id(e)}"
            if key not in row:
                raise SQLError("window functions are not allowed here", sqlstate="42P20")
            return row[key]
        if op == "subquery":
            res = self._select(Parser(e.args[0]), outer=row)
            if len(res.columns) != 1:
                raise SQLError("subquery must return only one column", sqlstate="42601")
            if len(res.rows) > 1:
                raise SQLError("more than one row returned by a subquery used as an expression", sqlstate="21000")
            return res.rows[0][0] if res.rows else None
        if op == "func":
            return self._call(e, row, ctx)
        if op == "star":
            raise SQLError('syntax error at or near "*"')
        raise SQLError(f"unsupported expression {op}", sqlstate="0A000")

    def _binop(self, e: Expr, row: Row, ctx) -> Any:
        if e.name == "AND":
            return self._truth(self._eval(e.args[0], row, ctx)) and self._truth(self._eval(e.args[1], row, ctx))
        if e.name == "OR":
            return self._truth(self._eval(e.args[0], row, ctx)) or self._truth(self._eval(e.args[1], row, ctx))
        a, b = self._eval(e.args[0], row, ctx), self._eval(e.args[1], row, ctx)
        if e.name == "||":
            return None if a is None or b is None else _pg_text(a) + _pg_text(b)
        if a is None or b is None:
            return None
        if e.name == "=" and type(a) is type(b) and type(a) in (int, str):
            return a == b  # the common case (ids, channel names) needs no coercion
        if e.name in ("LIKE", "ILIKE"):
            pat = "^" + re.escape(str(b)).replace("%", ".*").replace("_", ".") + "$"
            return re.match(pat, str(a), re.I if e.name == "ILIKE" else 0) is not None
        if e.name in ("+", "-", "*", "/"):
            if isinstance(a, Timestamp) or isinstance(b, Timestamp):
                if e.name == "-" and isinstance(a, Timestamp) and isinstance(b, Timestamp):
                    return Interval(float(a) - float(b))
                if e.name in ("+", "-") and isinstance(a, Timestamp) and isinstance(b, Interval):
                    return Timestamp(float(a) + (float(b) if e.name == "+" else -float(b)))
                raise SQLError(f"operator does not exist: timestamp with time zone {e.name} "
                               f"{'interval' if isinstance(b, Interval) else 'unknown'}", sqlstate="42883")
            try:
                x, y = float(a), float(b)
            except (TypeError, ValueError):
                raise SQLError(f'invalid input syntax for type numeric: "{_pg_text(b if isinstance(a, (int, float)) else a)}"',
                               sqlstate="22P02") from None
            if e.name == "/" and y == 0:
                raise SQLError("division by zero", sqlstate="22012")
            r = {"+": x + y, "-": x - y, "*": x * y, "/": x / y if y else 0.0}[e.name]
            if isinstance(a, Interval) or isinstance(b, Interval):
                return Interval(r)
            return int(r) if r == int(r) else r
        a, b = _coerce_pair(a, b)
        return {"=": a == b, "<>": a != b, "<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[e.name]

    def _call(self, e: Expr, row: Row, ctx) -> Any:
        args = [self._eval(a, row, ctx) for a in e.args if a.op != "star"]
        n = e.name
        s = self.server
        if n == "pg_backend_pid":
            return self.backend.pid
        if n == "current_user" or n == "session_user":
            return self.backend.role
        if n == "current_database":
            return self.backend.database
        if n == "version":
            return "PostgreSQL 16.4 on x86_64-pc-linux-gnu, compiled by gcc (Debian 12.2.0-14) 12.2.0, 64-bit"
        if n == "now" or n == "clock_timestamp":
            return _timestamp(self.now())
        if n == "coalesce":
            return next((a for a in args if a is not None), None)
        if n == "left":
            return None if args[0] is None else _pg_text(args[0])[:int(args[1])]
        if n in ("substr", "substring"):
            if args[0] is None:
                return None
            start = int(args[1]) - 1 if len(args) > 1 else 0
            text = _pg_text(args[0])
            return text[start:start + int(args[2])] if len(args) > 2 else text[start:]
        if n in ("length", "char_length"):
            return None if args[0] is None else len(_pg_text(args[0]))
        if n in ("lower", "upper"):
            return None if args[0] is None else (str(args[0]).lower() if n == "lower" else str(args[0]).upper())
        if n == "unnest":
            return args[0]
        if n == "current_setting":
            spec = self._guc(str(args[0]))
            return format_guc_value(spec, s.effective(self.backend, spec.name)[0])
        if n == "set_config":
            self._set_session(str(args[0]), str(args[1]), bool(args[2]) if len(args) > 2 else False)
            spec = self._guc(str(args[0]))
            return format_guc_value(spec, s.effective(self.backend, spec.name)[0])
        if n in ("pg_terminate_backend", "pg_cancel_backend"):
            self._require_signal_rights(n)
            pid = int(args[0])
            if pid == self.backend.pid and n == "pg_terminate_backend":
                raise SelfTerminated()
            if pid not in s.backends:
                return False
            if n == "pg_cancel_backend":
                return True
            done = s.terminate(pid, self.now())
            if done:
                self.on_event("terminate", {"pid": pid})
            return done
        if n == "pg_blocking_pids":
            b = s.backends.get(int(args[0])) if args[0] is not None else None
            if b is None or b.waiting_for is None:
                return []
            holder = s.row_locks.get(b.waiting_for)
            return [holder] if holder is not None else []
        if n == "pg_reload_conf":
            self._require_signal_rights(n)
            s.reload(self.now())
            self.on_event("reload", {})
            return True
        if n == "pg_sleep":
            secs = float(args[0])
            timeout_ms = setting_ms("statement_timeout", s.effective(self.backend, "statement_timeout")[0])
            spent = (ctx.slept if ctx else 0.0)
            if timeout_ms > 0 and (spent + secs) * 1000.0 > timeout_ms:
                if ctx is not None:
                    ctx.slept = timeout_ms / 1000.0
                raise SQLError("canceling statement due to statement timeout", sqlstate="57014",
                               duration_s=timeout_ms / 1000.0)
            if ctx is not None:
                ctx.slept += secs
            return ""
        if n == "pg_size_pretty":
            return f"{int(args[0]) // 1024} kB"
        if n in ("count", "max", "min", "sum"):
            raise SQLError(f"aggregate function {n} is not allowed here", sqlstate="42803")
        raise SQLError(f"function {n}({', '.join('unknown' for _ in args)}) does not exist", sqlstate="42883",
                       hint="No function matches the given name and argument types. You might need to add explicit "
                            "type casts.")

    def _require_signal_rights(self, fn: str) -> None:
        if not self.server.roles[self.backend.role].superuser:
            raise SQLError(f"permission denied to execute function {fn}", sqlstate="42501")


class SelfTerminated(Exception):
    """The session terminated itself (pg_terminate_backend(pg_backend_pid()))."""


class _EvalCtx:
    """Per-statement evaluation state: how long pg_sleep held it."""

    def __init__(self) -> None:
        self.slept = 0.0
        self.cache: dict[str, Any] = {}  # uncorrelated subquery results


def _coerce_pair(a: Any, b: Any) -> tuple[Any, Any]:
    if isinstance(a, Oid) or isinstance(b, Oid):
        return _oid_pair(a, b)
    if isinstance(a, (Timestamp, Interval)) or isinstance(b, (Timestamp, Interval)):
        if isinstance(a, str):
            a = parse_interval(a) if isinstance(b, Interval) else a
        if isinstance(b, str):
            b = parse_interval(b) if isinstance(a, Interval) else b
        if isinstance(a, str) or isinstance(b, str):
            return _pg_text(a), _pg_text(b)
        return float(a), float(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) if not isinstance(a, str) else a in ("t", "true"), bool(b) if not isinstance(b, str) else b in (
            "t", "true")
    if isinstance(a, (int, float)) and isinstance(b, str):
        try:
            return a, float(b)
        except ValueError:
            return str(a), b
    if isinstance(b, (int, float)) and isinstance(a, str):
        try:
            return float(a), b
        except ValueError:
            return a, str(b)
    if isinstance(a, list) or isinstance(b, list):
        return _pg_text(a), _pg_text(b)
    return a, b


def _oid_pair(a: Any, b: Any) -> tuple[Any, Any]:
    """Operands of a comparison with an oid: text is read as oid input, so a relation name is an error unless the
    oid is a regclass (whose input is a name)."""
    def as_oid(text: str, other: Any) -> Any:
        try:
            return int(text)
        except ValueError:
            if isinstance(other, RegClass):
                return int(other) if text in (other.relname, f"public.{other.relname}") else -1
            raise SQLError(f'invalid input syntax for type oid: "{text}"', sqlstate="22P02") from None
    if isinstance(a, str):
        a = as_oid(a, b)
    if isinstance(b, str):
        b = as_oid(b, a)
    return a, b


def _join_key(v: Any) -> Any:
    """A hash key under which values that `=` finds equal meet (numbers and numeric text alike)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, (int, float)):
        return ("n", float(v))
    if isinstance(v, str):
        try:
            return ("n", float(v))
        except ValueError:
            return ("s", v)
    return ("s", _pg_text(v))


def _eq(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return False
    x, y = _coerce_pair(a, b)
    return x == y


def _sort_key(v: Any) -> tuple:
    if v is None:
        return (1, 0, "")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (0, v, "")
    return (0, 0, _pg_text(v))
