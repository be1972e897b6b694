"""SQL text as statements and tokens, and what the dialect-independent statements do (DML, DDL, reads).

Used by the psql and mysql classifiers (`postgres.py`, `mysql.py`), which add their dialect's SET, ALTER and GRANT
forms. A small hand-written lexer: it splits statements on `;` outside strings, quoted identifiers, dollar quotes
and comments, which is all the classifiers need. Each statement becomes a `SqlEffect` (verb, keys, layer, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from guardrail.actions.model import UNKNOWN, KeyChange, Layer, Mutating

__all__ = ["Tok", "Statement", "SqlEffect", "scan", "statements", "common_effect", "literal"]

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<lc>--[^\n]*)
  | (?P<bc>/\*.*?(?:\*/|\Z))
  | (?P<dollar>\$(?P<tag>[A-Za-z_][A-Za-z0-9_]*)?\$)
  | (?P<str>[EeNnBbXx]?'(?:[^'\\]|''|\\.)*(?:'|\Z))
  | (?P<qid>"(?:[^"]|"")*(?:"|\Z))
  | (?P<bq>`(?:[^`]|``)*(?:`|\Z))
  | (?P<num>[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?[A-Za-z]*)
  | (?P<word>@{0,2}[A-Za-z_\u0080-\uffff][A-Za-z0-9_$\u0080-\uffff]*)
  | (?P<semi>;)
  | (?P<op>::|<>|!=|<=|>=|:=|\|\||[(),.=*+\-/<>%:\[\]{}@?&|~^!#\\])
  | (?P<other>.)
""", re.S | re.X)


@dataclass(frozen=True)
class Tok:
    """One SQL token: kind (word, str, qid, num, op), its text, and its value (unquoted for strings)."""

    kind: str
    text: str
    value: str

    @property
    def up(self) -> str:
        return self.value.upper() if self.kind == "word" else ""


@dataclass
class Statement:
    """One SQL statement's tokens and text."""

    toks: list[Tok]
    text: str

    def kw(self, i: int) -> str:
        return self.toks[i].up if 0 <= i < len(self.toks) else ""

    def index(self, *words: str, start: int = 0, depth0: bool = True) -> int:
        """Index of the first keyword in `words` at parenthesis depth 0, or -1."""
        depth = 0
        for i in range(start, len(self.toks)):
            t = self.toks[i]
            if t.text == "(":
                depth += 1
            elif t.text == ")":
                depth = max(0, depth - 1)
            elif (depth == 0 or not depth0) and t.up in words:
                return i
        return -1

    def name_at(self, i: int) -> tuple[str, int]:
        """A possibly qualified name starting at i (`public.users`, `"Weird"."T"`) and the index after it."""
        parts: list[str] = []
        j = i
        while j < len(self.toks) and self.toks[j].kind in ("word", "qid", "str", "num"):
            parts.append(self.toks[j].value)
            if j + 1 < len(self.toks) and self.toks[j + 1].text == "." and j + 2 < len(self.toks):
                j += 2
                continue
            j += 1
            break
        return ".".join(parts), j


def _unquote(kind: str, text: str) -> str:
    if kind == "str":
        body = text[1:] if text[0] in "EeNnBbXx" and len(text) > 1 and text[1] == "'" else text
        body = body[1:-1] if len(body) >= 2 and body.endswith("'") else body[1:]
        return body.replace("''", "'").replace("\\'", "'")
    if kind == "qid":
        return text[1:-1].replace('""', '"') if len(text) >= 2 else text
    if kind == "bq":
        return text[1:-1].replace("``", "`") if len(text) >= 2 else text
    return text


# PostgreSQL's standard strings ('...' with standard_conforming_strings on, the default since 9.1): a backslash is
# an ordinary character, so 'C:\' ends there. Only E'...' strings take backslash escapes.
_STD_STR = re.compile(r"[NnBbXx]?'(?:[^']|'')*(?:'|\Z)")
# MySQL/MariaDB executable comments: the server runs what is inside /*! ... */, /*!50000 ... */ and /*M! ... */.
_EXEC_COMMENT = re.compile(r"/\*M?![0-9]{0,6}")


