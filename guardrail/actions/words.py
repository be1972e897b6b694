"""Shell words: what one tree-sitter-bash argument node means once the shell has removed its quotes.

Used by `guardrail.actions.shell` (the walker) to turn argument nodes into `Word`s, which every classifier reads
as plain strings. A word whose value depends on run time (a `$VAR`, a `$(...)`, `${IFS}`) is marked `dynamic`;
its text is then the best static approximation (quotes removed, the expansion kept as written).
"""

from __future__ import annotations

import re
from typing import Iterator

from tree_sitter import Node

__all__ = ["Word", "word_of", "brace_words", "substitutions_in", "unquoted_expansions", "decode_ansi_c", "hidden_commands",
           "unparsed_text", "DYNAMIC_NODES", "SUBSTITUTIONS"]

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
                yield _text(c), True, c.type in SUBSTITUTIONS or (c.type == "expansion" and _runs_commands(c))
            else:
                yield from _parts(c, env)
    elif t == "concatenation":
        for c in node.children:
            yield from _parts(c, env)
    elif t in DYNAMIC_NODES:
        # (the substitutions the grammar parsed, then, in a `${...}`, those it left as plain text)
        yield _text(node), True, t in SUBSTITUTIONS or any(True for _ in substitutions_in(node)) \
            or (t == "expansion" and hidden_commands(unparsed_text(node)) != [])
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


# Past this many words from one argument's brace expansion, the argument is left unexpanded (and so unknown).
MAX_BRACE_WORDS = 64
_STATIC_PIECES = frozenset({"word", "number", "string", "raw_string", "ansi_c_string", "string_content", '"'})


def brace_words(node: Node, env: dict[str, str] | None = None) -> list[Word] | None:
    """The words bash makes of an argument by brace expansion (`{stop,}` -> `stop`; `s{ed,}` -> `sed`, `s`;
    `a{b,c}d` -> `abd`, `acd`), before any other expansion; None when the argument has no brace list outside
    quotes, holds an expansion, or expands past MAX_BRACE_WORDS. A `{a..b}` sequence is a dynamic node already."""
    pieces = list(node.children) if node.type == "concatenation" else [node]
    if not any(p.type == "word" and "{" in _text(p) for p in pieces):
        return None
    if any(p.type not in _STATIC_PIECES or (p.type == "string" and any(
            c.type not in ("string_content", '"') for c in p.children)) for p in pieces):
        return None
    # (character, active): a brace or comma is active only unquoted and unescaped.
    tokens: list[tuple[str, bool]] = []
    for p in pieces:
        if p.type == "word":
            text, i = _text(p), 0
            while i < len(text):
                if text[i] == "\\" and i + 1 < len(text):
                    if text[i + 1] != "\n":
                        tokens.append((text[i + 1], False))
                    i += 2
                    continue
                tokens.append((text[i], True))
                i += 1
        else:
            tokens += [(ch, False) for ch in "".join(t for t, _, _ in _parts(p, env))]
    quoted = any(p.type != "word" for p in pieces)
    out = _brace_expand(tokens, MAX_BRACE_WORDS)
    if out is None or out == ["".join(ch for ch, _ in tokens)]:
        return None
    # An unquoted word that expands to nothing is removed (`{stop,}` is one word); a quoted piece keeps it.
    return [Word.of(w) for w in out if w or quoted]


def _brace_expand(tokens: list[tuple[str, bool]], limit: int) -> list[str] | None:
    """Bash's brace expansion of one word: the first `{...}` with a comma at its top level is replaced by each of
    its parts in turn (recursively); a brace without a top-level comma stays literal. None past `limit` words."""
    for i, (ch, active) in enumerate(tokens):
        if ch != "{" or not active:
            continue
        depth, commas, close = 0, [], -1
        for j in range(i, len(tokens)):
            cj, aj = tokens[j]
            if not aj:
                continue
            if cj == "{":
                depth += 1
            elif cj == "}":
                depth -= 1
                if depth == 0:
                    close = j
                    break
            elif cj == "," and depth == 1:
                commas.append(j)
        if close < 0 or not commas:
            continue
        bounds = [i, *commas, close]
        out: list[str] = []
        for k in range(len(bounds) - 1):
            more = _brace_expand(tokens[:i] + tokens[bounds[k] + 1:bounds[k + 1]] + tokens[close + 1:], limit)
            if more is None or len(out) + len(more) > limit:
                return None
            out += more
        return out
    return ["".join(ch for ch, _ in tokens)]


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


def _runs_commands(expansion: Node) -> bool:
    return any(True for _ in substitutions_in(expansion)) or hidden_commands(unparsed_text(expansion)) != []


def unparsed_text(node: Node) -> str:
    """A node's text with the substitutions and inner `${...}` the grammar parsed in it blanked out. In a `${...}`
    operand what is left can still hold a backtick or a `$(` that bash runs (`${x:-`cmd`}`, `${x#$(cmd)}`): the
    grammar reads those as a plain word."""
    if node.text is None:
        return ""
    raw = bytearray(node.text)
    stack = list(node.children)
    while stack:
        n = stack.pop()
        if n.type in SUBSTITUTIONS or n.type in ("expansion", "arithmetic_expansion"):
            raw[n.start_byte - node.start_byte:n.end_byte - node.start_byte] = b" " * (n.end_byte - n.start_byte)
            continue
        stack.extend(n.children)
    return raw.decode("utf-8", "replace")


_BACKTICK_ESC = re.compile(r"\\([\\`$])")


def hidden_commands(text: str) -> list[tuple[str, str]] | None:
    """The command substitutions bash runs in text it expands as a double-quoted string does (an unquoted heredoc
    body, a `${...}` operand), in order: ("`", the command between backticks, unescaped as bash does), ("$(", the
    command inside `$(...)`) or ("$((", the expression inside `$((...))`). A backslash quotes the next character.
    None when one is not closed (bash would not run the text as written; what it does is not known here)."""
    found: list[tuple[str, str]] = []
    if "`" not in text and "$(" not in text:
        return found
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif c == "`":
            j = _closing_backtick(text, i + 1)
            if j < 0:
                return None
            found.append(("`", _BACKTICK_ESC.sub(r"\1", text[i + 1:j])))
            i = j + 1
        elif c == "$" and text.startswith("$(", i):
            j = _closing_paren(text, i + 1)
            if j < 0:
                return None
            if text.startswith("$((", i) and text[j - 1] == ")" and j > i + 3:
                found.append(("$((", text[i + 3:j - 1]))
            else:
                found.append(("$(", text[i + 2:j]))
            i = j + 1
        else:
            i += 1
    return found


def _closing_backtick(text: str, i: int) -> int:
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "`":
            return i
        i += 1
    return -1


def _closing_paren(text: str, i: int) -> int:
    """The index of the `)` closing the `(` at i, skipping quoted text, backticks and nested parentheses."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            i = text.find("'", i + 1)
            if i < 0:
                return -1
        elif c == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c == "`":
            i = _closing_backtick(text, i + 1)
            if i < 0:
                return -1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1
