"""The shim every wrapped tool on the agent's PATH runs: ask the guard daemon, then run the real binary.

Invoked as `python -S shim.py [--session ID] [--socket PATH] [--secret FILE] [--real PATH] [--via daemon] TOOL
ARGS...` by the sh wrappers that guardrail/adapters/shell/shimdir.py writes (kubectl, psql, ...); the options default
to the environment (protocol.py's SESSION_ENV, SOCKET_ENV, SECRET_ENV). Standard library only, so it starts fast
and needs no site-packages. Speaks protocol.py: `hello` (the daemon proves the session's secret), `before` (argv,
cwd, and the stdin payload when the tool reads one), then runs the real binary the shim directory resolved at
start (`--real`; without it, the first one further along PATH that is no shim) with that same stdin, then
`after` with its exit code. A denial prints the rule and message on stderr and exits 126. Everything else that
goes wrong before the command runs also exits 126 and runs nothing (fail closed): no daemon, a daemon that cannot
prove the secret or does not answer in time, a stdin payload over the limit, a shim reached again from inside its
own command. `declare_repair_complete` waits for the guard's verdict instead,
printing a line on stderr every 30 s (GUARDRAIL_PROGRESS_EVERY_S) with the latest progress the daemon streamed;
the answer is short (verdict, codes, one line each). With `--via daemon` (`guardrail
shell --confine`, where this user cannot run the real tool) the daemon decides and runs the command itself, and
the shim relays its output and exit code.
"""

import hashlib
import hmac
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
# These mirror protocol.py (this file is standard library only; a test holds them equal).
SOCKET_ENV = "GUARDRAIL_SOCKET"
SHIM_DIR_ENV = "GUARDRAIL_SHIM_DIR"
SECRET_ENV = "GUARDRAIL_SECRET_FILE"
SESSION_ENV = "GUARDRAIL_SHIM_SESSION"
ACTIVE_ENV = "GUARDRAIL_SHIM_ACTIVE"
MAX_STDIN_BYTES = 1024 * 1024
MAX_LINE_BYTES = 8 * 1024 * 1024
CONNECT_TIMEOUT_S = 5.0
HELLO_TIMEOUT_S = 10.0
SILENCE_TIMEOUT_S = 30.0
PROOF_CONTEXT = b"guardrail-daemon-proof:"
# The first line of every wrapper shimdir.py writes, with its session id: how a wrapper is known for ours.
SHIM_MARKER = "# guardrail-shim session="
# Shims nested in one another's commands, any sessions and tools: past this, something loops.
MAX_SHIM_DEPTH = 8
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


def _is_own_shim(path, session):
    """Whether the file at `path` is a wrapper of this session's shims (its marker line names the session)."""
    if not session:
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return (SHIM_MARKER + session).encode() in head


def real_binary(tool, session=""):
    """The first `tool` further along PATH that is neither in a shim directory nor a wrapper of this session
    (the fallback when the wrapper names no resolved binary, e.g. a shim started by hand)."""
    shim_dirs = {os.path.realpath(os.path.dirname(os.path.abspath(__file__)))}
    if os.environ.get(SHIM_DIR_ENV):
        shim_dirs.add(os.path.realpath(os.environ[SHIM_DIR_ENV]))
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not d or os.path.realpath(d) in shim_dirs:
            continue
        cand = os.path.join(d, tool)
        if os.path.isfile(cand) and os.access(cand, os.X_OK) and not _is_own_shim(cand, session) and \
                os.path.dirname(os.path.realpath(cand)) not in shim_dirs:
            return cand
    return None


class RequestTooLarge(ValueError):
    pass


