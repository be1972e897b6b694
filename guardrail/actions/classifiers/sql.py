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

__all__ = ["Tok", "Statement", "SqlEffect", "scan", "statements", "common_effect", "literal", "hold_locks", "pg_bool",
           "counts_only"]

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
    # A `(` with white space or a comment right before it (MariaDB then looks `now (` up as a stored function).
    spaced: bool = False

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


# PostgreSQL's boolean settings whose value the rules judge (durability, read-only, checksums, security). The server
# reads a boolean as any unambiguous prefix of true, false, yes, no, on, off, in any case, or 1 / 0 (parse_bool):
# `fsync = f`, `'fals'`, `full_page_writes = 'of'` and `default_transaction_read_only = 'ye'` all count.
PG_BOOLS = frozenset({
    "fsync", "full_page_writes", "wal_log_hints", "data_checksums", "zero_damaged_pages", "ignore_checksum_failure",
    "ignore_invalid_pages", "data_sync_retry", "wal_init_zero", "default_transaction_read_only",
    "transaction_read_only", "default_transaction_deferrable", "hot_standby", "autovacuum", "track_counts",
    "row_security", "ssl", "allow_system_table_mods", "ignore_system_indexes", "archive_mode",
})


def pg_bool(name: str, value: Any) -> Any:
    """A PostgreSQL boolean setting's value as the server reads it, written `on` or `off`; other settings and
    values it would reject are left as they are."""
    if name not in PG_BOOLS or not isinstance(value, str):
        return value
    v = value.strip().lower()
    if v == "1" or v and ("true".startswith(v) or "yes".startswith(v)) or len(v) >= 2 and "on".startswith(v):
        return "on"
    if v == "0" or v and ("false".startswith(v) or "no".startswith(v)) or len(v) >= 2 and "off".startswith(v):
        return "off"
    return value


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
                "lo_export", "dblink", "dblink_exec", "dblink_send_query", "pg_advisory_lock", "pg_file_write",
                "pg_file_unlink", "pg_file_rename", "pg_stat_reset",
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


def _condition(st: Statement, where: int) -> list[Tok]:
    """The tokens of the condition after the WHERE at index `where`, up to the clause that ends it."""
    end = st.index("RETURNING", "ORDER", "LIMIT", "GROUP", "HAVING", "WINDOW", "UNION", "INTERSECT", "EXCEPT",
                   "OFFSET", "FETCH", "FOR", "ON", start=where + 1)
    return st.toks[where + 1:end if end >= 0 else len(st.toks)]


def _has_where(st: Statement) -> bool:
    """A WHERE clause that can leave a row out. `WHERE true`, `WHERE 1=1`, `WHERE x = x`, `WHERE id > 0` and
    `WHERE name IS NOT NULL` select every row, as no WHERE does."""
    i = st.index("WHERE")
    if i < 0:
        return st.index("CURRENT") >= 0 and st.index("OF") >= 0
    return not _selects_all(_condition(st, i))


def _split(cond: list[Tok], word: str) -> list[list[Tok]]:
    """`cond` split at each `word` (AND, OR) outside parentheses."""
    parts: list[list[Tok]] = [[]]
    depth = 0
    for t in cond:
        depth += (t.text == "(") - (t.text == ")")
        if depth == 0 and t.up == word:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts


def _unwrap(cond: list[Tok]) -> list[Tok]:
    """`cond` without parentheses that enclose all of it: `((a = 1))` -> `a = 1`, not `(a) = (b)`."""
    while len(cond) >= 2 and cond[0].text == "(" and cond[-1].text == ")":
        depth = 0
        for j, t in enumerate(cond):
            depth += (t.text == "(") - (t.text == ")")
            if depth == 0 and j < len(cond) - 1:
                return cond
        cond = cond[1:-1]
    return cond


