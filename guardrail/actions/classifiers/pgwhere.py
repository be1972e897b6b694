"""Whether a PostgreSQL WHERE clause really narrows the rows an UPDATE or DELETE reaches, read from the parse tree.

Called by `pgsql.py` for UpdateStmt and DeleteStmt, on top of the token reading in `sql.py` (both must agree that
the clause narrows). The test is an allowlist: a condition narrows only when it compares a column with something
that is not that same column (`status = 'done'`, `id IN (1, 2)`, `o.id = s.order_id`, `created_at < now() - ...`),
tests a column for NULL, or names a subquery that itself narrows or reads another table. Constant conditions
(`1 = 1`, `'a' = 'a'`, `1 IN (1)`, `NOT false`), a column against itself (`id = id`, `coalesce(x, 0) >=
coalesce(x, 0)`), a pattern that matches everything (`LIKE '%'`, `~ ''`), the key column `id` against what every
key passes (`id > 0`, `id <> -1`, `id IS NOT NULL`, `id BETWEEN 0 AND 2147483647`) and `EXISTS (SELECT 1)` do not.
An OR narrows only when each branch does; an AND when one part does.
"""

from __future__ import annotations

import re
from typing import Any

from guardrail.clients.pgquery import walk

__all__ = ["narrows"]

_INT_MAX = 2_147_483_647


def _enum(msg: Any, name: str) -> str:
    fd = msg.DESCRIPTOR.fields_by_name[name]
    return fd.enum_type.values_by_number[getattr(msg, name)].name


def _columns(node: Any) -> set[tuple[str, ...]]:
    """The columns an expression reads, each as its dotted name, lower case (subqueries' columns included)."""
    out = set()
    for ref in walk(node, "ColumnRef"):
        parts = tuple(f.string.sval.lower() if f.WhichOneof("node") == "string" else "*" for f in ref.fields)
        out.add(parts)
    return out


def _same_columns(a: set[tuple[str, ...]], b: set[tuple[str, ...]]) -> bool:
    """Both sides read the same columns: `id` and `t.id` count as one (unqualified, it is the same column or an
    ambiguous one)."""
    def key(c: tuple[str, ...]) -> str:
        return c[-1]
    if {key(c) for c in a} != {key(c) for c in b}:
        return False
    for ca in a:
        for cb in b:
            if key(ca) == key(cb) and len(ca) > 1 and len(cb) > 1 and ca[:-1] != cb[:-1]:
                return False  # `o.id = s.id`: a join of two tables
    return True


def _number(node: Any) -> float | None:
    which = node.WhichOneof("node")
    if which == "type_cast" and node.type_cast.HasField("arg"):
        return _number(node.type_cast.arg)
    if which == "a_const":
        c = node.a_const
        kind = c.WhichOneof("val")
        try:
            if kind == "ival":
                return float(c.ival.ival)
            if kind == "fval":
                return float(c.fval.fval)
        except ValueError:
            return None
    if which == "a_expr" and _enum(node.a_expr, "kind") == "AEXPR_OP" and not node.a_expr.HasField("lexpr") \
            and _op(node.a_expr) == "-":
        n = _number(node.a_expr.rexpr)
        return -n if n is not None else None
    return None


def _string(node: Any) -> str | None:
    which = node.WhichOneof("node")
    if which == "type_cast" and node.type_cast.HasField("arg"):
        return _string(node.type_cast.arg)
    if which == "a_const" and node.a_const.WhichOneof("val") == "sval":
        return node.a_const.sval.sval
    return None


def _is_key(node: Any) -> bool:
    """The table's own key column `id` (`id`, `t.id`, `"id"`): never null, counting from 1."""
    if node.WhichOneof("node") != "column_ref":
        return False
    fields = node.column_ref.fields
    return bool(fields) and fields[-1].WhichOneof("node") == "string" and fields[-1].string.sval.lower() == "id"


def _op(a: Any) -> str:
    return a.name[-1].string.sval if a.name and a.name[-1].WhichOneof("node") == "string" else ""


_FLIP = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "=", "<>": "<>", "!=": "!="}


def _key_passes_all(op: str, n: float) -> bool:
    """`id <op> n` holds for every key (keys count from 1)."""
    return (op == ">" and n < 1) or (op == ">=" and n <= 1) or (op in ("<>", "!=") and n < 1)


def _compare(a: Any, table: str) -> bool:
    kind = _enum(a, "kind")
    op = _op(a)
    left = a.lexpr if a.HasField("lexpr") else None
    right = a.rexpr if a.HasField("rexpr") else None
    lc = _columns(left) if left is not None else set()
    rc = _columns(right) if right is not None else set()
    if not lc and not rc:
        return _truth(a) is False  # a constant condition: every row, or (known false) none
    if lc and rc and _same_columns(lc, rc):
        # `id = id`, `x >= x`: every row (or, for `<>`, `<`, `>`, none, which narrows all the way).
        return kind == "AEXPR_OP" and op in ("<>", "!=", "<", ">")
    if kind == "AEXPR_OP" and op in _FLIP and left is not None and right is not None:
        if _is_key(left) and (n := _number(right)) is not None:
            return not _key_passes_all(op, n)
        if _is_key(right) and (n := _number(left)) is not None:
            return not _key_passes_all(_FLIP[op], n)
        return True
    if kind in ("AEXPR_LIKE", "AEXPR_ILIKE", "AEXPR_SIMILAR") or op in ("~", "~*", "~~", "~~*"):
        pattern = _string(right) if right is not None else None
        if pattern is None:
            return True
        negated = op.startswith("!")
        if kind in ("AEXPR_LIKE", "AEXPR_ILIKE") or op in ("~~", "~~*"):
            every = pattern != "" and set(pattern) <= {"%"}
        elif kind == "AEXPR_SIMILAR":
            every = pattern in ("%", ".*", "%%")
        else:
            try:
                every = re.search(pattern, "") is not None  # a regex that matches the empty string matches all
            except re.error:
                every = True
        return negated or not every
    if kind in ("AEXPR_BETWEEN", "AEXPR_BETWEEN_SYM") and left is not None and _is_key(left) and right is not None:
        bounds = [_number(x) for x in right.list.items] if right.WhichOneof("node") == "list" else []
        if len(bounds) == 2 and None not in bounds:
            lo, hi = sorted(bounds)  # type: ignore[type-var]
            return not (lo <= 1 and hi >= _INT_MAX)
        return True
    return True


