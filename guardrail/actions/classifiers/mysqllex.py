"""MySQL/MariaDB text as the mysql client and then the server read it: what statements reach the server, in order.

Called by the mysql classifier (`mysql.py`). Two stages, each after the real program (MariaDB 10.11):

- the **client** (`client/mysql.cc`, `add_line`) reads its input line by line, strips plain comments, tracks
  strings (a backslash escapes inside any quote, unless the session has NO_BACKSLASH_ESCAPES), splits at its
  delimiter (`DELIMITER x`, `\\d x`), runs its own commands (`\\!`, `system`, `source`, `\\.`, `pager`, `tee`,
  `connect`, `charset`, ...) and sends each statement as it ends (`;`, `\\g`, `\\G`);
- the **server** (`sql/sql_lex.cc`) lexes what it receives: `#` and `-- ` comments (the second dash followed by
  whitespace or a control character, so `1--1` is arithmetic) to the end of the line, `/* */` that do not nest,
  executable comments whose content runs (`/*!`, `/*!NNNNN`, `/*M!`), strings with backslash escapes, `"` a string
  unless ANSI_QUOTES, no dollar quoting, and `;` between statements (the client enables multi-statements).

What depends on the server is read every way it could be (`readings`): its sql_mode at connect (NO_BACKSLASH_ESCAPES
and ANSI_QUOTES change where a string ends) and its flavour and version (whether a `/*!NNNNN` or `/*M!` comment runs
or is skipped; MariaDB skips 5-digit versions from 50700). A `SET sql_mode` with a literal value is applied to what
follows; one the guard cannot read makes the rest opaque. A non-ASCII character before a backslash or a backtick is
opaque: in a multi-byte client character set (gbk, big5, sjis) that byte pair is one character, and the quote or
escape is gone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterator

from guardrail.actions.classifiers.sql import Statement, Tok

__all__ = ["ClientCommand", "Opaque", "Mode", "readings", "server_statements", "literal_text", "source_name",
           "MAX_SOURCE_DEPTH"]

_SPACE = " \t\n\r\v\f"  # my_isspace in the ASCII range


@dataclass(frozen=True)
class ClientCommand:
    """One of the mysql client's own commands (`system ls`, `\\. file`), run by the client, not the server."""

    name: str
    text: str


@dataclass(frozen=True)
class Opaque:
    """From here on the guard cannot tell what the server reads (an sql_mode it cannot read, too many readings)."""

    reason: str


@dataclass(frozen=True)
class Mode:
    """The session's sql_mode flags that change lexing."""

    backslash_escapes: bool = True
    ansi_quotes: bool = False


# The client's one-character commands (`\\x`) by name, and whether each takes the rest up to the delimiter as its
# argument (`takes_params` in mysql.cc).
_SHORT = {"?": ("help", True), "c": ("clear", False), "r": ("connect", True), "d": ("delimiter", True),
          "e": ("edit", False), "G": ("ego", False), "q": ("quit", False), "g": ("go", False), "h": ("help", True),
          "n": ("nopager", False), "t": ("notee", False), "P": ("pager", True), "p": ("print", False),
          "R": ("prompt", True), "#": ("rehash", False), ".": ("source", True), "s": ("status", False),
          "!": ("system", True), "T": ("tee", True), "u": ("use", True), "C": ("charset", True),
          "W": ("warnings", False), "w": ("nowarning", False)}
_NAMED = {name: params for name, params in _SHORT.values()}
_NAMED.update({"exit": False, "quit": False})


def _is_delimiter_command(text: str) -> bool:
    return text[:9].lower() == "delimiter" and len(text) > 9 and text[9] in _SPACE


# How many files deep `source` is followed (a file that sources itself would go on until the client fails).
MAX_SOURCE_DEPTH = 8


def source_name(text: str) -> str:
    """The file `source FILE` / `\\. FILE` reads: get_arg's word, without trailing white space or control
    characters (com_source); a `;` right after the name is part of it, as for the client."""
    return _get_arg(text).rstrip("".join(chr(c) for c in range(33)))


def _get_arg(text: str) -> str:
    """A client command's argument as `get_arg` reads it: after the command word (or `\\x`), one word or a quoted
    string."""
    s = text.lstrip(_SPACE)
    if s.startswith("\\"):
        s = s[2:]
    else:
        s = re.sub(r"^\S*", "", s)
    s = s.lstrip(_SPACE)
    if s[:1] in ("'", '"', "`"):
        end = s.find(s[0], 1)
        return s[1:end] if end > 0 else ""
    return re.split(r"[ ]", s, maxsplit=1)[0] if s else ""