def _canon(cond: list[Tok]) -> str:
    """A condition's text, lower case, without table qualifiers: `a.pid <> pg_backend_pid()` ->
    `pid <> pg_backend_pid ( )`."""
    out: list[str] = []
    i = 0
    while i < len(cond):
        t = cond[i]
        if t.kind in ("word", "qid") and i + 1 < len(cond) and cond[i + 1].text == ".":
            i += 2  # a qualifier and its dot
            continue
        out.append(t.value.lower() if t.kind == "qid" else t.text.lower())
        i += 1
    return " ".join(out)


_COMPARE = {"=", "<>", "!=", "<", ">", "<=", ">=", "LIKE", "ILIKE"}


def _number(side: list[Tok]) -> float | None:
    """A numeric literal (`5`, `-1`, `+0.5`), or None."""
    sign = 1.0
    if len(side) == 2 and side[0].text in ("-", "+"):
        sign, side = (-1.0 if side[0].text == "-" else 1.0), side[1:]
    if len(side) == 1 and side[0].kind == "num":
        try:
            return sign * float(side[0].text)
        except ValueError:
            return None
    return None


def _column(side: list[Tok]) -> bool:
    """A (possibly qualified) column name: `id`, `o.id`, `"Id"`."""
    return bool(side) and len(side) % 2 == 1 and all(
        (t.kind in ("word", "qid") and t.up not in ("NULL", "TRUE", "FALSE", "NOT")) if k % 2 == 0 else t.text == "."
        for k, t in enumerate(side))


def _key(side: list[Tok]) -> bool:
    """A table's own key column: `id`, `o.id`, `"Id"`. Not `worker_id`: a reference to another table's row may be
    null (`WHERE worker_id IS NOT NULL` picks the claimed jobs)."""
    if not _column(side):
        return False
    return (side[-1].value if side[-1].kind == "qid" else side[-1].text).upper() == "ID"


def _always_true(cond: list[Tok]) -> bool:
    """Whether one condition (no AND/OR at its top) holds for every row: a constant truth (`true`, `1`, `NOT
    false`, `1 < 2`, `'a' = 'a'`), `a = a`, `id IS NOT NULL`, `id > 0` or `id >= 0` (the key column `id`, `o.id`:
    never null, counting from 1), `col LIKE '%'`. On other columns those narrow: `deleted_at IS NOT NULL`,
    `worker_id IS NOT NULL` and `retries > 0` pick the soft-deleted rows, the claimed jobs, the retried ones."""
    texts = [t.text.upper() for t in cond]
    if texts in (["TRUE"], ["NOT", "FALSE"], ["TRUE", "IS", "TRUE"]):
        return True
    n = _number(cond)
    if n is not None:
        return n != 0  # MySQL: WHERE 1, WHERE 2
    if len(cond) >= 4 and texts[-3:] == ["IS", "NOT", "NULL"] and (_key(cond[:-3]) or _number(cond[:-3]) is not None
                                                                 or (len(cond) == 4 and cond[0].kind == "str")):
        return True
    ops = [k for k, t in enumerate(cond) if t.text.upper() in _COMPARE and t.kind in ("op", "word")]
    if len(ops) != 1:
        return False
    k = ops[0]
    op, lhs, rhs = texts[k], cond[:k], cond[k + 1:]
    if [t.text.upper() for t in lhs] == [t.text.upper() for t in rhs] and op in ("=", "<=", ">=", "LIKE", "ILIKE") \
            and texts[0] not in ("NULL", "?"):
        return True
    ln, rn = _number(lhs), _number(rhs)
    if ln is not None and rn is not None:
        return {"=": ln == rn, "<>": ln != rn, "!=": ln != rn, "<": ln < rn, ">": ln > rn, "<=": ln <= rn,
                ">=": ln >= rn}.get(op, False)
    if len(lhs) == 1 and len(rhs) == 1 and lhs[0].kind == "str" and rhs[0].kind == "str":
        a, b = lhs[0].value, rhs[0].value
        return {"=": a == b, "<>": a != b, "!=": a != b, "LIKE": a == b}.get(op, False)
    if _key(lhs) and rn is not None:
        return (op == ">" and rn <= 0) or (op == ">=" and rn <= 0)
    if _key(rhs) and ln is not None:
        return (op == "<" and ln <= 0) or (op == "<=" and ln <= 0)
    if _column(lhs) and op in ("LIKE", "ILIKE") and len(rhs) == 1 and rhs[0].kind == "str":
        return rhs[0].value != "" and set(rhs[0].value) == {"%"}
    return False


