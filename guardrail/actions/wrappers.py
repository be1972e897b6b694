"""Wrappers: commands that run another command (`sh -c`, `kubectl exec`, `sudo`, `xargs`, `env`, `timeout` ...).

Called by `Normaliser.dispatch` before the tool classifiers. Each wrapper finds the command it runs and hands it
back to the normaliser with the wrapper added to `Where.via`, so `kubectl exec redis-0 -- sh -c 'redis-cli
FLUSHALL'` is classified as the FLUSHALL it is. Wrappers whose payload cannot be seen (eval, `source`, a script
file, `python -c`, a decoded payload piped into a shell) give a `mutating: "unknown"` Action with the reason.
A wrapper returns None when the command is not wrapping anything (then the tool classifier decides).
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any, Callable, Sequence

from guardrail.actions.classifiers import classifier_for
from guardrail.actions.classifiers.base import OptionSpec
from guardrail.actions.classifiers.containers import CONTAINER_EXEC, CONTAINER_RUN
from guardrail.actions.classifiers.files import SSH_OPTIONS, ssh_hidden
from guardrail.actions.classifiers.kubectl import KUBECTL_GLOBAL, container_commands, container_specs, parse_exec
from guardrail.actions.dispatch import Dispatcher
from guardrail.actions.filewrite import file_write
from guardrail.actions.invocation import Invocation, Stdin, Where, clean_path, command_name, runs_code
from guardrail.actions.model import UNKNOWN, Action, Target
from guardrail.actions.words import Word, decode_ansi_c

__all__ = ["WRAPPERS", "SHELLS", "INTERPRETERS"]

Wrapper = Callable[[Invocation, Dispatcher], "list[Action] | None"]
WRAPPERS: dict[str, Wrapper] = {}

SHELLS = ("sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "rbash", "fish", "csh", "tcsh")
INTERPRETERS = ("python", "python2", "python3", "perl", "ruby", "node", "nodejs", "php", "lua", "Rscript",
                "deno", "bun", "pwsh", "powershell", "tclsh", "irb", "jshell", "osascript", "expect", "gdb")
# Shells whose grammar is POSIX sh's: no brace expansion, no `$'...'` or `$"..."` quoting, so `$'\' ; cmd` is a `$`, a quoted
# backslash and then `cmd`, run (bash would read one quoted word). Their scripts are read as bash reads the same
# text with each such `$` and each unquoted `{` of a word escaped, which is what they do.
POSIX_SHELLS = frozenset({"sh", "dash", "ash"})
# Shells with another grammar altogether: what bash's reading of their script says is no evidence.
FOREIGN_SHELLS = frozenset({"fish", "csh", "tcsh"})
MAX_POSIX_REWRITES = 64
_DECODER_WORDS = re.compile(r"\b(base64|base32|basenc|xxd|rev|openssl|gunzip|zcat|uudecode|tr)\b")


def wrapper(*names: str) -> Callable[[Wrapper], Wrapper]:
    def deco(fn: Wrapper) -> Wrapper:
        for n in names:
            WRAPPERS[n] = fn
        return fn
    return deco


def _inner(inv: Invocation, argv: list[Word], label: str, *, pending: bool = False, **where: object) -> Invocation:
    raw = " ".join(shlex.quote(str(a)) if not a.dynamic else str(a) for a in argv)
    return Invocation(argv=list(argv), where=inv.where.inside(label, **where), stdin=inv.stdin, raw=raw,
                      args_pending=pending or inv.args_pending)


# ---- shells and interpreters -----------------------------------------------------------------------------------

def as_posix_sh(script: str) -> str | None:
    """The bash text that means what a POSIX sh does with `script`: every `$'` and `$"` that bash would read as
    a quoted string gets its `$` escaped (dash reads a literal `$` and then an ordinary quote), one at a time from
    the left, since each changes where the later quotes end. None past MAX_POSIX_REWRITES."""
    from guardrail.actions.shell import parse

    data = script.encode("utf-8", "surrogatepass")
    for _ in range(MAX_POSIX_REWRITES):
        first = None
        stack = [parse(data.decode("utf-8", "surrogatepass")).root_node]
        while stack:
            node = stack.pop()
            if node.type in ("ansi_c_string", "translated_string") or (
                    node.type == "$" and node.next_sibling is not None and node.next_sibling.type == "string"):
                if first is None or node.start_byte < first:
                    first = node.start_byte
                continue
            stack.extend(node.children)
        if first is None:
            return _no_brace_expansion(data.decode("utf-8", "surrogatepass"))
        data = data[:first] + b"\\" + data[first:]
    return None


_NOT_WORDS = frozenset({"string", "raw_string", "ansi_c_string", "translated_string", "expansion", "simple_expansion",
                        "heredoc_body", "heredoc_redirect", "comment", "arithmetic_expansion"})


def _no_brace_expansion(script: str) -> str:
    """The script with every unquoted `{` in a word escaped: a POSIX sh does no brace expansion, so `{stop,}` is the
    word `{stop,}` there, not `stop`."""
    from guardrail.actions.shell import parse

    data = script.encode("utf-8", "surrogatepass")
    at: list[int] = []
    stack = [parse(script).root_node]
    while stack:
        node = stack.pop()
        if node.type in _NOT_WORDS:
            continue
        if node.type == "word" and node.text is not None and b"{" in node.text:
            raw, i = node.text, 0
            while i < len(raw):
                if raw[i:i + 1] == b"\\":
                    i += 2
                    continue
                if raw[i:i + 1] == b"{":
                    at.append(node.start_byte + i)
                i += 1
        stack.extend(node.children)
    for pos in sorted(at, reverse=True):
        data = data[:pos] + b"\\" + data[pos:]
    return data.decode("utf-8", "surrogatepass")


def _script_for(inv: Invocation, script: str) -> str | Action:
    """The script as bash text that means what inv's shell does with it, or an opaque action."""
    if inv.name in FOREIGN_SHELLS:
        return inv.opaque("foreign-shell", f"{inv.name} has its own grammar, which the guard does not read; run the "
                          "commands in bash or sh", script=script)
    if inv.name in POSIX_SHELLS:
        posix = as_posix_sh(script)
        if posix is None:
            return inv.opaque("computed-script", f"too many $'...' strings in a {inv.name} script to read")
        return posix
    return script


