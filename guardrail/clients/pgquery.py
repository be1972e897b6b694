"""PostgreSQL's own parser (libpg_query, through the postgast binding): statements, tokens and canonical text.

Used only by guardrail.actions.classifiers.pgsql, which judges what each statement does. libpg_query is the server's
grammar and lexer compiled as a library (postgast 0.2 bundles the PostgreSQL 18 grammar; the servers run 15, and
what 18 accepts of a 15 statement it reads the same way), so the guard splits, unquotes and decodes SQL exactly as
the server does: nested comments, a CR ending a `--` comment, any dollar-quote tag, `U&"..."` escapes. Everything
the binding raises becomes SqlSyntaxError, on which the caller denies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import postgast
from postgast import pg_query_pb2 as pb
from google.protobuf.message import Message

__all__ = ["SqlSyntaxError", "ParsedStatement", "ScanToken", "parse", "scan", "walk", "token_spans"]


class SqlSyntaxError(Exception):
    """The server's parser does not accept the text (or the binding failed on it)."""


@dataclass(frozen=True)
class ScanToken:
    """One token as the server's lexer reads it: character offsets, its kind (`SCONST`, `IDENT`, `C_COMMENT`, or the
    character itself for one-character tokens) and its text."""

    start: int
    end: int
    kind: str
    text: str


def _kind(code: int) -> str:
    try:
        return pb.Token.Name(code)
    except ValueError:  # one-character tokens carry their character code
        return chr(code) if 0 < code < 128 else str(code)


def _char_offsets(sql: str) -> list[int]:
    """The character index of every UTF-8 byte offset (libpg_query reports byte offsets)."""
    out: list[int] = []
    for i, ch in enumerate(sql):
        out += [i] * len(ch.encode("utf-8"))
    out.append(len(sql))
    return out


def scan(sql: str) -> list[ScanToken]:
    """Every token of `sql`, comments included, as the server's lexer reads it."""
    try:
        result = postgast.scan(sql)
    except Exception as e:  # the binding's PgQueryError, or anything it fails with
        raise SqlSyntaxError(str(e) or type(e).__name__) from e
    at = _char_offsets(sql)
    return [ScanToken(at[t.start], at[t.end], _kind(t.token), sql[at[t.start]:at[t.end]]) for t in result.tokens]


def token_spans(sql: str) -> list[tuple[int, int, bool]]:
    """Every token of `sql` as the server's lexer reads it, as (start, end, is a backslash), character offsets."""
    try:
        result = postgast.scan(sql)
    except Exception as e:
        raise SqlSyntaxError(str(e) or type(e).__name__) from e
    at = None if sql.isascii() else _char_offsets(sql)
    slash = ord("\\")
    if at is None:
        return [(t.start, t.end, t.token == slash) for t in result.tokens]
    return [(at[t.start], at[t.end], t.token == slash) for t in result.tokens]


class ParsedStatement:
    """One statement (or a statement nested in one: EXPLAIN's, a cursor's query) as the server's parser reads it."""

    def __init__(self, node: Any, text: str):
        self._node = node  # a pg_query Node
        self.text = text  # as written, comments left out and each run of white space one space (top level only)

    @property
    def node_type(self) -> str:
        """The parse node's type: `SelectStmt`, `ExplainStmt`, `TransactionStmt` ..."""
        which = self._node.WhichOneof("node")
        return getattr(self._node, which).DESCRIPTOR.name if which else ""

    @property
    def fields(self) -> Message:
        """The node's own message (its fields as the parser filled them)."""
        which = self._node.WhichOneof("node")
        return getattr(self._node, which)

    def canonical(self) -> str:
        """The statement as the deparser writes it back: no comments, names and strings in plain quoting, one
        statement. Raises SqlSyntaxError when the deparser cannot write it."""
        try:
            return postgast.deparse(pb.ParseResult(version=pb.ParseResult().version,
                                                   stmts=[pb.RawStmt(stmt=self._node)]))
        except Exception as e:
            raise SqlSyntaxError(f"cannot write the statement back: {e}") from e

    def child(self, field: str) -> "ParsedStatement | None":
        """A statement nested in this one's field (`query` of EXPLAIN, DECLARE CURSOR, CREATE TABLE AS, COPY)."""
        fields = self.fields
        if not fields.DESCRIPTOR.fields_by_name.get(field) or not fields.HasField(field):
            return None
        sub = getattr(fields, field)
        return ParsedStatement(sub, "") if sub.WhichOneof("node") else None

    def messages(self, type_name: str) -> Iterator[Message]:
        """Every message of this type anywhere in the statement's tree (FuncCall, A_Const ...), in tree order."""
        return walk(self._node, type_name)


def walk(root: Message, type_name: str) -> Iterator[Message]:
    """Every message of this type in a tree (the root included), in tree order, without recursion (a deep
    expression is no deeper a stack here)."""
    stack: list[Message] = [root]
    while stack:
        msg = stack.pop()
        if msg.DESCRIPTOR.name == type_name:
            yield msg
        kids: list[Message] = []
        for fd, value in msg.ListFields():
            if fd.message_type is None:
                continue
            if fd.is_repeated:
                kids.extend(value)
            else:
                kids.append(value)
        stack.extend(reversed(kids))


def parse(sql: str) -> list[ParsedStatement]:
    """Each statement of `sql`, with the text it was written as."""
    try:
        result = postgast.parse(sql)
    except Exception as e:
        raise SqlSyntaxError(str(e) or type(e).__name__) from e
    toks = scan(sql)
    at = _char_offsets(sql)
    out = []
    k = 0
    for s in result.stmts:
        a = at[min(s.stmt_location, len(at) - 1)]
        b = at[min(s.stmt_location + s.stmt_len, len(at) - 1)] if s.stmt_len else len(sql)
        words: list[str] = []
        last = -1
        while k < len(toks) and toks[k].start < b:
            t = toks[k]
            k += 1
            if t.start < a or t.kind in ("C_COMMENT", "SQL_COMMENT"):
                continue
            words.append(t.text if last in (-1, t.start) else " " + t.text)
            last = t.end
        out.append(ParsedStatement(s.stmt, "".join(words)))
    return out