def _selects_all(cond: list[Tok], ignore: frozenset[str] = frozenset()) -> bool:
    """Whether a WHERE condition lets every row through: an OR with one branch that does, an AND whose every part
    does, a condition that always holds (`_always_true`), or one whose text is in `ignore` (conditions that do not
    narrow what a statement reaches, such as `pid <> pg_backend_pid()` for a terminate)."""
    cond = _unwrap(cond)
    if not cond:
        return True
    parts = _split(cond, "OR")
    if len(parts) > 1:
        return any(_selects_all(p, ignore) for p in parts)
    # `x BETWEEN 1 AND 5` splits too, but its first part is never always true, so the AND never is.
    parts = _split(cond, "AND")
    if len(parts) > 1:
        return all(_selects_all(p, ignore) for p in parts)
    return _always_true(cond) or (bool(ignore) and _canon(cond) in ignore)


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
        if k == "INSERT" and _upserts(st):
            # ON CONFLICT ... DO UPDATE / ON DUPLICATE KEY UPDATE: an UPDATE of every existing row the source
            # names. Rows given as VALUES are named one by one; a query's rows only as its WHERE narrows them.
            on = st.index("ON")
            from_query = any(t.up in ("SELECT", "TABLE") for t in st.toks[:on]) and st.index("VALUES", "VALUE") < 0
            eff = _dml("update", table, not from_query or _narrowing_where(st))
            eff.details["upsert"] = True
            return eff
        return _dml(k.lower(), table, None)
    if k == "UPDATE":
        j = 2 if st.kw(1) in ("ONLY", "LOW_PRIORITY", "IGNORE") else 1
        return _dml("update", st.name_at(j)[0], _has_where(st), st)
    if k == "DELETE":
        i = st.index("FROM")
        table = st.name_at(i + 1 + (1 if st.kw(i + 1) == "ONLY" else 0))[0] if i >= 0 else ""
        return _dml("delete", table, _has_where(st), st)
    if k == "MERGE":
        return _merge(st)
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
        eff = SqlEffect(verb=f"{k.lower()} {obj.lower()}".strip(), mutating=True, layer=Layer.DECLARED,
                        details={"sql_kind": "ddl", "object": obj.lower(), "name": name,
                                 **({"table": name} if obj == "TABLE" else {})},
                        target_kind=obj.lower() or "object", target_name=name)
        return _alter_effect(st, obj, name, eff) if k == "ALTER" else eff
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


def _upserts(st: Statement) -> bool:
    """INSERT ... ON CONFLICT ... DO UPDATE (PostgreSQL) or ON DUPLICATE KEY UPDATE (MySQL)."""
    on = st.index("ON")
    if on < 0:
        return False
    if st.kw(on + 1) == "DUPLICATE":
        return True
    do = st.index("DO", start=on)
    return st.kw(on + 1) == "CONFLICT" and do > 0 and st.kw(do + 1) == "UPDATE"


def _narrowing_where(st: Statement) -> bool:
    """Any WHERE of the statement (its query's or its DO UPDATE's) that can leave a row out."""
    i = st.index("WHERE", depth0=False)
    while i >= 0:
        if not _selects_all(_condition(st, i)):
            return True
        i = st.index("WHERE", start=i + 1, depth0=False)
    return False