def client_terminators(sql: str, letters: str, **dialect: Any) -> str:
    """`sql` with a client's backslash terminators outside strings and comments (`\\g`, `\\G` for the mysql
    client, which ends the statement there and reads the rest as the next) written as `;`."""
    out, pos = [], 0
    toks = list(scan(sql, **dialect))
    for i, (tok, a, _) in enumerate(toks[:-1]):
        nxt, b, e = toks[i + 1]
        if tok.kind == "op" and tok.text == "\\" and b == a + 1 and nxt.kind == "word" and nxt.text[:1] in letters:
            out += [sql[pos:a], "; "]
            pos = a + 2
            if len(nxt.text) > 1:  # `\\GDROP ...`: the rest of the word is the next statement's
                out.append(sql[pos:e])
            pos = e
    out.append(sql[pos:])
    return "".join(out)


def scan(sql: str, start: int = 0, end: int | None = None, *, hash_comments: bool = False,
         exec_comments: bool = False, pg_strings: bool = False) -> Any:
    """Every token of `sql` as (Tok, start, end), whitespace and comments left out, `;` as a `semi` token.

    Dialects: `hash_comments` (MySQL `#` line comments), `exec_comments` (MySQL executable comments, lexed as the
    SQL they hold), `pg_strings` (PostgreSQL: a backslash escapes only inside E'...')."""
    n = len(sql) if end is None else end
    pos = start
    while pos < n:
        if hash_comments and sql[pos] == "#":
            e = sql.find("\n", pos, n)
            pos = n if e < 0 else e
            continue
        m = _TOKEN.match(sql, pos, n)
        if m is None:  # pragma: no cover - `other` matches any character
            pos += 1
            continue
        kind = m.lastgroup or "other"
        text = m.group(0)
        if kind == "tag":
            kind = "dollar"
        if kind == "dollar":
            e = sql.find(text, m.end(), n)
            body_end = n if e < 0 else e
            stop = n if e < 0 else e + len(text)
            yield Tok("str", sql[pos:stop], sql[m.end():body_end]), pos, stop
            pos = stop
            continue
        if kind == "str" and pg_strings and text[0] not in "Ee":
            m = _STD_STR.match(sql, pos, n) or m
            text = m.group(0)
        if kind == "bc" and exec_comments:
            x = _EXEC_COMMENT.match(sql, pos, n)
            if x is not None:
                body_end = m.end() - 2 if text.endswith("*/") and m.end() - 2 >= x.end() else m.end()
                yield from scan(sql, x.end(), body_end, hash_comments=hash_comments, exec_comments=True)
                pos = m.end()
                continue
        pos = m.end()
        if kind in ("ws", "lc", "bc"):
            continue
        if kind == "semi":
            yield Tok("semi", text, text), m.start(), m.end()
        elif kind == "bq":
            yield Tok("qid", text, _unquote("bq", text)), m.start(), m.end()
        else:
            yield Tok(kind, text, _unquote(kind, text)), m.start(), m.end()


def statements(sql: str, *, hash_comments: bool = False, exec_comments: bool = False,
               pg_strings: bool = False) -> list[Statement]:
    """Split SQL into statements (dialect flags as in `scan`)."""
    out: list[Statement] = []
    toks: list[Tok] = []
    start = 0
    for tok, a, b in scan(sql, hash_comments=hash_comments, exec_comments=exec_comments, pg_strings=pg_strings):
        if tok.kind == "semi":
            if toks:
                out.append(Statement(toks, sql[start:a].strip()))
            toks = []
            start = b
            continue
        toks.append(tok)
    if toks:
        out.append(Statement(toks, sql[start:].strip()))
    return out


def literal(tok: Tok | None) -> Any:
    """A setting's value as written: '150ms' -> "150ms", 20 -> 20, on -> "on"."""
    if tok is None:
        return None
    if tok.kind == "num" and re.fullmatch(r"[0-9]+", tok.text):
        return int(tok.text)
    if tok.kind == "num" and re.fullmatch(r"[0-9]+\.[0-9]+", tok.text):
        return float(tok.text)
    return tok.value