class _Client:
    """The mysql client's reading of its input (`read_and_execute` and `add_line` of mysql.cc), as a generator of
    the statements it sends (str) and the commands it runs (ClientCommand). `no_backslash` follows the session's
    NO_BACKSLASH_ESCAPES (the server reports it after each statement); the caller updates it between items."""

    def __init__(self, delimiter: str = ";", preserve_comments: bool = False,
                 source: "Callable[[str], str | None] | None" = None):
        self.delimiter = delimiter or ";"
        self.preserve = preserve_comments
        self.no_backslash = False
        self.source = source  # the text of a file `source FILE` names, read now; None when it cannot be
        self.sourcing = 0  # how many `source` files deep the reading is

    def _find_command(self, text: str) -> str | None:
        name = text.lstrip(_SPACE)
        if "\\g" in name or (self.delimiter in name and not _is_delimiter_command(name)):
            return None
        m = re.match(r"([^ \t]*)([ \t]+)?(.*)", name, re.S)
        word, rest = m.group(1).lower(), m.group(3)
        takes = _NAMED.get(word)
        if takes is None or (rest and not takes):
            return None
        return word

    def read(self, text: str) -> Iterator[str | ClientCommand]:
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        self.buffer, self.in_string, self.ml = "", "", False
        for line in lines:
            if not self.buffer and not self.ml and not self.in_string:
                name = self._find_command(line)
                if name is not None:
                    yield from self._command(name, line)
                    continue
            yield from self._add_line(line)
        rest = self.buffer.rstrip("".join(chr(c) for c in range(33)) + "\x7f")
        if rest:
            yield rest

    def _command(self, name: str, text: str) -> Iterator[str | ClientCommand]:
        if name == "delimiter":
            arg = _get_arg(text)
            if arg and "\\" not in arg:
                self.delimiter = arg
        elif name in ("go", "ego"):
            if self.buffer.strip(_SPACE):
                yield self.buffer
            self.buffer = ""
        elif name == "clear":
            # The client drops the statement; judged anyway, as if sent (never less than what may run).
            if self.buffer.strip(_SPACE):
                yield self.buffer
            self.buffer = ""
        elif name == "source" and self.source is not None and self.sourcing < MAX_SOURCE_DEPTH and \
                (body := self.source(source_name(text))) is not None:
            # The client reads the file's lines as its own input, there and then (com_source: same session,
            # same delimiter); the statement it was in the middle of is kept for after.
            saved = (self.buffer, self.in_string, self.ml)
            self.sourcing += 1
            try:
                yield from self.read(body)
            finally:
                self.sourcing -= 1
                self.buffer, self.in_string, self.ml = saved
        else:
            yield ClientCommand(name, text.strip(_SPACE))

    def _add_line(self, line: str) -> Iterator[str | ClientCommand]:
        out: list[str] = []
        need_space = False
        ss = ""  # "" | "conditional" (/*! ... */) | "hint" (/*+ ... */)
        i, n = 0, len(line)
        while i < n:
            ch = line[i]
            if not self.preserve and ch in _SPACE and not out and not self.buffer:
                i += 1
                continue
            if not self.ml and ch == "\\" and not (self.in_string and self.no_backslash):
                i += 1
                if i >= n:
                    break
                ch = line[i]
                if self.in_string or ch == "N":
                    out.append("\\")
                    if ch == "`" and self.in_string == "`":
                        continue  # the backtick is read again, and closes the identifier
                    out.append(ch)
                    i += 1
                    continue
                if ch in _SHORT:
                    name, takes = _SHORT[ch]
                    self.buffer += "".join(out)
                    out = []
                    yield from self._command(name, line[i - 1:])
                    if takes:
                        if ss:
                            j = line.find("*/", i + 1)
                            i = j if j >= 0 else n
                            continue
                        j = line.find(self.delimiter, i + 1)
                        i = n if j < 0 else j + len(self.delimiter)
                        continue
                    i += 1
                    continue
                out += ["\\", ch]  # "Unknown command": both characters are kept
                i += 1
                continue
            if not self.ml and not self.in_string and ss != "hint" and line.startswith(self.delimiter, i):
                i += len(self.delimiter)
                if self.preserve:
                    while i < n and line[i] in _SPACE:
                        out.append(line[i])
                        i += 1
                self.buffer += "".join(out)
                out = []
                name = self._find_command(self.buffer)
                if name is not None:
                    yield from self._command(name, self.buffer)
                elif self.buffer.strip(_SPACE):
                    yield self.buffer
                self.buffer = ""
                continue
            nxt, nxt2 = line[i + 1:i + 2], line[i + 2:i + 3]
            if not self.ml and not self.in_string and (ch == "#" or ch == "-" and nxt == "-" and (
                    nxt2 == "" or nxt2 in _SPACE)):
                self.buffer += "".join(out)
                out = []
                if self.preserve:
                    self.buffer += line[i:]
                i = n
                break
            cond = nxt2 == "!" or line[i + 2:i + 4] == "M!"  # /*! and MariaDB's /*M!: executable
            if not self.in_string and ch == "/" and nxt == "*" and not cond and nxt2 != "+" and ss != "hint":
                if self.preserve:
                    out += ["/", "*"]
                i += 2
                self.ml = True
                self.buffer += "".join(out)
                out = []
                continue
            if self.ml and not ss and ch == "*" and nxt == "/":
                if self.preserve:
                    out += ["*", "/"]
                i += 2
                self.ml = False
                self.buffer += "".join(out)
                out = []
                need_space = True
                continue
            if not self.in_string and ch == "/" and nxt == "*":
                ss = "conditional" if cond else "hint" if nxt2 == "+" else ss
            elif not self.in_string and ss and ch == "*" and nxt == "/":
                ss = ""
            if self.in_string and ch == self.in_string:
                self.in_string = ""
            elif not self.ml and not self.in_string and ss != "hint" and ch in "'\"`":
                self.in_string = ch
            if not self.ml or self.preserve:
                if need_space and ch not in _SPACE:
                    out.append(" ")
                need_space = False
                out.append(ch)
            i += 1
        if out or self.buffer:
            text = "".join(out)
            if not _is_delimiter_command(text) or self.in_string or self.ml:
                text += "\n"
            if not self.ml or self.preserve:
                self.buffer += text