def _merge(st: Statement) -> SqlEffect:
    """MERGE INTO t USING s ON cond WHEN [NOT] MATCHED [BY SOURCE|TARGET] [AND cond] THEN DELETE|UPDATE|INSERT: judged
    as the most destructive action it may take on t (a DELETE, else an UPDATE), scoped by its ON condition and the
    WHEN clause's own. WHEN NOT MATCHED BY SOURCE reaches every row of t the source lacks: with an empty source,
    all of them."""
    into = st.index("INTO")
    table = st.name_at(into + 1)[0] if into >= 0 else ""
    on = st.index("ON")
    first_when = st.index("WHEN")
    on_cond = st.toks[on + 1:first_when if first_when > on else len(st.toks)] if on >= 0 else []
    if _source_is_target(st, table, on):
        on_cond = _beyond_join(on_cond)
    actions: dict[str, bool] = {}  # verb -> scoped (every WHEN clause that takes it must be)
    w = first_when
    while w >= 0:
        nxt = st.index("WHEN", start=w + 1)
        then = st.index("THEN", start=w)
        clause_end = nxt if nxt >= 0 else len(st.toks)
        if then < 0 or then > clause_end:
            break
        what = st.kw(then + 1)
        if what in ("DELETE", "UPDATE"):
            head = [t.up for t in st.toks[w + 1:then]]
            by_source = head[:4] == ["NOT", "MATCHED", "BY", "SOURCE"]
            extra_at = next((j for j in range(w + 1, then) if st.toks[j].up == "AND"), -1)
            extra = st.toks[extra_at + 1:then] if extra_at >= 0 else []
            scoped = (not by_source and not _selects_all(on_cond)) or (bool(extra) and not _selects_all(extra))
            verb = what.lower()
            actions[verb] = actions.get(verb, True) and scoped
        w = nxt
    if not actions:
        eff = _dml("merge", table, None)
    else:
        verb = "delete" if "delete" in actions else "update"
        eff = _dml(verb, table, actions[verb])
    eff.details["merge"] = True
    return eff


def _source_is_target(st: Statement, table: str, on: int) -> bool:
    """MERGE INTO t USING t (or a query of t that no WHERE narrows) ON ...: its source holds every row of t."""
    using = st.index("USING")
    if not table or using < 0 or on < using:
        return False
    src = st.toks[using + 1:on]
    bare = table.split(".")[-1].lower()
    if src and src[0].kind in ("word", "qid"):
        return st.name_at(using + 1)[0].split(".")[-1].lower() == bare
    inner = Statement(_unwrap(src[:_closing(st, using + 2) - using]) if src and src[0].text == "(" else [], st.text)
    if inner.kw(0) not in ("SELECT", "TABLE"):
        return False
    reads = [t.split(".")[-1].lower() for t in _tables_after(inner, "FROM", "JOIN", "TABLE")]
    return bare in reads and not _narrowing_where(inner)


def _beyond_join(cond: list[Tok]) -> list[Tok]:
    """An ON condition without its joins (`o.id = s.id`): what is left is all that narrows a self-sourced MERGE."""
    parts = _split(_unwrap(cond), "AND")
    if len(parts) == 1 and len(_split(parts[0], "OR")) > 1:
        return cond
    kept: list[Tok] = []
    for part in parts:
        p = _unwrap(part)
        eq = [k for k, t in enumerate(p) if t.text == "="]
        if len(eq) == 1 and _column(p[:eq[0]]) and _column(p[eq[0] + 1:]):
            continue
        kept += ([Tok("word", "AND", "AND")] if kept else []) + part
    return kept


def hold_locks(effects: list[SqlEffect]) -> None:
    """A lock the statements take (LOCK TABLE(S), FLUSH TABLES WITH READ LOCK, SELECT ... FOR UPDATE) and then hold
    while a later statement sleeps: the lock's effect gets `held_s`, the sleep's length (None: not readable), and a
    row lock held so becomes a change (every writer of those rows waits). COMMIT, ROLLBACK and UNLOCK release it."""
    lock: SqlEffect | None = None
    for eff in effects:
        d = eff.details
        if eff.verb == "lock" or d.get("lock") or d.get("row_lock"):
            lock = eff
        elif eff.verb in ("commit", "rollback", "end", "abort", "unlock"):
            lock = None
        elif lock is not None and "sleep_s" in d:
            held = d["sleep_s"]
            prev = lock.details.get("held_s", 0)
            lock.details["held_s"] = None if held is None or prev is None else prev + held
            if lock.mutating is False:
                lock.mutating, lock.layer = True, Layer.NONE