@dataclass
class SqlEffect:
    """What one statement does, before it becomes an Action."""

    verb: str
    mutating: Mutating
    layer: Layer = Layer.NONE
    keys: list[KeyChange] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    target_kind: str = ""
    target_name: str = ""
    opaque_reason: str | None = None
    skip: bool = False  # transaction control: nothing to report on its own


_TX = {"BEGIN", "START", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE", "ABORT"}
_MAINT = {"VACUUM", "ANALYZE", "ANALYSE", "CHECKPOINT", "REINDEX", "CLUSTER", "OPTIMIZE", "REPAIR", "REFRESH"}
_READ = {"SELECT", "SHOW", "DESCRIBE", "DESC", "EXPLAIN", "VALUES", "TABLE", "WITH", "HELP", "USE", "CHECK"}
_WRITE_FUNCS = {"nextval", "setval", "pg_terminate_backend", "pg_cancel_backend", "pg_reload_conf", "set_config",
                "pg_rotate_logfile", "pg_switch_wal", "pg_promote", "pg_create_physical_replication_slot",
                "pg_create_logical_replication_slot", "pg_drop_replication_slot", "lo_unlink", "lo_import",
                "lo_export", "dblink", "dblink_exec", "pg_advisory_lock", "pg_file_write", "pg_stat_reset",
                "pg_stat_reset_shared", "pg_wal_replay_pause", "pg_wal_replay_resume", "pg_backup_start",
                "pg_start_backup", "pg_stop_backup", "pg_backup_stop", "pg_sleep"}
_FUNC_VERBS = {"pg_terminate_backend": "terminate backend", "pg_cancel_backend": "cancel backend",
               "pg_reload_conf": "reload conf"}


def _tables_after(st: Statement, *words: str) -> list[str]:
    names = []
    for i, t in enumerate(st.toks):
        if t.up in words and i + 1 < len(st.toks) and st.toks[i + 1].kind in ("word", "qid"):
            nm, _ = st.name_at(i + 1)
            if nm.upper() not in ("SELECT", "LATERAL", "ONLY", "("):
                names.append(nm)
    return names


def _has_where(st: Statement) -> bool:
    """A WHERE clause that can leave a row out. `WHERE true`, `WHERE 1=1`, `WHERE x = x` and `WHERE NOT false`
    select every row, as no WHERE does."""
    i = st.index("WHERE")
    if i < 0:
        return st.index("CURRENT") >= 0 and st.index("OF") >= 0
    end = st.index("RETURNING", "ORDER", "LIMIT", start=i + 1)
    return not _always_true([t.text.upper() for t in st.toks[i + 1:end if end >= 0 else len(st.toks)]])


def _always_true(cond: list[str]) -> bool:
    """Whether a condition's tokens hold for every row: a constant truth, `a = a`, or an OR with one of those."""
    parts, depth, cur = [], 0, []
    for t in cond:
        depth += (t == "(") - (t == ")")
        if t == "OR" and depth == 0:
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
    parts.append(cur)
    if len(parts) > 1:
        return any(_always_true(p) for p in parts)
    while len(cond) >= 2 and cond[0] == "(" and cond[-1] == ")":
        cond = cond[1:-1]
    if cond in (["TRUE"], ["NOT", "FALSE"], ["1"]):
        return True
    return len(cond) == 3 and cond[1] in ("=", "IS") and cond[0] == cond[2] and cond[0] not in ("NULL", "?")


# Objects whose body is code the server runs later (functions, procedures, triggers, rewrite rules, MySQL events).
_STORED_CODE = frozenset({"FUNCTION", "PROCEDURE", "TRIGGER", "RULE", "EVENT", "AGGREGATE", "CONSTRAINT"})


def _stored_code(st: Statement) -> str | None:
    """CREATE ... FUNCTION/PROCEDURE/TRIGGER/...: the first object word after CREATE's modifiers (OR REPLACE,
    DEFINER = 'u'@'h', SQL SECURITY ..., CONSTRAINT) is one whose body runs later."""
    for i in range(1, 14):
        w = st.kw(i)
        if w in _STORED_CODE:
            return w
        if w in _OTHER_OBJECTS:
            return None
    return None


_OTHER_OBJECTS = frozenset({"TABLE", "VIEW", "INDEX", "DATABASE", "SCHEMA", "USER", "ROLE", "SEQUENCE", "TYPE",
                            "EXTENSION", "DOMAIN", "SERVER", "TABLESPACE", "POLICY", "PUBLICATION", "SUBSCRIPTION"})


def common_effect(st: Statement) -> SqlEffect | None:
    """The effect of statements both dialects share (reads, DML, DDL, maintenance); None when not one of them."""
    k = st.kw(0)
    if k in _TX:
        return SqlEffect(verb=k.lower(), mutating=False, skip=True)
    if k == "WITH":
        # The statement a WITH list leads to may itself write: `WITH x AS (SELECT 1) DELETE FROM t`.
        main = st.index("INSERT", "UPDATE", "DELETE", "MERGE", "REPLACE")
        if main > 0:
            eff = common_effect(Statement(st.toks[main:], st.text))
            if eff is not None:
                return eff  # the CTEs' own writes are actions too (postgres.py)
    if k in ("SELECT", "VALUES", "TABLE", "WITH"):
        return _select(st)
    if k in ("SHOW", "DESCRIBE", "DESC", "HELP", "USE"):
        return SqlEffect(verb=k.lower(), mutating=False, details={"sql_kind": "read"})
    if k == "EXPLAIN":
        # EXPLAIN ANALYZE runs the statement. ANALYZE may come bare or in the option list, `EXPLAIN (ANALYZE,
        # FORMAT json) DELETE ...`: anywhere before the statement it explains.
        inner_at = next((i for i, t in enumerate(st.toks) if i > 0 and t.up in
                         ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "MERGE", "REPLACE", "EXECUTE")), -1)
        head = st.toks[1:inner_at] if inner_at > 0 else st.toks[1:]
        if any(t.up in ("ANALYZE", "ANALYSE") for t in head):
            if inner_at > 0:
                eff = common_effect(Statement(st.toks[inner_at:], st.text))
                if eff is not None:
                    eff.details["explain_analyze"] = True
                    return eff
            return SqlEffect(verb="explain", mutating=UNKNOWN, details={"sql_kind": "unknown", "explain_analyze": True},
                             opaque_reason="EXPLAIN ANALYZE runs a statement that is not in the text")
        return SqlEffect(verb="explain", mutating=False, details={"sql_kind": "read"})
    if k in ("INSERT", "REPLACE", "UPSERT"):
        i = st.index("INTO")
        table = st.name_at(i + 1)[0] if i >= 0 else (st.name_at(1)[0] if len(st.toks) > 1 else "")
        return _dml(k.lower(), table, None)
    if k == "UPDATE":
        j = 2 if st.kw(1) in ("ONLY", "LOW_PRIORITY", "IGNORE") else 1
        return _dml("update", st.name_at(j)[0], _has_where(st))
    if k == "DELETE":
        i = st.index("FROM")
        table = st.name_at(i + 1 + (1 if st.kw(i + 1) == "ONLY" else 0))[0] if i >= 0 else ""
        return _dml("delete", table, _has_where(st))
    if k == "MERGE":
        return _dml("merge", st.name_at(st.index("INTO") + 1)[0] if st.index("INTO") >= 0 else "", None)
    if k == "TRUNCATE":
        j = 1 + (1 if st.kw(1) == "TABLE" else 0) + (1 if st.kw(2) == "ONLY" else 0)
        tables = [st.name_at(j)[0]]
        e = SqlEffect(verb="truncate", mutating=True, layer=Layer.DECLARED,
                      details={"sql_kind": "truncate", "table": tables[0], "has_where": False},
                      target_kind="table", target_name=tables[0])
        return e
    if k == "DROP":
        obj = st.kw(1)
        j = 2
        if obj in ("MATERIALIZED", "FOREIGN", "UNLOGGED", "TEMPORARY", "TEMP"):
            obj, j = f"{obj} {st.kw(2)}", 3
        if st.kw(j) == "IF" and st.kw(j + 1) == "EXISTS":
            j += 2
        name = st.name_at(j)[0]
        return SqlEffect(verb="drop", mutating=True, layer=Layer.DECLARED,
                         details={"sql_kind": "drop", "object": obj.lower(), "name": name,
                                  **({"table": name} if obj == "TABLE" else {})},
                         target_kind=obj.lower() or "object", target_name=name)
    if k in ("CREATE", "ALTER", "COMMENT", "RENAME", "SECURITY"):
        j = 1
        while st.kw(j) in ("OR", "REPLACE", "UNIQUE", "TEMPORARY", "TEMP", "UNLOGGED", "MATERIALIZED", "GLOBAL",
                           "LOCAL", "DEFINER", "ALGORITHM", "="):
            j += 1
        obj = st.kw(j)
        if st.kw(j + 1) == "IF":
            j += 3 if st.kw(j + 2) == "NOT" else 2
        name = st.name_at(j + 1)[0]
        stored = _stored_code(st) if k == "CREATE" else None
        if stored:
            obj = stored
            # Its body runs later, when called or triggered (`SELECT f()` reads as a plain SELECT): what it
            # does is not judged where it happens.
            return SqlEffect(verb=f"{k.lower()} {obj.lower()}", mutating=UNKNOWN, layer=Layer.DECLARED,
                             details={"sql_kind": "procedural", "object": obj.lower(), "name": name},
                             target_kind=obj.lower(), target_name=name,
                             opaque_reason=f"{k} {obj} stores code that runs later, when it is called or "
                                           "triggered, out of the guard's sight; run the plain statements instead")
        return SqlEffect(verb=f"{k.lower()} {obj.lower()}".strip(), mutating=True, layer=Layer.DECLARED,
                         details={"sql_kind": "ddl", "object": obj.lower(), "name": name,
                                  **({"table": name} if obj == "TABLE" else {})},
                         target_kind=obj.lower() or "object", target_name=name)
    if k in _MAINT:
        return SqlEffect(verb=k.lower(), mutating=True, layer=Layer.NONE, details={"sql_kind": "maintenance"})
    if k == "LOCK":
        j = 2 if st.kw(1) in ("TABLE", "TABLES") else 1
        name = st.name_at(j)[0]
        return SqlEffect(verb="lock", mutating=True, layer=Layer.NONE,
                         details={"sql_kind": "lock", "table": name}, target_kind="table", target_name=name)
    if k == "UNLOCK":
        return SqlEffect(verb="unlock", mutating=True, layer=Layer.NONE, details={"sql_kind": "lock"})
    if k == "COPY":
        if len(st.toks) > 1 and st.toks[1].text == "(":
            # COPY (query) TO ...: the query runs, and it may write (`COPY (DELETE ... RETURNING *) TO STDOUT`).
            inner = common_effect(Statement(st.toks[2:_closing(st, 2)], st.text))
            if inner is not None and inner.mutating is not False:
                return inner
        name = st.name_at(1)[0]
        if st.index("PROGRAM") > 0:
            return SqlEffect(verb="copy program", mutating=UNKNOWN, details={"sql_kind": "program", "table": name},
                             opaque_reason="COPY ... PROGRAM runs a shell command on the database server")
        frm = st.index("FROM")
        to = st.index("TO")
        if to >= 0 and st.kw(to + 1) == "STDOUT":
            return SqlEffect(verb="copy to", mutating=False, details={"sql_kind": "read", "table": name})
        if frm >= 0:
            return _dml("copy from", name, None)
        return SqlEffect(verb="copy to", mutating=True, layer=Layer.NONE,
                         details={"sql_kind": "file write", "table": name})
    return None


