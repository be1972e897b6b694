"""The shim every wrapped tool on the agent's PATH runs: ask the guard daemon, then run the real binary.

Invoked as `python -S shim.py TOOL ARGS...` by the one-line sh wrappers that guardrail/adapters/shell/shimdir.py
writes (kubectl, psql, redis-cli, ...). Standard library only, so it starts fast and needs no site-packages.
Speaks protocol.py: `before` (argv, cwd, and the stdin payload when the tool reads one), then runs the real
binary found further along PATH (skipping the shim directory) with that same stdin, then `after` with its exit
code. A denial prints the rule and message on stderr and exits 126. If the daemon cannot be reached the shim
refuses to run anything (fail closed). `declare_repair_complete` waits for the guard's verdict instead, printing
a line on stderr every 30 s (GUARDRAIL_PROGRESS_EVERY_S) with the latest progress the daemon streamed, so the agent
and its operator see a held declaration is being worked on; the answer is short (verdict, codes, one line each).
"""

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

DENIED = 126
NOT_FOUND = 127
SOCKET_ENV = "GUARDRAIL_SOCKET"
SHIM_DIR_ENV = "GUARDRAIL_SHIM_DIR"
DECLARE = "declare_repair_complete"
PROGRESS_ENV = "GUARDRAIL_PROGRESS_EVERY_S"
PROGRESS_EVERY_S = 30.0
# Tools that always take their payload on stdin (restart-svc.sh reads {"db": {...}} from stdin).
ALWAYS_STDIN = {"restart-svc.sh", "reconfigure-infra.sh"}


# File names under which a tool reads its stdin: the same set as guardrail.actions.invocation.STDIN_PATHS (this
# file is standard library only; a test holds the two equal).
STDIN_PATHS = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})
# Short options that take a value, as each tool's getopt reads them: in a cluster (`psql -tAc SQL`) the letters
# before one of these are flags, and the value is the rest of the word or else the next word. mysql's -p takes
# its password only attached (`-psecret`): alone it prompts, and never takes the next word.
PSQL_VALUE_SHORTS = frozenset("cdfFhLoPpRTUv")
MYSQL_VALUE_SHORTS = frozenset("DehPSuOo")
MYSQL_ATTACHED_SHORTS = frozenset("p#")
# Long options whose value may be the next word (`--file x`, `--command "SELECT 1"`): that word is not an option.
PSQL_VALUE_LONGS = frozenset({"--file", "--command", "--dbname", "--host", "--port", "--username", "--output",
                              "--set", "--variable", "--log-file", "--pset", "--field-separator",
                              "--record-separator"})
MYSQL_VALUE_LONGS = frozenset({"--execute", "--database", "--host", "--port", "--user", "--socket",
                               "--init-command", "--defaults-file", "--defaults-extra-file"})


def _options(args, value_shorts, attached_shorts=frozenset(), value_longs=frozenset()):
    """The short options of argv as getopt reads them, [(letter, value or None)], and the long ones as
    [(name, value or None)]: `--file=x`, or `--file x` for a name in value_longs (the next word is its value)."""
    shorts, longs = [], []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            break
        if a.startswith("--"):
            name, eq, value = a.partition("=")
            if not eq and name in value_longs and i + 1 < len(args):
                i += 1
                value, eq = args[i], "="
            longs.append((name, value if eq else None))
        elif a.startswith("-") and len(a) > 1:
            for j in range(1, len(a)):
                ch = a[j]
                if ch in attached_shorts:
                    shorts.append((ch, a[j + 1:] or None))
                    break
                if ch in value_shorts:
                    value = a[j + 1:]
                    if not value and i + 1 < len(args):
                        i += 1
                        value = args[i]
                    shorts.append((ch, value))
                    break
                shorts.append((ch, None))
        i += 1
    return shorts, longs