def _dml(verb: str, table: str, has_where: bool | None, st: Statement | None = None) -> SqlEffect:
    d: dict[str, Any] = {"sql_kind": "dml", "table": table}
    if has_where is not None:
        d["has_where"] = has_where
    if has_where is False and st is not None and st.index("WHERE") >= 0:
        d["where_selects_all"] = True  # a WHERE that every row passes (`WHERE true`, `id > 0`)
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
    sleep = _sleep(st) if any(f in _SLEEPS for f in funcs) else None
    writes = [f for f in funcs if f in _WRITE_FUNCS]
    if writes:
        first = writes[0]
        verb = _FUNC_VERBS.get(first, first)
        if first == "set_config":
            return _set_config(st, details)
        details["sql_kind"] = "function"
        where = st.index("WHERE")
        if where >= 0:
            # Over the backends, a filter that only spares this session or keeps the busy ones selects them all.
            details["has_where"] = not _selects_all(_condition(st, where), _EVERY_BACKEND
                                                    if first in ("pg_terminate_backend", "pg_cancel_backend")
                                                    else frozenset())
        if first == "pg_drop_replication_slot":
            details["discards_logs"] = "a replication slot"
        if first == "setval":
            _setval(st, details)
        if first in ("pg_terminate_backend", "pg_cancel_backend") and where < 0 and _over_every_backend(tables):
            details["every_backend"] = True
        if sleep is not None:
            details["sleep_s"] = sleep[0]
        return SqlEffect(verb=verb, mutating=True, layer=Layer.NONE, details=details)
    if "pg_read_file" in funcs or "pg_read_binary_file" in funcs or "pg_ls_dir" in funcs:
        details["reads_server_files"] = True
    if sleep is not None:
        details["sleep"] = True
        details["sleep_s"] = sleep[0]
    if st.index("FOR") > 0 and st.kw(st.index("FOR") + 1) in ("UPDATE", "SHARE", "NO", "KEY") \
            or st.index("LOCK") > 0 and st.kw(st.index("LOCK") + 1) == "IN":
        details["row_lock"] = True  # SELECT ... FOR UPDATE / FOR SHARE / LOCK IN SHARE MODE
    return SqlEffect(verb="select", mutating=False, details=details,
                     target_kind="table" if tables else "", target_name=tables[0] if tables else "")


select_effect = _select  # for the PostgreSQL reader (pgsql.py), which knows a query however it begins

# Conditions on pg_stat_activity that leave (nearly) every backend in: all but this session, the busy ones, the
# client backends.
_EVERY_BACKEND = frozenset({
    "pid <> pg_backend_pid ( )", "pid != pg_backend_pid ( )", "pg_backend_pid ( ) <> pid", "pg_backend_pid ( ) != pid",
    "state = 'active'", "state <> 'idle'", "state != 'idle'", "state is not null",
    "backend_type = 'client backend'",
})

