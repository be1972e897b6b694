"""PostgreSQL SQL read by the server's own parser: which statements a text holds and what each one does.

Called by the psql classifier (`postgres.py`) for every piece of SQL psql sends. The text goes through libpg_query
(`guardrail.clients.pgquery`): a text the server's parser rejects is one opaque action (denied), never read by a
hand lexer that might see other statements. Each statement is dispatched on its parse node type and written back
canonically by the deparser (no comments, `U&"..."` names decoded, strings plainly quoted); the project's own
readings (keys, layers, WHERE, the function list in `sql.py` and `postgres.py`) then run on that canonical text,
so they see what the server sees. On top of them, only node types that cannot write may come out as reads, every
function call is checked against PostgreSQL's own volatility list (`pg_functions.yaml`), SQL given to a function as
text is read the same way, and a statement that changes how later text is lexed (`standard_conforming_strings`,
`client_encoding`) is reported so the caller judges the rest as opaque.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml
from pydantic import BaseModel, ConfigDict

from guardrail.actions.classifiers.pgwhere import narrows
from guardrail.actions.classifiers.sql import SqlEffect, Statement, pg_bool, select_effect, statements
from guardrail.actions.model import UNKNOWN, Layer
from guardrail.clients.pgquery import ParsedStatement, SqlSyntaxError, parse, scan

__all__ = ["PgStatement", "PgReading", "read_sql", "LEXING_SETTINGS", "lexing_value_known", "psql_variables",
           "FUNCTIONS", "BUILTIN_FUNCTIONS"]


class _FunctionLists(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    reads_only: frozenset[str]
    changes_state: frozenset[str]
    runs_sql_text: dict[str, int]


FUNCTIONS = _FunctionLists.model_validate(
    yaml.safe_load((Path(__file__).with_name("pg_functions.yaml")).read_text(encoding="utf-8")))
_CHANGES = frozenset(n.lower() for n in FUNCTIONS.changes_state)
# Every function PostgreSQL has built in (pg_catalog): the immutable and stable ones (which cannot change anything)
# and the volatile ones sorted above. A call of another name is a function of the database's own or of an
# extension: its body may write, and the guard does not see it.
_STABLE = frozenset(line.strip() for line in
                    (Path(__file__).with_name("pg_catalog_functions.txt")).read_text(encoding="utf-8").splitlines()
                    if line.strip() and not line.startswith("#"))
BUILTIN_FUNCTIONS = _STABLE | FUNCTIONS.reads_only | FUNCTIONS.changes_state
# Statements that run the expressions they hold (a definition's DEFAULT or index expression does not run yet).
_RUNS_EXPRESSIONS = frozenset({"SelectStmt", "InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt", "CallStmt",
                               "ExplainStmt", "DeclareCursorStmt", "CopyStmt", "CreateTableAsStmt", "ExecuteStmt"})

# Parse nodes that cannot change anything by themselves (their expressions' functions are checked apart). A hand
# reading that calls another node a read (`COMMIT PREPARED` as a COMMIT) is not trusted.
_READ_NODES = frozenset({"SelectStmt", "VariableShowStmt", "ExplainStmt", "DeclareCursorStmt", "FetchStmt",
                         "ClosePortalStmt", "TransactionStmt", "ListenStmt", "UnlistenStmt", "DeallocateStmt",
                         "CopyStmt"})
_PREPARED = {"TRANS_STMT_PREPARE": "prepare transaction", "TRANS_STMT_COMMIT_PREPARED": "commit prepared",
             "TRANS_STMT_ROLLBACK_PREPARED": "rollback prepared"}

# Settings that change how the server and psql split and unquote the text that follows: with
# standard_conforming_strings off a backslash escapes a quote in '...'; a client encoding such as SJIS or BIG5 has
# multibyte characters whose second byte is `\` or `'`.
LEXING_SETTINGS = frozenset({"standard_conforming_strings", "client_encoding"})
# Client encodings in which no multibyte character holds an ASCII byte (as PostgreSQL names them, any case, with
# or without `_` and `-`).
_SAFE_ENCODINGS = frozenset({
    "utf8", "unicode", "sqlascii", "eucjp", "euccn", "euckr", "euctw", "eucjis2004", "muleinternal", "koi8r", "koi8u",
    "koi8", "alt", "tcvn", "tcvn5712", "vscii", "abc", "iso88595", "iso88596", "iso88597", "iso88598",
    *(f"latin{i}" for i in range(1, 11)), *(f"iso8859{i}" for i in range(1, 17)),
    *(f"win{n}" for n in (866, 874, 1250, 1251, 1252, 1253, 1254, 1255, 1256, 1257, 1258)),
})
_ALL_PRIVILEGES = re.compile(r"^\s*(GRANT|REVOKE)\s+(GRANT\s+OPTION\s+FOR\s+)?ALL\s+PRIVILEGES\b", re.I)
# How deep SQL inside SQL (a function's text argument, EXPLAIN's statement) is read before it is called opaque.
_MAX_DEPTH = 4


def lexing_value_known(name: str, value: Any) -> bool:
    """Whether setting `name` to `value` leaves the text lexed as the guard reads it (the defaults:
    standard_conforming_strings on, a client encoding without ASCII bytes inside its characters)."""
    name = name.lower()
    if name == "standard_conforming_strings":
        return pg_bool(name, str(value)) == "on" if value is not None else False
    if name == "client_encoding":
        return value is not None and str(value).lower().replace("_", "").replace("-", "") in _SAFE_ENCODINGS
    return True


@dataclass
class PgStatement:
    """One statement: its text as written (comments left out: what the rules read), its canonical text (what the
    readings here read), its effect, and the canonical text's tokens."""

    written: str
    canonical: str
    effect: SqlEffect
    tokens: Statement | None = None
    changes_lexing: str | None = None  # why the text after this statement is not lexed as the guard reads it


