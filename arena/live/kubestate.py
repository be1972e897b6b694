"""A kube-state-metrics stand-in for the live stack: the emulated cluster's workloads as Prometheus metrics.

In the tasks, readiness and restart counts reach Prometheus through kube-state-metrics, which reads the API
server; here this exporter (a prometheus_client HTTP server in the controlling process, on its own loopback
address as `kube-state-metrics:8080`) reads the stack's emulated API server (`arena.live.cluster.LiveCluster`)
and publishes under kube-state-metrics' names, which `verifiers.clients.prometheus.PromMetrics` expects:

  kube_deployment_status_replicas_ready{namespace, deployment}    the Deployment's status.readyReplicas
  kube_statefulset_status_replicas_ready{namespace, statefulset}  the StatefulSet's status.readyReplicas
  kube_pod_container_status_restarts_total{namespace, pod, container}  the component's process restarts (a
      pod replaced, or a crashed process started again), on its current pod

Started and stopped by `arena.live.stack.LiveStack`.
"""

from __future__ import annotations

from typing import Iterable

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from arena.live.cluster import COMPONENT_LABEL
from arena.live.kubeapi.store import resource_for
from arena.live.names import Endpoint

__all__ = ["KubeStateExporter"]

_KINDS = {"deployments": "deployment", "statefulsets": "statefulset"}


class _WorkloadCollector:
    """Reads the cluster's workloads and pods at scrape time."""

    def __init__(self, stack):
        self.stack = stack

    def collect(self) -> Iterable:
        ready = {kind: GaugeMetricFamily(f"kube_{kind}_status_replicas_ready", "ready replicas",
                                         labels=["namespace", kind]) for kind in _KINDS.values()}
        restarts = CounterMetricFamily("kube_pod_container_status_restarts_total", "container restarts",
                                       labels=["namespace", "pod", "container"])
        cluster = self.stack.cluster
        if cluster is not None:
            counts = {**self.stack.supervisor.restarts, **self.stack.server_restarts} \
                if self.stack.supervisor is not None else dict(self.stack.server_restarts)
            with cluster.store.lock:
                for plural, kind in _KINDS.items():
                    for w in cluster.store.list(resource_for("apps", "v1", plural))[0]:
                        ready[kind].add_metric([w["metadata"]["namespace"], w["metadata"]["name"]],
                                               float((w.get("status") or {}).get("readyReplicas") or 0))
                for p in cluster.store.list(resource_for("", "v1", "pods"))[0]:
                    comp = (p["metadata"].get("labels") or {}).get(COMPONENT_LABEL, "")
                    restarts.add_metric([p["metadata"]["namespace"], p["metadata"]["name"], comp],
                                        float(counts.get(comp, 0)))
        yield from ready.values()
        yield restarts


class KubeStateExporter:
    """Serves the workload metrics on one loopback endpoint."""

    def __init__(self, stack, endpoint: Endpoint):
        self.endpoint = endpoint
        self.registry = CollectorRegistry()
        self.registry.register(_WorkloadCollector(stack))
        self._server = None
        self._thread = None

    def start(self) -> None:
        self._server, self._thread = start_http_server(self.endpoint.port, addr=self.endpoint.address,
                                                       registry=self.registry)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