# ----------------------------------------------------------------------------------------------------- the server
_WORD = re.compile(r"@{0,2}[A-Za-z_$\u0080-\U0010ffff][A-Za-z0-9_$\u0080-\U0010ffff]*")
_NUM = re.compile(r"[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?[A-Za-z0-9_$]*|\.[0-9]+(?:[eE][-+]?[0-9]+)?")
_OP = re.compile(r"<=>|->>|->|::|<>|!=|<=|>=|:=|\|\||&&|<<|>>|[(),.=*+\-/<>%:\[\]{}@?&|~^!\\]")
_VERSION = re.compile(r"/\*(M?)!([0-9]{6}|[0-9]{5})?")


class _Ambiguous(Exception):
    """Text the guard will not guess about (an executable comment inside another)."""


def _consume_comment(text: str, pos: int, nesting: int) -> int:
    """`consume_comment` of sql_lex.cc: the end of a comment whose body starts at pos; `nesting` levels of `/* */`
    may sit inside (one in a skipped versioned comment, none in a plain one)."""
    n = len(text)
    while pos < n:
        if nesting > 0 and text.startswith("/*", pos):
            pos = _consume_comment(text, pos + 2, nesting - 1)
            continue
        if text.startswith("*/", pos):
            return pos + 2
        pos += 1
    return n


def _quoted(text: str, pos: int, q: str, escapes: bool) -> int:
    """The end of a quoted string or identifier opened at pos (a doubled quote stays inside; a backslash escapes
    the next character when `escapes`); the text's end when it is not closed."""
    n = len(text)
    i = pos + 1
    while i < n:
        c = text[i]
        if escapes and c == "\\":
            i += 2
            continue
        if c == q:
            if i + 1 < n and text[i + 1] == q:
                i += 2
                continue
            return i + 1
        i += 1
    return n


def _unquote(body: str, q: str, escapes: bool) -> str:
    if escapes:
        body = re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t", "0": "\0", "r": "\r", "Z": "\x1a", "b": "\b"}.get(
            m.group(1), m.group(1)), body, flags=re.S)
    return body.replace(q + q, q)


