"""The live stack's container runtime for its app processes: it starts one, stops it, and keeps it running.

The emulated kubelet (`arena.live.cluster.StackPods`) starts an app's process when the API server's controller
starts its pod (`launch`, with the pod's name as the instance id and the config file rendered from the pod's
ConfigMap) and stops it when the pod goes (`stop`); the load generator, which is not in the cluster, is started
directly (`start`). The image identity is a hash of the app's code, which a restart does not change. A process
that dies on its own is started again by `reconcile()` in the same pod and counted as a restart (a container
restart: a CrashLoop shows as a rising count). Called by `arena.live.stack.LiveStack` and the cluster's pods.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import secrets
import signal
import subprocess
import sys
import threading
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from arena.live.clock import WallClock, wait_until
from arena.live.names import Endpoint
from guardrail.errors import EnvironmentError_
from guardrail.policy import goruntime

__all__ = ["AppSpec", "AppStartError", "Supervisor", "image_identity"]

_APPS_DIR = Path(__file__).resolve().parent / "apps"


class AppStartError(EnvironmentError_):
    """An app process of the live stack did not become ready; names it and its log."""


def image_identity(module: str) -> str:
    """sha256 of the app's code (its module and the shared base), the stand-in for a pinned image digest."""
    h = hashlib.sha256()
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise EnvironmentError_(f"no app module {module}")
    for f in sorted({_APPS_DIR / "base.py", Path(spec.origin)}):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return "sha256:" + h.hexdigest()[:32]


@dataclass
class AppSpec:
    """One supervised process: its task name, entry module, endpoint, durable config file and image env."""

    name: str
    module: str
    endpoint: Endpoint
    config_path: Path | None = None
    image_env: Mapping[str, str] = field(default_factory=dict)
    kind: str = "Deployment"
    restartable: bool = True
    health_path: str = "/healthz"


@dataclass
class _Running:
    proc: subprocess.Popen
    instance: str
    image: str
    started_at: float = 0.0


class Supervisor:
    """Starts, restarts and watches the stack's app processes."""

    def __init__(self, run_dir: Path, *, hosts_file: Path, clock=None, ready_timeout_s: float = 60.0):
        self.run_dir = Path(run_dir)
        self.hosts_file = hosts_file
        self.clock = clock or WallClock()
        self.ready_timeout_s = ready_timeout_s
        self.specs: dict[str, AppSpec] = {}
        self.running: dict[str, _Running] = {}
        self.restarts: dict[str, int] = {}
        self._lock = threading.RLock()

    def add(self, spec: AppSpec) -> None:
        self.specs[spec.name] = spec
        self.restarts.setdefault(spec.name, 0)

    def log_path(self, name: str) -> Path:
        return self.run_dir / f"{name}.log"

    def _spawn(self, spec: AppSpec, instance: str | None = None) -> _Running:
        instance = instance or f"{spec.name}-{secrets.token_hex(3)}"
        image = image_identity(spec.module)  # before Popen, so that a bad module cannot orphan a process
        env = {
            **goruntime.child_env(),  # without the Go GC settings the guard set for its own engine
            **dict(spec.image_env),
            "APP_NAME": spec.name,
            "APP_INSTANCE": instance,
            "APP_LISTEN": spec.endpoint.hostport,
            "LIVE_HOSTS_FILE": str(self.hosts_file),
            "PYTHONUNBUFFERED": "1",
        }
        if spec.config_path:
            env["APP_CONFIG"] = str(spec.config_path)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path(spec.name), "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", spec.module], env=env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        return _Running(proc, instance, image, self.clock.now())

    def _healthy(self, spec: AppSpec, instance: str) -> bool:
        try:
            with urllib.request.urlopen(f"{spec.endpoint.url}{spec.health_path}", timeout=1) as r:
                # The instance check makes sure we see the new process, not an old one still on the port.
                return r.status == 200 and instance.encode() in r.read()
        except OSError:
            return False

    def _launch(self, name: str, instance: str | None = None) -> _Running:
        """Spawn and register the app's new process (under the lock, so the watcher never sees a gap)."""
        with self._lock:
            run = self._spawn(self.specs[name], instance)
            self.running[name] = run
            return run

    def launch(self, name: str, instance: str, config_path: Path | None = None) -> _Running:
        """A pod's container: stop any process the app still runs, then start one named `instance` (the pod)
        reading `config_path` (rendered from the pod's ConfigMap); `await_ready` waits for it."""
        with self._lock:
            self.stop(name)
            if config_path is not None:
                self.specs[name].config_path = config_path
            return self._launch(name, instance)

    def await_ready(self, name: str, run: _Running) -> None:
        """Wait until `run` answers its health check; AppStartError (naming its log) when it exits or never does."""
        self._await_ready(name, run)

    def stop(self, name: str) -> None:
        """Stop the app's process (its pod went); `reconcile` does not start it again."""
        with self._lock:
            run = self.running.pop(name, None)
            if run is not None:
                self._kill(run.proc)

    def _await_ready(self, name: str, run: _Running) -> None:
        spec = self.specs[name]
        ok = wait_until(lambda: self._healthy(spec, run.instance), timeout_s=self.ready_timeout_s,
                        clock=self.clock, interval_s=0.05, abort=lambda: run.proc.poll() is not None)
        if not ok:
            why = f"exited with {run.proc.returncode}" if run.proc.poll() is not None else "never became healthy"
            self._kill(run.proc)
            raise AppStartError(f"{name} failed to start: {why}; see {self.log_path(name)}")

    def start(self, name: str) -> _Running:
        run = self._launch(name)
        self._await_ready(name, run)
        return run

    def instance(self, name: str) -> str:
        return self.running[name].instance

    def image(self, name: str) -> str:
        return self.running[name].image if name in self.running else image_identity(self.specs[name].module)

    def ready(self, name: str) -> bool:
        run = self.running.get(name)
        return bool(run and run.proc.poll() is None and self._healthy(self.specs[name], run.instance))

    def reconcile(self) -> list[str]:
        """Start again every app whose process died on its own; returns their names."""
        revived = []
        with self._lock:
            for name, run in list(self.running.items()):
                if run.proc.poll() is not None:
                    self.restarts[name] += 1
                    # The same pod's container again: its readiness shows on /healthz; a CrashLoop, as a rising count.
                    self._launch(name, run.instance)
                    revived.append(name)
        return revived

    def _kill(self, proc: subprocess.Popen, timeout_s: float = 5.0) -> None:
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        except ProcessLookupError:
            pass

    def stop_all(self) -> None:
        with self._lock:
            for run in self.running.values():
                self._kill(run.proc)
            self.running.clear()

    def pids(self) -> list[int]:
        return [r.proc.pid for r in self.running.values() if r.proc.poll() is None]
