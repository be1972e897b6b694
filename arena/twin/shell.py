"""The operator's shell in the twin: parses a command line like bash and dispatches each program to a handler.

`arena.twin.engine.TwinEnvironment.run` calls `Shell.run`. The core registers generic programs (sleep, echo, cat,
true, false, date, kubectl, curl); a substrate adds its own (psql, redis-cli, mysql, restart-svc.sh, helm...)
through `Substrate.commands()`. Handlers receive argv and stdin and return (stdout, stderr, exit code, seconds);
the seconds are the command's own virtual duration, which the shell spends on the world's clock.

Supported syntax: quoting (shlex), `;`, `&&`, `||`, pipes `|`, heredocs (`<<EOF`, `<<'EOF'`, `<<-EOF`),
`VAR=value` prefixes, `$VAR`/`${VAR}` expansion outside single quotes. Anything else (subshells, redirections
to files, globbing, command substitution) gets the error bash would print.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Callable, Mapping

from verifiers.protocols import CommandResult

__all__ = ["Shell", "Handler", "Invocation", "split_program"]


@dataclass
class Invocation:
    """What a handler is called with."""

    argv: list[str]
    stdin: str
    env: Mapping[str, str]


# handler(inv) -> (stdout, stderr, exit_code, duration_s)
Handler = Callable[[Invocation], tuple[str, str, int, float]]

_OPS = ("&&", "||", ";", "|")


def _tokenize_top(line: str) -> list[str]:
    """Split a line on top-level ; && || | outside quotes. Returns pieces and operators interleaved."""
    out, buf, i, q = [], [], 0, None
    while i < len(line):
        ch = line[i]
        if q:
            buf.append(ch)
            if ch == "\\" and q == '"' and i + 1 < len(line):
                buf.append(line[i + 1])
                i += 2
                continue
            if ch == q:
                q = None
            i += 1
            continue
        if ch in ("'", '"'):
            q = ch
            buf.append(ch)
            i += 1
            continue
        if ch == "\\" and i + 1 < len(line):
            buf.append(line[i:i + 2])
            i += 2
            continue
        two = line[i:i + 2]
        if two in ("&&", "||"):
            out += ["".join(buf), two]
            buf = []
            i += 2
            continue
        if ch in ";|":
            out += ["".join(buf), ch]
            buf = []
            i += 1
            continue
        buf.append(ch)
        i += 1
    if q:
        raise SyntaxError("unexpected EOF while looking for matching `%s'" % q)
    out.append("".join(buf))
    return out


_HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def split_program(text: str) -> tuple[str, dict[int, str]]:
    """Pull heredoc bodies out of a multi-line command. Returns the command text and {piece index: body}."""
    lines = text.split("\n")
    cmd_lines: list[str] = []
    bodies: dict[int, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _HEREDOC.search(line)
        if m:
            strip, delim = m.group(1) == "-", m.group(3)
            body: list[str] = []
            i += 1
            while i < len(lines) and (lines[i].lstrip("\t") if strip else lines[i]) != delim:
                body.append(lines[i].lstrip("\t") if strip else lines[i])
                i += 1
            # The heredoc feeds the simple command it appears in; mark it with a placeholder.
            key = len(bodies)
            bodies[key] = "\n".join(body) + ("\n" if body else "")
            line = line[:m.start()] + f" __HEREDOC_{key}__ " + line[m.end():]
        cmd_lines.append(line)
        i += 1
    return " ; ".join(x for x in cmd_lines if x.strip()), bodies


class Shell:
    """A small bash: sequences, pipes, heredocs and variables, over registered program handlers."""

    def __init__(self, spend: Callable[[float], None], env: Mapping[str, str] | None = None):
        self._spend = spend
        self.handlers: dict[str, Handler] = {}
        self.env: dict[str, str] = dict(env or {})

    def register(self, name: str, handler: Handler) -> None:
        self.handlers[name] = handler

    def run(self, command: str) -> CommandResult:
        out: list[str] = []
        err: list[str] = []
        total = 0.0
        code = 0
        try:
            text, bodies = split_program(command)
            pieces = _tokenize_top(text)
        except SyntaxError as e:
            return CommandResult(command, "", f"bash: syntax error: {e}\n", 2, 0.0)
        pipe_in: str | None = None
        skip = False
        i = 0
        while i < len(pieces):
            piece = pieces[i]
            op = pieces[i + 1] if i + 1 < len(pieces) else None
            i += 2
            if not piece.strip():
                if op in ("|", "&&", "||"):
                    return CommandResult(command, "".join(out), f"bash: syntax error near unexpected token `{op}'\n",
                                         2, total)
                continue
            if skip:
                # A skipped command leaves $? as it was; a skipped pipeline is skipped as a whole.
                skip = False
                if op == "|":
                    skip = True
                    continue
                if op == "&&" and code != 0 or op == "||" and code == 0:
                    skip = True
                continue
            o, e, code, dur = self._simple(piece, pipe_in if pipe_in is not None else "", bodies)
            total += dur
            if dur > 0:
                self._spend(dur)
            err.append(e)
            if op == "|":
                pipe_in = o
                continue
            pipe_in = None
            out.append(o)
            if op == "&&" and code != 0 or op == "||" and code == 0:
                skip = True
        return CommandResult(command, "".join(out), "".join(err), code, round(total, 6))

    def _expand(self, piece: str, env: Mapping[str, str]) -> str:
        # Expand $VAR outside single quotes, as bash does before word splitting.
        res, q = [], None
        i = 0
        while i < len(piece):
            ch = piece[i]
            if ch == "'" and q != '"':
                q = None if q == "'" else "'"
            elif ch == '"' and q != "'":
                q = None if q == '"' else '"'
            if ch == "$" and q != "'":
                m = _VAR.match(piece, i)
                if m:
                    res.append(env.get(m.group(1) or m.group(2), ""))
                    i = m.end()
                    continue
            res.append(ch)
            i += 1
        return "".join(res)

    def _simple(self, piece: str, stdin: str, bodies: Mapping[int, str]) -> tuple[str, str, int, float]:
        env = dict(self.env)
        if _substitutes(piece):
            return "", "bash: command substitution is not available in this shell\n", 2, 0.0
        try:
            argv = shlex.split(_shield_quoted_redirects(self._expand(piece, env)))
        except ValueError as e:
            return "", f"bash: syntax error: {e}\n", 2, 0.0
        while argv and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[0]):
            k, v = argv.pop(0).split("=", 1)
            env[k] = v
        if not argv:
            return "", "", 0, 0.0
        rest: list[str] = []
        drop_out = drop_err = err_to_out = False
        i = 0
        while i < len(argv):
            a = argv[i]
            i += 1
            m = re.fullmatch(r"__HEREDOC_(\d+)__", a)
            if m:
                stdin = bodies[int(m.group(1))]
                continue
            target = None
            op = re.fullmatch(r"(1|2|&)?>>?(/dev/null)?", a)
            if op and op.group(2) is None and i < len(argv):
                target = argv[i]
                i += 1
            elif op:
                target = op.group(2)
            if op:
                if target != "/dev/null":
                    return "", f"bash: redirection is not available in this shell: {a} {target or ''}\n", 1, 0.0
                fd = op.group(1) or "1"
                drop_out = drop_out or fd in ("1", "&")
                drop_err = drop_err or fd in ("2", "&")
            elif a == "2>&1":
                err_to_out = True
            elif a.startswith((">", "<", "2>", "1>", "&>")):
                return "", f"bash: redirection is not available in this shell: {a}\n", 1, 0.0
            else:
                rest.append(a)
        argv = [_unshield(a) for a in rest]
        env = {k: _unshield(v) for k, v in env.items()}
        if not argv:
            return "", "", 0, 0.0
        h = self.handlers.get(argv[0]) or self.handlers.get(argv[0].rsplit("/", 1)[-1])
        if h is None:
            o, e, code, dur = "", f"bash: {argv[0]}: command not found\n", 127, 0.0
        else:
            try:
                o, e, code, dur = h(Invocation(argv, stdin, env))
            except _Exit as x:
                o, e, code, dur = x.out, x.err, x.code, x.dur
        if err_to_out and not drop_out:
            o, e = o + e, ""
        return ("" if drop_out else o), ("" if drop_err or (err_to_out and drop_out) else e), code, dur


# A quoted or escaped `>`/`<` is a literal character in bash (redis-cli ACL SETUSER u '>password'), never a
# redirection. shlex drops the quotes before the redirection scan, so such characters are swapped for
# private-use code points first and swapped back in the arguments afterwards.
_SHIELD = {">": "\ue000", "<": "\ue001"}
_UNSHIELD = str.maketrans({v: k for k, v in _SHIELD.items()})


def _shield_quoted_redirects(piece: str) -> str:
    out: list[str] = []
    q: str | None = None
    i = 0
    while i < len(piece):
        ch = piece[i]
        if q is None and ch == "\\" and i + 1 < len(piece) and piece[i + 1] in _SHIELD:
            out.append(_SHIELD[piece[i + 1]])  # \> outside quotes: the backslash quotes one character
            i += 2
            continue
        if ch == "'" and q != '"':
            q = None if q == "'" else "'"
        elif ch == '"' and q != "'" and not (q == '"' and i and piece[i - 1] == "\\"):
            q = None if q == '"' else '"'
        out.append(_SHIELD[ch] if q is not None and ch in _SHIELD else ch)
        i += 1
    return "".join(out)


def _unshield(word: str) -> str:
    return word.translate(_UNSHIELD)


class _Exit(Exception):
    def __init__(self, out: str = "", err: str = "", code: int = 1, dur: float = 0.0):
        self.out, self.err, self.code, self.dur = out, err, code, dur


def _substitutes(piece: str) -> bool:
    """Whether bash would run a command substitution here: `$(` or a backtick outside single quotes (inside
    single quotes both are literal, e.g. a MariaDB identifier in mysql -e '... `tabPrepared Report`')."""
    q: str | None = None
    prev = ""
    for i, ch in enumerate(piece):
        if q == "'":
            if ch == "'":
                q = None
        elif ch == "'" and q is None and prev != "\\":
            q = "'"
        elif ch == '"' and prev != "\\":
            q = None if q == '"' else '"'
        elif ch == "`" and prev != "\\":
            return True
        elif ch == "$" and piece[i + 1:i + 2] == "(" and prev != "\\":
            return True
        prev = ch
    return False

