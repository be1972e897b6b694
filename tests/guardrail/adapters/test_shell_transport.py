"""The shims' transport: the daemon must prove the session's secret, a stopped daemon cannot hang a shim, the real
binary is resolved once by identity and a wrapper that leads back to a shim cannot make it loop, and the daemon's
connections, lines and stdin payloads are bounded."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from guardrail.actions.model import Action
from guardrail.adapters.session import GuardSessions, load_engine
from guardrail.adapters.shell import GuardDaemon, build_shim_dir, shim
from guardrail.adapters.shell import protocol
from guardrail.adapters.shell.protocol import DaemonAuthError, DaemonClient, proof
from guardrail.adapters.shell.shimdir import RESOLVED_FILE, judged_by_active_shim, resolve_real_binary
from guardrail.context import IncidentContext
from guardrail.envs.local import LocalEnvironment
from guardrail.journal import read_journal
from verifiers.protocols import Verdict, VerdictStatus


def _exe(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


@pytest.fixture
def stub_redis(tmp_path):
    """A stand-in redis-cli that leaves a mark when it runs (the shim must never reach it when it refuses)."""
    mark = tmp_path / "ran"
    d = tmp_path / "realbin"
    _exe(d / "redis-cli", f'echo "$*" >> {mark}\necho REAL\n')
    return d, mark


def _sessions(tmp_path, checks=None):
    return GuardSessions(load_engine(), IncidentContext(), journal_dir=tmp_path / "journals",
                         env_factory=lambda ctx: LocalEnvironment(cwd=tmp_path),
                         normaliser=lambda c: [Action(tool="shell", verb="x", raw=c, mutating=False)],
                         declaration_checks=checks or [])


def test_the_shim_constants_match_the_protocol():
    for name in ("SOCKET_ENV", "SHIM_DIR_ENV", "SECRET_ENV", "SESSION_ENV", "ACTIVE_ENV", "MAX_STDIN_BYTES",
                 "MAX_LINE_BYTES", "CONNECT_TIMEOUT_S", "HELLO_TIMEOUT_S", "SILENCE_TIMEOUT_S"):
        assert getattr(shim, name) == getattr(protocol, name), name
    assert shim.PROOF_CONTEXT == protocol._PROOF_CONTEXT


class _Impostor:
    """A server on a socket that allows every command but does not hold the session's secret."""

    def __init__(self, path: Path, hello: str):
        self.hello = hello  # "made-up" proof, "skip" the hello (answer allow), "error", or "silent" (never answer)
        self.requests: list[dict] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.running:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            with conn, conn.makefile("rwb") as f:
                for line in f:
                    msg = json.loads(line)
                    self.requests.append(msg)
                    if self.hello == "silent":
                        while self.running:
                            time.sleep(0.05)
                        break
                    if msg["op"] == "hello" and self.hello == "made-up":
                        reply = {"proof": proof(b"a guess at the secret, 32 bytes long", msg["nonce"])}
                    elif msg["op"] == "hello" and self.hello == "error":
                        reply = {"error": "no"}
                    else:
                        reply = {"id": 1, "runs": True, "message": "", "proof": "0" * 64, "ok": True}
                    f.write(json.dumps(reply).encode() + b"\n")
                    f.flush()

    def stop(self) -> None:
        self.running = False
        self.thread.join(10)
        self.sock.close()