def server_statements(text: str, mode: Mode, runs: dict[tuple[str, str], bool]) -> list[Statement]:
    """The statements the server runs from one packet, split at `;` (multi-statements). `runs` says, for each
    executable comment's (M, version) seen in the text, whether its content runs in this reading."""
    out: list[Statement] = []
    toks: list[Tok] = []
    start, pos, n = 0, 0, len(text)
    in_exec = False
    while pos < n:
        c = text[pos]
        if c in _SPACE:
            pos += 1
            continue
        if c == "#" or c == "-" and text.startswith("--", pos) and (
                pos + 2 >= n or text[pos + 2] in _SPACE or ord(text[pos + 2]) < 32 or text[pos + 2] == "\x7f"):
            e = text.find("\n", pos)
            pos = n if e < 0 else e
            continue
        if text.startswith("/*", pos):
            v = _VERSION.match(text, pos)
            if v is not None:
                if in_exec:
                    raise _Ambiguous("an executable comment inside another")
                if runs.get((v.group(1), v.group(2) or ""), True):
                    in_exec = True
                    pos = v.end()
                else:
                    pos = _consume_comment(text, v.end(), 1)
                continue
            pos = _consume_comment(text, pos + 2, 0)
            continue
        if in_exec and text.startswith("*/", pos):
            in_exec = False
            pos += 2
            continue
        if c == ";":
            if toks:
                out.append(Statement(toks, text[start:pos].strip()))
            toks, start = [], pos + 1
            pos += 1
            continue
        if c == "'" or c == '"' and not mode.ansi_quotes:
            e = _quoted(text, pos, c, mode.backslash_escapes)
            body = text[pos + 1:e - 1] if e - pos >= 2 and text[e - 1] == c else text[pos + 1:e]
            toks.append(Tok("str", text[pos:e], _unquote(body, c, mode.backslash_escapes)))
            pos = e
            continue
        if c in "`\"":
            e = _quoted(text, pos, c, False)
            body = text[pos + 1:e - 1] if e - pos >= 2 and text[e - 1] == c else text[pos + 1:e]
            toks.append(Tok("qid", text[pos:e], _unquote(body, c, False)))
            pos = e
            continue
        m = _NUM.match(text, pos) if c.isdigit() or c == "." and text[pos + 1:pos + 2].isdigit() else None
        kind = "num"
        if m is None:
            m, kind = _WORD.match(text, pos), "word"
        if m is None:
            m, kind = _OP.match(text, pos), "op"
        if m is None:
            toks.append(Tok("other", c, c))
            pos += 1
            continue
        spaced = m.group(0) == "(" and pos > 0 and (text[pos - 1] in _SPACE or text[pos - 1] == "/")
        toks.append(Tok(kind, m.group(0), m.group(0), spaced))
        pos = m.end()
    if toks:
        out.append(Statement(toks, text[start:].strip()))
    return out


def literal_text(toks: list[Tok]) -> str | None:
    """The text of a string literal (adjacent literals are one, as the server concatenates them), or None when the
    tokens are anything else (a variable, a function, a charset introducer)."""
    if not toks or any(t.kind != "str" for t in toks):
        return None
    return "".join(t.value for t in toks)


# ------------------------------------------------------------------------------------------------------ readings
# sql_mode names that turn on ANSI_QUOTES (the combination modes include it) and that the guard cannot follow.
_ANSI_QUOTES = {"ANSI_QUOTES", "ANSI", "DB2", "MAXDB", "MSSQL", "POSTGRESQL", "ORACLE"}
_UNFOLLOWED = {"ORACLE", "MSSQL", "DB2", "MAXDB", "POSTGRESQL"}  # parsers with other statement forms


def _mode_after(st: Statement, mode: Mode) -> Mode | Opaque:
    """The session's lexing mode after statement `st`: changed by `SET [SESSION] sql_mode = 'literal'` (also
    `@@sql_mode`, `@@session.sql_mode`, `@@local.sql_mode`, in a list of assignments); unchanged by SET GLOBAL
    (later sessions only) and SET STATEMENT (one statement). A value the guard cannot read: Opaque."""
    if st.kw(0) != "SET" or st.kw(1) == "STATEMENT":
        return mode
    toks = st.toks[1:]
    scope = "SESSION"
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.up in ("GLOBAL", "SESSION", "LOCAL", "PERSIST", "PERSIST_ONLY"):
            scope = t.up
            i += 1
            continue
        name, j = t.value.lower(), i + 1
        this = scope
        if name in ("@@global", "@@session", "@@local") and j + 1 < len(toks) and toks[j].text == ".":
            this, name, j = name[2:].upper(), toks[j + 1].value.lower(), j + 2
        elif name.startswith("@@"):
            this, name = "SESSION", name[2:]
        end = j
        depth = 0
        while end < len(toks) and not (toks[end].text == "," and depth == 0):
            depth += (toks[end].text == "(") - (toks[end].text == ")")
            end += 1
        if name == "sql_mode" and this in ("SESSION", "LOCAL"):
            value = toks[j + 1:end] if j < len(toks) and toks[j].text in ("=", ":=") else []
            text = literal_text(value)
            if text is None:
                return Opaque("SET sql_mode to a value the guard cannot read changes how later text is lexed")
            modes = {m.strip().upper() for m in text.split(",") if m.strip()}
            if modes & _UNFOLLOWED:
                return Opaque(f"sql_mode {', '.join(sorted(modes & _UNFOLLOWED))} reads statements in another "
                              "dialect")
            mode = Mode(backslash_escapes="NO_BACKSLASH_ESCAPES" not in modes,
                        ansi_quotes=bool(modes & _ANSI_QUOTES))
        i = end + 1
    return mode


