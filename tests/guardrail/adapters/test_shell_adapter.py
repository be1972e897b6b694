"""`guardrail shell -- AGENT`: a real bash agent, real shims on PATH, a real redis-server on loopback.

The end-to-end test runs the CLI as a subprocess with the real normaliser and the embedded OPA engine over the
shipped policies/. The declare test drives the daemon in process with a declaration check that rejects.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

from guardrail.adapters.session import GuardSessions, load_engine
from guardrail.adapters.shell import GuardDaemon, build_shim_dir
from guardrail.adapters.shell.daemon import command_text
from guardrail.context import IncidentContext
from guardrail.envs.local import LocalEnvironment
from guardrail.journal import read_journal
from verifiers.protocols import FeedbackCode, Verdict, VerdictStatus


def run_agent(guardrail_cmd, tmp_path, script: str, *extra: str, timeout: float = 300):
    agent = tmp_path / "agent.sh"
    agent.write_text(script)
    journal = tmp_path / "journal.jsonl"
    proc = subprocess.run([guardrail_cmd, "shell", "--journal", str(journal), *extra, "--", "bash", str(agent)],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    return proc, journal


def test_flushall_denied_config_set_runs_and_everything_is_journalled(guardrail_cmd, redis_server, tmp_path):
    redis_server.cli("SET", "queue:job:1", "payload")
    redis_server.cli("SET", "session:42", "alice")
    # The server starts with a 32mb limit, which the agent raises: the guard reads the value the agent's command
    # replaces (the same -h/-p), and lowering it would be SRE-CAP-006 (test below).
    redis_server.cli("CONFIG", "SET", "maxmemory", "32mb")
    p = redis_server.port
    proc, journal = run_agent(guardrail_cmd, tmp_path, textwrap.dedent(f"""\
        redis-cli -h 127.0.0.1 -p {p} FLUSHALL; echo "flush=$?"
        redis-cli -h 127.0.0.1 -p {p} CONFIG SET maxmemory 64mb; echo "config=$?"
        redis-cli -h 127.0.0.1 -p {p} GET session:42
        echo "which=$(command -v redis-cli)"
        """))
    assert proc.returncode == 0, proc.stderr
    # Denied: the rule and its message on stderr, exit 126, and the keys are still there.
    assert "flush=126" in proc.stdout
    assert "SRE-DATA-001" in proc.stderr and "FLUSHALL" in proc.stderr
    assert redis_server.cli("DBSIZE") == "2"
    assert redis_server.cli("GET", "queue:job:1") == "payload"
    # Allowed: it really ran against the real server.
    assert "config=0" in proc.stdout
    assert redis_server.cli("CONFIG", "GET", "maxmemory").splitlines()[-1] == str(64 * 1024 * 1024)
    assert "alice" in proc.stdout
    # The agent's redis-cli was the shim, not the real binary.
    which = next(ln for ln in proc.stdout.splitlines() if ln.startswith("which="))
    assert "guardrail-shell-" in which

    records = read_journal(journal)
    commands = [r for r in records if r["kind"] == "command"]
    assert [c["command"].split()[-1] for c in commands] == ["FLUSHALL", "64mb", "session:42"]
    flush, config, get = commands
    assert flush["outcome"] == "deny" and flush["ran"] is False
    assert config["ran"] is True
    changes = [(a["layer"], k["key"]) for a in config["actions"] for k in a["keys"]]
    assert ("runtime", "redis.maxmemory") in changes
    results = {r["ref"]: r for r in records if r["kind"] == "result"}
    assert results[flush["seq"]]["exit_code"] == 126
    assert results[config["seq"]]["exit_code"] == 0
    assert results[get["seq"]]["exit_code"] == 0
    assert "3 commands, 1 denied" in proc.stderr


def test_lowering_a_local_servers_limit_is_denied_from_the_value_read_before_it(guardrail_cmd, redis_server,
                                                                             tmp_path):
    # At its default (maxmemory 0: no limit) a 64mb limit takes memory away; the guard reads the prior value the
    # way the agent reached the server, and says what it found.
    p = redis_server.port
    proc, journal = run_agent(guardrail_cmd, tmp_path,
                              f'redis-cli -h 127.0.0.1 -p {p} CONFIG SET maxmemory 64mb; echo "config=$?"\n')
    assert "config=126" in proc.stdout
    assert "SRE-CAP-006" in proc.stderr and "from 0" in proc.stderr
    assert redis_server.cli("CONFIG", "GET", "maxmemory").splitlines()[-1] == "0"
    (cmd,) = [r for r in read_journal(journal) if r["kind"] == "command"]
    found = [f for d in cmd["decisions"] for f in d["deny"] if f["id"] == "SRE-CAP-006"]
    assert [(f["details"]["key"], f["details"]["initial"]) for f in found] == [("redis.maxmemory", 0)]


def test_stdin_payload_reaches_the_guard_and_the_real_tool(guardrail_cmd, redis_server, tmp_path):
    p = redis_server.port
    proc, journal = run_agent(guardrail_cmd, tmp_path, textwrap.dedent(f"""\
        printf 'hello-from-stdin' | redis-cli -h 127.0.0.1 -p {p} -x SET greeting; echo "set=$?"
        """))
    assert "set=0" in proc.stdout, proc.stderr
    assert redis_server.cli("GET", "greeting") == "hello-from-stdin"
    cmd = next(r for r in read_journal(journal) if r["kind"] == "command")["command"]
    assert "hello-from-stdin" in cmd  # the guard decided on the payload, not just the argv


def test_command_text_carries_stdin_as_a_heredoc():
    assert command_text(["psql", "-h", "db host"]) == "psql -h 'db host'"
    text = command_text(["psql"], "DELETE FROM jobs;\n")
    assert text.startswith("psql <<'GUARDRAIL_STDIN'\nDELETE FROM jobs;\n") and text.endswith("GUARDRAIL_STDIN")


class PendingDurability:
    """Rejects the first `n` declarations with NOT_DURABLE, then passes (an agent that goes on working)."""

    def __init__(self, n: int):
        self.n = n

    def check(self, env, journal, criteria=None):
        if self.n > 0:
            self.n -= 1
            return Verdict(VerdictStatus.FAIL, "durability", FeedbackCode.NOT_DURABLE,
                           "redis.maxmemory is set only at runtime; write it to redis.conf")
        return Verdict(VerdictStatus.PASS, "durability")


def test_declare_shim_prints_feedback_then_is_accepted(tmp_path, session_secret):
    from guardrail.actions.model import Action

    sessions = GuardSessions(load_engine(), IncidentContext(), journal_dir=tmp_path,
                             env_factory=lambda ctx: LocalEnvironment(cwd=tmp_path),
                             normaliser=lambda c: [Action(tool="shell", verb="x", raw=c, mutating=False)],
                             declaration_checks=[PendingDurability(1)])
    session = sessions.get("declare")
    secret, secret_file = session_secret
    with GuardDaemon(session, tmp_path / "g.sock", secret=secret) as daemon:
        shims = build_shim_dir(tmp_path / "bin", socket_path=daemon.socket_path, secret_file=str(secret_file))
        env = dict(os.environ, PATH=f"{shims}:{os.environ['PATH']}", GUARDRAIL_SOCKET=daemon.socket_path,
                   GUARDRAIL_SHIM_DIR=str(shims))
        proc = subprocess.run(["bash", "-c", "declare_repair_complete first try; echo rc1=$?; "
                                             "declare_repair_complete second try; echo rc2=$?"],
                              env=env, capture_output=True, text=True, timeout=300)
    sessions.close()
    assert "rc1=1" in proc.stdout and "rc2=0" in proc.stdout
    assert "NOT_DURABLE" in proc.stderr and "redis.conf" in proc.stderr
    outcomes = [r["accepted"] for r in read_journal(session.journal.path) if r["kind"] == "declaration_outcome"]
    assert outcomes == [False, True]


def test_shim_fails_closed_without_a_daemon(tmp_path, session_secret):
    shims = build_shim_dir(tmp_path / "bin", socket_path=str(tmp_path / "nothing.sock"),
                           secret_file=str(session_secret[1]))
    env = dict(os.environ, PATH=f"{shims}:{os.environ['PATH']}")
    proc = subprocess.run(["bash", "-c", "redis-cli PING; echo rc=$?"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert "rc=126" in proc.stdout
    assert "cannot reach the guard daemon" in proc.stderr


def test_shell_passes_the_agents_exit_code(guardrail_cmd, tmp_path):
    proc, journal = run_agent(guardrail_cmd, tmp_path, "exit 7\n")
    assert proc.returncode == 7
    assert json.loads(journal.read_text().splitlines()[0])["kind"] == "session_start"


def test_the_guard_runs_with_its_go_settings_and_the_agent_without(guardrail_cmd, tmp_path):
    # `guardrail shell` re-executes itself once with GOGC/GOMEMLIMIT for OPA's Go runtime (guardrail/policy/
    # goruntime.py); the agent it starts (and the kubectl it may run, also Go) gets the environment without them.
    # /proc/$PPID/environ is the guard process's environment as the kernel started it, after the re-exec.
    agent = tmp_path / "agent.sh"
    agent.write_text(textwrap.dedent("""\
        echo "agent GOGC=${GOGC-unset} GOMEMLIMIT=${GOMEMLIMIT-unset} marker=${GUARDRAIL_GO_TUNED-unset}"
        tr '\\0' '\\n' < /proc/$PPID/environ | grep -E '^(GOGC|GOMEMLIMIT)=' | sed 's/^/guard /'
        """))
    env = {k: v for k, v in os.environ.items() if k not in {"GOGC", "GOMEMLIMIT", "GUARDRAIL_GO_TUNED",
                                                            "GUARDRAIL_GO_TUNING"}}
    proc = subprocess.run([guardrail_cmd, "shell", "--journal", str(tmp_path / "j.jsonl"), "--", "bash", str(agent)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "agent GOGC=unset GOMEMLIMIT=unset marker=unset" in proc.stdout
    assert "guard GOGC=1000" in proc.stdout and "guard GOMEMLIMIT=512MiB" in proc.stdout

    # The operator's own setting wins, and reaches the agent unchanged.
    proc = subprocess.run([guardrail_cmd, "shell", "--journal", str(tmp_path / "k.jsonl"), "--", "bash", str(agent)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**env, "GOGC": "150"})
    assert proc.returncode == 0, proc.stderr
    assert "agent GOGC=150 GOMEMLIMIT=unset marker=unset" in proc.stdout
    assert "guard GOGC=150" in proc.stdout and "GOMEMLIMIT" not in proc.stdout.split("guard GOGC=150")[1]


class HeldUntilReleased:
    """A declaration check that holds until the test releases it, reporting progress as convergence does."""

    name = "convergence"

    def __init__(self):
        import threading

        self.release = threading.Event()

    def check(self, env, journal, criteria=None):
        from verifiers.progress import report

        n = 0
        while not self.release.wait(0.05):
            n += 1
            report("convergence", f"convergence: 0/2 consecutive windows in band (measurement {n})")
        return Verdict(VerdictStatus.PASS, "convergence", message="SLIs in band for 2 consecutive windows")


def test_a_held_declaration_prints_progress_from_the_shim_and_the_session_stays_answerable(tmp_path, session_secret):
    import threading

    from guardrail.actions.model import Action
    from guardrail.adapters.shell.protocol import DaemonClient

    check = HeldUntilReleased()
    sessions = GuardSessions(load_engine(), IncidentContext(), journal_dir=tmp_path,
                             env_factory=lambda ctx: LocalEnvironment(cwd=tmp_path),
                             normaliser=lambda c: [Action(tool="shell", verb="x", raw=c,
                                                          mutating="touch" in c)],
                             declaration_checks=[check])
    session = sessions.get("held")
    secret, secret_file = session_secret
    with GuardDaemon(session, tmp_path / "g.sock", secret=secret) as daemon:
        shims = build_shim_dir(tmp_path / "bin", socket_path=daemon.socket_path, secret_file=str(secret_file))
        env = dict(os.environ, PATH=f"{shims}:{os.environ['PATH']}", GUARDRAIL_SOCKET=daemon.socket_path,
                   GUARDRAIL_SHIM_DIR=str(shims), GUARDRAIL_PROGRESS_EVERY_S="0.2")
        proc = subprocess.Popen(["bash", "-c", "declare_repair_complete done; echo rc=$?"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: list[str] = []
        two_lines = threading.Event()

        def read_stderr():
            for ln in proc.stderr:
                lines.append(ln)
                if sum("held by the guard" in x for x in lines) >= 2:
                    two_lines.set()

        reader = threading.Thread(target=read_stderr, daemon=True)
        reader.start()
        try:
            assert two_lines.wait(60), lines
            # Meanwhile, on another connection: status answers, a read is admitted, a change is held back.
            with DaemonClient(daemon.socket_path, timeout_s=30, secret=secret) as c:
                status = c.request({"op": "status"})
                read = c.request({"op": "before", "argv": ["echo", "hi"]})
                change = c.request({"op": "before", "argv": ["touch", "x"]})
                again = c.request({"op": "declare", "summary": "again"})
        finally:
            check.release.set()
            out, _ = proc.communicate(timeout=60)
            reader.join(10)
    sessions.close()
    assert status["declaration_pending"]["stage"] == "convergence"
    assert read["runs"] is True
    assert change["runs"] is False and "DECLARATION_PENDING" in change["message"]
    assert again["accepted"] is False and again["codes"] == ["DECLARATION_PENDING"]
    held = [x for x in lines if "held by the guard" in x]
    assert "convergence: 0/2 consecutive windows in band" in held[-1]
    assert "rc=0" in out and "accepted by the guard" in out


def test_declare_under_local_without_an_sli_source_is_answered_at_once_naming_what_to_configure(guardrail_cmd,
                                                                                                  tmp_path):
    # The default criteria: waiting out a convergence window would take 8 minutes, past the test's timeout.
    proc, journal = run_agent(guardrail_cmd, tmp_path, "declare_repair_complete all good; echo rc=$?\n")
    assert proc.returncode == 0, proc.stderr
    assert "rc=1" in proc.stdout
    assert "[guardrail NO_SLI_SOURCE]" in proc.stderr and "--prometheus URL --slo FILE" in proc.stderr
    outcome = [r for r in read_journal(journal) if r["kind"] == "declaration_outcome"]
    assert [r["accepted"] for r in outcome] == [False]