def _dml(verb: str, table: str, has_where: bool | None) -> SqlEffect:
    d: dict[str, Any] = {"sql_kind": "dml", "table": table}
    if has_where is not None:
        d["has_where"] = has_where
    return SqlEffect(verb=verb, mutating=True, layer=Layer.DECLARED, details=d, target_kind="table",
                     target_name=table)


def cte_dml_effects(st: Statement) -> list[SqlEffect]:
    """Each data-modifying statement nested in a parenthesis (`WITH a AS (DELETE ...), b AS (UPDATE ...) ...`), in
    order: one effect each. Only a statement that opens its parenthesis counts, so `SELECT ... FOR UPDATE` (a row
    lock) and `INSERT ... ON CONFLICT DO UPDATE` (the INSERT's own clause) are not separate writes."""
    out = []
    for i, t in enumerate(st.toks):
        if i == 0 or t.up not in ("INSERT", "UPDATE", "DELETE", "MERGE") or st.toks[i - 1].text != "(":
            continue
        # The CTE's own statement only, up to the parenthesis that closes it: the outer query's WHERE is not the
        # DELETE's (`WITH d AS (DELETE FROM t RETURNING *) SELECT ... WHERE true`).
        eff = common_effect(Statement(st.toks[i:_closing(st, i)], st.text))
        if eff is not None:
            eff.details["in_cte"] = True
            out.append(eff)
    return out