_SLEEPS = ("pg_sleep", "sleep", "pg_sleep_for", "pg_sleep_until")
_UNITS = {"ms": 0.001, "msec": 0.001, "millisecond": 0.001, "milliseconds": 0.001, "s": 1, "sec": 1, "secs": 1,
          "second": 1, "seconds": 1, "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60, "h": 3600,
          "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400}


def _sleep(st: Statement) -> tuple[float | None] | None:
    """A sleep the statement runs (pg_sleep(n), SLEEP(n), pg_sleep_for('1 hour'), pg_sleep_until(...)): (seconds,)
    or (None,) when its length cannot be read; None when there is no sleep."""
    for i, t in enumerate(st.toks[:-2]):
        name = t.value.lower()
        if t.kind not in ("word", "qid") or name not in _SLEEPS or st.toks[i + 1].text != "(":
            continue
        arg = st.toks[i + 2:_closing(st, i + 2)]
        if name in ("pg_sleep", "sleep"):
            n = _number(arg)
            return (n,) if n is not None else (None,)
        if name == "pg_sleep_for" and arg and arg[0].kind == "str":
            return (_interval(arg[0].value),)
        return (None,)
    return None


def _interval(text: str) -> float | None:
    """An interval's seconds ('1 hour', '90 s', '00:10:00'), or None."""
    hms = re.fullmatch(r"\s*(\d+):(\d{1,2})(?::(\d{1,2}(?:\.\d+)?))?\s*", text)
    if hms:
        return int(hms.group(1)) * 3600 + int(hms.group(2)) * 60 + float(hms.group(3) or 0)
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+)", text.lower())
    if not parts or re.sub(r"[\d.\sa-z]", "", text.lower()):
        return None
    total = 0.0
    for n, unit in parts:
        if unit not in _UNITS:
            return None
        total += float(n) * _UNITS[unit]
    return total


def _set_config(st: Statement, details: dict[str, Any]) -> SqlEffect:
    # set_config('name', 'value', is_local): the SET of a SELECT.
    i = next((i for i, t in enumerate(st.toks) if t.value.lower() == "set_config"), -1)
    args = [t for t in st.toks[i + 2:] if t.kind in ("str", "num", "word")][:3]
    if len(args) >= 2 and args[0].kind == "str":
        return SqlEffect(verb="set", mutating=True, layer=Layer.SESSION,
                         keys=[KeyChange(key=f"postgres.{args[0].value.lower()}",
                                         value=pg_bool(args[0].value.lower(), literal(args[1])))],
                         details={**details, "sql_kind": "set"})
    return SqlEffect(verb="set", mutating=UNKNOWN, details=details,
                     opaque_reason="set_config with computed arguments")


def _alter_effect(st: Statement, obj: str, name: str, eff: SqlEffect) -> SqlEffect:
    """An ALTER read by what it does, not only by its object: MySQL's ALTER EVENT ... DO stores new code, as CREATE
    EVENT does; an ALTER TABLE may rewrite a column with a value that ignores it or move a partition's rows out of
    the table; an ALTER SEQUENCE may set a sequence back to its start or cap it."""
    if st.index("DO") > 0 and (obj == "EVENT" or st.kw(1) == "DEFINER" and st.index("EVENT") > 0):
        return SqlEffect(verb="alter event", mutating=UNKNOWN, layer=Layer.DECLARED,
                         details={"sql_kind": "procedural", "object": "event", "name": name},
                         target_kind="event", target_name=name,
                         opaque_reason="ALTER EVENT ... DO stores code that runs later, on its schedule, out of the "
                                       "guard's sight; run the plain statements instead")
    if obj == "TABLE":
        col = _rewritten_column(st)
        if col:
            eff.details["rewrites_column"] = col
        at = st.index("DETACH", "EXCHANGE")
        if at > 0 and st.kw(at + 1) == "PARTITION":
            eff.details["rows_out"] = f"{st.kw(at)} PARTITION"
    if obj == "SEQUENCE":
        restart = st.index("RESTART")
        if restart > 0:
            n = _number(st.toks[restart + 2:restart + 3]) if st.kw(restart + 1) == "WITH" else \
                _number(st.toks[restart + 1:restart + 2])
            if n is None and st.kw(restart + 1) != "WITH" or n is not None and n <= 1:
                eff.details["sequence_reset"] = {"sequence": name, "how": "RESTART"}
        cap = st.index("MAXVALUE")
        if cap > 0 and st.kw(cap - 1) != "NO" and _number(st.toks[cap + 1:cap + 2]) is not None:
            eff.details["sequence_reset"] = {"sequence": name, "how": f"MAXVALUE {st.toks[cap + 1].text}"}
    return eff


