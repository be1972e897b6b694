"""The shell walker: a tree-sitter-bash parse tree, visited in execution order, one simple command at a time.

Called by `guardrail.actions.normalise.Normaliser.script`. For every simple command it builds an `Invocation`
(argv as `Word`s, the stdin it reads, where it runs) and hands it to the normaliser's `dispatch`, which unwraps
wrappers and calls the tool classifiers. It follows `;`, `&&`, `||`, pipes (tracking what flows through them, so
`echo '{..}' | restart-svc.sh channel` gives the helper its JSON), subshells, `$(...)` and backticks (run before
the command that uses them), heredocs and here-strings, assignments, function definitions and aliases, and the
redirections that write files.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
import shlex

import tree_sitter
import tree_sitter_bash
from tree_sitter import Node

from guardrail.actions.dispatch import Dispatcher, Session
from guardrail.actions.filewrite import NULL_SINKS, file_write
from guardrail.actions.invocation import Invocation, Stdin, Where, clean_path, runs_code
from guardrail.actions.model import Action
from guardrail.actions.words import (DYNAMIC_NODES, SUBSTITUTIONS, Word, brace_words, decode_ansi_c,
                                     hidden_commands, substitutions_in, unparsed_text, unquoted_expansions,
                                     word_of)

__all__ = ["parse", "ShellWalker", "Session", "file_write", "NULL_SINKS", "DECODERS"]

_PARSER = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


# Inside backticks bash turns \\` and \\$ and \\\\ into ` and $ and \\ before it parses the command.
_BACKTICK_ESCAPE = re.compile(r"\\([\\`$])")

def join_continuations(text: str) -> str:
    """The text with each backslash-newline inside a word removed, as bash removes it before it splits words
    (`r\\<newline>m -rf /etc` runs rm); outside single quotes, where a backslash is literal. Between words the
    grammar reads a continuation itself."""
    if "\\\n" not in text:
        return text
    out: list[str] = []
    i, n, quote = 0, len(text), ""
    while i < n:
        c = text[i]
        if quote == "'":
            if c == "'":
                quote = ""
        elif c == "'" and quote == "":
            quote = "'"
        elif c == '"':
            quote = "" if quote == '"' else '"'
        elif c == "\\" and i + 1 < n:
            if text[i + 1] == "\n" and out and not out[-1].isspace() and i + 2 < n and not text[i + 2].isspace():
                i += 2
                continue
            out.append(c)
            out.append(text[i + 1])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse(text: str) -> tree_sitter.Tree:
    """Parse shell text with the one cached parser (building a Parser costs more than parsing a command)."""
    return _PARSER.parse(text.encode("utf-8", "surrogatepass"))


# Programs that turn their stdin into something other than what was typed: a payload through them is opaque.
DECODERS = frozenset({"base64", "base32", "basenc", "xxd", "rev", "tr", "openssl", "gzip", "gunzip", "zcat",
                      "bzip2", "bunzip2", "bzcat", "xz", "unxz", "xzcat", "uudecode", "od", "hexdump", "perl",
                      "python", "python3", "sed", "awk", "gawk", "iconv", "zstd", "unzstd", "lz4", "brotli",
                      "rot13", "caesar", "tac"})
_STATEMENT_TOKENS = frozenset({";", "&", "&&", "||", "|", "|&", "\n", ";;", "(", ")", "{", "}", "do", "done",
                               "then", "fi", "else", "elif", "if", "while", "until", "for", "in", "case", "esac",
                               "!", "function", "select"})
_WORDISH = frozenset({"word", "string", "raw_string", "concatenation", "number", "ansi_c_string",
                      "translated_string", "variable_name"}) | DYNAMIC_NODES
_WRITE_OPS = frozenset({">", ">>", "&>", "&>>", ">|", ">&"})
# A `for` loop over more literal values than this is walked once, not unrolled.
MAX_UNROLL = 32


def _is_test_syntax(text: str) -> bool:
    """`[ ... ]` or `[[ ... ]]` as bash reads them: the bracket a word of its own, ended by a blank or a shell
    metacharacter (`[[( -f x )]]`). A backslash-newline joins lines first (`[\\<newline>ls]` is `[ls]`); any
    other backslash makes the bracket part of a longer word (`[\\ls]` is still a glob)."""
    text = text.replace("\\\n", "")
    for opener in ("[[", "["):
        if text.startswith(opener):
            return len(text) > len(opener) and text[len(opener)] in " \t\n()<>;&|"
    return True


def _txt(node: Node) -> str:
    return node.text.decode("utf-8", "replace") if node.text is not None else ""


_PRINTF_ESC = re.compile(r"\\(x[0-9a-fA-F]{1,2}|[0-7]{1,3}|u[0-9a-fA-F]{1,4}|.)", re.S)


def _printf(fmt: str, args: list[str]) -> str | None:
    # Only the conversions that keep the text knowable: %s, %d, %b and %%.
    out = decode_ansi_c(fmt) if "\\" in fmt else fmt
    if "%" not in out:
        return out
    it = iter(args)
    ok = True

    def conv(m: re.Match[str]) -> str:
        nonlocal ok
        c = m.group(1)
        if c == "%":
            return "%"
        v = next(it, "")
        if c == "b":
            return decode_ansi_c(v)
        if c in "sd":
            return v
        ok = False
        return ""

    res = re.sub(r"%[-+ #0-9.]*([sdb%a-zA-Z])", conv, out)
    return res if ok else None


class ShellWalker:
    """Visits one parse tree in execution order; every simple command goes to `normaliser.dispatch`."""

    def __init__(self, normaliser: Dispatcher, session: Session, where: Where):
        self.n = normaliser
        self.session = session
        self.where = where
        self.actions: list[Action] = []
        # Loop variables bound while a `for v in a b c` loop over literal words is unrolled.
        self.env: dict[str, str] = {}
        # The `$(...)` (node ids) whose command prints only numbers (`$(... | wc -l)`, `$(date +%s)`): a value
        # arithmetic can read without running anything, and one word.
        self.numbers: set[int] = set()

    # ---- statements -------------------------------------------------------------------------------------------

    def run(self, node: Node, stdin: Stdin | None = None) -> Stdin | None:
        """Walk a statement; returns what it writes to stdout, as far as it can be known."""
        t = node.type
        if t == "command":
            return self.command(node, stdin)
        if t == "redirected_statement":
            return self.redirected(node, stdin)
        if t == "pipeline":
            return self.pipeline([c for c in node.children if c.is_named], stdin)
        if t == "function_definition":
            name = node.child_by_field_name("name")
            body = node.child_by_field_name("body")
            if name is not None and body is not None:
                self.session.functions[_txt(name)] = body
            return None
        if t == "for_statement" and self.unroll(node, stdin):
            return None
        if t in ("for_statement", "select_statement"):
            var = node.child_by_field_name("variable")
            if var is not None:  # its values are only known as the loop runs; numbers when they count
                self.session.variables[_txt(var)] = None
                values = node.children_by_field_name("value")
                if t == "for_statement" and values and all(_COUNTS.fullmatch(_txt(v)) for v in values):
                    self.session.integers.add(_txt(var))
                else:
                    self.session.integers.discard(_txt(var))
        if (t == "compound_statement" and node.children and node.children[0].type == "((") \
                or t == "c_style_for_statement":
            opened = next((c for c in node.children if c.type == "(("), None)
            closed = next((c for c in node.children if c.type == "))"), None)
            if t == "compound_statement":
                self.substitutions(node)  # `(( $(wc -l < f) > 10 ))`: the shell expands them first
            if opened is not None and closed is not None and node.text is not None:
                self.arithmetic(node, node.text[opened.end_byte - node.start_byte:
                                                closed.start_byte - node.start_byte].decode("utf-8", "replace"))
            if t == "compound_statement":
                return None
        if t in ("variable_assignment", "variable_assignments"):
            self.assignments(node)
            return None
        if t in ("declaration_command", "unset_command"):
            self.declaration(node)
            return None
        if t in ("comment", "heredoc_body", "heredoc_start", "heredoc_end", "file_descriptor"):
            return None
        if t == "ERROR" or node.is_missing:
            self.session.syntax_errors.append(_txt(node)[:80])
        if t == "test_command" and not _is_test_syntax(_txt(node)):
            # `[ls]`: bash's `[` and `[[` are words of their own. Glued to more text they are a glob in the command
            # name, which runs whatever file in the working directory matches; the grammar still calls it a test.
            self.substitutions(node)
            inv = Invocation(argv=[Word.of(_txt(node))], where=self.where, raw=_txt(node))
            self.emit([inv.opaque(_txt(node)[:40], f"command name {_txt(node)[:40]!r} is a glob: it runs whatever "
                                                   "file matches, which cannot be known before it runs")])
            return None
        if t == "test_command" and _RUNS_LATER.search(_txt(node)):
            self.emit([_runs_later_action(Invocation(argv=[Word.of("[[")], where=self.where, raw=_txt(node)))])
            return None
        if t in _WORDISH or t == "test_command":
            if t == "test_command" and _ARITH_TEST.search(_txt(node)):
                self.arithmetic(node, _txt(node), strict=False)
            if t == "test_command" and " -v" in _txt(node):
                self.tested_names(node)
            self.substitutions(node)
            return None
        out = None
        for c in node.children:
            if c.is_named:
                out = self.run(c, stdin)
            elif c.is_missing:
                self.session.syntax_errors.append(f"missing {c.type!r}")
        return out

    def unroll(self, node: Node, stdin: Stdin | None) -> bool:
        """`for r in channel message; do ...$r...; done`: walk the body once per literal value, `$r` bound.

        Only when every value is a literal word and the body never assigns the variable itself; otherwise the
        loop is walked once with `$r` left dynamic (and so opaque wherever it decides what runs)."""
        var = node.child_by_field_name("variable")
        body = node.child_by_field_name("body")
        values = node.children_by_field_name("value")
        if var is None or body is None or not values or len(values) > MAX_UNROLL:
            return False
        name = _txt(var)
        words: list[Word] = []
        for v in values:  # `for a in {stop,start}` loops over the brace expansion's words
            braced = brace_words(v, self.env)
            words += braced if braced is not None else [word_of(v, self.env)]
        if any(w.dynamic or any(ch in w for ch in "*?[") for w in words):
            return False
        if re.search(rf"(\b{re.escape(name)}\+?=|\bread\b[^;\n]*\b{re.escape(name)}\b|\bfor\s+{re.escape(name)}\b"
                     rf"|\b(unset|export|declare|local|typeset|readonly)\b[^;\n]*\b{re.escape(name)}\b)",
                     _txt(body)):
            return False
        saved = self.env
        try:
            for w in words:
                self.env = {**saved, name: str(w)}
                self.run(body, stdin)
        finally:
            self.env = saved
        return True

    def pipeline(self, stages: list[Node], stdin: Stdin | None) -> Stdin | None:
        out = stdin
        for i, stage in enumerate(stages):
            out = self.run(stage, out if i == 0 else (out or Stdin("pipe", computed=True)))
        return out

    def substitutions(self, node: Node) -> None:
        """Run every `$(...)`, backtick and `<(...)` inside a node: the shell runs them before the command. An
        arithmetic expansion in it is checked for what its evaluation may run (`arithmetic`)."""
        stack = [node]
        while stack:
            n = stack.pop()
            if n.type in SUBSTITUTIONS:
                text = _txt(n)
                if n.type == "command_substitution" and text.startswith("`") and text.endswith("`"):
                    body = _BACKTICK_ESCAPE.sub(r"\1", text[1:-1])
                    if body != text[1:-1]:
                        # Inside backticks bash first turns \`, \$ and \\ into `, $ and \, then parses what is
                        # left: `echo \`rm -rf /etc\`` runs rm. The grammar reads \` as a plain character.
                        self.run(parse(body).root_node, None)
                        self.numbers.discard(n.id)
                        continue
                named = [c for c in n.children if c.is_named]
                out = None
                for c in named:
                    out = self.run(c, None)
                # Its output is the one command's (a list's would be every command's), when that prints numbers.
                if n.type == "command_substitution" and len(named) == 1 and out is not None and out.number \
                        and named[0].type in ("command", "pipeline", "redirected_statement"):
                    self.numbers.add(n.id)
                else:
                    self.numbers.discard(n.id)
                continue
            if n.type == "arithmetic_expansion":
                for c in n.children:  # the $(...) inside are expanded first: whether they print numbers
                    self.substitutions(c)
                text = _txt(n)
                self.arithmetic(n, text[3:-2] if text.startswith("$((") else text[2:-1])
                continue
            if n.type == "expansion":
                self.hidden(n, unparsed_text(n))
                self.expansion_evaluates(n)
            stack.extend(reversed(n.children))

    def hidden(self, node: Node, text: str) -> bool:
        """Run the command substitutions bash finds in text the grammar reads as plain (a backtick or a `$(` in a
        `${x:-...}` operand, an unquoted heredoc body): see `words.hidden_commands`. True when there is one, or one
        that is not closed (then opaque)."""
        found = hidden_commands(text)
        if found is None:
            inv = Invocation(argv=[Word.of("`")], where=self.where, raw=_txt(node))
            self.emit([inv.opaque("substitution", "a backtick or $( here is not closed, so what bash runs is not "
                                  "known; close it, or quote it if it is meant as text", text=text[:200])])
            return True
        for kind, body in found:
            if kind == "$((":
                self.arithmetic(node, body)
            else:
                self.run(parse(body).root_node, None)
        return bool(found)

    def arithmetic(self, node: Node, text: str, *, strict: bool = True) -> None:
        """Bash evaluates a variable named in arithmetic (`$((x))`, `((x))`, `let`, `for ((...))`) as an expression
        itself, and an array subscript in that value runs its `$(...)`: `x='a[$(cmd)]'; echo $((x))` runs cmd. So
        is the output of a `$(...)` in it. Opaque unless every variable it names is known to hold a plain number
        (`strict`); for `[[ A -eq B ]]`, only when a value set in this text is known to run something."""
        for sub in substitutions_in(node):
            if sub.id in self.numbers:  # `$(( $(date +%s) - start ))`: a number, whatever it is
                text = text.replace(_txt(sub), " 0 ")
        name = self._arith_risk(text, strict)
        if name is not None:
            inv = Invocation(argv=[Word.of("$((")], where=self.where, raw=text)
            self.emit([inv.opaque("evaluated", f"bash evaluates {name} as an arithmetic expression here, and an "
                                  "array subscript in a value (a[$(cmd)]) runs its command; use literal numbers, or "
                                  "variables set to numbers in the same command", expression=text[:200])])

    def _arith_risk(self, text: str, strict: bool, depth: int = 0) -> str | None:
        if (strict or depth) and ("$(" in text or "`" in text or "<(" in text):
            return "a command's output" if depth == 0 else "a value holding a command"
        if strict and _ARITH_POSITIONAL.search(text):
            return "a positional parameter"
        text = _ARITH_NUMBER.sub(" ", _ARITH_SPECIALS.sub(" ", text))
        assigned: set[str] = set()
        for m in _ARITH_NAME.finditer(text):
            name = m.group(1)
            if m.group(2):  # `i=0`: assigned here, an integer from now on
                assigned.add(name)
                self.session.integers.add(name)
                continue
            if name in assigned or name in _BASH_INTEGERS or name in self.session.integers:
                continue
            value = self.env.get(name, self.session.variables.get(name, _UNSET))
            if value is _UNSET or value is None:
                if strict:
                    return f"the value of {name} (not known before it runs)"
                continue
            if depth < 8 and self._arith_risk(str(value), strict, depth + 1) is not None:
                return f"the value of {name}"
        return None

    def assignments(self, node: Node) -> None:
        self.substitutions(node)
        pairs = [node] if node.type == "variable_assignment" else [c for c in node.children
                                                                   if c.type == "variable_assignment"]
        for a in pairs:
            self.emit(self._assignment_action(a, "assign"))

    def _assignment_action(self, a: Node, verb: str) -> list[Action]:
        name_node = a.child_by_field_name("name")
        value_node = a.child_by_field_name("value")
        name = _txt(name_node) if name_node is not None else _txt(a)
        value = word_of(value_node, self.env) if value_node is not None else Word.of("")
        self.session.variables[name] = None if value.dynamic else str(value)
        if value_node is not None and (value_node.type == "arithmetic_expansion" or self._counted(value_node)):
            self.session.integers.add(name)
        else:
            self.session.integers.discard(name)
        self.assigned_evaluates(a, name_node, value_node, value)
        inv = Invocation(argv=[Word.of(verb)], where=self.where, raw=_txt(a))
        if runs_code(name, _txt(value_node).strip("\"'") if value_node is not None else ""):
            return [_runs_code_action(inv, name)]
        return [inv.action("shell", "assign", mutating=False, details={"name": name, "value": str(value)})]

    def _counted(self, node: Node) -> bool:
        """Is this value one `$(...)` (quoted or not) whose command prints only numbers: `n=$(... | wc -l)`?"""
        if node.type == "string":
            inner = [c for c in node.children if c.type not in ('"', '$"')]
            return len(inner) == 1 and self._counted(inner[0])
        return node.type == "command_substitution" and node.id in self.numbers

    def _one_word(self, node: Node) -> bool:
        """Is this unquoted expansion one word whatever it holds (no blank in it): a number?"""
        if node.type == "arithmetic_expansion" or self._counted(node):
            return True
        name = node.named_children[0] if node.type in ("simple_expansion", "expansion") and \
            len(node.named_children) == 1 else None
        return name is not None and name.type == "variable_name" and _txt(node) in (f"${_txt(name)}",
                                                                                      f"${{{_txt(name)}}}") \
            and _txt(name) in self.session.integers

    def word(self, node: Node) -> Word:
        """The Word of an argument; an unquoted expansion in it that can only be a number does not split it."""
        w = word_of(node, self.env)
        if w.splits and all(self._one_word(e) for e in unquoted_expansions(node, self.env)):
            w.splits = False
        return w

    def declaration(self, node: Node) -> None:
        # export / declare / local / readonly / unset: shell state only, unless a substitution runs something.
        if _RUNS_LATER.search(_txt(node)):
            self.emit([_runs_later_action(Invocation(argv=[Word.of("declare")], where=self.where, raw=_txt(node)))])
            return
        self.substitutions(node)
        kw = _txt(node.children[0]) if node.children else "declare"
        self.declared(node, kw)
        assigned = [c for c in node.children if c.type == "variable_assignment"]
        for a in assigned:
            self.emit(self._assignment_action(a, kw))
        if not assigned:
            inv = Invocation(argv=[Word.of(kw)], where=self.where, raw=_txt(node))
            self.emit([inv.action("shell", kw, mutating=False)])

    # ---- names and values bash evaluates as it runs ------------------------------------------------------------
    # A subscript is arithmetic, and arithmetic evaluates a variable's value as an expression: wherever bash takes a
    # variable name from a value (`${!x}`, `test -v "$x"`, `declare -n r="$x"`) or evaluates a value as a number
    # (`declare -i y=x`, `${y:x}`, `a[x]=1`), a value holding `a[$(cmd)]` runs cmd.

    def expansion_evaluates(self, node: Node) -> None:
        """`${v:OFFSET:LENGTH}` evaluates OFFSET and LENGTH as arithmetic; `${!v}` takes v's value as a name."""
        kids = node.children
        colon = next((c for c in kids if c.type == ":"), None)
        if colon is not None and node.text is not None:
            close = kids[-1].start_byte if kids[-1].type == "}" else node.end_byte
            self.arithmetic(node, node.text[colon.end_byte - node.start_byte:close - node.start_byte]
                            .decode("utf-8", "replace"))
        if len(kids) > 2 and kids[1].type == "!" and kids[2].type == "variable_name" \
                and not (len(kids) > 3 and kids[3].type in ("*", "@")):  # `${!prefix*}` lists names
            self.evaluated_names(node, [Word.of("$" + _txt(kids[2]), dynamic=True)])
        sub = next((c for c in kids if c.type == "subscript"), None)
        if sub is not None:  # `${a[x]}`, `${#a[x]}`: an indexed array's subscript is arithmetic
            self.subscript(node, sub)

    def subscript(self, node: Node, sub: Node) -> None:
        base, index = sub.child_by_field_name("name"), sub.child_by_field_name("index")
        if index is not None and _txt(index) not in ("@", "*") \
                and "A" not in self.session.attributes.get(_txt(base) if base is not None else "", ""):
            self.arithmetic(node, _txt(index))

    def read_names(self, node: Node, argv: list[Word]) -> None:
        """`read NAME`, `mapfile NAME`: a name given by a value is resolved (`read "$x"`), and a line read into a
        `declare -i` name is evaluated as arithmetic, a subscript and all."""
        takes_value = "dinNptu" if argv[0] == "read" else "dnOsuCc"
        names: list[Word] = []
        skip = False
        for a in argv[1:]:
            if skip:
                skip = False
            elif a.startswith("-") and len(a) > 1 and not a.dynamic:
                skip = a[-1] in takes_value
            else:
                names.append(a)
        self.evaluated_names(node, names)
        ints = [str(n) for n in names if "i" in self.session.attributes.get(str(n), "")]
        if ints:
            inv = Invocation(argv=[Word.of(str(argv[0]))], where=self.where, raw=_txt(node))
            self.emit([inv.opaque("evaluated", f"{ints[0]} is declared -i: bash evaluates what is read into it as "
                                  "an arithmetic expression, and an array subscript in it (a[$(cmd)]) runs its "
                                  "command; read into a plain variable", name=ints[0])])

    def tested_names(self, node: Node) -> None:
        """`[[ -v NAME ]]`: NAME's subscript is evaluated."""
        stack = [node]
        while stack:
            n = stack.pop()
            op = n.child_by_field_name("operator") if n.type == "unary_expression" else None
            if op is not None and _txt(op) == "-v":
                self.evaluated_names(n, [word_of(c, self.env) for c in n.named_children if c.id != op.id])
            stack.extend(n.named_children)

    def evaluated_names(self, node: Node, names: list[Word]) -> None:
        """Opaque when one of `names` (words bash resolves as variable names) may hold a subscript that runs
        something: a name known only as it runs, or a subscript that is not plain arithmetic."""
        for w in names:
            risk = self._name_risk(self._value_of_word(w))
            if risk is not None:
                inv = Invocation(argv=[Word.of(str(w))], where=self.where, raw=_txt(node))
                self.emit([inv.opaque("evaluated", f"bash resolves {str(w)!r} as a variable name here ({risk}), and "
                                      "a subscript in a name is evaluated, running a command in it (a[$(cmd)]); "
                                      "name the variable literally", name=str(w)[:100])])
                return

    def _value_of_word(self, w: Word) -> str | None:
        """The text a word stands for: itself when literal, a variable's value for a lone `$v` known here."""
        if not w.dynamic:
            return str(w)
        m = re.fullmatch(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", str(w))
        value = self.env.get(m.group(1), self.session.variables.get(m.group(1))) if m else None
        return value if isinstance(value, str) else None

    def _name_risk(self, name: str | None) -> str | None:
        if name is None:
            return "a name not known before it runs"
        if "[" not in name:
            return None
        m = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\[(.*)\]", name, re.S)
        if m is None:
            return "not a plain name"
        return self._arith_risk(m.group(1), True)

    def declared(self, node: Node, kw: str) -> None:
        """`declare -i/-A/-n NAME`: the attributes, which decide how later assignments are evaluated; and every name
        it is given, as a name bash resolves (`declare "$x"=1`, `unset 'a[i]'`)."""
        flags = ""
        for c in node.children[1:]:
            text = _txt(c)
            if c.type == "word" and text[:1] in ("-", "+"):
                flags += text[1:] if text[0] == "-" and kw in ("declare", "typeset", "local") else ""
                continue
            if c.type == "variable_assignment":
                name_node = c.child_by_field_name("name")
                name = _txt(name_node) if name_node is not None else text
            else:
                w = word_of(c, self.env)
                name = str(w).split("=", 1)[0]
                self.evaluated_names(node, [Word.of(name, dynamic=w.dynamic)])
            if flags:
                self.session.attributes[name] = flags

    def assigned_evaluates(self, a: Node, name_node: Node | None, value_node: Node | None, value: Word) -> None:
        """`a[x]=1` evaluates x (an indexed array's subscript); a value assigned to a `-i` name is arithmetic; the
        value of a `-n` name is a name."""
        if name_node is not None and name_node.type == "subscript":
            self.subscript(a, name_node)
            return
        attrs = self.session.attributes.get(_txt(name_node) if name_node is not None else "", "")
        if "i" in attrs and value_node is not None and value_node.type != "arithmetic_expansion":
            self.arithmetic(a, str(value) if not value.dynamic else _txt(value_node))
        if "n" in attrs and value_node is not None:
            self.evaluated_names(a, [value])

    # ---- redirections ----------------------------------------------------------------------------------------

    def redirected(self, node: Node, stdin: Stdin | None) -> Stdin | None:
        body = node.child_by_field_name("body")
        redirects = node.children_by_field_name("redirect")
        if body is None:
            # A redirection alone (`> file`, `: >` without the colon) empties or creates the file.
            self._bare_writes(node, redirects)
            return None
        own_stdin, writes, continuations, words = self.redirects(redirects, self._herestrings(node))
        if body.type == "command":
            out = self.command(body, stdin, own_stdin=own_stdin, writes=writes, raw=_txt(node),
                               extra=_dropped_words(node, body, redirects) + words)
            if out is not None and out.number and _merges_stderr(redirects):
                out = dataclasses.replace(out, number=False)  # `wc -l f 2>&1`: its errors name the file
        else:
            out = self.with_stdin(body, stdin, own_stdin)
            inv = Invocation(argv=[Word.of("{")], where=self.where, raw=_txt(node))
            for path, append in writes:
                self.emit([file_write(inv, path, verb="append" if append else "write",
                                      content=out.text if out else None, by="redirect")])
            if writes:
                out = None
        for op, cont in continuations:
            if op == "|":
                out = self.pipeline([c for c in cont.children if c.is_named], out or Stdin("pipe", computed=True))
            else:
                out = self.run(cont, stdin)
        return out

    def _bare_writes(self, node: Node, redirects: list[Node]) -> None:
        """The files a redirection with no command writes: `> f` empties f (creates it), `>> f` creates it."""
        if not redirects:
            return
        _, writes, _, _ = self.redirects(redirects)
        inv = Invocation(argv=[Word.of("redirect")], where=self.where, raw=_txt(node))
        for path, append in writes:
            self.emit([file_write(inv, path, verb="append" if append else "write", content="", by="redirect")])

    def with_stdin(self, body: Node, stdin: Stdin | None, own: Stdin | None) -> Stdin | None:
        """A heredoc on `a | b <<EOF` or `a && b <<EOF` belongs to the last command (tree-sitter hangs it higher)."""
        if own is None:
            return self.run(body, stdin)
        if body.type in ("pipeline", "list"):
            parts = [c for c in body.children if c.is_named]
            if body.type == "pipeline":
                out = self.pipeline(parts[:-1], stdin) if len(parts) > 1 else None
                return self.with_stdin(parts[-1], out, own)
            for p in parts[:-1]:
                self.run(p, stdin)
            return self.with_stdin(parts[-1], stdin, own)
        if body.type == "command":
            return self.command(body, stdin, own_stdin=own)
        return self.run(body, own)

    def _herestrings(self, node: Node) -> set[int]:
        """`cat > f <<< 'text'`: tree-sitter-bash (0.25) parses a here-string that follows a file redirect as an
        ERROR `<<` and a redirect `< 'text'` (tree-sitter/tree-sitter-bash#232, #282). Bash reads a here-string:
        the ids of those `<` redirects, read as here-strings; their ERROR nodes are marked repaired. Only the exact
        shape (`<<` glued to a `<` with one word and no descriptor) is taken."""
        out: set[int] = set()
        kids = node.children
        for err, nxt in zip(kids, kids[1:]):
            if err.type == "ERROR" and _txt(err) == "<<" and nxt.type == "file_redirect" \
                    and err.end_byte == nxt.start_byte and nxt.child_by_field_name("descriptor") is None \
                    and [c.type for c in nxt.children if not c.is_named] == ["<"] \
                    and len(nxt.children_by_field_name("destination")) == 1:
                out.add(nxt.id)
                self.session.repaired.add(err.id)
        return out

    def redirects(self, redirects: list[Node], herestrings: set[int] | frozenset[int] = frozenset()
                  ) -> tuple[Stdin | None, list[tuple[str, bool]], list[tuple[str, Node]], list[Word]]:
        """(stdin from a heredoc/here-string/`<` file, files written, statements chained after a heredoc, the
        command's words that tree-sitter-bash hung on a redirect: in `xargs </dev/null rm -rf` it reads `rm -rf` as
        more destinations of `<`; bash takes one word as the file and the rest as the command's own)."""
        stdin: Stdin | None = None
        writes: list[tuple[str, bool]] = []
        conts: list[tuple[str, Node]] = []
        words: list[Word] = []
        for r in redirects:
            if r.type != "heredoc_redirect":  # a heredoc's body is expanded in `heredoc`, what follows it when run
                self.substitutions(r)
            if r.type == "heredoc_redirect":
                stdin = self.heredoc(r)
                op = ""
                for c in r.children:
                    if not c.is_named and c.type in ("&&", "||", ";", "|", "&"):
                        op = c.type
                    elif c.type in ("pipeline", "command", "list", "redirected_statement", "subshell",
                                    "compound_statement"):
                        if c.type == "pipeline" and c.children and c.children[0].type in ("|", "|&"):
                            conts.append(("|", c))
                        else:
                            conts.append((op or ";", c))
            elif r.type == "herestring_redirect" or r.id in herestrings:
                arg = next((c for c in r.children if c.is_named), None)
                w = word_of(arg, self.env) if arg is not None else Word.of("")
                stdin = Stdin("herestring", text=None if w.has_substitution else str(w) + "\n",
                              computed=w.has_substitution, producer="<<<",
                              decoded=w.has_substitution and _mentions_decoder(_txt(r)))
            elif r.type == "file_redirect":
                op = next((c.type for c in r.children if not c.is_named), "")
                dest = r.child_by_field_name("destination")
                if dest is None:
                    continue
                for more in r.children_by_field_name("destination")[1:]:
                    braced = brace_words(more, self.env)
                    words += braced if braced is not None else [self.word(more)]
                w = word_of(dest, self.env)
                if str(w).startswith(("/dev/tcp/", "/dev/udp/")) or (w.dynamic and "/dev/" in str(w)):
                    # bash opens a raw socket here: whatever is written to it is a protocol command we cannot see.
                    inv = Invocation(argv=[Word.of("redirect")], where=self.where, raw=_txt(r))
                    self.emit([inv.opaque("network-redirect", f"a redirection to {str(w)!r} talks to a network "
                                          "service directly; use the service's client instead", path=str(w))])
                    continue
                if op == "<" and w.has_substitution:
                    # `< <(curl ...)`: another command's output, made as this one runs, as through a pipe.
                    stdin = Stdin("pipe", computed=True, producer=str(w))
                elif op == "<":
                    stdin = Stdin("file", computed=True, producer=str(w), in_pod=self.where.in_exec)
                elif op in _WRITE_OPS and dest.type != "number" and str(w) not in NULL_SINKS \
                        and not str(w).startswith(("/dev/fd/", "&")):
                    writes.append((str(w), op in (">>", "&>>")))
        return stdin, writes, conts, words

    def heredoc(self, r: Node) -> Stdin:
        start = next((c for c in r.children if c.type == "heredoc_start"), None)
        body = next((c for c in r.children if c.type == "heredoc_body"), None)
        quoted = start is not None and any(q in _txt(start) for q in "'\"\\")
        text = _txt(body) if body is not None else ""
        written = _heredoc_text(r, start)
        misparsed = written is not None and written != text
        if misparsed:
            # tree-sitter-bash loses a body whose first line starts with `\` (it parses the line as words of the
            # redirect and leaves heredoc_body empty): the body is what lies between the lines, as bash reads it.
            text = written
        if any(c.type == "<<-" for c in r.children):
            text = "\n".join(line.lstrip("\t") for line in text.split("\n"))
        if not _ends_alone(r):
            # tree-sitter-bash ends a heredoc at a line that starts with the delimiter (`EOF && true`); bash reads on
            # to a line that is the delimiter alone, so the tool gets the lines after it too: not the text read here.
            return Stdin("heredoc", text=None, computed=True, producer="<< (end line not the delimiter alone)")
        # expansions in a body the parser did not read: computed as it runs
        has_sub = misparsed and not quoted and bool(re.search(r"\$[({A-Za-z_]|`", text))
        if not quoted:
            # An unquoted body is expanded as a double-quoted string is, quotes aside: its backticks and `$(...)` run
            # (the grammar parses only some of them, and none in a `<<-` body), and a backslash before $ ` \ or a
            # newline goes (`\\!` reaches the program as `\!`).
            has_sub = self.hidden(r, text) or has_sub
            text = _HEREDOC_ESC.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), text)
        return Stdin("heredoc", text=None if has_sub else text, computed=has_sub, producer="<<",
                     decoded=has_sub and _mentions_decoder(text))

    # ---- simple commands ---------------------------------------------------------------------------------------

    def command(self, node: Node, stdin: Stdin | None, *, own_stdin: Stdin | None = None,
                writes: list[tuple[str, bool]] | None = None, raw: str | None = None,
                extra: list[Word] | None = None) -> Stdin | None:
        name_node = node.child_by_field_name("name")
        args: list[Node] = []
        redirects: list[Node] = []
        for i, c in enumerate(node.children):
            field_name = node.field_name_for_child(i)
            if field_name == "argument":
                args.append(c)
            elif field_name == "redirect" or c.type in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
                redirects.append(c)
            elif c.type == "variable_assignment":
                self.substitutions(c)
                var, val = c.child_by_field_name("name"), c.child_by_field_name("value")
                if var is not None and runs_code(_txt(var), _txt(val).strip("\"'") if val is not None else ""):
                    # `PATH=/tmp ls`: not the ls the line names
                    self.emit([_runs_code_action(Invocation(argv=[Word.of("assign")], where=self.where,
                                                            raw=_txt(c)), _txt(var))])
        if name_node is not None:
            self.substitutions(name_node)
            if _split_by_newline(node, [name_node, *args]):
                # tree-sitter-bash reads `ls<newline>\rm -rf /x` as one command; bash ends `ls` at the newline
                # and runs rm: the words are not the commands that run.
                inv = Invocation(argv=[word_of(name_node)], where=self.where, raw=_txt(node))
                self.emit([inv.opaque("syntax-error", "a command's words run on past a line break (a line that "
                                      "starts with a backslash?); the shell runs them as separate commands: put "
                                      "each command on its own line without the backslash")])
                return None
        for a in args:
            self.substitutions(a)
        if name_node is None:
            # Only assignments (`A=1 B=2`) and redirections.
            for c in node.children:
                if c.type == "variable_assignment":
                    self.emit(self._assignment_action(c, "assign"))
            self._bare_writes(node, redirects)
            return None
        in_stdin, more_writes, conts, hung = self.redirects(redirects)
        all_writes = list(writes or []) + more_writes
        # The command name is never taken from a variable, even a loop-bound one: that stays opaque.
        argv = [word_of(name_node.named_children[0] if name_node.named_children else name_node)]
        for a in args:
            # `systemctl {stop,} db` runs `systemctl stop db`: brace expansion comes first, as bash does it.
            braced = brace_words(a, self.env)
            argv += braced if braced is not None else [self.word(a)]
        argv += hung + (extra or [])
        if len(name_node.named_children) > 1:
            argv[0] = word_of(name_node)
        named = brace_words(name_node.named_children[0], self.env) if name_node.named_children else None
        if named is not None and (named or len(argv) > 1):
            argv[:1] = named  # `s{ed,} -i ...` runs `sed s -i ...`; `{,} rm -rf x` runs `rm -rf x`
        # bash applies redirections left to right, so the last stdin wins: a redirect after the command
        # (`xargs </dev/null cmd <<EOF`, the heredoc hung on the statement) over one among its words.
        effective = own_stdin or in_stdin or stdin
        words_raw = " ".join([*(_txt(a) for a in [name_node, *args]), *(shlex.quote(str(w)) for w in extra or [])])
        inv = Invocation(argv=argv, where=self.where, stdin=effective, raw=raw if raw is not None else _txt(node),
                         words_raw=words_raw)
        if (str(argv[0]) in _EVALUATES_NAMES and _RUNS_LATER.search(_txt(node))) or "@P}" in _txt(node):
            self.emit([_runs_later_action(inv)])
            return None
        if str(argv[0]) in ("read", "mapfile", "readarray"):
            self.read_names(node, argv)
        if str(argv[0]) in ("test", "["):
            self.evaluated_names(node, [argv[i + 1] for i in range(1, len(argv) - 1) if argv[i] == "-v"])
        elif str(argv[0]) == "printf" and len(argv) > 2 and argv[1] == "-v":
            self.evaluated_names(node, [argv[2]])
        if str(argv[0]) == "let":
            self.arithmetic(node, " , ".join(str(a) for a in argv[1:]))
        elif str(argv[0]) in _SETS_NAMES:
            # `read n`, `mapfile a`, `printf -v n`, `getopts o n`: set from input as it runs, not known here.
            for a in argv[1:]:
                if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", a):
                    self.session.variables[str(a)] = None
                    self.session.integers.discard(str(a))
            if str(argv[0]) == "read" and effective is not None and effective.number:
                # `seq 1 5 | while read i`: what it reads is numbers, so are the variables it sets.
                self.session.integers.update(_read_names(argv[1:]))
        self.emit(self.n.dispatch(inv))
        out = _output_of(inv)
        if out is not None and not _merges_stderr(redirects) and self.n.prints_number(inv):
            out = dataclasses.replace(out, number=True)
        for path, append in all_writes:
            self.emit([file_write(inv, path, verb="append" if append else "write",
                                  content=out.text if out else None, by="redirect")])
        if all_writes:
            out = None
        for op, cont in conts:
            if op == "|":
                out = self.pipeline([c for c in cont.children if c.is_named], out or Stdin("pipe", computed=True))
            else:
                out = self.run(cont, stdin)
        return out

    def emit(self, actions: list[Action]) -> None:
        self.actions.extend(actions)