def _closing(st: Statement, i: int) -> int:
    """Index of the `)` that closes the parenthesis token i stands in (len(toks) when it stands in none)."""
    depth = 0
    for j in range(i, len(st.toks)):
        t = st.toks[j].text
        if t == "(":
            depth += 1
        elif t == ")":
            if depth == 0:
                return j
            depth -= 1
    return len(st.toks)


def _select(st: Statement) -> SqlEffect:
    funcs = []
    for i, t in enumerate(st.toks[:-1]):
        # A function name may be quoted: SELECT "pg_terminate_backend"(pid) calls the same function.
        if t.kind in ("word", "qid") and st.toks[i + 1].text == "(":
            funcs.append(t.value.lower())
    tables = _tables_after(st, "FROM", "JOIN")
    details: dict[str, Any] = {"sql_kind": "read", "tables": tables}
    catalogs = sorted({t.split(".")[-1].lower() for t in tables
                       if t.split(".")[-1].lower().startswith(("pg_", "information_schema"))
                       or t.lower().startswith(("information_schema.", "performance_schema.", "mysql."))})
    if catalogs:
        details["catalogs"] = catalogs
    if funcs:
        details["functions"] = sorted(set(funcs))
    # A data-modifying CTE or SELECT INTO writes.
    ctes = cte_dml_effects(st)
    if ctes:
        return ctes[0]
    if st.kw(0) == "SELECT" and st.index("INTO") > 0 and st.index("OUTFILE", "DUMPFILE") < 0:
        into = st.index("INTO")
        name = st.name_at(into + 1 + (1 if st.kw(into + 1) in ("TABLE", "TEMP", "TEMPORARY") else 0))[0]
        return SqlEffect(verb="select into", mutating=True, layer=Layer.DECLARED,
                         details={**details, "sql_kind": "ddl", "table": name}, target_kind="table",
                         target_name=name)
    if st.index("OUTFILE", "DUMPFILE") > 0:
        return SqlEffect(verb="select into outfile", mutating=True, layer=Layer.NONE,
                         details={**details, "sql_kind": "file write"})
    writes = [f for f in funcs if f in _WRITE_FUNCS]
    if writes:
        first = writes[0]
        verb = _FUNC_VERBS.get(first, first)
        if first == "set_config":
            return _set_config(st, details)
        details["sql_kind"] = "function"
        if st.index("WHERE") >= 0:
            details["has_where"] = True
        return SqlEffect(verb=verb, mutating=True, layer=Layer.NONE, details=details)
    if "pg_read_file" in funcs or "pg_read_binary_file" in funcs or "pg_ls_dir" in funcs:
        details["reads_server_files"] = True
    if "sleep" in funcs:
        details["sleep"] = True
    return SqlEffect(verb="select", mutating=False, details=details,
                     target_kind="table" if tables else "", target_name=tables[0] if tables else "")


def _set_config(st: Statement, details: dict[str, Any]) -> SqlEffect:
    # set_config('name', 'value', is_local): the SET of a SELECT.
    i = next((i for i, t in enumerate(st.toks) if t.value.lower() == "set_config"), -1)
    args = [t for t in st.toks[i + 2:] if t.kind in ("str", "num", "word")][:3]
    if len(args) >= 2 and args[0].kind == "str":
        return SqlEffect(verb="set", mutating=True, layer=Layer.SESSION,
                         keys=[KeyChange(key=f"postgres.{args[0].value.lower()}", value=literal(args[1]))],
                         details={**details, "sql_kind": "set"})
    return SqlEffect(verb="set", mutating=UNKNOWN, details=details,
                     opaque_reason="set_config with computed arguments")
