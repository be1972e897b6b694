"""Pods bound to real processes: the emulated kubelet's `PodRuntime` for the stand-in API server.

Used by tests where a pod must be a real server (the live stack has its own, `arena.live.cluster.StackPods`): a pod
start renders the ConfigMap volumes its containers mount into files under the pod's own directory (Kubernetes'
projection: one file per key), then starts the binding's command; a pod stop terminates the process; readiness is
the process alive and the binding's check passing; the pod's log is the process's output. Pods no binding matches
run nothing (`InertRuntime`).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from arena.live.kubeapi.controller import InertRuntime
from arena.live.kubeapi.store import LabelSelector, Store, resource_for

__all__ = ["ProcessBinding", "ProcessRuntime"]


@dataclass(frozen=True)
class ProcessBinding:
    """Which pods (a label selector) run which command, and how to tell that one is ready."""

    selector: str
    # (pod, root) -> argv; `root` is the pod's directory, holding its ConfigMap volumes at root/<mountPath>/<key>
    command: Callable[[dict[str, Any], Path], list[str]]
    ready: Callable[[dict[str, Any]], bool]
    # A pod start waits (real seconds, bounded) for the process to pass `ready`, as a container's start would.
    start_timeout_s: float = 30.0


class ProcessRuntime:
    """Starts and stops one process per bound pod; the rest are inert."""

    def __init__(self, store: Store, workdir: Path, bindings: list[ProcessBinding]):
        self.store, self.workdir, self.bindings = store, Path(workdir), bindings
        self.procs: dict[str, subprocess.Popen] = {}
        self.inert = InertRuntime()
        self.started: list[str] = []

    def _binding(self, pod: dict[str, Any]) -> ProcessBinding | None:
        labels = pod["metadata"].get("labels") or {}
        return next((b for b in self.bindings if LabelSelector(b.selector).matches(labels)), None)

    def _root(self, pod: dict[str, Any]) -> Path:
        return self.workdir / pod["metadata"]["name"] / pod["metadata"]["uid"][:8]

    def _render(self, pod: dict[str, Any], root: Path) -> None:
        cms = resource_for("", "v1", "configmaps")
        volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or ()}
        for c in (pod.get("spec") or {}).get("containers") or ():
            for m in c.get("volumeMounts") or ():
                src = (volumes.get(m.get("name")) or {}).get("configMap")
                if not src:
                    continue
                cm = self.store.find(cms, pod["metadata"]["namespace"], src.get("name", "")) or {}  # type: ignore
                where = root / str(m["mountPath"]).lstrip("/")
                where.mkdir(parents=True, exist_ok=True)
                for key, text in (cm.get("data") or {}).items():
                    (where / key).write_text(text)

    def pod_started(self, pod: dict[str, Any]) -> None:
        b = self._binding(pod)
        if b is None:
            return self.inert.pod_started(pod)
        root = self._root(pod)
        root.mkdir(parents=True, exist_ok=True)
        self._render(pod, root)
        log = open(root / "process.log", "wb")
        proc = subprocess.Popen(b.command(pod, root), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=root)
        log.close()
        self.procs[pod["metadata"]["uid"]] = proc
        self.started.append(pod["metadata"]["name"])
        deadline = time.monotonic() + b.start_timeout_s
        while proc.poll() is None and not b.ready(pod) and time.monotonic() < deadline:
            time.sleep(0.02)  # a container starting: real time, bounded

    def pod_stopped(self, pod: dict[str, Any]) -> None:
        proc = self.procs.pop(pod["metadata"]["uid"], None)
        if proc is None:
            return self.inert.pod_stopped(pod)
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def pod_ready(self, pod: dict[str, Any]) -> bool:
        proc = self.procs.get(pod["metadata"]["uid"])
        b = self._binding(pod)
        if b is None or proc is None:
            return self.inert.pod_ready(pod)
        return proc.poll() is None and b.ready(pod)

    def pod_log(self, pod: dict[str, Any], container: str) -> str:
        if pod["metadata"]["uid"] not in self.procs and self._binding(pod) is None:
            return self.inert.pod_log(pod, container)
        try:
            return (self._root(pod) / "process.log").read_text(errors="replace")
        except OSError:
            return ""

    def pod_pid(self, pod: dict[str, Any], container: str) -> int | None:
        """The pid of the pod's process while it runs (`kubectl exec` runs beside it); None for an inert pod."""
        proc = self.procs.get(pod["metadata"]["uid"])
        return proc.pid if proc is not None and proc.poll() is None else None

    def stop_all(self) -> None:
        for uid in list(self.procs):
            proc = self.procs.pop(uid)
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