def _file_from_stdin(args, shorts, longs):
    """Whether a file option names stdin: `-f -`, `-f-`, `-f /dev/stdin`, `--filename=/dev/fd/0`, ..."""
    for i, a in enumerate(args):
        for f in shorts:
            if a == f and i + 1 < len(args) and args[i + 1] in STDIN_PATHS:
                return True
            if a.startswith(f) and not a.startswith("--") and a[len(f):] in STDIN_PATHS:
                return True
        for f in longs:
            if (a == f and i + 1 < len(args) and args[i + 1] in STDIN_PATHS) or \
                    (a.startswith(f + "=") and a[len(f) + 1:] in STDIN_PATHS):
                return True
    return False


def _psql_reads_stdin(args):
    shorts, longs = _options(args, PSQL_VALUE_SHORTS, value_longs=PSQL_VALUE_LONGS)
    letters = {ch for ch, _ in shorts}
    names = {n for n, _ in longs}
    if letters & set("clV?") or names & {"--command", "--list", "--version", "--help"}:
        return False
    files = [v for ch, v in shorts if ch == "f"] + [v for n, v in longs if n == "--file"]
    return not files or any(f in STDIN_PATHS for f in files)


def _mysql_reads_stdin(args):
    shorts, longs = _options(args, MYSQL_VALUE_SHORTS, MYSQL_ATTACHED_SHORTS, MYSQL_VALUE_LONGS)
    letters = {ch for ch, _ in shorts}
    names = {n for n, _ in longs}
    return not (letters & set("eVI?") or names & {"--execute", "--version", "--help"})


def reads_stdin(tool, args):
    """Whether this invocation takes a payload on stdin (so the guard must see it before it runs)."""
    try:
        if os.isatty(0):
            return False
        os.fstat(0)
    except OSError:
        return False
    if tool in ALWAYS_STDIN:
        return True
    if tool == "psql":
        return _psql_reads_stdin(args)
    if tool in ("mysql", "mariadb"):
        return _mysql_reads_stdin(args)
    if tool == "redis-cli":
        return "-x" in args
    if tool in ("kubectl", "helm"):
        return _file_from_stdin(args, ("-f",), ("--filename", "--values"))
    if tool == "curl":
        return _curl_reads_stdin(args)
    return False


CURL_DATA = ("--data", "--data-binary", "--data-ascii", "--data-urlencode", "--json", "--upload-file", "--form",
             "-d", "-T", "-F")


def _curl_reads_stdin(args):
    """`-d @-`, `-d@-`, `--data-binary @/dev/stdin`, `-T -`, `-F file=@-` ...: a data option whose value reads stdin."""
    for i, a in enumerate(args):
        for opt in CURL_DATA:
            if a == opt and i + 1 < len(args):
                value = args[i + 1]
            elif opt.startswith("-") and not opt.startswith("--") and a.startswith(opt) and len(a) > len(opt):
                value = a[len(opt):]
            else:
                continue
            if value in STDIN_PATHS or value.rpartition("@")[2] in STDIN_PATHS and "@" in value:
                return True
    return False


def real_binary(tool):
    shim_dirs = {os.path.realpath(os.path.dirname(os.path.abspath(__file__)))}
    if os.environ.get(SHIM_DIR_ENV):
        shim_dirs.add(os.path.realpath(os.environ[SHIM_DIR_ENV]))
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not d or os.path.realpath(d) in shim_dirs:
            continue
        cand = os.path.join(d, tool)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


