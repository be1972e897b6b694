"""`guardrail shell -- AGENT_COMMAND`: run a shell-based agent with the guard's shims first on its PATH.

Attached to the root group by guardrail/cli/commands.py. Writes the session's secret and the shim directory
(each tool's real binary resolved once), starts a GuardDaemon (guardrail/adapters/shell) on a private unix socket,
runs the agent with the shims first on its PATH, and exits with the agent's exit code after printing the
session's counts on stderr. With --confine (root) the agent runs as its own user with the real clients hidden
from it, and the daemon runs the commands for its shims (docs/security.md).
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
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
from guardrail.cli.observe import observed, slo_options
from guardrail.errors import InputError, JournalError
from guardrail.policy import goruntime
from guardrail.policy.base import Mode

__all__ = ["shell"]


@cli.command("shell")
@click.option("--env", "env_spec", default="local", show_default=True,
              help="Where the agent's commands run: `local` (this machine's shell) or `kubernetes[:NAMESPACE]`.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="--env kubernetes: the kubeconfig file (default: KUBECONFIG, ~/.kube/config, or in-cluster).")
@click.option("--context-name", default=None, help="--env kubernetes: the kubeconfig context to use.")
@click.option("--context", "context_path", type=click.Path(dir_okay=False), default=None,
              help="Public incident context (YAML/JSON, or a scenario file: only its public part is read).")
@click.option("--policy", "policy", type=click.Path(file_okay=False), default=None,
              help=POLICY_HELP)
@click.option("--journal", "journal_path", type=click.Path(dir_okay=False), default=None,
              help="Journal file (default: guardrail-journals/shell-<time>-<pid>.jsonl).")
@click.option("--criteria", "criteria_path", type=click.Path(dir_okay=False), default=None,
              help="Verifier criteria overrides (YAML), e.g. convergence: {default_cycle_s: 30, max_wait_cycles: 4}.")
@click.option("--mode", type=click.Choice([m.value for m in Mode]), default=Mode.ENFORCE.value, show_default=True)
@click.option("--confine", is_flag=True, default=False,
              help="Run the agent as its own unprivileged user, with the real clients hidden from it: only the guard "
                   "runs them, for its shims (needs root; Linux).")
@click.option("--confine-user", default="guardrail-agent", show_default=True,
              help="The agent's user under --confine (created as a system user when missing).")
@slo_options
@click.argument("agent_command", nargs=-1, required=True, type=click.UNPROCESSED)
def shell(env_spec: str, kubeconfig: str | None, context_name: str | None, context_path: str | None, policy: str | None, journal_path: str | None, criteria_path: str | None,
          mode: str, confine: bool, confine_user: str, prometheus_url: str | None, slo_path: str | None,
          agent_command: tuple[str, ...]) -> None:
    """Run AGENT_COMMAND with kubectl, helm, psql, mysql, redis-cli, curl, restart-svc.sh ... guarded."""
    from guardrail.adapters.session import GuardSessions, context_from, journal_name, load_criteria, load_engine
    from guardrail.adapters.shell import GuardDaemon, build_shim_dir
    from guardrail.adapters.shell.shimdir import RESOLVED_FILE
    from guardrail.adapters.shell.protocol import SECRET_ENV, SESSION_ENV, SHIM_DIR_ENV, SOCKET_ENV
    from guardrail.envs import resolve_environment
    from guardrail.ownfiles import OwnFiles

    agent_user = confined_user(confine_user) if confine else None
    context = context_from(context_path)
    env_options = {"kubeconfig": kubeconfig, "context_name": context_name}
    resolve_environment(env_spec, context, env_options)  # a bad --env fails now (exit 2), before the journal
    if journal_path is None:
        journal_path = f"guardrail-journals/shell-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.jsonl"
    journal = Path(journal_path)
    if journal.suffix != ".jsonl":
        raise InputError("must name a .jsonl file", path="--journal")
    key = journal.name[:-len(".jsonl")]
    if journal_name(key) != journal.name:
        raise InputError("a journal's name may hold only letters, digits, '.', '_' and '-'", path="--journal")
    # The lambda reads `criteria` when a session starts: the merged criteria this line assigns (the restart bounds).
    env_factory, criteria = observed(lambda ctx: resolve_environment(env_spec, ctx, env_options, criteria),
                                     prometheus_url, slo_path, load_criteria(criteria_path))
    sessions = GuardSessions(load_engine(policy), context, journal_dir=journal.parent,
                             env_factory=env_factory, mode=Mode(mode), criteria=criteria,
                             own_files=OwnFiles().add_files([context_path, criteria_path, slo_path]))
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
    # The daemon proves this secret to every shim, so a socket this session did not make is refused.
    secret_file = work / "secret"
    secret = secrets.token_hex(32).encode()
    fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secret + b"\n")
    code = 1
    env = goruntime.child_env()  # the agent's own Go programs (kubectl) keep Go's defaults
    search_path = env.get("PATH", "")
    shim_session = secrets.token_hex(8)
    shim_python = shim_script = None
    if confine:
        # The agent's user runs the shims: an interpreter and a copy of shim.py it can read (a venv under /root,
        # say, it cannot).
        from guardrail.adapters.shell.shimdir import SHIM_SCRIPT

        shim_python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable
        shim_script = work / "shim.py"
        shutil.copyfile(SHIM_SCRIPT, shim_script)
        os.chmod(shim_script, 0o644)
    shims = build_shim_dir(work / "bin", search_path=search_path, socket_path=str(work / "guard.sock"),
                           secret_file=str(secret_file), session=shim_session, via_daemon=confine,
                           python=shim_python, script=shim_script)
    resolved = json.loads((shims / RESOLVED_FILE).read_text())["resolved"]
    daemon = GuardDaemon(session, work / "guard.sock", secret=secret, runs_for=resolved if confine else None,
                         run_env=dict(env))
    try:
        daemon.start()
        pygc.settle()  # engines and sessions are built: stop re-scanning them (guardrail/pygc.py)
        session.journal.append("shims", directory=str(shims), resolved=resolved, confined=confine)
        if agent_user is not None:
            hand_over(work, secret_file, daemon.socket_path, agent_user)
        env["PATH"] = f"{shims}{os.pathsep}{env.get('PATH', '')}"
        env[SOCKET_ENV] = daemon.socket_path
        env[SHIM_DIR_ENV] = str(shims)
        env[SECRET_ENV] = str(secret_file)
        env[SESSION_ENV] = shim_session
        argv = agent_argv(agent_command) if agent_user is None else \
            confined_argv(agent_command, agent_user, hidden_clients(resolved, search_path))
        if agent_user is not None:
            env.update(HOME=agent_user.pw_dir if os.path.isdir(agent_user.pw_dir) else "/tmp",
                       USER=agent_user.pw_name, LOGNAME=agent_user.pw_name)
        # The shims run the real tools in the agent's shell: an environment that points them somewhere (the
        # Kubernetes environment's KUBECONFIG) says so, so the agent acts where the guard looks.
        shell_variables = getattr(session.env, "shell_variables", None)
        if callable(shell_variables):
            env.update(shell_variables())
        try:
            agent = subprocess.Popen(argv, env=env)
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


# -- confined mode (`--confine`): the agent as its own user, the real clients hidden from it ---------------------


def confined_user(name: str) -> pwd.struct_passwd:
    """The agent's unprivileged user, created as a system user when missing; bad input unless we are root."""
    if not sys.platform.startswith("linux"):
        raise InputError("--confine needs Linux (mount namespaces)", path="--confine")
    if os.geteuid() != 0:
        raise InputError("--confine needs root: it runs the agent as its own user and hides the real clients "
                         "from it (run the guard as root, or without --confine)", path="--confine")
    try:
        user = pwd.getpwnam(name)
    except KeyError:
        made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                              capture_output=True, text=True)
        if made.returncode != 0:
            raise InputError(f"cannot create user {name}: {made.stderr.strip() or made.returncode}",
                             path="--confine-user") from None
        user = pwd.getpwnam(name)
    if user.pw_uid == 0 or user.pw_gid == 0:
        raise InputError(f"{name} is root, or in root's group: the agent's user must be unprivileged",
                         path="--confine-user")
    return user