@wrapper(*SHELLS)
def shell(inv: Invocation, n: Dispatcher) -> list[Action] | None:
    args = inv.args
    has_c = False
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--" or a == "-":
            i += 1
            break
        if len(a) > 1 and a[0] in "-+" and not a.dynamic:
            if a.startswith("--"):
                i += 2 if a in ("--rcfile", "--init-file") else 1
                continue
            letters = a[1:]
            has_c = has_c or (a[0] == "-" and "c" in letters)
            i += 2 if ("o" in letters or "O" in letters) else 1
            continue
        break
    rest = args[i:]
    label = f"{inv.name} -c" if has_c else inv.name
    if has_c:
        if not rest:
            return [inv.opaque("syntax-error", f"{inv.name} -c without a command string")]
        script = rest[0]
        if script.has_substitution:
            decoded = bool(_DECODER_WORDS.search(script))
            return [inv.opaque("decoded-payload" if decoded else "computed-script",
                               ("a decoded payload is run by a shell" if decoded else
                                f"the {inv.name} -c script is computed at run time ($(...))")
                               + "; run the plain command instead", script=str(script))]
        if script.dynamic and _uses_local_variable(script, n):
            return [inv.opaque("computed-script", f"the {inv.name} -c script splices a variable set in the same "
                               "command; run the plain command instead", script=str(script))]
        text = _script_for(inv, str(script))
        if isinstance(text, Action):
            return [text]
        return n.script(text, inv.where.inside(label), inv.stdin)
    if rest:
        target = command_name(rest[0])
        if not rest[0].dynamic and target.endswith(".sh") and classifier_for(target) is not None:
            return n.dispatch(_inner(inv, rest, inv.name))
        return [inv.opaque("script-file", f"{inv.name} runs the script file {str(rest[0])!r}, whose content is "
                           "not visible to the guard; run its commands directly", script_file=str(rest[0]))]
    return _stdin_script(inv, n, label)


def _stdin_script(inv: Invocation, n: Dispatcher, label: str) -> list[Action]:
    st = inv.stdin
    if st is None:
        return [inv.opaque("interactive", f"an interactive {inv.name}: the commands typed into it are not visible")]
    if st.decoded:
        return [inv.opaque("decoded-payload", f"a decoded payload ({st.producer}) is piped into {inv.name}; "
                           "run the plain command instead",
                           **({"decoded_script": st.text} if st.text is not None else {}))]
    if st.text is None:
        return [inv.opaque("stdin-script", f"{inv.name} runs a script computed at run time "
                           f"({st.producer or st.source}); run the plain command instead")]
    text = _script_for(inv, st.text)
    if isinstance(text, Action):
        return [text]
    return n.script(text, inv.where.inside(f"{label} stdin"))