def _rewritten_column(st: Statement) -> str | None:
    """`ALTER [COLUMN] c [SET DATA] TYPE t USING expr` whose expr does not read c (`USING (0)`, `USING null::int`)
    or multiplies it by zero: every row's value is replaced, as by an UPDATE without WHERE. `USING c::int` converts
    it. The first such column, or None."""
    i = st.index("TYPE")
    while i > 0:
        j = i - 1
        if st.kw(j) == "DATA" and st.kw(j - 1) == "SET":
            j -= 2
        col = st.toks[j].value.lower() if st.toks[j].kind in ("word", "qid") else ""
        using = st.index("USING", start=i)
        nxt = next((k for k in range(i, len(st.toks)) if st.toks[k].text == ","
                    and _closing(st, k) == len(st.toks)), len(st.toks))
        if col and 0 < using < nxt:
            expr = _unwrap(st.toks[using + 1:nxt])
            names = [t.value.lower() for t in expr if t.kind in ("word", "qid")]
            zero = len(expr) == 3 and expr[1].text == "*" and (_number(expr[:1]) == 0 or _number(expr[2:]) == 0)
            if col not in names or zero:
                return col
        i = st.index("TYPE", start=i + 1)
    return None


def _setval(st: Statement, details: dict[str, Any]) -> None:
    """setval(seq, n[, is_called]) setting a sequence back to its start (n <= 1): every new row then takes an id
    the table already holds. The sequence as written ('s', 's'::regclass) or as pg_get_serial_sequence('t', 'c')
    names it (t_c_seq)."""
    i = next((i for i, t in enumerate(st.toks[:-3]) if t.value.lower() == "setval" and st.toks[i + 1].text == "("),
             -1)
    if i < 0:
        return
    end = _closing(st, i + 2)
    args = _split([Tok("word", "AND", "AND") if t.text == "," and _closing(st, k) == end else t
                   for k, t in enumerate(st.toks[i + 2:end], start=i + 2)], "AND")
    if len(args) < 2 or not args[0]:
        return
    first = args[0]
    if first[0].kind == "str":
        seq = first[0].value
    elif first[0].value.lower() == "pg_get_serial_sequence" and len(first) >= 5 and first[2].kind == "str" \
            and first[4].kind == "str":
        seq = f"{first[2].value}_{first[4].value}_seq"
    else:
        return
    n = _number(args[1])
    if n is not None and n <= 1:
        details["sequence_reset"] = {"sequence": seq, "how": f"setval(..., {args[1][-1].text})"}


def _over_every_backend(tables: list[str]) -> bool:
    """A terminate (or cancel) over a set of backends that no WHERE narrows: every pid of pg_locks,
    pg_stat_replication ... or every number generate_series counts through."""
    return any(t.split(".")[-1].lower() in ("generate_series", "pg_locks", "pg_stat_replication", "pg_stat_ssl",
                                            "pg_stat_gssapi", "pg_stat_activity") for t in tables)
def counts_only(sql: str, **dialect: Any) -> bool:
    """Is `sql` one `SELECT count(...) [AS n] [FROM ...]`, whose result (printed without headers) holds only
    integers? No UNION / INTERSECT / EXCEPT (which could add a row of another type), no second statement."""
    sts = statements(sql, **dialect)
    if len(sts) != 1:
        return False
    st = sts[0]
    if st.kw(0) != "SELECT" or st.kw(1) != "COUNT" or len(st.toks) < 4 or st.toks[2].text != "(":
        return False
    if st.index("UNION", "INTERSECT", "EXCEPT", "INTO", depth0=False) >= 0 or any(t.text == "\\" for t in st.toks):
        return False
    j = _closing(st, 3) + 1
    if j < len(st.toks) and st.toks[j].text == "::":  # count(*)::int (not ::regclass, which prints a name)
        if st.kw(j + 1) not in ("INT", "INTEGER", "BIGINT", "INT4", "INT8"):
            return False
        j += 2
    if st.kw(j) == "AS":
        j += 1
    if j < len(st.toks) and st.toks[j].kind in ("word", "qid") and st.kw(j) != "FROM":
        j += 1  # its alias
    return j == len(st.toks) or st.kw(j) == "FROM"
