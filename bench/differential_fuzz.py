"""Differential-execution fuzzer of the guard (issue #25, item 5): what the guard allows, run in a real bash, must
not run anything the guard denies.

Random shell text is built from a small grammar: dangerous and harmless commands (FLUSHALL, DROP TABLE, rm -rf of a
data directory, kubectl delete, scale to zero, ... and reads) wrapped in the bash constructs that hide a command
(quotes, escapes, `$()`, backticks, variables, eval, `sh -c`, functions, aliases, arrays, brace expansion, here-docs,
here-strings, command/exec/env/xargs/timeout/nohup wrappers, line continuations, `;`/`&&`/`||`/pipes). Each input is
decided by `Guard.before` in enforce mode, built as `guardrail check` builds it (the embedded engine, the shipped
policy, the example production context). Every input the guard lets run is executed by `bash -c` in a sandbox whose
tools are logging stubs: each stub appends its argv, and the stdin it would read (bounded), as one JSON line to a
log and exits 0. Then each recorded invocation is asked of the guard alone, as the shell daemon asks it of a shim's
call (`command_text`: the argv quoted, its stdin as a heredoc); a denial there is a **bypass**: the guard allowed
text that ran something it denies. A deny the fuzzer cannot execute, and an opaque action the guard denies, are
fine: only allowed inputs run.

The sandbox, when the machine allows it (root, or unprivileged namespaces): a private mount, network and PID
namespace in which every real binary of a stubbed tool (`/usr/bin/rm`, `/usr/bin/psql`, ...) is bind-mounted over
by its stub, so absolute paths and `command -p` reach the stub too, and bash runs as `nobody` (when root) in a
temporary directory with HOME there, a PATH of only the stubs and the coreutils shell plumbing needs, an empty
environment and a `timeout`; every file system but that directory is read-only there. Without namespaces ("path" sandbox) only PATH lookups reach the stubs, so the
generator leaves out absolute paths and `command -p` (they would run the real binary).

Called by tests/guardrail/test_differential_fuzz.py (a bounded, seeded sample) and run alone for a long sample:

    python bench/differential_fuzz.py [--count 100000] [--seed 0] [--jobs 2] [--out bench/results/differential_fuzz.json]

Prints a table (inputs, allowed, executed, bypasses, by construct) and writes the JSON (figures and every bypass
with its input and the recorded argv). Exit 1 when a bypass was found, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONTEXT = ROOT / "examples" / "ctx.yaml"
SHIM = ROOT / "guardrail" / "adapters" / "shell" / "shim.py"

# The tools whose every invocation is recorded (and, in the namespace sandbox, whose real binaries are covered).
STUB_TOOLS = ("kubectl", "helm", "psql", "mysql", "mariadb", "redis-cli", "curl", "rm", "mv", "cp", "dd",
              "truncate", "chmod", "chown", "sed", "tee", "systemctl", "kill", "pkill", "docker", "restart-svc.sh",
              "reconfigure-infra.sh", "ln", "install", "shred", "find")
# What shell plumbing needs (real binaries, linked into the sandbox's PATH).
PLUMBING = ("bash", "sh", "cat", "echo", "printf", "true", "false", "head", "tail", "tr", "base64", "xargs",
            "timeout", "env", "nohup", "sleep", "ls", "grep", "wc", "cut", "mkdir", "touch", "rev", "sort", "nice",
            "setsid", "stdbuf")
STDIN_LIMIT = 64 * 1024
RUN_TIMEOUT_S = 10
GUARD_REUSE = 500  # decisions per Guard: an unjournalled Guard keeps its records in memory

# The stub every recorded tool runs as: standard library only, started with -I (no site, no environment).
STUB = r'''
import json, os, sys
sys.path.insert(0, "@STUBDIR@")
tool, args = os.path.basename(sys.argv[0]), sys.argv[1:]
try:
    from _shim import _file_from_stdin, reads_stdin
    reads = reads_stdin(tool, args)
    # psql runs every -c and -f in order: `-c 'SELECT 1' -f -` reads stdin too (the shim says no and sends no
    # payload; the guard then denies it as opaque, which fails closed).
    reads = reads or (tool == "psql" and not os.isatty(0) and _file_from_stdin(args, ("-f",), ("--file",)))
except Exception:
    reads = False
if not reads and tool == "redis-cli":
    # redis-cli with no command words reads its commands from a stdin that is not a terminal.
    VALUED = {"-h", "-p", "-a", "-n", "-u", "-s", "-r", "-i", "--user", "--pass", "--tls-cert", "--cacert"}
    i, words = 0, []
    while i < len(args):
        a = args[i]
        if a in VALUED:
            i += 2
            continue
        if not a.startswith("-"):
            words.append(a)
        i += 1
    try:
        reads = not words and not os.isatty(0)
    except OSError:
        reads = False
rec = {"tool": tool, "args": args}
if reads:
    try:
        data = sys.stdin.buffer.read(@LIMIT@ + 1)
    except OSError:
        data = b""
    rec["stdin"] = data[:@LIMIT@].decode("utf-8", "replace")
    rec["stdin_cut"] = len(data) > @LIMIT@
with open("@LOG@", "a", encoding="utf-8") as f:
    f.write(json.dumps(rec) + "\n")
'''

# -- the grammar -------------------------------------------------------------------------------------------------

# (argv, stdin or None): commands the example context's policy denies, and commands it allows.
DANGEROUS: list[tuple[list[str], str | None]] = [
    (["redis-cli", "FLUSHALL"], None),
    (["redis-cli", "FLUSHDB"], None),
    (["redis-cli", "SHUTDOWN", "NOSAVE"], None),
    (["redis-cli", "CONFIG", "SET", "appendonly", "no"], None),
    (["psql", "-c", "DROP TABLE users"], None),
    (["psql", "-c", "TRUNCATE orders"], None),
    (["psql", "-c", "ALTER SYSTEM SET fsync = off"], None),
    (["psql"], "DROP TABLE users;\n"),
    (["mysql", "-e", "DROP DATABASE app"], None),
    (["mariadb", "-e", "DELETE FROM users"], None),
    (["mysql"], "DROP TABLE t;\n"),
    (["redis-cli"], "FLUSHALL\n"),
    (["rm", "-rf", "/var/lib/postgresql/data"], None),
    (["rm", "-rf", "/var/lib/mysql"], None),
    (["rm", "-r", "-f", "/var/lib/redis"], None),
    (["kubectl", "delete", "deployment", "api", "-n", "prod"], None),
    (["kubectl", "delete", "namespace", "prod"], None),
    (["kubectl", "scale", "deployment", "api", "--replicas=0", "-n", "prod"], None),
    (["kubectl", "scale", "deployment", "api", "--replicas", "0"], None),
    (["helm", "uninstall", "api"], None),
    (["systemctl", "stop", "postgresql"], None),
    (["kill", "-9", "1"], None),
    (["pkill", "postgres"], None),
    (["docker", "rm", "-f", "db"], None),
    (["chmod", "000", "/var/lib/postgresql/data"], None),
    (["dd", "if=/dev/zero", "of=/dev/sda"], None),
    (["truncate", "-s", "0", "/var/lib/postgresql/data/PG_VERSION"], None),
    (["mv", "/var/lib/mysql", "/tmp/gone"], None),
    (["sed", "-i", "s/a/b/", "/etc/hosts"], None),
    (["cp", "/dev/null", "/etc/hosts"], None),
    (["redis-cli", "flushall"], None),
    (["redis-cli", "-n", "0", "FlushDB", "ASYNC"], None),
    (["psql", "-c", "SELECT 1", "-f", "-"], "DROP TABLE users;\n"),
    (["psql", "-f", "/dev/stdin"], "TRUNCATE orders;\n"),
    (["psql", "-c", "/* a /* b */ */ DROP TABLE users"], None),
    (["mysql", "-e", "SET STATEMENT max_statement_time=1 FOR DELETE FROM users"], None),
    (["rm", "-rf", "/tmp/../var/lib/postgresql/data"], None),
    (["rm", "-rf", "/var/lib/postgresql//data/"], None),
    (["rm", "-rf", "/var/lib/p*ostgresql/data"], None),
    (["rm", "--recursive", "--force", "/var/lib/mysql"], None),
    (["kubectl", "delete", "deploy/api", "-n", "prod"], None),
    (["kubectl", "scale", "--replicas=00", "deployment/api"], None),
    (["kubectl", "-n", "prod", "delete", "pods", "--all"], None),
    (["restart-svc.sh"], '{"db": {"pool_size": 0}}\n'),
    (["sed", "-n", "w /etc/hosts", "/dev/null"], None),
    (["tee", "/etc/hosts"], "127.0.0.1 db\n"),
]
HARMLESS: list[tuple[list[str], str | None]] = [
    (["redis-cli", "GET", "k"], None),
    (["redis-cli", "INFO", "memory"], None),
    (["psql", "-c", "SELECT 1"], None),
    (["mysql", "-e", "SELECT 1"], None),
    (["psql"], "SELECT count(*) FROM users;\n"),
    (["kubectl", "get", "pods", "-n", "prod"], None),
    (["kubectl", "describe", "deployment", "api"], None),
    (["rm", "-rf", "/tmp/scratch"], None),
    (["helm", "list"], None),
    (["systemctl", "status", "postgresql"], None),
    (["curl", "-s", "http://127.0.0.1:9/health"], None),
    (["echo", "hello"], None),
    (["ls"], None),
    (["redis-cli", "--scan", "--pattern", "user:*"], None),
    (["psql", "-At", "-c", "SELECT now()"], None),
    (["kubectl", "logs", "deploy/api", "--tail=20"], None),
    (["kubectl", "rollout", "status", "deployment/api", "-n", "prod"], None),
    (["sed", "-n", "1,5p", "/etc/hosts"], None),
    (["cp", "/etc/hosts", "hosts.copy"], None),
    (["curl", "-sf", "http://127.0.0.1:9090/api/v1/query?query=up"], None),
]


def q(word: str, rng: random.Random) -> str:
    """One word in a random but equivalent quoting: bare, single, double, backslashes, $'..', split quotes."""
    form = rng.randrange(7)
    if form == 0 or not word:
        return shlex.quote(word)
    if form == 1:
        return "'" + word.replace("'", "'\\''") + "'"
    if form == 2:
        return '"' + "".join("\\" + c if c in '"\\$`' else c for c in word) + '"'
    if form == 3:
        return "".join("\\" + c if not c.isalnum() or rng.random() < 0.4 else c for c in word)
    if form == 4:
        return "$'" + "".join(f"\\x{ord(c):02x}" if rng.random() < 0.3 and ord(c) < 128 else
                              ("\\" + c if c in "'\\" else c) for c in word) + "'"
    if form == 5 and len(word) > 1:
        cut = rng.randrange(1, len(word))
        return shlex.quote(word[:cut]) + shlex.quote(word[cut:])
    return shlex.quote(word)


def words(argv: list[str], rng: random.Random) -> str:
    return " ".join(q(w, rng) for w in argv)


def with_stdin(text: str, stdin: str | None, rng: random.Random) -> tuple[str, str]:
    """Text running `text` with `stdin` fed by one of the forms bash has (heredoc, here-string, pipe)."""
    if stdin is None:
        return text, ""
    form = rng.randrange(4)
    body = stdin.rstrip("\n")
    if form == 0:
        return f"{text} <<'EOF'\n{stdin}EOF", "heredoc"
    if form == 1:
        return f"{text} <<EOF\n{stdin}EOF", "heredoc"
    if form == 2:
        return f"{text} <<< {shlex.quote(body)}", "herestring"
    return f"printf '%s\\n' {shlex.quote(body)} | {text}", "pipe"


@dataclass
class Sample:
    text: str
    constructs: list[str] = field(default_factory=list)
    dangerous: bool = False


def hide(argv: list[str], stdin: str | None, rng: random.Random, absolute: bool, depth: int = 0) -> Sample:
    """Shell text that runs argv (with stdin) through one or two hiding constructs."""
    choices = ["plain", "quotes", "var", "subst", "backtick", "eval", "sh_c", "function", "alias", "array",
               "brace", "wrapper", "continuation", "xargs", "ifs", "printf_eval", "base64", "nested_subst",
               "for_loop", "exec_subshell", "sh_stdin", "source_stdin", "printf_v"]
    if absolute:
        choices += ["abs_path", "command_p", "glob_path"]
    c = rng.choice(choices)
    tool, rest = argv[0], argv[1:]
    nested = depth < 1 and rng.random() < 0.25
    sample = Sample("", [c])

    def inner() -> tuple[str, str]:
        if nested:
            s = hide(argv, None, rng, absolute, depth + 1)
            sample.constructs += s.constructs
            return s.text, ""
        return words(argv, rng), ""

    if c == "plain":
        text = " ".join(shlex.quote(w) for w in argv)
    elif c == "quotes":
        text = words(argv, rng)
    elif c == "var":
        name = rng.choice(["T", "cmd", "X", "_a"])
        how = rng.randrange(3)
        if how == 0:
            text = f"{name}={q(tool, rng)}; ${name} {words(rest, rng)}"
        elif how == 1:
            text = f"{name}={shlex.quote(' '.join(argv))}; ${name}"
        else:
            text = f"{name}={q(tool, rng)}; \"${{{name}}}\" {words(rest, rng)}"
    elif c == "subst":
        text = f"$(echo {q(tool, rng)}) {words(rest, rng)}"
    elif c == "nested_subst":
        text = f"$(echo $(echo {q(tool, rng)})) {words(rest, rng)}"
    elif c == "backtick":
        text = rng.choice([f"`echo {q(tool, rng)}` {words(rest, rng)}",
                           f"`echo \\`echo {shlex.quote(tool)}\\`` {words(rest, rng)}"])
    elif c == "eval":
        body, _ = inner()
        text = f"eval {shlex.quote(body)}" if rng.random() < 0.6 else f"eval {body}"
    elif c == "sh_c":
        body, _ = inner()
        text = f"{rng.choice(['sh', 'bash'])} -c {shlex.quote(body)}"
    elif c == "function":
        body, _ = inner()
        name = rng.choice(["f", "go", "fix"])
        text = f"{name}() {{ {body}; }}; {name}" if rng.random() < 0.5 else f"function {name} {{ {body}; }}\n{name}"
    elif c == "alias":
        text = f"shopt -s expand_aliases\nalias z={shlex.quote(tool)}\nz {words(rest, rng)}"
    elif c == "array":
        text = f"a=({words(argv, rng)}); \"${{a[@]}}\""
    elif c == "brace":
        if rest:
            text = f"{{{shlex.quote(tool)},}} {words(rest, rng)}"  # (draws from rng: keeps the seeded sample)
            text = f"{tool[:1]}{{{tool[1:]},}} {words(rest, rng)}" if len(tool) > 1 else text
            text = f"{q(tool, rng)} {{{rest[0]},}} {words(rest[1:], rng)}" if rng.random() < 0.5 else text
        else:
            text = f"{tool[:1]}{{{tool[1:]},}}"
    elif c == "wrapper":
        w = rng.choice(["command", "command --", "exec", "exec --", "env", "env -i", "env --", "timeout 5",
                        "timeout -s KILL 5", "nohup", "builtin command", "time", "nice -n 1", "env FOO=1",
                        "command -v rm >/dev/null &&", "exec -a ls", "env -S", "setsid", "stdbuf -o0",
                        "timeout --signal=KILL 5", "nice", "command -V rm >/dev/null;", "xargs -0 -r </dev/null"])
        if w == "env -S":
            text = f"env -S {shlex.quote(' '.join(shlex.quote(x) for x in argv))}"
            w = ""
        body = words(argv, rng)
        if w:
            text = f"({w} {body})" if w.startswith("exec") else f"{w} {body}"
    elif c == "continuation":
        parts = [q(w, rng) for w in argv]
        out = []
        for p in parts:
            if len(p) > 2 and rng.random() < 0.4 and p.isalnum():
                k = rng.randrange(1, len(p))
                p = p[:k] + "\\\n" + p[k:]
            out.append(p)
        text = " \\\n".join(out)
    elif c == "xargs":
        text = f"echo {words(rest, rng)} | xargs {q(tool, rng)}" if rest and stdin is None \
            else f"xargs {words(argv, rng)} </dev/null"
    elif c == "ifs":
        text = f"IFS=,; c={shlex.quote(','.join(argv))}; $c"
    elif c == "printf_eval":
        body = " ".join(shlex.quote(w) for w in argv)
        text = f"eval \"$(printf '%s' {shlex.quote(body)})\""
    elif c == "base64":
        import base64 as b64
        body = b64.b64encode(" ".join(shlex.quote(w) for w in argv).encode()).decode()
        text = f"echo {body} | base64 -d | {rng.choice(['sh', 'bash'])}"
    elif c == "for_loop":
        text = f"for t in {q(tool, rng)}; do \"$t\" {words(rest, rng)}; done"
    elif c == "exec_subshell":
        body, _ = inner()
        text = rng.choice([f"( {body} )", f"{{ {body}; }}", f"true && {body}", f"false || {body}",
                           f"echo x | {body}" if stdin is None else f"{body}"])
    elif c == "sh_stdin":
        body = " ".join(shlex.quote(w) for w in argv)
        text = f"{rng.choice(['sh', 'bash', 'bash -s'])} <<'EOS'\n{body}\nEOS" if stdin is None \
            else f"{rng.choice(['sh', 'bash'])} -c {shlex.quote(body)}"
    elif c == "source_stdin":
        body = " ".join(shlex.quote(w) for w in argv)
        text = f"{rng.choice(['.', 'source'])} /dev/stdin <<< {shlex.quote(body)}" if stdin is None \
            else f"eval {shlex.quote(body)}"
    elif c == "printf_v":
        text = f"printf -v c '%s' {q(tool, rng)}; $c {words(rest, rng)}"
    elif c == "glob_path":
        where = shutil.which(tool, path="/usr/local/bin:/usr/bin:/bin") or f"/usr/bin/{tool}"
        k = where.rindex("/") + 1 + rng.randrange(len(tool))
        text = f"{where[:k]}[{where[k]}]{where[k + 1:]} {words(rest, rng)}"
    elif c == "abs_path":
        where = shutil.which(tool, path="/usr/local/bin:/usr/bin:/bin") or f"/usr/bin/{tool}"
        text = f"{where} {words(rest, rng)}"
    else:  # command_p
        text = f"command -p {words(argv, rng)}"
    if stdin is not None and not text.startswith("echo ") and "|" not in text.split("\n")[-1]:
        text, form = with_stdin(text, stdin, rng)
        if form:
            sample.constructs.append(form)
    elif stdin is not None:
        text, form = with_stdin(f"{{ {text}; }}", stdin, rng)
        if form:
            sample.constructs.append(form)
    sample.text = text
    return sample


def generate(seed: int, index: int, absolute: bool = True) -> Sample:
    """Input `index` of the sample seeded `seed`: the same text on every run and in any order."""
    rng = random.Random(f"differential-fuzz:{seed}:{index}")
    parts: list[Sample] = []
    for _ in range(1 if rng.random() < 0.7 else 2):
        pool = DANGEROUS if rng.random() < 0.6 else HARMLESS
        argv, stdin = rng.choice(pool)
        s = hide(argv, stdin, rng, absolute)
        s.dangerous = pool is DANGEROUS
        parts.append(s)
    if len(parts) == 1:
        return parts[0]
    sep = rng.choice(["; ", " && ", " || ", "\n", " | "])
    joined = Sample(parts[0].text + sep + parts[1].text,
                    parts[0].constructs + parts[1].constructs + [{"; ": "semicolon", " && ": "and", " || ": "or",
                                                                 "\n": "newline", " | ": "pipe_chain"}[sep]],
                    parts[0].dangerous or parts[1].dangerous)
    return joined


# -- the sandbox -------------------------------------------------------------------------------------------------

class Sandbox:
    """A temporary directory with the stubs, the plumbing and the log; runs one text at a time in bash."""

    def __init__(self, parent: str | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="guardrail-fuzz-", dir=parent))
        self.stubs = self.root / "stubs"
        self.plumbing = self.root / "bin"
        self.work = self.root / "work"
        self.logdir = self.root / "log"
        self.log = self.logdir / "calls.jsonl"
        for d in (self.stubs, self.plumbing, self.work, self.logdir):
            d.mkdir()
        python = shutil.which("python3", path="/usr/bin:/bin:/usr/local/bin") or sys.executable
        shutil.copy(SHIM, self.stubs / "_shim.py")
        src = STUB.replace("@STUBDIR@", str(self.stubs)).replace("@LOG@", str(self.log)) \
            .replace("@LIMIT@", str(STDIN_LIMIT))
        for tool in STUB_TOOLS:
            p = self.stubs / tool
            p.write_text(f"#!{python} -I\n{src}")
            p.chmod(0o755)
        for tool in PLUMBING:
            real = shutil.which(tool, path="/usr/bin:/bin")
            if real:
                (self.plumbing / tool).symlink_to(real)
        # The real binaries a stub covers inside the namespace: every copy on the usual paths.
        self.covered: list[tuple[Path, Path]] = []
        seen: set[str] = set()
        for tool in STUB_TOOLS:
            for d in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
                p = Path(d) / tool
                if p.exists() and os.path.realpath(p) not in seen:
                    seen.add(os.path.realpath(p))
                    self.covered.append((self.stubs / tool, Path(os.path.realpath(p))))
        self.as_nobody = os.geteuid() == 0
        self.kind = self._probe()
        if self.as_nobody and self.kind == "namespace":
            for d in (self.root, self.stubs, self.plumbing):
                d.chmod(0o755)
            for d in (self.work, self.logdir):
                os.chown(d, 65534, 65534)
        self.env = {"PATH": f"{self.stubs}:{self.plumbing}", "HOME": str(self.work), "LANG": "C.UTF-8"}

    def _probe(self) -> str:
        """'namespace' when real binaries can be covered by stubs in a private mount namespace, else 'path'."""
        if not shutil.which("unshare"):
            return "path"
        try:
            r = subprocess.run(self._prefix() + ["true"], capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return "path"
        return "namespace" if r.returncode == 0 else "path"

    def _prefix(self) -> list[str]:
        userns = [] if os.geteuid() == 0 else ["--map-root-user"]
        mounts = "; ".join(f"mount --bind {shlex.quote(str(s))} {shlex.quote(str(r))}" for s, r in self.covered)
        # Then every file system read-only but the run's own directory and the stubs' log (their binds, made
        # first, keep their own flags): a shared /tmp or /dev/shm is outside the sandbox too.
        own = " ".join(shlex.quote(str(d)) for d in (self.work, self.logdir))
        mounts += (f"; for d in {own}; do mount --bind \"$d\" \"$d\"; done; "
                   "while read -r _ m _; do case \"$m\" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/pts) ;; "
                   f"{'|'.join(shlex.quote(str(d)) for d in (self.work, self.logdir))}) ;; "
                   "*) mount -o remount,bind,ro \"$m\" 2>/dev/null || true;; esac; done < /proc/self/mounts")
        mounts += f"; cd {shlex.quote(str(self.work))}"  # onto the writable bind, not the directory under it
        drop = ("setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs "
                if self.as_nobody and shutil.which("setpriv") else "")
        return ["unshare", "--mount", "--net", "--pid", "--fork", "--propagation", "private", *userns, "/bin/sh",
                "-ec", f"{mounts}; exec {drop}\"$@\"", "sh"]

    def run(self, text: str) -> list[dict[str, Any]]:
        """Run text in bash and return the invocations the stubs recorded."""
        self.log.unlink(missing_ok=True)
        for p in self.work.iterdir():
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        inner = ["env", "-i", *(f"{k}={v}" for k, v in self.env.items()), "timeout", "-s", "KILL",
                 str(RUN_TIMEOUT_S), "/bin/bash", "-c", text]
        argv = (self._prefix() + inner) if self.kind == "namespace" else inner
        try:
            subprocess.run(argv, cwd=self.work, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=RUN_TIMEOUT_S + 20)
        except subprocess.TimeoutExpired:
            pass
        if not self.log.exists():
            return []
        calls = []
        for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                calls.append(json.loads(line))
            except ValueError:
                continue
        return calls

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


# -- the oracle --------------------------------------------------------------------------------------------------

class Oracle:
    """The guard as `guardrail check` builds it: the shipped policy in the embedded engine, the example context,
    enforce mode. `runs(text)` is whether the guard lets that text run."""

    def __init__(self, context_path: Path = CONTEXT) -> None:
        from guardrail.context import load_context
        from guardrail.policy.embedded import EmbeddedOPA

        self.context_path = context_path
        self.context = load_context(str(context_path))
        self.engine = EmbeddedOPA(None)
        self.engine.__enter__()
        self._guard = None
        self._used = 0
        self._memo: dict[str, bool] = {}

    def guard(self) -> Any:
        from guardrail.guard import Guard
        from guardrail.ownfiles import OwnFiles
        from guardrail.policy.base import Mode

        if self._guard is None or self._used >= GUARD_REUSE:
            self._guard = Guard(self.engine, self.context, mode=Mode.ENFORCE,
                                own_files=OwnFiles().add_file(str(self.context_path)))
            self._used = 0
        self._used += 1
        return self._guard

    def runs(self, text: str) -> bool:
        if text not in self._memo:
            if len(self._memo) > 20000:
                self._memo.clear()
            self._memo[text] = self.guard().before(text).runs
        return self._memo[text]

    def call_text(self, call: dict[str, Any]) -> str:
        from guardrail.adapters.shell.daemon import command_text

        return command_text([call["tool"], *call["args"]], call.get("stdin") or None)

    def close(self) -> None:
        self.engine.__exit__(None, None, None)


@dataclass
class Outcome:
    index: int
    text: str
    constructs: list[str]
    allowed: bool
    executed: bool
    calls: list[dict[str, Any]]
    bypasses: list[dict[str, Any]]


def check_one(oracle: Oracle, sandbox: Sandbox, index: int, text: str, constructs: list[str]) -> Outcome:
    """Decide text; if it runs, execute it and ask the guard about every recorded call."""
    if not oracle.runs(text):
        return Outcome(index, text, constructs, False, False, [], [])
    calls = sandbox.run(text)
    bypasses = []
    for call in calls:
        asked = oracle.call_text(call)
        if not oracle.runs(asked):
            bypasses.append({"call": call, "asked": asked})
    return Outcome(index, text, constructs, True, True, calls, bypasses)


# -- the long run ------------------------------------------------------------------------------------------------

_WORKER: tuple[Oracle, Sandbox] | None = None


def _init_worker(parent: str) -> None:
    global _WORKER
    _WORKER = (Oracle(), Sandbox(parent))


def _work(args: tuple[int, int, bool]) -> Outcome:
    seed, index, absolute = args
    assert _WORKER is not None
    s = generate(seed, index, absolute)
    return check_one(_WORKER[0], _WORKER[1], index, s.text, s.constructs)


def summarise(outcomes: list[Outcome], seed: int, sandbox_kind: str, wall_s: float) -> dict[str, Any]:
    by: dict[str, Counter[str]] = {}
    for o in outcomes:
        for c in set(o.constructs):
            row = by.setdefault(c, Counter())
            row["inputs"] += 1
            row["allowed"] += o.allowed
            row["executed"] += o.executed
            row["bypasses"] += bool(o.bypasses)
    bypasses = [{"index": o.index, "input": o.text, "constructs": o.constructs, "calls": o.bypasses}
                for o in outcomes if o.bypasses]
    return {
        "seed": seed, "sandbox": sandbox_kind, "wall_s": round(wall_s, 1),
        "inputs": len(outcomes), "allowed": sum(o.allowed for o in outcomes),
        "executed": sum(o.executed for o in outcomes), "recorded_calls": sum(len(o.calls) for o in outcomes),
        "bypasses": len(bypasses), "distinct_bypass_calls": len({b["asked"] for o in outcomes for b in o.bypasses}),
        "by_construct": {k: dict(v) for k, v in sorted(by.items())},
        "bypass_inputs": bypasses[:500],
    }


def print_table(summary: dict[str, Any]) -> None:
    print(f"seed {summary['seed']}, sandbox {summary['sandbox']}, {summary['wall_s']} s wall")
    print(f"inputs {summary['inputs']}  allowed {summary['allowed']}  executed {summary['executed']}  "
          f"recorded calls {summary['recorded_calls']}  bypasses {summary['bypasses']} "
          f"({summary['distinct_bypass_calls']} distinct denied calls)")
    print(f"{'construct':<16} {'inputs':>8} {'allowed':>8} {'executed':>9} {'bypasses':>9}")
    for name, row in summary["by_construct"].items():
        print(f"{name:<16} {row.get('inputs', 0):>8} {row.get('allowed', 0):>8} {row.get('executed', 0):>9} "
              f"{row.get('bypasses', 0):>9}")
    for b in summary["bypass_inputs"][:20]:
        print(f"BYPASS #{b['index']}: {b['input']!r} ran {b['calls'][0]['asked']!r}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "differential_fuzz.json"))
    args = ap.parse_args()
    if args.count < 1 or args.jobs < 1:
        print("differential_fuzz: --count and --jobs must be at least 1", file=sys.stderr)
        return 2
    # The workers' sandboxes live under one directory, removed at the end whatever happens to the workers (a
    # SIGTERM unwinds through the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parent = tempfile.mkdtemp(prefix="guardrail-fuzz-run-")
    os.chmod(parent, 0o755)
    try:
        probe = Sandbox(parent)
        kind = probe.kind
        probe.close()
        absolute = kind == "namespace"
        started = time.monotonic()
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        work = [(args.seed, i, absolute) for i in range(args.count)]
        outcomes: list[Outcome] = []
        with ctx.Pool(args.jobs, initializer=_init_worker, initargs=(parent,)) as pool:
            for n, o in enumerate(pool.imap_unordered(_work, work, chunksize=16), 1):
                outcomes.append(o)
                for b in o.bypasses:
                    print(f"  BYPASS #{o.index}: {o.text!r} ran {b['asked']!r}", file=sys.stderr, flush=True)
                if n % 1000 == 0:
                    print(f"  {n}/{args.count} ({sum(bool(x.bypasses) for x in outcomes)} bypasses)",
                          file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    outcomes.sort(key=lambda o: o.index)
    summary = summarise(outcomes, args.seed, kind, time.monotonic() - started)
    summary["load_average"] = os.getloadavg()[0]
    print_table(summary)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=2))
    tmp.replace(out)
    return 1 if summary["bypasses"] else 0


if __name__ == "__main__":
    sys.exit(main())
