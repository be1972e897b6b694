"""Shell words: what one tree-sitter-bash argument node means once the shell has removed its quotes.

Used by `guardrail.actions.shell` (the walker) to turn argument nodes into `Word`s, which every classifier reads
as plain strings. A word whose value depends on run time (a `$VAR`, a `$(...)`, `${IFS}`) is marked `dynamic`;
its text is then the best static approximation (quotes removed, the expansion kept as written).
"""

from __future__ import annotations

import re
from typing import Iterator

from tree_sitter import Node

__all__ = ["Word", "word_of", "substitutions_in", "unquoted_expansions", "decode_ansi_c", "DYNAMIC_NODES",
           "SUBSTITUTIONS"]

# Node types whose value is only known when the command runs.
DYNAMIC_NODES = frozenset({
    "simple_expansion", "expansion", "command_substitution", "process_substitution", "arithmetic_expansion",
    "brace_expression",
})
SUBSTITUTIONS = frozenset({"command_substitution", "process_substitution"})


class Word(str):
    """One shell word after quote removal; `dynamic` when part of it is expanded at run time."""

    dynamic: bool = False
    has_substitution: bool = False
    # An expansion outside double quotes: the shell splits its value into words (`k=$(cmd)` may become several).
    splits: bool = False

    @staticmethod
    def of(text: str, *, dynamic: bool = False, has_substitution: bool = False, splits: bool = False) -> "Word":
        w = Word(text)
        w.dynamic = dynamic
        w.has_substitution = has_substitution
        w.splits = splits
        return w


_ESC_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f",
               "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}
_ANSI_RE = re.compile(r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|[0-7]{1,3}|c.|.)", re.S)


def decode_ansi_c(body: str) -> str:
    """Decode the inside of a bash `$'...'` string (\\x41, \\101, \\u0041, \\n ...), as bash does."""

    def sub(m: re.Match[str]) -> str:
        e = m.group(1)
        try:
            if e[0] == "x":
                return chr(int(e[1:], 16))
            if e[0] in "uU":
                return chr(int(e[1:], 16))
            if e[0] in "01234567":
                return chr(int(e, 8) & 0xFF)
            if e[0] == "c" and len(e) == 2:
                return chr(ord(e[1].upper()) ^ 0x40)
        except (ValueError, OverflowError):
            return m.group(0)
        return _ESC_SIMPLE.get(e, "\\" + e)

    return _ANSI_RE.sub(sub, body)


_BACKSLASH = re.compile(r"\\(.)", re.S)
_DQ_ESC = re.compile(r'\\([$`"\\\n])')


def _unquoted(text: str) -> str:
    # Outside quotes a backslash quotes the next character; a backslash-newline is a line continuation.
    return _BACKSLASH.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def _text(node: Node) -> str:
    return node.text.decode("utf-8", "replace") if node.text is not None else ""


def _bound(node: Node, env: dict[str, str] | None) -> str | None:
    """The value of `$v` / `${v}` when `v` is bound (a `for v in a b` loop being unrolled), else None."""
    if not env:
        return None
    named = node.named_children
    if node.type in ("simple_expansion", "expansion") and len(named) == 1 and named[0].type == "variable_name" \
            and len(_text(node)) <= len(_text(named[0])) + 3:
        return env.get(_text(named[0]))
    return None


def _parts(node: Node, env: dict[str, str] | None = None) -> Iterator[tuple[str, bool, bool]]:
    """(text, dynamic, has_substitution) pieces of one argument node."""
    t = node.type
    bound = _bound(node, env)
    if bound is not None:
        yield bound, False, False
        return
    if t in ("word", "number", "variable_name", "file_descriptor", "test_operator", "regex", "extglob_pattern"):
        yield _unquoted(_text(node)), False, False
    elif t == "raw_string":
        yield _text(node)[1:-1], False, False
    elif t == "ansi_c_string":
        yield decode_ansi_c(_text(node)[2:-1]), False, False
    elif t in ("string", "translated_string"):
        inner = node if t == "string" else next((c for c in node.children if c.type == "string"), node)
        end = None
        for c in inner.children:
            # Text between two children is in no node (tree-sitter-bash leaves a newline inside the quotes out
            # of every string_content): it is part of the string all the same.
            if end is not None and c.start_byte > end and inner.text is not None:
                gap = inner.text[end - inner.start_byte:c.start_byte - inner.start_byte].decode("utf-8", "replace")
                yield _DQ_ESC.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), gap), False, False
            end = c.end_byte
            if c.type == '"' or c.type == '$"':
                continue
            if c.type == "string_content":
                yield _DQ_ESC.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), _text(c)), False, False
            elif _bound(c, env) is not None:
                yield _bound(c, env) or "", False, False
            elif c.type in DYNAMIC_NODES:
                yield _text(c), True, c.type in SUBSTITUTIONS
            else:
                yield from _parts(c, env)
    elif t == "concatenation":
        for c in node.children:
            yield from _parts(c, env)
    elif t in DYNAMIC_NODES:
        yield _text(node), True, t in SUBSTITUTIONS or any(True for _ in substitutions_in(node))
    elif node.child_count == 0:
        yield _unquoted(_text(node)), False, False
    else:
        # Anything else (arrays, ERROR nodes) is taken as written and treated as run-time dependent.
        yield _text(node), True, any(True for _ in substitutions_in(node))


def word_of(node: Node, env: dict[str, str] | None = None) -> Word:
    """The Word an argument node stands for (`env`: loop variables bound to known values)."""
    text, dynamic, subst = [], False, False
    for piece, dyn, sub in _parts(node, env):
        text.append(piece)
        dynamic = dynamic or dyn
        subst = subst or sub
    return Word.of("".join(text), dynamic=dynamic, has_substitution=subst,
                   splits=dynamic and any(True for _ in unquoted_expansions(node, env)))


_QUOTED = frozenset({"string", "translated_string", "raw_string", "ansi_c_string"})
_LITERAL = frozenset({"word", "number", "variable_name", "file_descriptor", "test_operator", "regex",
                      "extglob_pattern", "concatenation"})


def unquoted_expansions(node: Node, env: dict[str, str] | None = None) -> Iterator[Node]:
    """The expansions in a word outside quotes, whose values the shell splits into words (and globs); a part the
    word reading does not know (an array, an ERROR) counts as one."""
    if node.type in _QUOTED or _bound(node, env) is not None:
        return
    if node.type in DYNAMIC_NODES or (node.type not in _LITERAL and node.child_count):
        yield node
        return
    for c in node.children:
        yield from unquoted_expansions(c, env)


def substitutions_in(node: Node) -> Iterator[Node]:
    """Every `$(...)`, backtick and `<(...)` inside a node, outermost first, in source order."""
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type in SUBSTITUTIONS:
            yield n
            continue
        stack.extend(reversed(n.children))
