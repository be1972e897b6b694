"""Launchers for the real servers of the live stack: PostgreSQL 15, Redis 7, MariaDB 10.11 and Prometheus 2.42.

Each runs from the Debian package's binaries, without systemd, in its own directory under the stack's temp dir,
bound to its own loopback address (see `arena.live.names`). `start()` returns when the server answers (a
readiness check, not a fixed sleep) and raises `ServerStartError`, naming the server and its log, when it does
not. `stop()` ends the server and checks that no process of it is left. Called by `arena.live.stack.LiveStack`.

PostgreSQL and MariaDB refuse to run as root: when we are root they run as the `postgres` and `mysql` users
(initdb/pg_ctl through setpriv, mariadbd through its own `user=` option), and their directories are handed over.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from arena.live.clock import WallClock, wait_until
from arena.live.names import Endpoint
from guardrail.errors import EnvironmentError_
from guardrail.policy import goruntime

__all__ = [
    "ServerStartError",
    "Server",
    "PostgresServer",
    "RedisServer",
    "MariaDBServer",
    "PrometheusServer",
    "ScrapeTarget",
    "PG_BIN",
]

PG_BIN = Path(os.environ.get("LIVE_PG_BIN", "/usr/lib/postgresql/15/bin"))
REDIS_SERVER = os.environ.get("LIVE_REDIS_SERVER", "/usr/bin/redis-server")
MARIADBD = os.environ.get("LIVE_MARIADBD", "/usr/sbin/mariadbd")
PROMETHEUS = os.environ.get("LIVE_PROMETHEUS", "/usr/bin/prometheus")


class ServerStartError(EnvironmentError_):
    """A server of the live stack did not start; the message names it and its log file."""

    def __init__(self, server: str, reason: str, log: Path | None):
        self.server = server
        self.log = log
        tail = _tail(log) if log else ""
        where = f"; see {log}" if log else ""
        super().__init__(f"{server} failed to start: {reason}{where}" + (f"\n{tail}" if tail else ""))


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _is_root() -> bool:
    return os.geteuid() == 0


def _as_user(user: str) -> list[str]:
    """A command prefix that drops root to `user`; empty when we are not root (then we run as ourselves)."""
    if not _is_root():
        return []
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--"]


def _chown(path: Path, user: str) -> None:
    if _is_root():
        shutil.chown(path, user, user)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return _not_zombie(pid)


def _not_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class Server:
    """One real server process in its own directory on its own loopback endpoint."""

    name: str = "server"

    def __init__(self, endpoint: Endpoint, base: Path, *, clock=None, start_timeout_s: float = 60.0):
        self.endpoint = endpoint
        self.base = Path(base)
        self.clock = clock or WallClock()
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.log_path = self.base / f"{self.name}.log"
        self.started_s: float | None = None  # seconds from launch to ready, measured

    # -- to implement -------------------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Create the directory, data and config (first start only, unless the config is rendered each time)."""

    def launch(self) -> None:
        """Start the process (sets self.proc when we own it directly)."""
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc else []

    # -- shared -------------------------------------------------------------------------------------------------
    def start(self) -> float:
        self.base.mkdir(parents=True, exist_ok=True)
        os.chmod(self.base, 0o755)
        t0 = self.clock.now()
        self.prepare()
        self.launch()
        ok = wait_until(self.ready, timeout_s=self.start_timeout_s, clock=self.clock, abort=self._died)
        if not ok:
            reason = "process exited" if self._died() else f"not ready after {self.start_timeout_s:.0f} s"
            self.stop()
            raise ServerStartError(self.name, reason, self.log_path)
        self.started_s = self.clock.now() - t0
        return self.started_s

    def _died(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def stop(self, timeout_s: float = 10.0) -> None:
        self._terminate(self.proc, timeout_s)
        self.proc = None

    def _terminate(self, proc: subprocess.Popen | None, timeout_s: float) -> None:
        if proc is None or proc.poll() is not None:
            return
        # Each server leads its own session, so the group holds its helpers too.
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)

    def alive(self) -> bool:
        return any(_pid_alive(p) for p in self.pids())

    def instance_id(self) -> str:
        """Like a pod name plus UID: the service name and the server's current main pid."""
        pids = self.pids()
        return f"{self.endpoint.name}-{pids[0]}" if pids else ""

    binary: str = ""

    def image(self) -> str:
        """The identity of the installed server binary (path, size, mtime): unchanged by a restart."""
        try:
            st = os.stat(self.binary)
        except OSError:
            return ""
        return hashlib.sha256(f"{self.binary}:{st.st_size}:{int(st.st_mtime)}".encode()).hexdigest()[:24]

    def _popen(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> subprocess.Popen:
        log = open(self.log_path, "ab")
        try:
            return subprocess.Popen(
                list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                # Without the Go GC settings the guard set for its own OPA engine (Prometheus is a Go program too).
                start_new_session=True, cwd=self.base, env={**goruntime.child_env(), **(env or {})},
            )
        except OSError as e:
            raise ServerStartError(self.name, f"cannot exec {argv[0]}: {e.strerror}", self.log_path) from e
        finally:
            log.close()

    def _run(self, argv: Sequence[str], what: str, *, input: str | None = None, timeout: float = 60) -> str:
        try:
            r = subprocess.run(list(argv), capture_output=True, text=True, input=input, timeout=timeout,
                               cwd=self.base)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ServerStartError(self.name, f"{what}: {e}", self.log_path) from e
        with open(self.log_path, "a") as log:
            log.write(f"$ {' '.join(argv)}\n{r.stdout}{r.stderr}")
        if r.returncode != 0:
            raise ServerStartError(self.name, f"{what} exited {r.returncode}: {r.stderr.strip()[:300]}",
                                   self.log_path)
        return r.stdout

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.endpoint.name} {self.endpoint.hostport}>"