def hand_over(work: Path, secret_file: Path, socket_path: str, user: pwd.struct_passwd) -> None:
    """Let the agent's user reach the socket, its secret and the shims; nothing else of the session directory."""
    os.chmod(work, 0o711)
    for p in (secret_file, Path(socket_path)):
        os.chown(p, user.pw_uid, user.pw_gid)
    os.chmod(work / "bin", 0o755)


# Where a shell finds a program without the agent's PATH: bash's `command -p` searches the system's standard path
# (confstr _CS_PATH), and `hash -p FILE`, an absolute path or a PATH the agent sets itself can name any of these.
_SYSTEM_BIN_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin", "/snap/bin")


def _standard_path() -> str:
    try:
        return os.confstr("CS_PATH") or ""
    except (ValueError, OSError):
        return ""


def hidden_clients(resolved: dict[str, str | None], search_path: str) -> list[str]:
    """Every file the agent could run a shimmed tool from: each one of that name on PATH, on the standard path
    (`command -p`) and in the system's bin directories, the file each resolves to, and PostgreSQL's versioned
    client directories (Debian's psql is a wrapper that runs one of them)."""
    import glob

    paths: set[str] = set()
    dirs = [*search_path.split(os.pathsep), *_standard_path().split(os.pathsep), *_SYSTEM_BIN_DIRS]
    for tool in resolved:
        for d in dirs:
            cand = os.path.join(d, tool) if d else ""
            if cand and os.path.isfile(cand):
                paths.update({os.path.abspath(cand), os.path.realpath(cand)})
        paths.update(glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"))
    return sorted(p for p in paths if os.path.isfile(p))


# Run as root in a new mount namespace (`unshare --mount --propagation private`): cover each client with /dev/null
# (exec then fails with EACCES; the guard, outside the namespace, still sees the real file), drop to the agent's
# user for good (no new privileges: a setuid program cannot lift it back), ask for SIGTERM when the guard dies,
# and exec the agent.
_CONFINE = """\
import ctypes, json, os, signal, subprocess, sys
guard, uid, gid, hidden = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
for p in hidden:
    if subprocess.call(["mount", "--bind", "/dev/null", p]) != 0:
        sys.stderr.write("error: cannot hide %s from the agent\\n" % p)
        sys.exit(2)
os.setgroups([])
os.setgid(gid)
os.setuid(uid)
libc = ctypes.CDLL(None)
libc.prctl(38, 1, 0, 0, 0)
libc.prctl(1, signal.SIGTERM)
if os.getppid() != guard:
    sys.exit(143)
try:
    os.execvp(sys.argv[5], sys.argv[5:])
except OSError as e:
    sys.stderr.write("error: cannot start %s: %s\\n" % (sys.argv[5], e.strerror or e))
    sys.exit(2)
"""


def confined_argv(agent_command: tuple[str, ...] | list[str], user: pwd.struct_passwd,
                  hidden: list[str]) -> list[str]:
    return ["unshare", "--mount", "--propagation", "private", "--", sys.executable, "-S", "-c", _CONFINE,
            str(os.getpid()), str(user.pw_uid), str(user.pw_gid), json.dumps(hidden), *agent_command]