@dataclass
class PgReading:
    """A text's statements, or why it could not be read (then `statements` is empty)."""

    statements: list[PgStatement] = field(default_factory=list)
    unreadable: str | None = None


HandReading = Callable[[Statement], SqlEffect]


def read_sql(sql: str, hand: HandReading, *, depth: int = 0) -> PgReading:
    """The statements of `sql` as the server parses them, each with its effect (`hand` reads one canonical
    statement the project's way: postgres.pg_effect)."""
    try:
        parsed = parse(sql)
    except SqlSyntaxError as e:
        return PgReading(unreadable=f"PostgreSQL's parser does not accept this SQL ({str(e)[:120]}); only SQL "
                                    "the server reads as it is written can be judged")
    out = []
    for ps in parsed:
        out.append(_judge(ps, hand, depth))
    return PgReading(statements=out)


def _opaque(verb: str, reason: str, **details: Any) -> SqlEffect:
    return SqlEffect(verb=verb, mutating=UNKNOWN, details={"sql_kind": "unknown", **details}, opaque_reason=reason)


def _judge(ps: ParsedStatement, hand: HandReading, depth: int) -> PgStatement:
    node = ps.node_type
    try:
        canon = ps.canonical()
    except SqlSyntaxError as e:
        return PgStatement(ps.text, ps.text, _opaque((node or "statement").lower(), str(e)[:160], node=node))
    sts = statements(canon, pg_strings=True)
    if len(sts) != 1:
        return PgStatement(ps.text or canon, canon, _opaque((node or "statement").lower(),
                                          "the statement's canonical text does not read as one statement", node=node))
    st = sts[0]
    f = ps.fields
    if node == "TransactionStmt" and _enum(f, "kind") in _PREPARED:
        verb = _PREPARED[_enum(f, "kind")]
        eff = _opaque(verb, f"{verb.upper()} acts on a prepared transaction whose statements ran earlier, out of "
                            "the guard's sight (COMMIT PREPARED makes them permanent); run the statements in one "
                            "transaction here instead", sql_kind="transaction")
    elif node == "ExplainStmt":
        eff = _explain(ps, hand, depth)
    elif node == "DeclareCursorStmt":
        eff = _inner_read(ps, "query", hand, depth, "declare cursor")
    elif node in ("FetchStmt", "ClosePortalStmt"):
        # Rows of a cursor this session declared (its query was judged then), or the cursor closed.
        verb = "close" if node == "ClosePortalStmt" else ("move" if f.ismove else "fetch")
        eff = SqlEffect(verb=verb, mutating=False, details={"sql_kind": "read", "cursor": f.portalname})
    elif node == "SelectStmt":
        eff = select_effect(st)  # `(SELECT 1) UNION (SELECT 2)` starts with a parenthesis
    else:
        eff = hand(st)
    if eff.mutating is False and node not in _READ_NODES:
        eff = _opaque(eff.verb, f"a {node or 'statement'} is not a statement the guard knows as a read", node=node)
    if node == "CopyStmt" and eff.mutating is False:
        if f.is_from or f.filename or f.is_program:
            eff = _opaque("copy", "COPY moves data between a table and a file or program", node=node)
        elif ps.child("query") is not None:
            eff = _inner_read(ps, "query", hand, depth, "copy to")
    if node == "GrantStmt" and eff.details.get("privileges") == ["ALL"] and _ALL_PRIVILEGES.search(ps.text):
        # The deparser writes ALL PRIVILEGES as ALL; the messages keep the words the agent wrote.
        eff.details["privileges"] = ["ALL PRIVILEGES"]
        eff.keys = [k.model_copy(update={"value": ["ALL PRIVILEGES"]}) for k in eff.keys]
    if node in ("DeleteStmt", "UpdateStmt") and "has_where" in eff.details:
        _where(f, eff)
    calls = list(ps.messages("FuncCall"))
    if eff.mutating is False:
        eff = _functions(calls, eff, hand, depth)
    if eff.mutating is not UNKNOWN and node in _RUNS_EXPRESSIONS:
        eff = _unknown_functions(calls, eff)
    lexing = _lexing_change(f, node, calls)
    if lexing and node in ("AlterRoleSetStmt", "AlterDatabaseSetStmt", "AlterSystemStmt"):
        eff = _opaque(eff.verb, lexing, node=node)
    eff.details.setdefault("node", node)
    return PgStatement(ps.text or canon, canon, eff, st, lexing)