def _tcp_accepts(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------------------------------- PostgreSQL
class PostgresServer(Server):
    """PostgreSQL 15 through initdb and pg_ctl, as the postgres user, socket directory inside its base dir."""

    name = "postgresql"
    binary = str(PG_BIN / "postgres")

    def __init__(self, endpoint: Endpoint, base: Path, *, superuser_password: str = "postgres",
                 settings: Mapping[str, Any] | None = None, **kw):
        super().__init__(endpoint, base, **kw)
        self.data = self.base / "data"
        self.socket_dir = self.base
        self.superuser_password = superuser_password
        self.settings = {"max_connections": 100, "fsync": "off", "shared_buffers": "32MB", **(settings or {})}

    def prepare(self) -> None:
        _chown(self.base, "postgres")
        self.log_path.touch()
        _chown(self.log_path, "postgres")
        if (self.data / "PG_VERSION").exists():
            return
        pwfile = self.base / ".pwfile"
        pwfile.write_text(self.superuser_password + "\n")
        _chown(pwfile, "postgres")
        self._run(_as_user("postgres") + [
            str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", f"--pwfile={pwfile}",
            "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync", "--no-instructions", "-E", "UTF8",
            "--locale=C.UTF-8",
        ], "initdb")
        pwfile.unlink()
        # Server-wide settings live in postgresql.conf (the declared file layer); ALTER SYSTEM writes
        # postgresql.auto.conf beside it, exactly as in a real cluster.
        conf = {
            "listen_addresses": f"'{self.endpoint.address}'",
            "port": self.endpoint.port,
            "unix_socket_directories": f"'{self.socket_dir}'",
            "log_line_prefix": "'%m [%p] %q%u@%d '",
            **{k: (v if isinstance(v, (int, float)) else f"'{v}'") for k, v in self.settings.items()},
        }
        with open(self.data / "postgresql.conf", "a") as f:
            f.write("\n# arena.live\n" + "".join(f"{k} = {v}\n" for k, v in conf.items()))
        # The superuser is trusted on loopback so that each scenario's admin DSN works whatever password it
        # names (one server may serve several substrates); every other role needs its password.
        (self.data / "pg_hba.conf").write_text(
            "local all all trust\nhost all postgres 127.0.0.0/8 trust\nhost all all 127.0.0.0/8 scram-sha-256\n")

    def launch(self) -> None:
        # pg_ctl -w is itself the readiness check: it returns once the postmaster accepts connections.
        self._run(_as_user("postgres") + [
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log_path), "-w", "-t",
            str(int(self.start_timeout_s)), "start",
        ], "pg_ctl start", timeout=self.start_timeout_s + 5)

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def pids(self) -> list[int]:
        pid = self.postmaster_pid()
        return [pid] if pid else []

    def ready(self) -> bool:
        return _tcp_accepts(self.endpoint.address, self.endpoint.port)

    def _died(self) -> bool:
        return False

    def stop(self, timeout_s: float = 10.0) -> None:
        pid = self.postmaster_pid()
        if pid is None or not _pid_alive(pid):
            return
        r = subprocess.run(_as_user("postgres") + [
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "-t", str(int(timeout_s)), "stop"],
            capture_output=True, text=True)
        if r.returncode != 0 and _pid_alive(pid):
            os.kill(pid, signal.SIGQUIT)
        # pg_ctl returns once postmaster.pid is gone, a moment before the postmaster itself has exited.
        if not wait_until(lambda: not _pid_alive(pid), timeout_s=timeout_s, clock=self.clock, interval_s=0.05):
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: not _pid_alive(pid), timeout_s=5, clock=self.clock, interval_s=0.05)

    def psql(self, sql: str, *, database: str = "postgres", user: str = "postgres") -> str:
        """Run SQL as the superuser over the unix socket (bootstrap only; agents use the TCP DSN)."""
        return self._run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(self.socket_dir), "-p",
                          str(self.endpoint.port), "-U", user, "-d", database, "-At", "-f", "-"],
                         f"psql bootstrap on {database}", input=sql)

    def dsn(self, user: str = "postgres", password: str | None = None, database: str = "postgres") -> str:
        pw = password if password is not None else (self.superuser_password if user == "postgres" else "")
        auth = f"{user}:{pw}" if pw else user
        return f"postgresql://{auth}@{self.endpoint.name}:{self.endpoint.port}/{database}"


