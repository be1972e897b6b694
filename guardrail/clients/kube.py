"""The Kubernetes API through the official `kubernetes` client: the only guardrail module that imports it.

Used by `guardrail.envs.kubernetes` (describe, restart, declared-layer reads) and `guardrail context init`. It
answers plain decoded JSON (the API's own camelCase objects, not the client's model classes) and turns every
client failure into `KubeError`, so callers see one error type with the HTTP status and the API's message.
Configuration: a kubeconfig file (or the client's default, KUBECONFIG / ~/.kube/config) and an optional context,
or the in-cluster service account when the guard runs in a pod and no kubeconfig is given.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

__all__ = ["KubeError", "KubeClient", "WORKLOAD_KINDS", "KIND_NAMES", "in_cluster"]

# kind as kubectl spells the resource -> the apps/v1 plural (restartable workloads, in the order describe lists them)
WORKLOAD_KINDS = {"deployment": "deployments", "statefulset": "statefulsets", "daemonset": "daemonsets"}
KIND_NAMES = {"deployment": "Deployment", "statefulset": "StatefulSet", "daemonset": "DaemonSet"}
_SINGULAR = {"pods": "pod", "configmaps": "config_map", "secrets": "secret", "deployments": "deployment",
             "statefulsets": "stateful_set", "daemonsets": "daemon_set", "replicasets": "replica_set"}
SERVICE_ACCOUNT_NS = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class KubeError(Exception):
    """A failed API call: HTTP status (0 when the server could not be reached), reason and message."""

    def __init__(self, status: int, reason: str, message: str):
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message

    @property
    def not_found(self) -> bool:
        return self.status == 404


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and SERVICE_ACCOUNT_NS.exists()


class KubeClient:
    """One cluster and namespace, reached with a kubeconfig (and context) or the in-cluster service account."""

    def __init__(self, *, kubeconfig: str | None = None, context: str | None = None, namespace: str | None = None,
                 timeout_s: float = 30.0):
        self.timeout_s = timeout_s
        self.kubeconfig, self.context = kubeconfig, context
        cfg_namespace = None
        try:
            if kubeconfig is None and context is None and in_cluster():
                config.load_incluster_config()
                self.api = client.ApiClient()
                cfg_namespace = SERVICE_ACCOUNT_NS.read_text().strip()
            else:
                self.api = config.new_client_from_config(config_file=kubeconfig, context=context)
                _, active = config.list_kube_config_contexts(config_file=kubeconfig)
                if context:
                    contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
                    active = next((c for c in contexts if c.get("name") == context), active)
                cfg_namespace = ((active or {}).get("context") or {}).get("namespace")
        except (ConfigException, OSError, TypeError, ValueError) as e:
            raise KubeError(0, "BadConfig", f"cannot load the Kubernetes configuration: {e}") from e
        self.namespace = namespace or cfg_namespace or "default"
        self.core, self.apps = client.CoreV1Api(self.api), client.AppsV1Api(self.api)
        self.server = self.api.configuration.host

    # -- typed calls, answered as the API's JSON -----------------------------------------------------------------

    def _do(self, group: str, verb: str, plural: str, *args: Any, **kw: Any) -> Any:
        api = self.apps if group == "apps" else self.core
        fn = getattr(api, f"{verb}_namespaced_{_SINGULAR[plural]}")
        try:
            return self.api.sanitize_for_serialization(fn(*args, _request_timeout=self.timeout_s, **kw))
        except ApiException as e:
            message = e.reason or ""
            try:
                message = json.loads(e.body or "{}").get("message") or message
            except (TypeError, ValueError):
                pass
            raise KubeError(int(e.status or 0), str(e.reason or ""), message) from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise KubeError(0, "Unreachable", f"cannot reach the Kubernetes API at {self.server}: {e}") from e

    def list(self, group: str, plural: str, namespace: str | None = None, *, labels: str | None = None,
             fields: str | None = None) -> list[dict[str, Any]]:
        kw = {k: v for k, v in (("label_selector", labels), ("field_selector", fields)) if v}
        out = self._do(group, "list", plural, namespace or self.namespace, **kw)
        return list((out or {}).get("items") or [])

    def get(self, group: str, plural: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self._do(group, "read", plural, name, namespace or self.namespace)

    def find(self, group: str, plural: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            return self.get(group, plural, name, namespace)
        except KubeError as e:
            if e.not_found:
                return None
            raise

    def patch(self, group: str, plural: str, name: str, body: dict[str, Any],
              namespace: str | None = None) -> dict[str, Any]:
        """A strategic merge patch, as `kubectl patch` and `kubectl rollout restart` send."""
        return self._do(group, "patch", plural, name, namespace or self.namespace, body,
                        _content_type="application/strategic-merge-patch+json")

    def namespace_exists(self, namespace: str | None = None) -> bool:
        try:
            self.api.sanitize_for_serialization(self.core.read_namespace(namespace or self.namespace,
                                                                         _request_timeout=self.timeout_s))
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            if e.status == 403:
                return True  # a namespaced Role cannot read the Namespace object; its lists still answer
            raise KubeError(int(e.status or 0), str(e.reason or ""), str(e.reason or "")) from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise KubeError(0, "Unreachable", f"cannot reach the Kubernetes API at {self.server}: {e}") from e

    def workload(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.find("apps", WORKLOAD_KINDS[kind], name, namespace)

    def workloads(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Deployments, StatefulSets and DaemonSets of the namespace, each with its `kind`."""
        out = []
        for kind, plural in WORKLOAD_KINDS.items():
            for o in self.list("apps", plural, namespace):
                o["kind"] = KIND_NAMES[kind]
                out.append(o)
        return out

    def pods(self, selector: dict[str, Any] | None, namespace: str | None = None) -> list[dict[str, Any]]:
        labels = ",".join(f"{k}={v}" for k, v in ((selector or {}).get("matchLabels") or {}).items())
        for e in (selector or {}).get("matchExpressions") or ():
            vals = ",".join(e.get("values") or ())
            labels += ("," if labels else "") + {"In": f"{e['key']} in ({vals})",
                                                 "NotIn": f"{e['key']} notin ({vals})", "Exists": e["key"],
                                                 "DoesNotExist": f"!{e['key']}"}.get(e.get("operator"), e["key"])
        return self.list("", "pods", namespace, labels=labels or None)

    def configmap(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.find("", "configmaps", name, namespace)

    def configmaps(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.list("", "configmaps", namespace)

    def helm_release_secrets(self, namespace: str | None = None, release: str | None = None) -> list[dict[str, Any]]:
        """Helm 3's release Secrets (type helm.sh/release.v1), optionally of one release."""
        labels = "owner=helm" + (f",name={release}" if release else "")
        return [s for s in self.list("", "secrets", namespace, labels=labels)
                if s.get("type") == "helm.sh/release.v1"]