def _where(f: Any, eff: SqlEffect) -> None:
    """The token reading's `has_where` stands only when the parse tree's WHERE really narrows too (pgwhere)."""
    clause = f.where_clause if f.HasField("where_clause") else None
    if eff.details["has_where"] and (clause is None or not narrows(clause, f.relation.relname)):
        eff.details["has_where"] = False
        if clause is not None:
            eff.details["where_selects_all"] = True


def _enum(msg: Any, name: str) -> str:
    fd = msg.DESCRIPTOR.fields_by_name[name]
    return fd.enum_type.values_by_number[getattr(msg, name)].name


def _explain(ps: ParsedStatement, hand: HandReading, depth: int) -> SqlEffect:
    """EXPLAIN plans its statement; EXPLAIN ANALYZE (in any option spelling) also runs it."""
    analyze = False
    for opt in ps.fields.options:
        d = opt.def_elem
        if d.defname.lower() in ("analyze", "analyse"):
            value = _const(d.arg) if d.HasField("arg") else True
            analyze = value is None or pg_bool("fsync", str(value).lower()) != "off"
    if not analyze:
        return SqlEffect(verb="explain", mutating=False, details={"sql_kind": "read"})
    eff = _inner_effect(ps, "query", hand, depth)
    eff.details["explain_analyze"] = True
    return eff


def _inner_effect(ps: ParsedStatement, fld: str, hand: HandReading, depth: int) -> SqlEffect:
    inner = ps.child(fld)
    if inner is None or depth >= _MAX_DEPTH:
        return _opaque(ps.node_type.lower(), "the statement it runs is not readable")
    return _judge(inner, hand, depth + 1).effect


def _inner_read(ps: ParsedStatement, fld: str, hand: HandReading, depth: int, verb: str) -> SqlEffect:
    """A statement that runs the query it holds (a cursor's, COPY's): a read when that query is one."""
    eff = _inner_effect(ps, fld, hand, depth)
    if eff.mutating is False:
        return SqlEffect(verb=verb, mutating=False, details={**eff.details, "sql_kind": "read"},
                         target_kind=eff.target_kind, target_name=eff.target_name)
    return eff


def _const(node: Any) -> Any:
    """A constant's value (string, number, boolean), or None when the node is not one."""
    which = node.WhichOneof("node")
    if which == "a_const":
        c = node.a_const
        kind = c.WhichOneof("val")
        if kind is None:
            return None
        return {"sval": lambda: c.sval.sval, "ival": lambda: c.ival.ival, "fval": lambda: c.fval.fval,
                "boolval": lambda: c.boolval.boolval, "bsval": lambda: c.bsval.bsval}[kind]()
    if which == "string":
        return node.string.sval
    if which == "type_cast" and node.type_cast.HasField("arg"):
        return _const(node.type_cast.arg)
    return None


def _func_name(fc: Any) -> str:
    names = [n.string.sval for n in fc.funcname if n.WhichOneof("node") == "string"]
    return names[-1].lower() if names else ""


def _qualified_name(fc: Any) -> str:
    return ".".join(n.string.sval for n in fc.funcname if n.WhichOneof("node") == "string")