def _uses_local_variable(script: str, n: Dispatcher) -> bool:
    names = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", script))
    return bool(names & set(n.session.variables))


@wrapper(*INTERPRETERS)
def interpreter(inv: Invocation, n: Dispatcher) -> list[Action] | None:
    args = [str(a) for a in inv.args]
    if inv.name.startswith("python") and len(args) >= 2 and args[0] == "-m" and args[1] == "json.tool":
        return [inv.action("python", "json.tool", mutating=False)]
    if args and args[0] in ("--version", "-V", "-v", "--help", "-h") and len(args) == 1:
        return [inv.action(inv.name, "version", mutating=False)]
    flag = next((a for a in args if a in ("-c", "-e", "-E", "--eval", "-p", "--print", "-r")), None)
    if flag:
        return [inv.opaque(f"{inv.name} {flag}", f"inline {inv.name} code ({flag}) can do anything; run the plain "
                           "command instead", interpreter=inv.name)]
    files = [a for a in args if not a.startswith("-")]
    if files:
        return [inv.opaque("script-file", f"{inv.name} runs {files[0]!r}, whose content is not visible to the guard",
                           interpreter=inv.name, script_file=files[0])]
    st = inv.stdin
    return [inv.opaque("stdin-script", f"{inv.name} runs code from stdin", interpreter=inv.name,
                       **({"script": st.text} if st is not None and st.text is not None else {}))]


@wrapper("eval")
def eval_(inv: Invocation, n: Dispatcher) -> list[Action]:
    return [inv.opaque("eval", "eval runs text assembled at run time; run the plain command instead",
                       script=" ".join(inv.args))]


@wrapper("source", ".")
def source(inv: Invocation, n: Dispatcher) -> list[Action]:
    f = str(inv.args[0]) if inv.args else ""
    return [inv.opaque("source", f"`{inv.name} {f}` runs a file's commands in this shell; they are not visible",
                       script_file=f)]


@wrapper("exec")
def exec_(inv: Invocation, n: Dispatcher) -> list[Action] | None:
    p = OptionSpec.of(["-a"], stop_at_positional=True).parse(inv.args)
    if not p.operands:
        return []  # `exec 3>file`: only redirections, which the walker already saw
    return n.dispatch(_inner(inv, p.operands, "exec"))


@wrapper("busybox")
def busybox(inv: Invocation, n: Dispatcher) -> list[Action] | None:
    if not inv.args:
        return [inv.action("busybox", "help", mutating=False)]
    return n.dispatch(_inner(inv, inv.args, "busybox"))


# ---- prefix wrappers ---------------------------------------------------------------------------------------------

def _prefix(label: str, spec: OptionSpec, *, skip_assignments: bool = False, skip_first: int = 0,
            empty: Callable[[Invocation], list[Action]] | None = None) -> Wrapper:
    def unwrap(inv: Invocation, n: Dispatcher) -> list[Action] | None:
        p = spec.parse(inv.args)
        rest = p.operands
        if skip_assignments:
            while rest and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", rest[0]):
                rest.pop(0)
        rest = rest[skip_first:]
        if not rest:
            return empty(inv) if empty else [inv.action("shell", inv.name, mutating=False)]
        return n.dispatch(_inner(inv, rest, label))
    return unwrap


def _interactive(inv: Invocation) -> list[Action]:
    return [inv.opaque("interactive", f"{inv.name} without a command opens a shell; its commands are not visible")]


WRAPPERS["nohup"] = _prefix("nohup", OptionSpec.of(stop_at_positional=True))
WRAPPERS["time"] = _prefix("time", OptionSpec.of(stop_at_positional=True))
WRAPPERS["setsid"] = _prefix("setsid", OptionSpec.of(stop_at_positional=True))
WRAPPERS["unbuffer"] = _prefix("unbuffer", OptionSpec.of(stop_at_positional=True))
WRAPPERS["stdbuf"] = _prefix("stdbuf", OptionSpec.of(["-i", "-o", "-e"], stop_at_positional=True))
WRAPPERS["nice"] = _prefix("nice", OptionSpec.of(["-n", "--adjustment"], stop_at_positional=True))
WRAPPERS["ionice"] = _prefix("ionice", OptionSpec.of(["-c", "-n", "-p", "-P", "-u"], stop_at_positional=True))
WRAPPERS["chroot"] = _prefix("chroot", OptionSpec.of(["--userspec", "--groups"], stop_at_positional=True),
                             skip_first=1, empty=_interactive)
