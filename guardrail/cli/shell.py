"""`guardrail shell -- AGENT_COMMAND`: run a shell-based agent with the guard's shims first on its PATH.

Attached to the root group by guardrail/cli/commands.py. Starts a GuardDaemon (guardrail/adapters/shell) on a
private unix socket, writes the shim directory, runs the agent with PATH and GUARDRAIL_SOCKET set, and exits
with the agent's exit code after printing the session's counts on stderr.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

from guardrail import pygc
from guardrail.cli import POLICY_HELP, cli
from guardrail.errors import InputError, JournalError
from guardrail.policy import goruntime
from guardrail.policy.base import Mode

__all__ = ["shell"]


@cli.command("shell")
@click.option("--context", "context_path", type=click.Path(dir_okay=False), default=None,
              help="Public incident context (YAML/JSON, or a scenario file: only its public part is read).")
@click.option("--policy", "policy", type=click.Path(file_okay=False), default=None,
              help=POLICY_HELP)
@click.option("--journal", "journal_path", type=click.Path(dir_okay=False), default=None,
              help="Journal file (default: guardrail-journals/shell-<time>-<pid>.jsonl).")
@click.option("--criteria", "criteria_path", type=click.Path(dir_okay=False), default=None,
              help="Verifier criteria overrides (YAML), e.g. convergence: {default_cycle_s: 30, max_wait_cycles: 4}.")
@click.option("--mode", type=click.Choice([m.value for m in Mode]), default=Mode.ENFORCE.value, show_default=True)
@click.argument("agent_command", nargs=-1, required=True, type=click.UNPROCESSED)
def shell(context_path: str | None, policy: str | None, journal_path: str | None, criteria_path: str | None,
          mode: str,
          agent_command: tuple[str, ...]) -> None:
    """Run AGENT_COMMAND with kubectl, helm, psql, mysql, redis-cli, curl, restart-svc.sh ... guarded."""
    from guardrail.adapters.session import GuardSessions, context_from, journal_name, load_criteria, load_engine
    from guardrail.adapters.shell import GuardDaemon, build_shim_dir
    from guardrail.adapters.shell.protocol import SHIM_DIR_ENV, SOCKET_ENV
    from guardrail.envs.local import LocalEnvironment
    from guardrail.ownfiles import OwnFiles

    context = context_from(context_path)
    if journal_path is None:
        journal_path = f"guardrail-journals/shell-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.jsonl"
    journal = Path(journal_path)
    if journal.suffix != ".jsonl":
        raise InputError("must name a .jsonl file", path="--journal")
    key = journal.name[:-len(".jsonl")]
    if journal_name(key) != journal.name:
        raise InputError("a journal's name may hold only letters, digits, '.', '_' and '-'", path="--journal")
    sessions = GuardSessions(load_engine(policy), context, journal_dir=journal.parent,
                             env_factory=lambda ctx: LocalEnvironment(), mode=Mode(mode),
                             criteria=load_criteria(criteria_path),
                             own_files=OwnFiles().add_files([context_path, criteria_path]))
    # Everything else is checked before the journal is opened: a failed start appends nothing to it.
    _check_runnable(agent_command[0])
    # The session's journal must land exactly at --journal: name the session after the file.
    try:
        session = sessions.get(key)
    except JournalError as e:
        raise InputError(str(e), path="--journal") from e
    bases = work_bases()
    for base in bases:
        sweep_stale_work_dirs(base)
    work = Path(tempfile.mkdtemp(prefix=WORK_PREFIX, dir=bases[0]))
    (work / OWNER_FILE).write_text(f"{os.getpid()}\n")
    daemon = GuardDaemon(session, work / "guard.sock")
    code = 1
    try:
        daemon.start()
        pygc.settle()  # engines and sessions are built: stop re-scanning them (guardrail/pygc.py)
        shims = build_shim_dir(work / "bin")
        env = goruntime.child_env()  # the agent's own Go programs (kubectl) keep Go's defaults
        env["PATH"] = f"{shims}{os.pathsep}{env.get('PATH', '')}"
        env[SOCKET_ENV] = daemon.socket_path
        env[SHIM_DIR_ENV] = str(shims)
        try:
            agent = subprocess.Popen(agent_argv(agent_command), env=env)
        except OSError as e:
            click.echo(f"error: cannot start {agent_command[0]}: {e.strerror or e}", err=True)
            sys.exit(2)
        previous = {s: signal.signal(s, lambda sig, _f: agent.send_signal(sig))
                    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        try:
            code = agent.wait()
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
        st = session.status()
        click.echo(f"guardrail: {st['commands']} commands, {st['denied']} denied, {st['warned']} warned, "
                   f"{st['declarations']} declarations ({st['declarations_rejected']} rejected); "
                   f"journal {session.journal.path}", err=True)
    finally:
        daemon.stop()
        sessions.close()
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(code if code >= 0 else 128 - code)


# Each session's socket and shims live in a private directory, removed when the session ends. A guard killed with
# SIGKILL cannot remove its own: the next `guardrail shell` removes those whose guard (named in OWNER_FILE) is gone.
WORK_PREFIX = "guardrail-shell-"
OWNER_FILE = "guard.pid"


# A unix socket's path holds at most 107 bytes on Linux (sun_path, with its NUL): a long TMPDIR (a CI runner's, a
# test's) cannot hold `guardrail-shell-XXXXXXXX/guard.sock`, so the session directory goes to /tmp instead.
MAX_SOCKET_PATH = 107


def work_bases() -> list[str]:
    """Where session directories go, in order of choice: $TMPDIR (tempfile's choice) when the socket path fits."""
    base = tempfile.gettempdir()
    fits = len(os.path.join(base, WORK_PREFIX + "x" * 8, "guard.sock")) <= MAX_SOCKET_PATH
    return list(dict.fromkeys([base, "/tmp"] if fits else ["/tmp", base]))


def sweep_stale_work_dirs(root: str | None = None) -> list[Path]:
    """Remove this user's session directories whose guard process is no longer running; the ones removed."""
    removed = []
    base = Path(root or tempfile.gettempdir())
    try:
        candidates = [p for p in base.iterdir() if p.name.startswith(WORK_PREFIX)]
    except OSError:
        return removed
    for d in candidates:
        try:
            if not d.is_dir() or d.is_symlink() or d.stat().st_uid != os.getuid():
                continue
            pid = int((d / OWNER_FILE).read_text().strip())
        except (OSError, ValueError):
            continue  # not ours to judge: no owner recorded (an older version, or a start still writing it)
        if pid == os.getpid() or _running(pid):
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, someone else's
    return True


# The agent must not outlive its guard: if `guardrail shell` is killed (SIGKILL, OOM), an agent left running would
# meet shims that refuse everything and a journal that no longer records. On Linux the agent starts through this
# stub, which asks the kernel for SIGTERM when its parent dies (PR_SET_PDEATHSIG, kept across exec) and then
# execs the agent in its own place (same pid, so signals forwarded to it reach the agent). A parent already gone
# by then is caught by comparing getppid() with the pid the guard passed. Not preexec_fn: the guard has threads
# running (the daemon) when it forks, which preexec_fn does not survive safely.
_DIE_WITH_GUARD = """\
import ctypes, os, signal, sys
ctypes.CDLL(None).prctl(1, signal.SIGTERM)
if os.getppid() != int(sys.argv[1]):
    sys.exit(143)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as e:
    sys.stderr.write("error: cannot start %s: %s\\n" % (sys.argv[2], e.strerror or e))
    sys.exit(2)
"""


def agent_argv(agent_command: tuple[str, ...] | list[str]) -> list[str]:
    """The argv that starts the agent: through the die-with-the-guard stub on Linux, as given elsewhere."""
    if not sys.platform.startswith("linux"):
        return list(agent_command)
    return [sys.executable, "-S", "-c", _DIE_WITH_GUARD, str(os.getpid()), *agent_command]


def _check_runnable(program: str) -> None:
    """Bad input (exit 2) unless `program` names an executable file, found on PATH as the agent's start would."""
    from guardrail.adapters.shell.shimdir import SHIMMED_TOOLS

    if os.sep in program:
        p = Path(program)
        if not p.exists():
            raise InputError("cannot start: no such file", path=program)
        if p.is_dir() or not os.access(p, os.X_OK):
            raise InputError("cannot start: not an executable file", path=program)
    elif shutil.which(program) is None and program not in SHIMMED_TOOLS:  # a shim is first on the agent's PATH
        raise InputError("cannot start: command not found on PATH", path=program)