def _subquery_narrows(sub: Any, table: str) -> bool:
    """A subquery's rows are fewer than the table's: its own WHERE narrows, or it reads another table."""
    if sub.WhichOneof("node") != "select_stmt":
        return False
    s = sub.select_stmt
    if s.HasField("where_clause") and narrows(s.where_clause, table):
        return True
    if s.HasField("limit_count"):
        return True
    tables = {r.relname.lower() for r in walk(sub, "RangeVar")}
    return bool(tables) and tables != {table.split(".")[-1].lower()}


_COMPARE = {"=": lambda a, b: a == b, "<>": lambda a, b: a != b, "!=": lambda a, b: a != b,
            "<": lambda a, b: a < b, ">": lambda a, b: a > b, "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b}


def _truth(a: Any) -> bool | None:
    """The value of a comparison of two constants (`1 > 2`, `'a' = 'a'`), or None when it is not read here."""
    if _enum(a, "kind") != "AEXPR_OP" or _op(a) not in _COMPARE or not a.HasField("lexpr") or not a.HasField("rexpr"):
        return None
    pairs = ((_number(a.lexpr), _number(a.rexpr)), (_string(a.lexpr), _string(a.rexpr)))
    for x, y in pairs:
        if x is not None and y is not None:
            return bool(_COMPARE[_op(a)](x, y))
    return None


def _constant_false(node: Any) -> bool:
    """`false`, `1 > 2`, `'a' = 'b'`, `NOT true`: a condition no row passes."""
    which = node.WhichOneof("node")
    if which == "a_const" and node.a_const.WhichOneof("val") == "boolval":
        return not node.a_const.boolval.boolval
    if which == "type_cast" and node.type_cast.HasField("arg"):
        return _constant_false(node.type_cast.arg)
    if which == "a_expr":
        return _truth(node.a_expr) is False
    if which == "bool_expr" and _enum(node.bool_expr, "boolop") == "NOT_EXPR" and node.bool_expr.args:
        inner = node.bool_expr.args[0]
        return inner.WhichOneof("node") == "a_const" and inner.a_const.WhichOneof("val") == "boolval" \
            and inner.a_const.boolval.boolval
    return False


def narrows(node: Any, table: str = "") -> bool:
    """Whether the WHERE condition `node` (a pg_query Node) can leave a row of `table` out."""
    which = node.WhichOneof("node")
    if not _columns(node):
        return _constant_false(node)  # no row passes (narrowed to none), or every row may
    if which == "bool_expr":
        b = node.bool_expr
        op = _enum(b, "boolop")
        if op == "AND_EXPR":
            return any(narrows(x, table) for x in b.args)
        if op == "OR_EXPR":
            return all(narrows(x, table) for x in b.args)
        inner = b.args[0] if b.args else None
        if inner is None or not _columns(inner):
            return False  # NOT of a constant
        if inner.WhichOneof("node") == "null_test":
            # NOT (x IS NULL) is x IS NOT NULL, and the other way round.
            t = inner.null_test
            return _enum(t, "nulltesttype") == "IS_NOT_NULL" or not _is_key(t.arg)
        if inner.WhichOneof("node") == "bool_expr":
            return True  # NOT (a AND b), NOT (a OR b): a row test on columns
        return narrows(inner, table)
    if which == "a_expr":
        return _compare(node.a_expr, table)
    if which == "null_test":
        t = node.null_test
        if not _columns(t.arg):
            return False
        if _enum(t, "nulltesttype") == "IS_NULL":
            return True
        # `deleted_at IS NOT NULL` picks the soft-deleted rows; `id IS NOT NULL` and `(id = 1) IS NOT NULL` hold
        # for every row.
        return t.arg.WhichOneof("node") == "column_ref" and not _is_key(t.arg)
    if which == "boolean_test":
        return bool(_columns(node.boolean_test.arg))
    if which == "sub_link":
        s = node.sub_link
        kind = _enum(s, "sub_link_type")
        if kind == "EXISTS_SUBLINK":
            return s.HasField("subselect") and s.subselect.WhichOneof("node") == "select_stmt" \
                and s.subselect.select_stmt.HasField("where_clause") \
                and narrows(s.subselect.select_stmt.where_clause, table)
        if kind in ("ANY_SUBLINK", "ALL_SUBLINK") and s.HasField("testexpr") and _columns(s.testexpr):
            return _subquery_narrows(s.subselect, table) if s.HasField("subselect") else False
        return False
    if which == "current_of_expr":
        return True
    if which in ("a_const", "type_cast", "param_ref"):
        return bool(_columns(node))
    return bool(_columns(node))  # a boolean column, a function of columns