WRAPPERS["timeout"] = _prefix("timeout", OptionSpec.of(["-s", "--signal", "-k", "--kill-after"],
                                                       stop_at_positional=True), skip_first=1)
WRAPPERS["sudo"] = _prefix("sudo", OptionSpec.of(["-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T",
                                                  "--user", "--group", "--host", "--prompt"],
                                                 stop_at_positional=True),
                           skip_assignments=True, empty=_interactive)
WRAPPERS["doas"] = _prefix("doas", OptionSpec.of(["-u", "-C"], stop_at_positional=True), empty=_interactive)
WRAPPERS["runuser"] = _prefix("runuser", OptionSpec.of(["-u", "-g", "-G", "--user", "--group"],
                                                       stop_at_positional=True), empty=_interactive)


@wrapper("command", "builtin")
def command_(inv: Invocation, n: Dispatcher) -> list[Action] | None:
    p = OptionSpec.of(stop_at_positional=True).parse(inv.args)
    if p.has("-v", "-V"):
        return [inv.action("shell", "command -v", mutating=False)]
    if not p.operands:
        return []
    return n.dispatch(_inner(inv, p.operands, inv.name))


@wrapper("env")
def env(inv: Invocation, n: Dispatcher) -> list[Action] | None:
    p = OptionSpec.of(["-u", "--unset", "-C", "--chdir", "-S", "--split-string"],
                      aliases={"--unset": "-u", "--chdir": "-C", "--split-string": "-S"},
                      stop_at_positional=True).parse(inv.args)
    split = p.get("-S")
    if split is not None:
        tail = " ".join(shlex.quote(str(a)) for a in p.positionals)
        return n.script(f"{split} {tail}".strip(), inv.where.inside("env -S"), inv.stdin)
    rest = p.operands
    while rest and (m := re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=", rest[0])):
        if runs_code(m.group(1), str(rest[0])[m.end():]):
            return [inv.opaque("environment", f"env sets {m.group(1)}, which changes which program runs or what it "
                               "runs; run the command without it", variable=m.group(1))]
        rest.pop(0)
    if not rest:
        return [inv.action("shell", "env", mutating=False)]
    return n.dispatch(_inner(inv, rest, "env"))


@wrapper("su")
def su(inv: Invocation, n: Dispatcher) -> list[Action] | None:
    p = OptionSpec.of(["-c", "--command", "-s", "--shell", "-g", "-G"], aliases={"--command": "-c"}).parse(inv.args)
    cmd = p.get("-c")
    if cmd is None:
        return _interactive(inv)
    if isinstance(cmd, Word) and cmd.has_substitution:
        return [inv.opaque("computed-script", "su -c runs a command computed at run time")]
    return n.script(str(cmd), inv.where.inside("su -c"), inv.stdin)


@wrapper("watch")
def watch(inv: Invocation, n: Dispatcher) -> list[Action] | None:
    p = OptionSpec.of(["-n", "--interval", "-q", "--equexit"], aliases={"--interval": "-n", "--exec": "-x"},
                      stop_at_positional=True).parse(inv.args)
    rest = list(p.positionals) + (p.after_dashdash or [])
    if not rest:
        return [inv.action("watch", "watch", mutating=False)]
    if p.has("-x"):
        return n.dispatch(_inner(inv, rest, "watch"))
    # watch hands its words, joined by spaces, to `sh -c`: the words are shell text again.
    if any(a.has_substitution for a in rest):
        return [inv.opaque("computed-script", "watch runs a command computed at run time")]
    return n.script(" ".join(str(a) for a in rest), inv.where.inside("watch"))


@wrapper("xargs")
def xargs(inv: Invocation, n: Dispatcher) -> list[Action] | None:
    spec = OptionSpec.of(["-I", "-n", "-L", "-l", "-P", "-s", "-d", "-E", "-e", "-a", "--max-args", "--max-procs",
                          "--delimiter", "--arg-file", "--replace", "--max-lines", "--max-chars", "--eof"],
                         aliases={"--max-args": "-n", "--max-procs": "-P", "--delimiter": "-d", "--arg-file": "-a",
                                  "--replace": "-I", "--max-lines": "-L", "--max-chars": "-s", "--eof": "-E"},
                         stop_at_positional=True)
    args = [Word.of("-I" + a[2:] if a.startswith("-i") and a != "-i" else a, dynamic=a.dynamic) for a in inv.args]
    p = spec.parse(args)
    rest = list(p.positionals) + (p.after_dashdash or []) or [Word.of("echo")]
    repl = p.get("-I") or ("{}" if "-i" in p.flags else None)
    st = inv.stdin
    if p.get("-a") is not None or st is None or st.text is None:
        return n.dispatch(Invocation(argv=rest, where=inv.where.inside("xargs"), stdin=None,
                                     raw=" ".join(str(a) for a in rest), args_pending=True,
                                     pending_from=st.producer if st is not None and p.get("-a") is None else ""))
    # The words xargs reads are known: build the commands it will run.
    out: list[Action] = []
    if repl is not None:
        for line in [ln for ln in st.text.splitlines() if ln.strip()] or [""]:
            argv = [Word.of(str(a).replace(str(repl), line), dynamic=a.dynamic) for a in rest]
            out += n.dispatch(Invocation(argv=argv, where=inv.where.inside("xargs"), raw=" ".join(argv)))
        return out
    argv = rest + [Word.of(e) for e in _xargs_items(st.text, p)]
    return n.dispatch(Invocation(argv=argv, where=inv.where.inside("xargs"),
                                 raw=" ".join(shlex.quote(str(a)) for a in argv)))


def _xargs_items(text: str, p: Any) -> list[str]:
    """The items xargs reads from `text`: with -0 / --null separated by NUL only, with -d X by X only (both take
    quotes and backslashes literally, and a newline is part of an item), otherwise words with xargs's quoting."""
    delim = "\0" if p.has("-0", "--null") else p.get("-d")
    if delim is not None:
        d = decode_ansi_c(str(delim)) if str(delim).startswith("\\") else str(delim)
        items = text.split(d[:1] or "\n")
        return items[:-1] if items and items[-1] == "" else items
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


@wrapper("trap")
def trap(inv: Invocation, n: Dispatcher) -> list[Action] | None:
    args = list(inv.args)
    if args and str(args[0]) == "--":  # `trap -- 'cmd' EXIT`: the end of options, then the handler
        args = args[1:]
    if not args or str(args[0]) in ("-", "-l", "-p") or len(args) == 1:
        return [inv.action("shell", "trap", mutating=False)]
    handler = args[0]
    if handler.dynamic:
        return [inv.opaque("computed-script", "trap runs a handler computed at run time")]
    return n.script(str(handler), inv.where.inside("trap"))


@wrapper("ssh")
def ssh(inv: Invocation, n: Dispatcher) -> list[Action] | None:
    p = SSH_OPTIONS.parse(inv.args)
    hidden = ssh_hidden(p)
    if hidden:
        return [inv.opaque("ssh", f"ssh {hidden}; use ssh with plain options, or run the command directly")]
    log = p.get("-E")  # -E LOGFILE: ssh appends its log there
    pre = [file_write(inv, str(log), verb="append", by="ssh -E")] if log is not None else []
    if not p.operands:
        return pre + _interactive(inv)
    host, cmd = p.operands[0], p.operands[1:]
    if not cmd and "-N" in p.flags:
        # -N: no remote command and no shell; the connection only carries its forwards (a tunnel to a database).
        forwards = {o: [str(v) for v in p.all(o)] for o in ("-L", "-R", "-D") if p.all(o)}
        return pre + [inv.action("ssh", "tunnel", target=Target(kind="host", name=str(host)), mutating=False,
                                 details={"forwards": forwards})]
    if not cmd:
        return pre + _interactive(inv)
    return pre + n.script(" ".join(str(c) for c in cmd), inv.where.inside(f"ssh {host}"), inv.stdin)


@wrapper("alias")
def alias(inv: Invocation, n: Dispatcher) -> list[Action] | None:
    for a in inv.args:
        name, eq, value = str(a).partition("=")
        if eq:
            n.session.aliases[name] = value
    return [inv.action("shell", "alias", mutating=False, details={"aliases": [str(a) for a in inv.args]})]


@wrapper("unalias")
def unalias(inv: Invocation, n: Dispatcher) -> list[Action] | None:
    for a in inv.args:
        n.session.aliases.pop(str(a), None)
    if "-a" in inv.args:
        n.session.aliases.clear()
    return [inv.action("shell", "unalias", mutating=False)]


@wrapper("find")
def find(inv: Invocation, n: Dispatcher) -> list[Action] | None:
    args = inv.args
    out: list[Action] = [inv.action("find", "find", mutating=False)]
    # The starting points: the words before the first test, option or action (`.` when none is given). What an
    # -exec runs or -delete removes is any file under them.
    # find's own options come first: -H, -L, -P, -D DEBUGOPTS, -O3, and `--` before the starting points.
    k = 0
    while k < len(args) and (str(args[k]) in ("-H", "-L", "-P", "--") or str(args[k]).startswith("-O")
                             or str(args[k]) == "-D"):
        k += 2 if str(args[k]) == "-D" else 1
    starts = []
    for w in args[k:]:
        if str(w).startswith(("-", "(", ")", "!")):
            break
        starts.append(str(w))
    if "-files0-from" in (str(a) for a in args):
        # The starting points are read from a file as find runs: what -delete or -exec reach is not known.
        return [inv.action("find", "find", mutating=UNKNOWN,
                           opaque_reason="find -files0-from reads its starting points from a file as it runs")]
    found = [p.rstrip("/") + "/**" for p in starts or ["."]]
    i = k + len(starts)
    while i < len(args):
        a = str(args[i])
        if a in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(args) and str(args[j]) not in (";", "+"):
                j += 1
            if j > i + 1:
                command = list(args[i + 1:j])
                # -execdir runs in each file's directory with {} as ./NAME: the same files, under the same starts.
                if any("{}" in str(w) for w in command):
                    # `-exec shred {} +` on the files found: the command as run on each starting point's files.
                    for f in found:
                        argv = [Word.of(str(w).replace("{}", f), dynamic=w.dynamic) for w in command]
                        out += n.dispatch(_inner(inv, argv, f"find {a}", pending=True))
                else:
                    out += n.dispatch(_inner(inv, command, f"find {a}", pending=True))
            i = j + 1
            continue
        if a == "-delete":
            out += [file_write(inv, f, verb="delete", by="find -delete") for f in found]
        elif a in ("-fprint", "-fprint0", "-fprintf", "-fls") and i + 1 < len(args):
            out.append(file_write(inv, str(args[i + 1]), by=f"find {a}"))
        i += 1
    return out


def _own_actions(inv: Invocation, tool: str) -> list[Action]:
    """What the wrapper command itself does (`kubectl run` creates a pod, `docker run` a container), as its own
    classifier reads it, beside what it runs."""
    classifier = classifier_for(tool)
    return classifier.classify(inv) if classifier is not None else []


# ---- kubectl exec --------------------------------------------------------------------------------------------------

@wrapper("kubectl", "oc")
def kubectl_exec(inv: Invocation, n: Dispatcher) -> list[Action] | None:
    g = KUBECTL_GLOBAL.parse(inv.args)
    words = [str(p) for p in g.positionals]
    # `kubectl run tmp --image=redis -- redis-cli -h redis-queue FLUSHALL`: a new pod, plus what it runs; so too a
    # job, a cronjob or a deployment created with the command after `--`.
    verb = words[:1] if words[:1] in (["run"], ["debug"]) else words[:2] if words[:2] in (
        ["create", "job"], ["create", "cronjob"], ["create", "deployment"]) else None
    overrides = g.get("--overrides") if verb == ["run"] else None
    if overrides is not None:
        return _run_overrides(inv, n, g, words, overrides)
    if verb and g.after_dashdash:
        own_actions = _own_actions(inv, "kubectl")
        pod = words[len(verb)] if len(words) > len(verb) else ""
        return own_actions + _in_new_pod(inv, n, g, "kubectl " + " ".join(verb), pod, g.after_dashdash, inv.stdin)
    if verb and not g.has("-h", "--help") and (verb == ["debug"] or g.get("--image") is not None):
        # A new pod, job or deployment (or a debug container) with no command: it runs the image's own entrypoint,
        # or an interactive shell, neither of which the guard sees.
        own_actions = _own_actions(inv, "kubectl")
        what = "kubectl " + " ".join(verb)
        return own_actions + [inv.opaque("image-command", f"{what} without a command runs the image's own "
                                         "entrypoint (or an interactive shell), which the guard cannot see; give the "
                                         f"command after -- ({what} NAME --image=IMAGE -- CMD ...)", tool="kubectl")]
    if words[:1] in (["apply"], ["create"], ["replace"]) and inv.stdin is not None:
        return _manifest_commands(inv, n, g)
    if not g.positionals or g.positionals[0] != "exec":
        return None
    ex = parse_exec(inv.args)
    if ex is None:
        return None
    pod, namespace, container, inner = ex
    ns = namespace or inv.where.namespace
    own = inv.action("kubectl", "exec", target=Target(kind="pod", name=pod, namespace=namespace),
                     mutating=False, details={"namespace": namespace, "container": container,
                                              "command": [str(a) for a in inner]})
    if not inner:
        return [own, inv.opaque("interactive", "kubectl exec without a command")]
    where = inv.where.inside("kubectl exec", pod=pod, namespace=ns, container=container)
    inner_inv = Invocation(argv=list(inner), where=where, stdin=inv.stdin,
                           raw=" ".join(shlex.quote(str(a)) if not a.dynamic else str(a) for a in inner))
    return [own] + n.dispatch(inner_inv)


def _manifest_commands(inv: Invocation, n: Dispatcher, g: Any) -> list[Action] | None:
    """`kubectl apply -f - <<EOF` with a Job, Pod or workload whose containers have a command: what they run is
    judged as a command run in that pod (`redis-cli FLUSHALL` in a Job is a FLUSHALL)."""
    classifier = classifier_for("kubectl")
    if classifier is None:
        return None
    own = classifier.classify(inv)
    out = list(own)
    for a in own:
        for pod, argv in a.details.pop("container_commands", []):
            out += _in_new_pod(inv, n, g, "kubectl " + a.verb, pod, argv)
    return out


def _run_overrides(inv: Invocation, n: Dispatcher, g: Any, words: list[str], overrides: Any) -> list[Action]:
    """`kubectl run NAME --overrides='{"spec": {"containers": [{"command": [...], "args": [...]}]}}'`: the pod's
    containers run the overrides' command and args (the words after `--` only where the overrides set none).
    Overrides the guard cannot read (not JSON, or built at run time) are opaque."""
    own = _own_actions(inv, "kubectl")
    if getattr(overrides, "dynamic", False):
        return own + [inv.opaque("overrides", "kubectl run --overrides built at run time: its pod spec is not visible")]
    try:
        doc = json.loads(str(overrides))
    except ValueError:
        return own + [inv.opaque("overrides", "kubectl run --overrides that is not JSON: its pod spec is not visible")]
    if not isinstance(doc, dict) or str(g.get("--override-type") or "merge") not in ("merge", "strategic"):
        # A JSON patch (a list of operations) edits paths of a spec the guard does not have.
        return own + [inv.opaque("overrides", "kubectl run --overrides as a JSON patch: the pod spec it makes is "
                                              "not visible; give the command after -- instead")]
    image_cmd = [str(a) for a in g.after_dashdash or []][:1]  # what runs when the overrides give args only
    argvs = [argv for c in container_specs(doc) for argv in container_commands(c, image_cmd)]
    if not argvs and g.after_dashdash:
        argvs.append([str(a) for a in g.after_dashdash])
    pod = words[1] if len(words) > 1 else ""
    return own + [a for argv in argvs for a in _in_new_pod(inv, n, g, "kubectl run", pod, argv, inv.stdin)]


def _in_new_pod(inv: Invocation, n: Dispatcher, g: Any, label: str, pod: str, argv: Sequence[str],
                stdin: Stdin | None = None) -> list[Action]:
    """What a pod that this kubectl command creates runs (`kubectl run ... -- CMD`, a Job's container command),
    judged as a command run in that pod, in the command's namespace."""
    ns = g.get("-n")
    where = inv.where.inside(label, pod=pod, namespace=str(ns) if ns is not None else inv.where.namespace)
    words = [a if isinstance(a, Word) else Word.of(a) for a in argv]
    return n.dispatch(Invocation(argv=words, where=where, stdin=stdin, raw=shlex.join(str(a) for a in argv)))


@wrapper("docker", "podman", "crictl", "nerdctl")
def container_exec(inv: Invocation, n: Dispatcher) -> list[Action] | None:
    args = list(inv.args)
    if args[:1] == ["container"] and inv.name != "crictl":  # `docker container run|exec ...`: the same commands
        args = args[1:]
    if args and args[0] in ("run", "create") and inv.name != "crictl":
        return _container_run(inv, n, args[1:])
    if args and args[0] in ("run", "runp", "create") and inv.name == "crictl":
        return [inv.opaque("crictl", f"crictl {args[0]} runs what its config files hold, which the guard does not "
                           "read; run the command in the container with crictl exec instead")]
    if not args or args[0] != "exec":
        return None
    p = CONTAINER_EXEC.parse(args[1:])
    if not p.operands:
        return None
    container, inner = str(p.operands[0]), list(p.operands[1:])
    own = inv.action(inv.name, "exec", target=Target(kind="container", name=container), mutating=False,
                     details={"command": [str(a) for a in inner]})
    if not inner:
        return [own, inv.opaque("interactive", f"{inv.name} exec without a command")]
    where = inv.where.inside(f"{inv.name} exec", pod=container)
    inner_inv = Invocation(argv=inner, where=where, stdin=inv.stdin,
                           raw=" ".join(shlex.quote(str(a)) if not a.dynamic else str(a) for a in inner))
    return [own] + n.dispatch(inner_inv)



def _container_run(inv: Invocation, n: Dispatcher, args: list[Word]) -> list[Action]:
    """`docker run [OPTIONS] IMAGE [CMD...]` (podman, nerdctl; and `create`, which runs it when started): the
    container's command judged as a command run in a container, as `kubectl run ... -- CMD` is. Host directories
    mounted into it (`-v /var/lib/postgresql:/x`, `--mount type=bind,...`) are those directories: a file the
    command writes under the mount point is the host's file. With no command the image's own entrypoint runs,
    which the guard cannot see."""
    own = _own_actions(inv, inv.name)
    p = CONTAINER_RUN.parse(args)
    if not p.operands:
        return own
    image, command = p.operands[0], list(p.operands[1:])
    entrypoint = p.get("--entrypoint")
    if entrypoint is not None and str(entrypoint):
        command = [entrypoint if isinstance(entrypoint, Word) else Word.of(entrypoint)] + command
    if not command:
        return own + [inv.opaque("image-command", f"{inv.name} run {image} without a command runs the image's own "
                                 "entrypoint, which the guard cannot see; give the command after the image "
                                 f"({inv.name} run IMAGE CMD ...)", image=str(image))]
    where = inv.where.inside(f"{inv.name} run", pod=str(p.get("--name") or image))
    out = list(own)
    health = p.get("--health-cmd")
    if health is not None:
        out += n.script(str(health), where.inside("--health-cmd"))
    inner = n.dispatch(Invocation(argv=command, where=where, stdin=inv.stdin,
                                  raw=" ".join(shlex.quote(str(a)) if not a.dynamic else str(a) for a in command)))
    mounts = _bind_mounts(p)
    return out + [_on_host(a, mounts) for a in inner] if mounts else out + inner


def _bind_mounts(p: Any) -> list[tuple[str, str]]:
    """(mount point in the container, host directory) of every bind mount, the longest mount point first."""
    out = []
    for v in p.all("-v"):
        parts = str(v).split(":")
        if len(parts) >= 2 and parts[0].startswith(("/", ".", "~")):
            out.append((parts[1], parts[0]))
    for m in p.all("--mount"):
        fields = dict(f.partition("=")[::2] for f in str(m).split(","))
        src = fields.get("source") or fields.get("src") or ""
        dst = fields.get("target") or fields.get("destination") or fields.get("dst") or ""
        if fields.get("type", "volume") == "bind" and src and dst:
            out.append((dst, src))
    return sorted(((clean_path(d).rstrip("/") or "/", s) for d, s in out), key=lambda m: -len(m[0]))


def _on_host(a: Action, mounts: list[tuple[str, str]]) -> Action:
    """A file action inside a container, as the host file it is when its path is under a bind mount."""
    path = a.details.get("path") if a.tool == "file" else None
    if not isinstance(path, str):
        return a
    inside = clean_path(path)
    for dst, src in mounts:
        if inside == dst or inside.startswith(dst.rstrip("/") + "/"):
            host = src.rstrip("/") + inside[len(dst.rstrip("/")):] if dst != "/" else src.rstrip("/") + inside
            d = {k: v for k, v in a.details.items() if k not in ("path", "by", "content", "host_change", "pod")}
            inv = Invocation(argv=[Word.of(a.tool)], where=Where(via=tuple(a.via)), raw=a.raw)
            return file_write(inv, host or "/", verb=a.verb, content=a.details.get("content"),
                              by=str(a.details.get("by", "")), in_container=path, **d)
    return a