# -------------------------------------------------------------------------------------------------------- Redis
class RedisServer(Server):
    """Redis 7 in the foreground; its redis.conf is rendered from a Helm-style values file on every start.

    Like the Bitnami chart's start script, the rendered file is rewritten at each start, so a `CONFIG REWRITE`
    into it does not survive a restart: only the values file is durable.
    """

    name = "redis"
    binary = REDIS_SERVER

    def __init__(self, endpoint: Endpoint, base: Path, *, values_path: Path, **kw):
        super().__init__(endpoint, base, **kw)
        self.name = f"redis ({endpoint.name})"
        self.log_path = self.base / "redis.log"
        self.values_path = Path(values_path)
        self.conf_path = self.base / "redis.conf"

    def render(self) -> list[str]:
        """Write redis.conf from the values file; return the extra flags, passed on the command line."""
        try:
            values = yaml.safe_load(self.values_path.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ServerStartError(self.name, f"cannot read values {self.values_path}: {e}", self.log_path) from e
        master = values.get("master", {}) or {}
        persistence = (master.get("persistence", {}) or {}).get("enabled", True)
        lines = [
            f"bind {self.endpoint.address}",
            f"port {self.endpoint.port}",
            f"dir {self.base / 'data'}",
            "daemonize no",
            "protected-mode no",
            f"appendonly {'yes' if persistence else 'no'}",
            "save ''",
        ]
        for k, v in (master.get("config", {}) or {}).items():
            lines.append(f"{k} {v}")
        self.conf_path.write_text("# rendered from %s at start; edits here are lost\n" % self.values_path
                                  + "\n".join(lines) + "\n")
        flags: list[str] = []
        for flag in master.get("extraFlags", []) or []:
            flags += str(flag).split()
        return flags

    def prepare(self) -> None:
        (self.base / "data").mkdir(exist_ok=True)

    def launch(self) -> None:
        flags = self.render()
        self.proc = self._popen([REDIS_SERVER, str(self.conf_path), *flags])

    def ready(self) -> bool:
        try:
            with socket.create_connection((self.endpoint.address, self.endpoint.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False


# ------------------------------------------------------------------------------------------------------ MariaDB
class MariaDBServer(Server):
    """MariaDB 10.11 with --defaults-file and user=mysql; my.cnf is its declared configuration layer."""

    name = "mariadb"
    binary = MARIADBD

    def __init__(self, endpoint: Endpoint, base: Path, *, max_user_connections: int = 1000,
                 settings: Mapping[str, Any] | None = None, **kw):
        super().__init__(endpoint, base, **kw)
        if max_user_connections <= 0:
            # With 0 at start, a later SET GLOBAL max_user_connections is refused with error 1290.
            raise ValueError("MariaDB must start with a non-zero max_user_connections")
        self.data = self.base / "data"
        self.run_dir = self.base / "run"
        self.cnf = self.base / "my.cnf"
        self.log_path = self.run_dir / "error.log"
        self.settings = {"max_user_connections": max_user_connections, "max_connections": 151, **(settings or {})}

    @property
    def socket_path(self) -> Path:
        return self.run_dir / "mysqld.sock"

    def prepare(self) -> None:
        self.run_dir.mkdir(exist_ok=True)
        _chown(self.run_dir, "mysql")
        if not self.cnf.exists():
            user = "mysql" if _is_root() else os.environ.get("USER", "nobody")
            lines = [
                "[mysqld]", f"datadir={self.data}", f"socket={self.socket_path}",
                f"pid-file={self.run_dir / 'mysqld.pid'}", f"log-error={self.log_path}",
                # Its own temporary directory: stacks that install side by side must not share /tmp's
                # #sql-temptable files (seen: "Unknown table 'mysql.tmp_user_sys'" from a clash).
                f"tmpdir={self.run_dir}",
                f"bind-address={self.endpoint.address}", f"port={self.endpoint.port}", f"user={user}",
                "skip-name-resolve", "innodb_buffer_pool_size=16M", "innodb_log_file_size=8M",
                "innodb_use_native_aio=0", "innodb_flush_log_at_trx_commit=2", "skip-log-bin",
                *(f"{k}={v}" for k, v in self.settings.items()),
            ]
            self.cnf.write_text("\n".join(lines) + "\n")
        if not (self.data / "mysql").exists():
            self.data.mkdir(exist_ok=True)
            _chown(self.data, "mysql")
            self._run(["mariadb-install-db", f"--defaults-file={self.cnf}", "--skip-test-db",
                       "--auth-root-authentication-method=normal"], "mariadb-install-db")

    def launch(self) -> None:
        self.proc = self._popen([MARIADBD, f"--defaults-file={self.cnf}"])

    def ready(self) -> bool:
        if not self.socket_path.exists():
            return False
        r = subprocess.run(["mariadb-admin", f"--socket={self.socket_path}", "-uroot", "ping"],
                           capture_output=True, timeout=5)
        return r.returncode == 0

    def sql(self, sql: str, *, database: str | None = None) -> str:
        """Run SQL as root over the unix socket (bootstrap only)."""
        argv = ["mariadb", f"--socket={self.socket_path}", "-uroot", "--batch"]
        if database:
            argv.append(database)
        return self._run(argv, "mariadb bootstrap", input=sql)


# --------------------------------------------------------------------------------------------------- Prometheus
@dataclass(frozen=True)
class ScrapeTarget:
    """A job Prometheus scrapes: the service name (the job and instance label) and its endpoint."""

    job: str
    endpoint: Endpoint
    metrics_path: str = "/metrics"
    labels: Mapping[str, str] = field(default_factory=dict)


class PrometheusServer(Server):
    """Prometheus 2.42 scraping the stack's services every second; its config is rendered on each start."""

    name = "prometheus"
    binary = PROMETHEUS

    def __init__(self, endpoint: Endpoint, base: Path, *, targets: Sequence[ScrapeTarget],
                 scrape_interval_s: float = 1.0, **kw):
        super().__init__(endpoint, base, **kw)
        self.targets = list(targets)
        self.scrape_interval_s = scrape_interval_s
        self.conf_path = self.base / "prometheus.yml"

    def render(self) -> None:
        interval = f"{int(self.scrape_interval_s * 1000)}ms"
        jobs = []
        for t in self.targets:
            jobs.append({
                "job_name": t.job,
                "metrics_path": t.metrics_path,
                "static_configs": [{"targets": [t.endpoint.hostport],
                                    "labels": {"service": t.endpoint.name, **dict(t.labels)}}],
                # Operators see service names, not the stack's private addresses.
                "relabel_configs": [{"target_label": "instance",
                                     "replacement": f"{t.endpoint.name}:{t.endpoint.port}"}],
            })
        conf = {"global": {"scrape_interval": interval, "evaluation_interval": interval,
                           "scrape_timeout": interval}, "scrape_configs": jobs}
        self.conf_path.write_text(yaml.safe_dump(conf, sort_keys=False))

    def prepare(self) -> None:
        (self.base / "tsdb").mkdir(exist_ok=True)
        self.render()

    def launch(self) -> None:
        self.proc = self._popen([
            PROMETHEUS, f"--config.file={self.conf_path}", f"--storage.tsdb.path={self.base / 'tsdb'}",
            f"--web.listen-address={self.endpoint.hostport}", "--storage.tsdb.retention.time=2h",
            "--web.enable-lifecycle", "--log.level=warn",
        ])

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint.url}/-/ready", timeout=0.5) as r:
                return r.status == 200
        except OSError:
            return False

    @property
    def url(self) -> str:
        return self.endpoint.url
