"""A kube-state-metrics stand-in for the live stack: the supervisor's view of its workloads as Prometheus metrics.

In the tasks, readiness and restart counts reach Prometheus through kube-state-metrics; here the supervisor and
the server launchers know them, and this exporter (a prometheus_client HTTP server in the controlling process,
on its own loopback address as `kube-state-metrics:8080`) publishes them under kube-state-metrics' names, which
`verifiers.clients.prometheus.PromMetrics` expects:

  kube_deployment_status_replicas_ready{deployment}        1 while the app's current process runs
  kube_statefulset_status_replicas_ready{statefulset}      1 when the server process is alive
  kube_pod_container_status_restarts_total{pod, container} the component's restarts, on its current pod name

Started and stopped by `arena.live.stack.LiveStack`.
"""

from __future__ import annotations

from typing import Callable, Iterable

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from arena.live.names import Endpoint

__all__ = ["KubeStateExporter"]


class _WorkloadCollector:
    """Reads the stack's workloads at scrape time."""

    def __init__(self, stack):
        self.stack = stack

    def collect(self) -> Iterable:
        sup = self.stack.supervisor
        deploy = GaugeMetricFamily("kube_deployment_status_replicas_ready", "ready replicas", labels=["deployment"])
        sts = GaugeMetricFamily("kube_statefulset_status_replicas_ready", "ready replicas", labels=["statefulset"])
        restarts = CounterMetricFamily("kube_pod_container_status_restarts_total", "container restarts",
                                       labels=["pod", "container"])
        if sup is not None:
            for name in list(sup.specs):
                run = sup.running.get(name)
                alive = run is not None and run.proc.poll() is None
                deploy.add_metric([name], 1.0 if alive else 0.0)
                if run is not None:
                    restarts.add_metric([run.instance, "app"], float(sup.restarts.get(name, 0)))
        for name, server in list(self.stack.servers.items()):
            sts.add_metric([name], 1.0 if server.alive() else 0.0)
            pod = server.instance_id() or f"{name}-0"
            restarts.add_metric([pod, name], float(self.stack.server_restarts.get(name, 0)))
        yield deploy
        yield sts
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
