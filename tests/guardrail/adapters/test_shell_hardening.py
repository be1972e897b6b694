"""What a shell agent's own input must not be able to do to the guard: end the heredoc that carries its stdin,
name stdin in a way the shim does not read, hide a psql/mysql command in a cluster of flags; and what happens
when the guard itself goes away (the command's own exit code stands; the agent does not outlive its guard)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from guardrail.actions import normalise
from guardrail.actions.invocation import STDIN_PATHS
from guardrail.adapters.session import journal_name
from guardrail.adapters.shell import shim
from guardrail.adapters.shell.daemon import STDIN_MARK, command_text
from guardrail.adapters.shell.protocol import proof
from guardrail.errors import JournalError
from guardrail.journal import Journal


def test_a_payload_that_holds_the_heredoc_delimiter_cannot_end_it_early():
    # psql would read this whole payload, comment and all, and run the DROP; the guard must see the DROP too.
    payload = f"/*\n{STDIN_MARK}\necho <<'{STDIN_MARK}' */\nDROP TABLE orders;\n"
    text = command_text(["psql", "-h", "db"], payload)
    assert f"\n{STDIN_MARK}\n" in text  # the payload's own line is still there, inside the heredoc
    actions = normalise(text)
    assert [(a.tool, a.verb) for a in actions] == [("psql", "drop")]
    assert command_text(["psql"], "SELECT 1;\n").endswith(f"\n{STDIN_MARK}")  # the usual delimiter otherwise


def test_the_shim_and_the_normaliser_agree_on_the_names_of_stdin():
    assert shim.STDIN_PATHS == STDIN_PATHS


CRB = "kind: ClusterRoleBinding\nmetadata: {name: agent-admin}\nroleRef: {kind: ClusterRole, name: cluster-admin}\n"


@pytest.mark.parametrize("files", [["-f", "-"], ["-f-"], ["-f", "/dev/stdin"], ["--filename=/dev/stdin"],
                                   ["-f", "/dev/fd/0"], ["--filename", "/proc/self/fd/0"]])
def test_a_manifest_on_stdin_is_read_whatever_name_stdin_goes_by(files):
    argv = ["kubectl", "apply", *files]
    assert shim._file_from_stdin(argv[1:], ("-f",), ("--filename", "--values"))
    (a,) = normalise(command_text(argv, CRB))
    assert a.target.kind == "clusterrolebinding"


def test_a_manifest_file_on_disk_is_not_taken_for_stdin():
    assert not shim._file_from_stdin(["apply", "-f", "crb.yaml"], ("-f",), ("--filename", "--values"))
    assert not shim._file_from_stdin(["apply", "--force"], ("-f",), ("--filename", "--values"))


@pytest.mark.parametrize("args,reads", [
    (["-tAc", "select 1"], False), (["-Atc", "select 1"], False), (["-c", "select 1"], False),
    (["--command=select 1"], False), (["-l"], False), (["--version"], False), (["-f", "x.sql"], False),
    (["-h", "db", "-U", "app"], True), (["-f", "-"], True), (["--file", "/dev/stdin"], True),
    (["-h", "-c"], True),  # -h takes the next word as its value: `-c` here is a host name, not a command
    (["--host", "-c"], True), (["--file", "x.sql", "--set", "-"], False),  # long options take the next word too
])
def test_psql_reads_stdin_only_when_getopt_would_say_so(args, reads):
    assert shim._psql_reads_stdin(args) is reads


@pytest.mark.parametrize("args,reads", [
    (["-Nse", "select 1"], False), (["-e", "select 1"], False), (["--execute=select 1"], False), (["-V"], False),
    (["-u", "root", "-psecret", "-e", "select 1"], False), (["-h", "db", "app"], True), (["-psecret", "app"], True),
    (["--host", "-e"], True), (["--execute", "select 1"], False),
])
def test_mysql_reads_stdin_only_when_getopt_would_say_so(args, reads):
    assert shim._mysql_reads_stdin(args) is reads


@pytest.mark.parametrize("args,reads", [
    (["-d", "@-", "http://a/x"], True), (["-d@-", "http://a/x"], True), (["--data-binary", "@/dev/stdin", "u"], True),
    (["-T", "-", "u"], True), (["-F", "file=@-", "u"], True), (["-d", "a=1", "u"], False), (["http://a/x"], False),
])
def test_curl_reads_stdin_when_a_data_option_names_it(args, reads):
    assert shim._curl_reads_stdin(args) is reads


def test_a_shimmed_psql_with_clustered_flags_leaves_the_agents_stdin_alone(tmp_path, session_secret):
    # `while read` feeds the loop from stdin; a shim that read stdin for `psql -tAc` would swallow the rest of it.
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "psql").write_text("#!/bin/sh\necho \"psql $*\"\n")
    (fake / "psql").chmod(0o755)
    sock = tmp_path / "g.sock"
    server = _FakeDaemon(sock, close_after_before=False, secret=session_secret[0])
    script = "printf 'a\\nb\\nc\\n' | while read x; do psql -tAc \"select '$x'\"; done"
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", GUARDRAIL_SOCKET=str(sock),
               GUARDRAIL_SECRET_FILE=str(session_secret[1]))
    proc = subprocess.run(["bash", "-c", script.replace("psql", f"{sys.executable} -S {shim.__file__} psql")],
                          env=env, capture_output=True, text=True, timeout=300)
    server.stop()
    assert proc.stdout.count("psql -tAc") == 3, proc.stdout + proc.stderr
    assert all("stdin" not in m for m in server.requests)


class _FakeDaemon:
    """A guard daemon that allows every command; with close_after_before it goes away while the command runs.
    With `secret` it proves it as the real daemon does; without, it answers a hello with a made-up proof."""

    def __init__(self, path: Path, *, close_after_before: bool, secret: bytes | None = None):
        self.secret = secret
        self.requests: list[dict] = []
        self.close_after_before = close_after_before
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
                    if msg["op"] == "hello":
                        made_up = proof(self.secret or b"not the session's secret", msg["nonce"])
                        f.write(json.dumps({"proof": made_up}).encode() + b"\n")
                        f.flush()
                    elif msg["op"] == "before":
                        f.write(json.dumps({"id": len(self.requests), "runs": True, "message": ""}).encode() + b"\n")
                        f.flush()
                        if self.close_after_before:
                            break
                    else:
                        f.write(b'{"ok": true, "message": ""}\n')
                        f.flush()

    def stop(self) -> None:
        self.running = False
        self.thread.join(5)
        self.sock.close()


def test_a_command_that_ran_keeps_its_exit_code_when_the_guard_goes_away_before_its_result(tmp_path,
                                                                                            session_secret):
    fake = tmp_path / "fakebin"
    fake.mkdir()
    marker = tmp_path / "ran"
    (fake / "redis-cli").write_text(f"#!/bin/sh\ntouch {marker}\nexit 3\n")
    (fake / "redis-cli").chmod(0o755)
    sock = tmp_path / "g.sock"
    server = _FakeDaemon(sock, close_after_before=True, secret=session_secret[0])
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", GUARDRAIL_SOCKET=str(sock),
               GUARDRAIL_SECRET_FILE=str(session_secret[1]))
    proc = subprocess.run([sys.executable, "-S", shim.__file__, "redis-cli", "SET", "a", "1"], env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    server.stop()
    assert marker.exists()
    assert proc.returncode == 3, proc.stderr  # the command's own code, not the shim's refusal (126)
    assert "ran (exit 3)" in proc.stderr and "refusing" not in proc.stderr


def test_the_agent_does_not_outlive_its_guard(guardrail_cmd, tmp_path):
    agent = tmp_path / "agent.sh"
    pidfile = tmp_path / "agent.pid"
    agent.write_text(f"echo $$ > {pidfile}\nsleep 600\n")  # far longer than any bound below
    # A short TMPDIR of its own (a unix socket path must fit in 107 bytes; pytest's tmp_path under xdist does not).
    tmpdir = Path(tempfile.mkdtemp(prefix="gr-", dir="/tmp"))
    env = dict(os.environ, TMPDIR=str(tmpdir))
    guard = subprocess.Popen([guardrail_cmd, "shell", "--journal", str(tmp_path / "j.jsonl"), "--", "bash",
                              str(agent)], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=env)
    try:
        deadline = time.monotonic() + 300  # generous bounds: each wait ends as soon as its event comes
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert time.monotonic() < deadline and guard.poll() is None, "the agent never started"
            time.sleep(0.05)
        pid = int(pidfile.read_text())
        guard.send_signal(signal.SIGKILL)
        guard.wait(120)
        deadline = time.monotonic() + 120
        while _alive(pid):
            assert time.monotonic() < deadline, "the agent kept running after its guard was killed"
            time.sleep(0.05)
        # The killed guard could not remove its socket and shims; the next session does.
        assert len(list(tmpdir.glob("guardrail-shell-*"))) == 1
        nxt = subprocess.run([guardrail_cmd, "shell", "--journal", str(tmp_path / "k.jsonl"), "--", "true"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert nxt.returncode == 0, nxt.stderr
        assert list(tmpdir.glob("guardrail-shell-*")) == []
    finally:
        if guard.poll() is None:
            guard.kill()
        shutil.rmtree(tmpdir, ignore_errors=True)


def test_a_tmpdir_too_long_for_a_socket_path_still_runs_the_session(guardrail_cmd, tmp_path):
    long_tmp = tmp_path / ("d" * 60) / ("e" * 60)
    long_tmp.mkdir(parents=True)
    proc = subprocess.run([guardrail_cmd, "shell", "--journal", str(tmp_path / "j.jsonl"), "--", "bash", "-c",
                           "redis-cli --version >/dev/null 2>&1; echo ran"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, TMPDIR=str(long_tmp)))
    assert proc.returncode == 0, proc.stderr
    assert "ran" in proc.stdout


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state  # a zombie has ended; only its parent (now init) has yet to reap it


def test_distinct_session_keys_get_distinct_journals():
    names = {journal_name(k) for k in ("ops/x", "ops:x", "ops_x", "ops x", "")}
    assert len(names) == 5
    assert journal_name("http-anonymous") == "http-anonymous.jsonl"  # a safe key is its own name
    assert len(journal_name("x" * 500)) < 130


def test_a_journal_has_one_writer_at_a_time(tmp_path):
    path = tmp_path / "j.jsonl"
    first = Journal(path, session="a")
    first.append("note", text="one")
    with pytest.raises(JournalError, match="in use by another guard session"):
        Journal(path, session="b")
    first.close()
    second = Journal(path, session="b")  # free again once the writer has closed it
    assert second.append("note", text="two")["seq"] == 2
    second.close()


def test_shell_refuses_a_journal_name_its_session_cannot_have(guardrail_cmd, tmp_path):
    proc = subprocess.run([guardrail_cmd, "shell", "--journal", str(tmp_path / "my journal.jsonl"), "--", "true"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "--journal" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "my_journal.jsonl").exists()



def test_a_killed_guards_session_directory_is_swept_by_the_next_start(tmp_path):
    from guardrail.cli.shell import OWNER_FILE, WORK_PREFIX, sweep_stale_work_dirs

    gone = subprocess.Popen(["true"])
    gone.wait()
    dirs = {}
    for name, owner in (("dead", str(gone.pid)), ("alive", str(os.getppid())), ("self", str(os.getpid())),
                        ("unowned", None), ("garbled", "not-a-pid")):
        d = tmp_path / f"{WORK_PREFIX}{name}"
        (d / "bin").mkdir(parents=True)
        if owner is not None:
            (d / OWNER_FILE).write_text(owner + "\n")
        dirs[name] = d
    other = tmp_path / "someone-else-dead"
    other.mkdir()
    (other / OWNER_FILE).write_text(f"{gone.pid}\n")
    assert sweep_stale_work_dirs(str(tmp_path)) == [dirs["dead"]]
    assert not dirs["dead"].exists()
    assert all(dirs[n].exists() for n in ("alive", "self", "unowned", "garbled")) and other.exists()