class Daemon:
    """One connection to the guard daemon (the same protocol as protocol.DaemonClient), authenticated: the
    daemon must prove the session's secret before anything is asked of it, and no wait is unbounded."""

    def __init__(self, path, secret):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            self.sock.connect(path)
        except socket.timeout:
            raise ConnectionError(f"no connection to {path} within {CONNECT_TIMEOUT_S:g} s")
        self.rfile = self.sock.makefile("rb")
        nonce = os.urandom(16).hex()
        self.sock.settimeout(HELLO_TIMEOUT_S)
        reply = self.ask({"op": "hello", "nonce": nonce}, what="prove the session's secret")
        want = hmac.new(secret, PROOF_CONTEXT + nonce.encode(), hashlib.sha256).hexdigest()
        got = reply.get("proof")
        if not isinstance(got, str) or not hmac.compare_digest(got, want):
            raise ConnectionError(f"the server at {path} could not prove this session's secret: it is not this "
                                  "session's guard")
        self.sock.settimeout(SILENCE_TIMEOUT_S)

    def ask(self, msg, what="answer"):
        try:
            line = json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        except UnicodeEncodeError:  # undecodable bytes in argv (surrogate escapes): sent escaped, as JSON allows
            line = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
        if len(line) > MAX_LINE_BYTES:
            raise RequestTooLarge(f"the request is {len(line)} bytes, over the guard's {MAX_LINE_BYTES}")
        self.sock.sendall(line)
        while True:
            try:
                line = self.rfile.readline(MAX_LINE_BYTES + 1)
            except socket.timeout:
                raise ConnectionError(f"the guard daemon did not {what} within {self.sock.gettimeout():g} s "
                                      "(stopped or stuck)")
            if not line:
                raise ConnectionError("the guard daemon closed the connection")
            reply = json.loads(line)
            if reply == {"wait": True}:  # a heartbeat: the guard is still judging
                continue
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
    started = last = heard = time.monotonic()
    latest = "verifying the repair"
    buf = b""
    while True:
        nl = buf.find(b"\n")
        if nl >= 0:
            line, buf = buf[:nl], buf[nl + 1:]
            if not line.strip():
                continue
            msg = json.loads(line)
            if msg == {"wait": True}:  # a heartbeat: the guard is still judging
                continue
            if isinstance(msg, dict) and set(msg) == {"progress"}:
                latest = (msg["progress"] or {}).get("message") or latest
                continue
            if "error" in msg:
                raise ConnectionError(msg["error"])
            return msg
        now = time.monotonic()
        if now - heard > SILENCE_TIMEOUT_S:
            raise ConnectionError(f"the guard daemon did not answer the declaration within {SILENCE_TIMEOUT_S:g} s "
                                  "of silence (stopped or stuck)")
        if now - last >= every:
            _say(f"declare_repair_complete: held by the guard for {now - started:.0f} s: {latest}")
            last = now
        ready, _, _ = select.select([daemon.sock], [], [], max(0.0, min(every - (now - last),
                                                                         SILENCE_TIMEOUT_S - (now - heard))))
        if ready:
            chunk = daemon.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the guard daemon closed the connection")
            buf += chunk
            heard = time.monotonic()


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


class PayloadTooLarge(Exception):
    pass


def read_payload():
    """The tool's stdin, streamed into a temporary file (the real tool reads that same file) and returned with
    its bytes; over MAX_STDIN_BYTES it is refused, never cut short and judged."""
    spool = tempfile.TemporaryFile()
    size = 0
    src = sys.stdin.buffer
    while True:
        chunk = src.read(64 * 1024)
        if not chunk:
            break
        size += len(chunk)
        if size > MAX_STDIN_BYTES:
            spool.close()
            raise PayloadTooLarge()
        spool.write(chunk)
    spool.seek(0)
    payload = spool.read()
    spool.seek(0)
    return spool, payload


def _secret(path):
    if not path:
        raise ConnectionError(f"no session secret ({SECRET_ENV} is not set), so the guard daemon cannot be told "
                              "from an impostor")
    try:
        with open(path, "rb") as f:
            secret = f.read(4096).strip()
    except OSError as e:
        raise ConnectionError(f"cannot read the session secret {path}: {e.strerror or e}")
    if len(secret) < 32:
        raise ConnectionError(f"the session secret {path} is too short")
    return secret


