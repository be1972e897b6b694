"""The shim every wrapped tool on the agent's PATH runs: ask the guard daemon, then run the real binary.

Invoked as `python -S shim.py TOOL ARGS...` by the one-line sh wrappers that guardrail/adapters/shell/shimdir.py
writes (kubectl, psql, redis-cli, ...). Standard library only, so it starts fast and needs no site-packages.
Speaks protocol.py: `before` (argv, cwd, and the stdin payload when the tool reads one), then runs the real
binary found further along PATH (skipping the shim directory) with that same stdin, then `after` with its exit
code. A denial prints the rule and message on stderr and exits 126. If the daemon cannot be reached the shim
refuses to run anything (fail closed). `declare_repair_complete` waits for the guard's verdict instead.
"""

import json
import os
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
# Tools that always take their payload on stdin (restart-svc.sh reads {"db": {...}} from stdin).
ALWAYS_STDIN = {"restart-svc.sh", "reconfigure-infra.sh"}


def _flag_given(args, short, longs):
    for a in args:
        if a == short or a in longs or any(a.startswith(l + "=") for l in longs):
            return True
        if short and a.startswith(short) and not a.startswith("--") and len(a) > 2:
            return True
    return False


def _file_from_stdin(args, flags):
    for i, a in enumerate(args):
        if a in flags and i + 1 < len(args) and args[i + 1] == "-":
            return True
        if any(a == f + "=-" for f in flags):
            return True
    return False


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
        return not _flag_given(args, "-c", ("--command",)) and not _flag_given(args, "-f", ("--file",)) \
            and not _flag_given(args, "-l", ("--list",))
    if tool in ("mysql", "mariadb"):
        return not _flag_given(args, "-e", ("--execute",))
    if tool == "redis-cli":
        return "-x" in args
    if tool in ("kubectl", "helm"):
        return _file_from_stdin(args, ("-f", "--filename", "--values"))
    if tool == "curl":
        return any(a.startswith("@-") or a == "-" for a in args[1:]) and \
            any(a in ("-d", "--data", "--data-binary", "--data-raw", "-T", "--upload-file", "--json") for a in args)
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


def declare(daemon, args):
    out = daemon.ask({"op": "declare", "summary": " ".join(args)})
    if out.get("accepted"):
        sys.stdout.write("declare_repair_complete: accepted by the guard\n")
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
        after = daemon.ask({"op": "after", "id": decision["id"], "exit_code": code,
                            "duration_s": round(time.monotonic() - start, 6)})
        _say(after.get("message"))
        return code
    except (OSError, ConnectionError, ValueError) as e:
        _say(f"guardrail: the guard daemon failed ({e}); refusing to run {tool}")
        return DENIED


if __name__ == "__main__":
    if len(sys.argv) < 2:
        _say("usage: shim.py TOOL [ARGS...]")
        sys.exit(2)
    sys.exit(run(sys.argv[1], sys.argv[2:]))