def _unknown_functions(calls: list[Any], eff: SqlEffect) -> SqlEffect:
    """A statement that calls a function PostgreSQL does not have built in is opaque: a function of the database's
    own (PL/pgSQL, SQL, C) or of an extension runs a body the guard does not see, which may write whatever the
    statement's own reading says (`SELECT f()` reads as a read; f may DELETE). A name qualified with another schema
    than pg_catalog is such a function even when a built-in one has its name."""
    for fc in calls:
        # As the parser gives them: an unquoted name is folded to lower case already, a quoted one (`"NOW"()`) is
        # another function than the built-in.
        names = [n.string.sval for n in fc.funcname if n.WhichOneof("node") == "string"]
        schema = names[0] if len(names) > 1 else "pg_catalog"
        if schema == "pg_catalog" and names and names[-1] in BUILTIN_FUNCTIONS and len(names) <= 2:
            continue
        name = _qualified_name(fc)
        return _opaque(eff.verb, f"{name}() is not a function PostgreSQL has built in (a function of the database's "
                                 "own or of an extension): its body may write, and the guard does not see it; run "
                                 "the statements it runs instead", node=eff.details.get("node"), function=name)
    return eff


def _functions(calls: list[Any], eff: SqlEffect, hand: HandReading, depth: int) -> SqlEffect:
    """A read whose function calls may change something: each call is checked, in tree order."""
    for fc in calls:
        name = _func_name(fc)
        at = FUNCTIONS.runs_sql_text.get(name)
        if at is not None:
            text = _const(fc.args[at]) if len(fc.args) > at else None
            if not isinstance(text, str):
                return _opaque(name, f"{name}() runs SQL given to it as text, and this text is computed")
            inner = read_sql(text, hand, depth=depth + 1) if depth < _MAX_DEPTH else PgReading(unreadable="too deep")
            if inner.unreadable or any(s.effect.mutating is not False or s.changes_lexing for s in inner.statements):
                return _opaque(name, f"{name}() runs the SQL text it is given ({text[:60]!r}), which is not a "
                                     "plain read; run the statement itself instead")
            continue
        if name in _CHANGES:
            details = {**eff.details, "sql_kind": "function", "changes_state": name}
            return SqlEffect(verb=name, mutating=True, layer=Layer.NONE, details=details)
    return eff


def _lexing_change(f: Any, node: str, calls: list[Any]) -> str | None:
    """Why the text after this statement is lexed differently from how the guard reads it, or None."""
    sets = []
    if node == "VariableSetStmt":
        sets.append(f)
    elif node in ("AlterRoleSetStmt", "AlterDatabaseSetStmt", "AlterSystemStmt") and f.HasField("setstmt"):
        sets.append(f.setstmt)
    for s in sets:
        name = s.name.lower()
        if name in LEXING_SETTINGS and _enum(s, "kind") in ("VAR_SET_VALUE", "VAR_SET_CURRENT"):
            value = _const(s.args[0]) if len(s.args) == 1 else None
            if _enum(s, "kind") == "VAR_SET_CURRENT" or not lexing_value_known(name, value):
                return f"SET {name} changes how the statements after it are read, which the guard does not follow"
    for fc in calls:
        if _func_name(fc) != "set_config":
            continue
        name = _const(fc.args[0]) if fc.args else None
        value = _const(fc.args[1]) if len(fc.args) > 1 else None
        if not isinstance(name, str) or name.lower() in LEXING_SETTINGS and not lexing_value_known(name, value):
            return "set_config may change how the statements after it are read, which the guard does not follow"
    return None


# psql's variable references in SQL it sends: `:name`, `:'name'` (as a literal), `:"name"` (as a name), `:{?name}`.
def psql_variables(sql: str) -> list[tuple[int, int, str, str]] | None:
    """Each psql variable reference in `sql` outside strings, names and comments, as (start, end, form, name) with
    form one of `:`, `:'`, `:"`, `:{?`; None when the text does not lex."""
    try:
        toks = scan(sql)
    except SqlSyntaxError:
        return None
    out = []
    for i, t in enumerate(toks[:-1]):
        nxt = toks[i + 1]
        if t.text != ":" or nxt.start != t.end:
            continue
        if nxt.kind == "SCONST" and nxt.text.startswith("'"):
            out.append((t.start, nxt.end, ":'", nxt.text[1:-1]))
        elif nxt.text.startswith('"'):
            out.append((t.start, nxt.end, ':"', nxt.text[1:-1]))
        elif nxt.text == "{":
            out.append((t.start, nxt.end, ":{?", ""))
        elif nxt.text[:1].isalnum() or nxt.text[:1] == "_":
            out.append((t.start, nxt.end, ":", nxt.text))
    return out