def run(tool, args, opts=None):
    opts = opts or {}
    session = opts.get("session") or os.environ.get(SESSION_ENV, "")
    path = opts.get("socket") or os.environ.get(SOCKET_ENV)
    me = f"{session or path or '-'}:{tool}"
    active = os.environ.get(ACTIVE_ENV, "").split()
    if me in active:
        _say(f"guardrail: {tool} was started again from inside its own guarded {tool} (a wrapper on PATH runs "
             f"'the next {tool} on PATH', which is this guard's shim); refusing to recurse")
        return DENIED
    if len(active) >= MAX_SHIM_DEPTH:
        _say(f"guardrail: {len(active)} guarded commands are already nested ({' '.join(active)}); refusing to run "
             f"{tool} deeper")
        return DENIED
    try:
        if not path:
            raise ConnectionError(f"{SOCKET_ENV} is not set")
        daemon = Daemon(path, _secret(opts.get("secret") or os.environ.get(SECRET_ENV)))
    except (OSError, ConnectionError, ValueError) as e:
        _say(f"guardrail: cannot reach the guard daemon ({e}); refusing to run {tool}")
        return DENIED
    try:
        if tool == DECLARE:
            return declare(daemon, args)
        stdin = payload = None
        if reads_stdin(tool, args):
            try:
                stdin, payload = read_payload()
            except PayloadTooLarge:
                _say(f"guardrail: {tool}'s stdin is over {MAX_STDIN_BYTES} bytes, more than the guard reads "
                     f"before a command runs; refusing to run {tool} (split the input, or pass a file with -f "
                     "that the policy can judge)")
                return DENIED
        msg = {"op": "before", "argv": [tool] + args, "cwd": os.getcwd()}
        if payload is not None:
            msg["stdin"] = payload.decode("utf-8", "replace")
            del payload  # the spool file holds the bytes the tool will read
        if opts.get("via") == "daemon":
            return run_in_daemon(daemon, tool, msg)
        try:
            decision = daemon.ask(msg)
        except RequestTooLarge as e:
            _say(f"guardrail: {e} (a long argv, or a stdin payload that escapes long); refusing to run {tool}")
            return DENIED
        if not decision.get("runs"):
            _say(decision.get("message") or f"guardrail: {tool} denied")
            return DENIED
        _say(decision.get("message"))  # warnings, when any
        real = (opts["real"] or None) if "real" in opts else real_binary(tool, session)
        if real is None:
            _say(f"{tool}: command not found")
            daemon.ask({"op": "after", "id": decision["id"], "exit_code": NOT_FOUND, "duration_s": 0.0})
            return NOT_FOUND
        env = dict(os.environ)
        env[ACTIVE_ENV] = " ".join(active + [me])
        start = time.monotonic()
        child = subprocess.Popen([tool] + args, executable=real, stdin=stdin, env=env)
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


def run_in_daemon(daemon, tool, msg):
    """Confined mode: the daemon decides and runs the command (this user cannot run the real tool); its output
    comes back as it is written, then its exit code."""
    import base64

    msg = dict(msg, op="run", env=dict(os.environ))
    try:
        line = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
        if len(line) > MAX_LINE_BYTES:
            raise RequestTooLarge(f"the request is {len(line)} bytes, over the guard's {MAX_LINE_BYTES}")
        daemon.sock.sendall(line)
        outs = {1: sys.stdout.buffer, 2: sys.stderr.buffer}
        while True:
            try:
                raw = daemon.rfile.readline(MAX_LINE_BYTES + 1)
            except socket.timeout:
                raise ConnectionError("the guard daemon went silent while running the command")
            if not raw:
                raise ConnectionError("the guard daemon closed the connection")
            reply = json.loads(raw)
            if reply == {"wait": True}:
                continue
            if "out" in reply:
                out = outs.get(reply["out"], sys.stderr.buffer)
                out.write(base64.b64decode(reply["data"]))
                out.flush()
                continue
            if "error" in reply:
                raise ConnectionError(reply["error"])
            _say(reply.get("message"))
            return int(reply.get("exit_code", DENIED)) if reply.get("runs") else DENIED
    except (OSError, ConnectionError, ValueError) as e:
        _say(f"guardrail: the guard daemon failed ({e}); {tool} may not have run")
        return DENIED


OPTIONS = ("--session", "--socket", "--secret", "--real", "--via")


def parse(argv):
    """`[--session ID] [--socket PATH] [--secret FILE] [--real PATH] TOOL ARGS...` -> (opts, tool, args)."""
    opts = {}
    i = 0
    while i + 1 < len(argv) and argv[i] in OPTIONS:
        opts[argv[i][2:]] = argv[i + 1]
        i += 2
    if i >= len(argv):
        return opts, None, []
    return opts, argv[i], argv[i + 1:]


if __name__ == "__main__":
    opts, tool, args = parse(sys.argv[1:])
    if tool is None:
        _say("usage: shim.py [--session ID] [--socket PATH] [--secret FILE] [--real PATH] [--via daemon] TOOL "
             "[ARGS...]")
        sys.exit(2)
    sys.exit(run(tool, args, opts))