def _dropped_words(stmt: Node, body: Node, redirects: list[Node]) -> list[Word]:
    """Words tree-sitter-bash leaves out of the command (`kubectl apply -f - <<EOF` loses the `-`)."""
    if not redirects or stmt.text is None:
        return []
    first = min(r.start_byte for r in redirects)
    gap = stmt.text[body.end_byte - stmt.start_byte:first - stmt.start_byte].decode("utf-8", "replace").split()
    return [Word.of(w) for w in gap if not re.fullmatch(r"[0-9]*[<>&|]+.*", w)]


# An array subscript holding a command substitution, which bash runs when it evaluates the subscript (`test -v
# 'a[$(cmd)]'`, `let 'a[$(cmd)]'`, `printf -v 'a[$(cmd)]'`), though the quotes keep the shell from running it
# where it stands; and ${x@P}, which expands a variable's value as a prompt, substitutions and all.
_RUNS_LATER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\[[^\]]*(\$\(|`)|@P\}")
_EVALUATES_NAMES = frozenset({"test", "[", "let", "printf", "read", "declare", "typeset", "local", "export",
                              "readonly", "unset", "mapfile", "readarray", "shift", "return", "exit"})


# Arithmetic: numbers (`16#ff`, `0x1f`, `10`), what is safe to name (a length `${#v}`, `$#`, `$?`, `$$`, `$!`), a
# positional parameter, a name (and whether it is assigned there: `i=0`, not `i==0`).
_ARITH_NUMBER = re.compile(r"\b(?:[0-9]+#[0-9A-Za-z@_]+|0[xX][0-9a-fA-F]+|[0-9]+)\b")
_ARITH_SPECIALS = re.compile(r"\$\{#[A-Za-z_][A-Za-z0-9_]*(\[[@*]\]|\[[0-9]+\])?\}|\$\{?[#?$!-]\}?")
_ARITH_POSITIONAL = re.compile(r"\$\{?[0-9@*]")
_ARITH_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\s*=(?!=))?")
# `[[ A -eq B ]]` evaluates A and B as arithmetic.
_ARITH_TEST = re.compile(r"\s-(eq|ne|lt|le|gt|ge)\s")
# Variables bash itself keeps as integers.
_BASH_INTEGERS = frozenset({"RANDOM", "SRANDOM", "SECONDS", "LINENO", "BASHPID", "PPID", "UID", "EUID",
                            "EPOCHSECONDS", "HISTCMD"})
_UNSET = object()
# Loop values that are numbers whatever runs: `$(seq 1 5)`, `{1..10}`, `{0..20..5}`.
_COUNTS = re.compile(r"\$\(\s*seq(\s+-?[0-9]+)+\s*\)|\{-?[0-9]+\.\.-?[0-9]+(\.\.-?[0-9]+)?\}|-?[0-9]+")
_SETS_NAMES = frozenset({"read", "mapfile", "readarray", "printf", "getopts"})


# Where a redirection sends stderr into stdout (`2>&1`, `2>/dev/stdout`): the output then holds error messages too.
_STDOUT = frozenset({"1", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"})


def _merges_stderr(redirects: list[Node]) -> bool:
    for r in redirects:
        dest = r.child_by_field_name("destination") if r.type == "file_redirect" else None
        if dest is not None and _txt(dest) in _STDOUT:
            return True
    return False


def _read_names(args: list[Word]) -> list[str]:
    """The variables `read [-r] [-p PROMPT] [-d DELIM] ... NAME...` sets; none when it reads another fd (-u)."""
    names, i = [], 0
    while i < len(args):
        a = str(args[i])
        if a.startswith("-") and len(a) > 1:
            if "u" in a:
                return []
            i += 2 if a[-1] in "adnNpti" else 1
            continue
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", a):
            names.append(a)
        i += 1
    return names


def _runs_later_action(inv: Invocation) -> Action:
    return inv.opaque("evaluated", "bash evaluates an array subscript or a prompt expansion here, running the command "
                      "inside it; run the command plainly instead")


def _runs_code_action(inv: Invocation, name: str) -> Action:
    return inv.opaque("environment", f"setting {name} changes which program runs or what it runs (a loader, a "
                      "pager, a prompt, the search path); run the command without it", variable=name)


_HEREDOC_ESC = re.compile(r"\\([$`\\\n])")


def _heredoc_text(r: Node, start: Node | None) -> str | None:
    """A heredoc's body as written: from the line after its start to its end delimiter's line (None when the
    redirect has no end, e.g. text cut off)."""
    end = next((c for c in r.children if c.type == "heredoc_end"), None)
    if start is None or end is None or r.text is None:
        return None
    src = r.text
    nl = src.find(b"\n", start.end_byte - r.start_byte)
    stop = end.start_byte - r.start_byte
    if nl < 0 or nl + 1 > stop:
        return None
    return src[nl + 1:stop].decode("utf-8", "replace")


def _split_by_newline(node: Node, words: list[Node]) -> bool:
    """Whether a line break that is not a continuation lies between two of a command's words, or inside an
    unquoted word (the grammar glues `<newline>\\rm` into one)."""
    src = node.text or b""
    newline = re.compile(rb"(?<!\\)\n")
    for a, b in zip(words, words[1:]):
        if newline.search(src[a.end_byte - node.start_byte:b.start_byte - node.start_byte]):
            return True
    stack = list(words)
    while stack:
        n = stack.pop()
        if n.type == "word" and n.text is not None and newline.search(n.text):
            return True
        if n.type in ("concatenation", "command_name"):
            stack.extend(n.children)
    return False


def _ends_alone(r: Node) -> bool:
    """Whether a heredoc's end delimiter is alone on its line (tabs before it aside), as bash needs it to be."""
    end = next((c for c in r.children if c.type == "heredoc_end"), None)
    if end is None:
        return True  # no end: bash reads to the end of the text, as the body read here does
    root = r
    while root.parent is not None:
        root = root.parent
    src = root.text or b""
    before = src[:end.start_byte].rsplit(b"\n", 1)[-1]
    return not before.strip(b"\t") and src[end.end_byte:end.end_byte + 1] in (b"", b"\n")


def _mentions_decoder(text: str) -> bool:
    return bool(re.search(r"\b(base64|base32|basenc|xxd|rev|openssl|gunzip|zcat|uudecode|tr)\b", text))


def _output_of(inv: Invocation) -> Stdin | None:
    """What a command prints, when it can be known statically (echo, printf, cat of a heredoc, a decoder)."""
    name = inv.name
    args = inv.args
    up = inv.stdin
    if name == "echo":
        flags = set()
        rest = list(args)
        while rest and re.fullmatch(r"-[neE]+", rest[0]):
            flags |= set(rest.pop(0)[1:])
        if any(a.dynamic for a in rest):
            return Stdin("pipe", computed=True, producer="echo",
                         decoded=any(a.has_substitution for a in rest) and _mentions_decoder(inv.raw))
        text = " ".join(rest)
        if "e" in flags:
            text = decode_ansi_c(text)
        return Stdin("pipe", text=text + ("" if "n" in flags else "\n"), producer="echo")
    if name == "printf":
        rest = [a for a in args]
        if rest and rest[0] == "--":
            rest = rest[1:]
        if not rest or any(a.dynamic for a in rest) or rest[0].startswith("-"):
            return Stdin("pipe", computed=True, producer="printf")
        text = _printf(rest[0], rest[1:])
        return Stdin("pipe", text=text, computed=text is None, producer="printf")
    if name in ("cat", "tee") and (name == "tee" or not [a for a in args if not a.startswith("-")]):
        if up is None:
            return Stdin("pipe", computed=True, producer=name)
        return Stdin("pipe", text=up.text, computed=up.computed, decoded=up.decoded, producer=name)
    files = [a for a in args if not a.startswith("-")]
    if name == "cat" and files and not any(a.dynamic or a == "-" for a in files):
        # The files' content, as `< file` gives it: known to the operator who has them, not to us.
        return Stdin("file", computed=True, producer=" ".join(files), in_pod=inv.where.in_exec)
    if name in DECODERS:
        text = None
        if name in ("base64", "base32") and up is not None and up.text is not None \
                and any(a in ("-d", "--decode", "-D", "-di", "-id") for a in args):
            try:
                blob = "".join(up.text.split())
                if name == "base64":
                    raw = base64.b64decode(blob + "=" * (-len(blob) % 4))
                else:
                    raw = base64.b32decode(blob + "=" * (-len(blob) % 8))
                text = raw.decode("utf-8", "replace")
            except (binascii.Error, ValueError):
                text = None
        return Stdin("pipe", text=text, computed=True, decoded=True, producer=name)
    # A pid lookup keeps its words: `pgrep postgres | xargs kill` kills what the lookup names.
    producer = inv.raw.strip() if name in ("pgrep", "pidof") else name
    return Stdin("pipe", computed=True, decoded=bool(up and up.decoded), producer=producer)