@pytest.mark.parametrize("hello", ["made-up", "skip", "error"])
def test_a_fake_daemon_that_allows_everything_without_the_secret_is_refused(tmp_path, stub_redis, session_secret,
                                                                           hello):
    realbin, mark = stub_redis
    sock = tmp_path / "fake.sock"
    fake = _Impostor(sock, hello)
    env = dict(os.environ, PATH=f"{realbin}:{os.environ['PATH']}", GUARDRAIL_SOCKET=str(sock),
               GUARDRAIL_SECRET_FILE=str(session_secret[1]))
    try:
        proc = subprocess.run([sys.executable, "-S", shim.__file__, "redis-cli", "FLUSHALL"], env=env,
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    finally:
        fake.stop()
    assert proc.returncode == 126
    assert "refusing to run redis-cli" in proc.stderr
    assert not mark.exists()  # nothing ran
    assert [m["op"] for m in fake.requests] == ["hello"]  # the command itself was never even sent


def test_a_shim_without_a_secret_runs_nothing(tmp_path, stub_redis):
    realbin, mark = stub_redis
    env = {k: v for k, v in os.environ.items() if k != "GUARDRAIL_SECRET_FILE"}
    env.update(PATH=f"{realbin}:{os.environ['PATH']}", GUARDRAIL_SOCKET=str(tmp_path / "any.sock"))
    proc = subprocess.run([sys.executable, "-S", shim.__file__, "redis-cli", "PING"], env=env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 126 and "no session secret" in proc.stderr and not mark.exists()


def test_the_wrappers_socket_wins_over_one_the_agent_points_elsewhere(tmp_path, stub_redis, session_secret):
    realbin, mark = stub_redis
    secret, secret_file = session_secret
    sessions = _sessions(tmp_path)
    fake = _Impostor(tmp_path / "fake.sock", "skip")
    try:
        with GuardDaemon(sessions.get("s"), tmp_path / "g.sock", secret=secret) as daemon:
            shims = build_shim_dir(tmp_path / "bin", search_path=f"{realbin}:{os.environ['PATH']}",
                                   socket_path=daemon.socket_path, secret_file=str(secret_file))
            env = dict(os.environ, PATH=f"{shims}:{realbin}:{os.environ['PATH']}",
                       GUARDRAIL_SOCKET=str(tmp_path / "fake.sock"))
            proc = subprocess.run(["bash", "-c", "redis-cli GET k"], env=env, capture_output=True, text=True,
                                  timeout=60, stdin=subprocess.DEVNULL)
    finally:
        fake.stop()
        sessions.close()
    assert proc.returncode == 0, proc.stderr
    assert fake.requests == []
    assert [r["command"] for r in read_journal(tmp_path / "journals" / "s.jsonl") if r["kind"] == "command"] == \
        ["redis-cli GET k"]


def test_a_stopped_daemon_does_not_hang_a_shim(tmp_path, stub_redis, session_secret):
    realbin, mark = stub_redis
    sock = tmp_path / "stopped.sock"
    silent = _Impostor(sock, "silent")  # accepts, reads, never answers: a SIGSTOPped daemon looks like this
    env = dict(os.environ, PATH=f"{realbin}:{os.environ['PATH']}", GUARDRAIL_SOCKET=str(sock),
               GUARDRAIL_SECRET_FILE=str(session_secret[1]))
    try:
        proc = subprocess.run([sys.executable, "-S", shim.__file__, "redis-cli", "PING"], env=env,
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    finally:
        silent.stop()
    assert proc.returncode == 126
    assert f"did not prove the session's secret within {protocol.HELLO_TIMEOUT_S:g} s" in proc.stderr
    assert not mark.exists()


def test_a_daemon_that_has_exited_is_refused_at_once(tmp_path, stub_redis, session_secret):
    realbin, mark = stub_redis
    sock = tmp_path / "gone.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(sock))  # the socket file stays behind; nothing listens on it
    s.close()
    env = dict(os.environ, PATH=f"{realbin}:{os.environ['PATH']}", GUARDRAIL_SOCKET=str(sock),
               GUARDRAIL_SECRET_FILE=str(session_secret[1]))
    proc = subprocess.run([sys.executable, "-S", shim.__file__, "redis-cli", "PING"], env=env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 126 and "cannot reach the guard daemon" in proc.stderr and not mark.exists()


class _Gate:
    """A declaration check that waits until the test lets it go: a declaration that takes as long as the test
    wants, without sleeping."""

    name = "gate"

    def __init__(self):
        self.release = threading.Event()

    def check(self, env, journal, criteria=None):
        assert self.release.wait(60)
        return Verdict(VerdictStatus.PASS, "gate", message="released")


def test_a_long_request_gets_heartbeats_until_its_answer(tmp_path, session_secret):
    gate = _Gate()
    sessions = _sessions(tmp_path, checks=[gate])
    secret, _ = session_secret
    with GuardDaemon(sessions.get("s"), tmp_path / "g.sock", secret=secret, heartbeat_s=0.05) as daemon:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c, c.makefile("rwb") as f:
            c.settimeout(60)
            c.connect(daemon.socket_path)
            f.write(b'{"op":"declare","summary":"done"}\n')
            f.flush()

            def line():  # progress lines (a held declaration's stages) interleave with heartbeats: passed over
                while True:
                    msg = json.loads(f.readline())
                    if set(msg) != {"progress"}:
                        return msg

            first, second = line(), line()
            gate.release.set()
            lines = [first, second]
            while lines[-1] == {"wait": True}:
                lines.append(line())
    sessions.close()
    assert first == {"wait": True} and second == {"wait": True}  # the check was still running, twice over
    assert lines[-1]["accepted"] is True


def test_the_python_client_checks_the_proof_too(tmp_path, session_secret):
    secret, _ = session_secret
    sessions = _sessions(tmp_path)
    with GuardDaemon(sessions.get("s"), tmp_path / "g.sock", secret=secret) as daemon:
        with DaemonClient(daemon.socket_path, secret=secret) as c:
            assert c.request({"op": "status"})["session"] == "s"
        with pytest.raises(DaemonAuthError):
            DaemonClient(daemon.socket_path, secret=b"x" * 64)
    sessions.close()


# -- resolving the real binary, and refusing to recurse -------------------------------------------------------

FIRST_OTHER = """LOG={log}
echo "{name} $*" >> "$LOG"
own=$(cd "$(dirname "$0")" && pwd)
IFS=:
for d in $PATH; do
  [ "$d" = "$own" ] && continue
  [ -x "$d/psql" ] && exec "$d/psql" "$@"
done
echo "{name}: no psql" >&2; exit 127
"""
# "The next psql on PATH" as a wrapper after the one it wraps reads it: only the directories after its own.
NEXT_AFTER = """LOG={log}
echo "{name} $*" >> "$LOG"
own=$(cd "$(dirname "$0")" && pwd)
seen=
IFS=:
for d in $PATH; do
  if [ -n "$seen" ] && [ -x "$d/psql" ]; then exec "$d/psql" "$@"; fi
  [ "$d" = "$own" ] && seen=1
done
echo "{name}: no psql" >&2; exit 127
"""


def _wrapped_psql(tmp_path, template):
    log = tmp_path / "calls.log"
    _exe(tmp_path / "realbin" / "psql", f'echo "real $*" >> {log}\necho REAL-PSQL\n')
    for name in ("wrapA", "wrapB"):
        _exe(tmp_path / name / "psql", template.format(log=log, name=name))
    return log, f"{tmp_path / 'wrapA'}:{tmp_path / 'wrapB'}:{tmp_path / 'realbin'}"


def _guarded(guardrail_cmd, tmp_path, path, script):
    env = dict(os.environ, PATH=f"{path}:{os.environ['PATH']}")
    # The loop this closes took 21 GB: the timeout bounds a regression's time, and the wrappers' call log (each
    # level of a loop writes a line) shows whether anything looped at all.
    return subprocess.run([guardrail_cmd, "shell", "--journal", str(tmp_path / "j.jsonl"), "--", "bash", "-c",
                           script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)


def test_two_wrappers_that_run_the_first_other_psql_on_path_cannot_make_the_shim_loop(guardrail_cmd, tmp_path):
    log, path = _wrapped_psql(tmp_path, FIRST_OTHER)
    proc = _guarded(guardrail_cmd, tmp_path, path, "psql -c 'select 1'; echo rc=$?")
    assert "rc=126" in proc.stdout, proc.stdout + proc.stderr
    assert "refusing to recurse" in proc.stderr
    calls = log.read_text().splitlines()
    assert calls == ["wrapA -c select 1"]  # one pass through the wrapper, then the shim refused; real never ran
    # The resolution was recorded in the journal: the wrapper, the first psql that is not a shim.
    (shims,) = [r for r in read_journal(tmp_path / "j.jsonl") if r["kind"] == "shims"]
    assert shims["resolved"]["psql"] == str(tmp_path / "wrapA" / "psql")


def test_two_wrappers_that_run_the_psql_after_their_own_reach_the_real_one(guardrail_cmd, tmp_path):
    log, path = _wrapped_psql(tmp_path, NEXT_AFTER)
    proc = _guarded(guardrail_cmd, tmp_path, path, "psql -c 'select 1'; echo rc=$?")
    assert "rc=0" in proc.stdout and "REAL-PSQL" in proc.stdout, proc.stdout + proc.stderr
    assert log.read_text().splitlines() == ["wrapA -c select 1", "wrapB -c select 1", "real -c select 1"]


def test_resolution_skips_what_is_or_leads_to_this_sessions_shims(tmp_path):
    shims = build_shim_dir(tmp_path / "bin", tools=("psql",), search_path="", session="s1")
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "psql").symlink_to(shims / "psql")
    (tmp_path / "hard").mkdir()
    os.link(shims / "psql", tmp_path / "hard" / "psql")
    _exe(tmp_path / "copy" / "psql", (shims / "psql").read_text().split("\n", 1)[1])
    _exe(tmp_path / "names" / "psql", f'exec {shims}/psql "$@"\n')
    real = _exe(tmp_path / "real" / "psql", "echo real\n")
    order = ["bin", "link", "hard", "copy", "names", "real"]
    search = ":".join(str(tmp_path / d) for d in order)
    assert resolve_real_binary("psql", search, shims, "s1") == str(real)
    # Another session's shim is not ours: a guard nested in another runs its commands through both. (The link,
    # the hard link and the wrapper naming the directory still lead to this directory's files.)
    assert resolve_real_binary("psql", search, shims, "s2") == str(tmp_path / "copy" / "psql")
    rebuilt = build_shim_dir(tmp_path / "bin", tools=("psql",), search_path=search, session="s1")
    assert json.loads((rebuilt / RESOLVED_FILE).read_text())["resolved"] == {"psql": str(real)}
    assert f"--real {real}" in (rebuilt / "psql").read_text()


def test_a_wrapper_started_by_a_shim_passes_over_that_shim_only(tmp_path):
    shims = build_shim_dir(tmp_path / "bin", tools=("psql", "kubectl"), search_path="", session="s1")
    active = {"GUARDRAIL_SHIM_ACTIVE": "s1:psql"}
    assert judged_by_active_shim(shims / "psql", "psql", active)
    assert not judged_by_active_shim(shims / "kubectl", "kubectl", active)
    assert not judged_by_active_shim(shims / "psql", "psql", {})
    assert not judged_by_active_shim(tmp_path / "nothing", "psql", active)


# -- bounds ---------------------------------------------------------------------------------------------------


def test_a_stdin_payload_over_the_limit_is_refused_with_bounded_memory(tmp_path, session_secret):
    """`psql < 100MB.sql`: refused before the guard is asked, never cut short and judged, and the shim streams."""
    big = tmp_path / "big.sql"
    with open(big, "wb") as f:
        line = b"INSERT INTO t VALUES (1);\n" * 4096
        for _ in range(100 * 1024 * 1024 // len(line)):
            f.write(line)
    secret, secret_file = session_secret
    sessions = _sessions(tmp_path)
    mark = tmp_path / "ran"
    realbin = tmp_path / "realbin"
    _exe(realbin / "psql", f"touch {mark}\n")
    with GuardDaemon(sessions.get("s"), tmp_path / "g.sock", secret=secret) as daemon:
        env = dict(os.environ, PATH=f"{realbin}:{os.environ['PATH']}", GUARDRAIL_SOCKET=daemon.socket_path,
                   GUARDRAIL_SECRET_FILE=str(secret_file))
        peak = tmp_path / "peak"
        with open(big, "rb") as stdin:
            proc = subprocess.run([sys.executable, "-c", PEAK_RSS, str(peak), sys.executable, "-S", shim.__file__,
                                   "psql", "-h", "db"], env=env, stdin=stdin, capture_output=True, text=True,
                                  timeout=120)
    sessions.close()
    assert proc.returncode == 126
    assert f"stdin is over {protocol.MAX_STDIN_BYTES} bytes" in proc.stderr
    assert not mark.exists()
    assert [r for r in read_journal(tmp_path / "journals" / "s.jsonl") if r["kind"] == "command"] == []
    # The shim's peak RSS: one that held the 100 MB payload (or a copy of it) would be far over this.
    assert int(peak.read_text()) < 48 * 1024, peak.read_text()


# Runs argv[2:] and writes the peak RSS (KB) of that child alone to argv[1].
PEAK_RSS = """import resource, subprocess, sys
code = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)
"""


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss_kb(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_an_oversized_request_line_is_refused_whole_and_nothing_of_it_judged(tmp_path, session_secret):
    sessions = _sessions(tmp_path)
    with GuardDaemon(sessions.get("s"), tmp_path / "g.sock", secret=session_secret[0]) as daemon:
        rss0 = _rss_kb()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c, c.makefile("rwb") as f:
            c.settimeout(60)
            c.connect(daemon.socket_path)
            chunk = b"x" * (1024 * 1024)
            f.write(b'{"op":"before","argv":["psql"],"stdin":"')
            for _ in range(protocol.MAX_LINE_BYTES // len(chunk) + 4):
                f.write(chunk)
            f.write(b'"}\n{"op":"status"}\n')
            f.flush()
            reply = json.loads(f.readline())
            after = json.loads(f.readline())  # the connection still serves the next, well-formed request
        grew_kb = _rss_kb() - rss0
    sessions.close()
    assert reply == {"error": f"request over {protocol.MAX_LINE_BYTES} bytes: refused"}
    assert after["session"] == "s" and after["commands"] == 0
    assert [r for r in read_journal(tmp_path / "journals" / "s.jsonl") if r["kind"] == "command"] == []
    assert grew_kb < 64 * 1024, grew_kb


def test_connections_beyond_the_bound_are_refused_and_a_flood_keeps_fds_and_memory_bounded(tmp_path,
                                                                                          session_secret):
    secret, _ = session_secret
    sessions = _sessions(tmp_path)
    with GuardDaemon(sessions.get("s"), tmp_path / "g.sock", secret=secret, max_connections=4) as daemon:
        held = [DaemonClient(daemon.socket_path, secret=secret) for _ in range(4)]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c, c.makefile("rwb") as f:
            c.settimeout(60)
            c.connect(daemon.socket_path)
            f.write(b'{"op":"status"}\n')
            f.flush()
            assert "at most 4 connections" in json.loads(f.readline())["error"]
        for h in held:
            h.close()
        fds0, rss0 = _fds(), _rss_kb()
        errors: list[str] = []

        def client(n: int) -> None:
            for i in range(n):
                try:
                    with DaemonClient(daemon.socket_path, secret=secret) as cl:
                        cl.request({"op": "status"})
                except (OSError, ConnectionError, ValueError) as e:
                    errors.append(str(e))

        threads = [threading.Thread(target=client, args=(1000,)) for _ in range(10)]  # 10,000 connections
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        assert not any(t.is_alive() for t in threads)
        deadline = time.monotonic() + 30
        while len(daemon.connections) and time.monotonic() < deadline:
            time.sleep(0.05)  # the last handler threads finish after their client has closed
        fds1, rss1 = _fds(), _rss_kb()
    sessions.close()
    # Some of the ten clients may meet the bound of 4 at once and be told so; none may hang or leak.
    assert [e for e in errors if "at most 4 connections" not in e] == [], errors[:3]
    assert fds1 - fds0 < 20, (fds0, fds1)
    assert rss1 - rss0 < 64 * 1024, (rss0, rss1)


def test_a_confined_shims_command_runs_in_the_daemon_with_its_output_streamed_back(tmp_path, session_secret):
    """`--via daemon` (what `guardrail shell --confine` writes): the daemon decides, runs the resolved binary and
    relays stdout, stderr and the exit code; of the agent's environment only client settings pass."""
    stub = _exe(tmp_path / "realbin" / "redis-cli",
                'echo "out $*"\necho "err" >&2\necho "lib=${LD_LIBRARY_PATH-unset} pg=${PGHOST-unset}"\nexit 3\n')
    secret, secret_file = session_secret
    sessions = _sessions(tmp_path)
    with GuardDaemon(sessions.get("s"), tmp_path / "g.sock", secret=secret, runs_for={"redis-cli": str(stub)},
                     run_env={"PATH": os.environ["PATH"]}) as daemon:
        env = dict(os.environ, GUARDRAIL_SOCKET=daemon.socket_path, GUARDRAIL_SECRET_FILE=str(secret_file),
                   LD_LIBRARY_PATH="/agent/libs", PGHOST="db", PATH="/usr/bin:/bin")  # no redis-cli of its own
        proc = subprocess.run([sys.executable, "-S", shim.__file__, "--via", "daemon", "redis-cli", "GET", "k"],
                              env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    sessions.close()
    assert proc.returncode == 3, proc.stderr
    assert "out GET k" in proc.stdout and "err" in proc.stderr
    assert "lib=unset pg=db" in proc.stdout  # the loader's variables stay the agent's; PGHOST is a client setting
    records = read_journal(tmp_path / "journals" / "s.jsonl")
    assert [r["command"] for r in records if r["kind"] == "command"] == ["redis-cli GET k"]
    assert [r["exit_code"] for r in records if r["kind"] == "result"] == [3]


def test_an_empty_stdin_payload_is_an_empty_body_and_no_payload_is_not_known(tmp_path, session_secret):
    """The daemon tells the guard what the shim forwarded: an empty payload is a helper run on an empty body (a
    reload), a body is keyed, and no payload at all (a terminal) leaves the helper's body unknown: refused."""
    secret, _ = session_secret
    sessions = GuardSessions(load_engine(), IncidentContext(), journal_dir=tmp_path / "journals",
                             env_factory=lambda ctx: LocalEnvironment(cwd=tmp_path))  # the real normaliser
    session = sessions.get("s")
    with GuardDaemon(session, tmp_path / "g.sock", secret=secret) as daemon:
        with DaemonClient(daemon.socket_path, secret=secret) as c:
            empty = c.request({"op": "before", "argv": ["restart-svc.sh", "channel"], "stdin": ""})
            body = c.request({"op": "before", "argv": ["restart-svc.sh", "channel"],
                              "stdin": '{"db":{"pool_size":20}}'})
            unseen = c.request({"op": "before", "argv": ["restart-svc.sh", "channel"]})
    keys = [[k["key"] for a in r["actions"] for k in a.get("keys", [])] for r in session.journal.records("command")]
    sessions.close()
    assert empty["runs"] is True and body["runs"] is True
    assert unseen["runs"] is False, unseen
    assert keys[:2] == [[], ["app.roles.channel.db.pool_size"]], keys