class Daemon:
    """One connection to the guard daemon (the same protocol as protocol.DaemonClient)."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.rfile = self.sock.makefile("rb")

    def ask(self, msg):
        self.sock.sendall(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
        line = self.rfile.readline()
        if not line:
            raise ConnectionError("the guard daemon closed the connection")
        reply = json.loads(line)
        if "error" in reply:
            raise ConnectionError(reply["error"])
        return reply


def _say(text):
    if text:
        sys.stderr.write(text if text.endswith("\n") else text + "\n")
        sys.stderr.flush()


def _progress_every():
    try:
        every = float(os.environ.get(PROGRESS_ENV) or PROGRESS_EVERY_S)
    except ValueError:
        every = PROGRESS_EVERY_S
    return every if every > 0 else PROGRESS_EVERY_S


def _await_verdict(daemon, every):
    """Read the daemon's progress lines until the reply, printing the latest progress every `every` seconds."""
    started = last = time.monotonic()
    latest = "verifying the repair"
    buf = b""
    while True:
        nl = buf.find(b"\n")
        if nl >= 0:
            line, buf = buf[:nl], buf[nl + 1:]
            if not line.strip():
                continue
            msg = json.loads(line)
            if isinstance(msg, dict) and set(msg) == {"progress"}:
                latest = (msg["progress"] or {}).get("message") or latest
                continue
            if "error" in msg:
                raise ConnectionError(msg["error"])
            return msg
        now = time.monotonic()
        if now - last >= every:
            _say(f"declare_repair_complete: held by the guard for {now - started:.0f} s: {latest}")
            last = now
        ready, _, _ = select.select([daemon.sock], [], [], max(0.0, every - (now - last)))
        if ready:
            chunk = daemon.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the guard daemon closed the connection")
            buf += chunk


def declare(daemon, args):
    daemon.sock.sendall(json.dumps({"op": "declare", "summary": " ".join(args)},
                                   separators=(",", ":")).encode() + b"\n")
    out = _await_verdict(daemon, _progress_every())
    if out.get("accepted"):
        unverified = out.get("verdict") == "ACCEPTED_UNVERIFIED"
        sys.stdout.write("declare_repair_complete: accepted by the guard%s\n"
                         % (", unverified (see below)" if unverified else ""))
        _say(out.get("message"))
        return 0
    _say(out.get("message") or "declare_repair_complete: rejected by the guard")
    return 1


def run(tool, args):
    path = os.environ.get(SOCKET_ENV)
    try:
        if not path:
            raise ConnectionError(f"{SOCKET_ENV} is not set")
        daemon = Daemon(path)
    except (OSError, ConnectionError) as e:
        _say(f"guardrail: cannot reach the guard daemon ({e}); refusing to run {tool}")
        return DENIED
    try:
        if tool == DECLARE:
            return declare(daemon, args)
        payload = sys.stdin.buffer.read() if reads_stdin(tool, args) else None
        msg = {"op": "before", "argv": [tool] + args, "cwd": os.getcwd()}
        if payload is not None:
            msg["stdin"] = payload.decode("utf-8", "replace")
        decision = daemon.ask(msg)
        if not decision.get("runs"):
            _say(decision.get("message") or f"guardrail: {tool} denied")
            return DENIED
        _say(decision.get("message"))  # warnings, when any
        real = real_binary(tool)
        if real is None:
            _say(f"{tool}: command not found")
            daemon.ask({"op": "after", "id": decision["id"], "exit_code": NOT_FOUND, "duration_s": 0.0})
            return NOT_FOUND
        stdin = None
        if payload is not None:
            # The payload was consumed to decide on it: hand the real tool the very same bytes.
            stdin = tempfile.TemporaryFile()
            stdin.write(payload)
            stdin.seek(0)
        start = time.monotonic()
        child = subprocess.Popen([tool] + args, executable=real, stdin=stdin)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda s, _f: child.send_signal(s))
        code = child.wait()
        if code < 0:
            code = 128 - code
    except (OSError, ConnectionError, ValueError) as e:
        _say(f"guardrail: the guard daemon failed ({e}); refusing to run {tool}")
        return DENIED
    # The command has run: from here on its own exit code is the truth, whatever becomes of the guard.
    try:
        after = daemon.ask({"op": "after", "id": decision["id"], "exit_code": code,
                            "duration_s": round(time.monotonic() - start, 6)})
        _say(after.get("message"))
    except (OSError, ConnectionError, ValueError) as e:
        _say(f"guardrail: {tool} ran (exit {code}), but the guard daemon failed before its result was journalled "
             f"({e})")
    return code


if __name__ == "__main__":
    if len(sys.argv) < 2:
        _say("usage: shim.py TOOL [ARGS...]")
        sys.exit(2)
    sys.exit(run(sys.argv[1], sys.argv[2:]))