def _version_readings(text: str) -> list[dict[tuple[str, str], bool]]:
    """Which versioned executable comments run, for each server that could read the text: MySQL runs `/*!N` when
    its version is at least N and never `/*M!`; MariaDB runs `/*M!N` and `/*!N` likewise, except a 5-digit `/*!N`
    from 50700 (MySQL-only syntax). Unversioned `/*!` always runs."""
    seen = {(m.group(1), m.group(2) or "") for m in _VERSION.finditer(text)}
    if not seen or seen == {("", "")}:
        return [{}]
    nums = sorted({int(v) for _, v in seen if v})
    candidates = {0, 999999, *nums, *(v - 1 for v in nums)}
    out: list[dict[tuple[str, str], bool]] = []
    for flavour in ("mariadb", "mysql"):
        for server in sorted(candidates):
            r = {}
            for m, v in seen:
                if not v:
                    r[(m, v)] = flavour == "mariadb" or not m
                elif m and flavour == "mysql":
                    r[(m, v)] = False
                else:
                    n = int(v)
                    r[(m, v)] = n <= server and not (flavour == "mariadb" and not m and len(v) == 5 and n >= 50700)
            if r not in out:
                out.append(r)
    out.sort(key=lambda r: -sum(r.values()))  # the reading where most runs first
    return out


_MAX_READINGS = 32
# A non-ASCII character right before a backslash or a backtick: one character in gbk, big5 or sjis.
_MULTIBYTE_PAIR = re.compile(r"[\u0080-\U0010ffff][\\`]")


def readings(sources: list[tuple[str, bool]], *, delimiter: str = ";", preserve_comments: bool = False,
             source: "Callable[[str], str | None] | None" = None) -> list[list[Statement | ClientCommand | Opaque]]:
    """Every way the server could run `sources` (in order; each (text, through_client): False for SQL sent as it
    is, like --init-command): one list of steps per reading, the one where the most runs first. `source` gives
    the text of a file a `source FILE` names (None: not readable, the command stays opaque); the files' text
    counts as the input's for the readings."""
    whole = "".join(s for s, _ in sources)
    if source is not None:
        read: list[str] = []

        def recording(path: str) -> str | None:
            text = source(path)
            if text is not None:
                read.append(text)
            return text

        _one_reading(sources, Mode(), {}, delimiter, preserve_comments, recording)
        whole += "".join(read)
    if _MULTIBYTE_PAIR.search(whole):
        return [[Opaque("a non-ASCII character before a backslash or backtick: in a multi-byte client character "
                        "set (gbk, big5, sjis) the two bytes are one character and the escape or quote is gone")]]
    modes = [Mode()]
    if "\\" in whole or '"' in whole:
        modes += [Mode(False, False), Mode(True, True), Mode(False, True)]
    versions = _version_readings(whole)
    if len(modes) * len(versions) > _MAX_READINGS:
        return [[Opaque(f"{len(versions)} ways executable comments /*!NNNNN may run or not: too many to judge")]]
    out = []
    for runs in versions:
        for mode in modes:
            steps = _one_reading(sources, mode, runs, delimiter, preserve_comments, source)
            if steps not in out:
                out.append(steps)
    return out


def _one_reading(sources: list[tuple[str, bool]], mode: Mode, runs: dict[tuple[str, str], bool], delimiter: str,
                 preserve: bool, source: "Callable[[str], str | None] | None" = None
                 ) -> list[Statement | ClientCommand | Opaque]:
    steps: list[Statement | ClientCommand | Opaque] = []
    client = _Client(delimiter, preserve, source)
    unread: Opaque | None = None  # a mode the guard cannot read: opaque if anything follows
    for text, through_client in sources:
        packets: Iterator[str | ClientCommand] = client.read(text) if through_client else iter([text])
        for item in packets:
            if isinstance(item, ClientCommand):
                if unread is not None:
                    return [*steps, unread]
                steps.append(item)
                continue
            try:
                sts = server_statements(item, mode, runs)
            except _Ambiguous as e:
                return [*steps, Opaque(str(e))]
            for st in sts:
                if unread is not None:
                    return [*steps, unread]
                steps.append(st)
                after = _mode_after(st, mode)
                if isinstance(after, Opaque):
                    unread = after
                else:
                    mode = after
            client.no_backslash = not mode.backslash_escapes
    return steps
