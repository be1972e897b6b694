"""`guardrail context init`: a starting context (ctx.yaml) read from a cluster namespace, for the team to review.

Called by guardrail/cli/context.py. It reads through `guardrail.clients.kube` only: the namespace's Deployments,
StatefulSets and DaemonSets (components; which are restartable), the ConfigMaps each one mounts or takes env from,
and the Helm releases (from their release Secrets' labels) that manage them. The file it writes loads as an
`IncidentContext`; its comments say what a person must decide, because a cluster cannot say what may be restarted
in production or which settings are protected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from guardrail.clients.kube import KubeClient
from guardrail.context import IncidentContext

__all__ = ["WorkloadFacts", "ClusterFacts", "read_cluster", "render_context"]

# A file a ConfigMap key projects, by name, and the settings family it declares (catalogue key glob).
CONFIG_FILE_KEYS = {"redis.conf": "redis.*"}


@dataclass
class WorkloadFacts:
    """What the cluster says about one workload."""

    name: str
    kind: str
    replicas: int
    images: list[str]
    configmaps: dict[str, list[str]] = field(default_factory=dict)  # name -> how it is used (mount path, env ...)
    helm_release: str | None = None


@dataclass
class ClusterFacts:
    namespace: str
    server: str
    workloads: list[WorkloadFacts]
    configmap_keys: dict[str, list[str]]
    helm_releases: list[str]


def _uses(pod_spec: dict[str, Any]) -> dict[str, list[str]]:
    uses: dict[str, list[str]] = {}
    volumes = {v.get("name"): v for v in pod_spec.get("volumes") or ()}
    for c in (pod_spec.get("containers") or []) + (pod_spec.get("initContainers") or []):
        for m in c.get("volumeMounts") or ():
            cm = (volumes.get(m.get("name")) or {}).get("configMap")
            if cm:
                uses.setdefault(cm.get("name", ""), []).append(f"mounted at {m.get('mountPath')}")
        for e in c.get("env") or ():
            ref = (e.get("valueFrom") or {}).get("configMapKeyRef")
            if ref:
                uses.setdefault(ref.get("name", ""), []).append(f"env {e.get('name')} from key {ref.get('key')}")
        for src in c.get("envFrom") or ():
            ref = src.get("configMapRef")
            if ref:
                uses.setdefault(ref.get("name", ""), []).append("env (envFrom)")
    return uses


def read_cluster(kube: KubeClient, namespace: str) -> ClusterFacts:
    """The facts a starting context is written from. KubeError propagates (the CLI names the kubeconfig)."""
    workloads = []
    for w in kube.workloads(namespace):
        meta, spec = w["metadata"], w.get("spec") or {}
        pod_spec = ((spec.get("template") or {}).get("spec")) or {}
        labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
        release = notes.get("meta.helm.sh/release-name") or (
            labels.get("app.kubernetes.io/instance") if labels.get("app.kubernetes.io/managed-by") == "Helm" else None)
        workloads.append(WorkloadFacts(
            name=meta["name"], kind=w["kind"], replicas=int(spec.get("replicas", 1) or 0),
            images=[str(c.get("image", "")) for c in pod_spec.get("containers") or ()],
            configmaps=_uses(pod_spec), helm_release=release))
    cms = {c["metadata"]["name"]: sorted((c.get("data") or {}).keys()) for c in kube.configmaps(namespace)}
    releases = sorted({((s.get("metadata") or {}).get("labels") or {}).get("name", "")
                       for s in kube.helm_release_secrets(namespace)} - {""})
    return ClusterFacts(namespace, kube.server, workloads, cms, releases)


def _block(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100).rstrip("\n")


def render_context(facts: ClusterFacts, prometheus: str | None = None) -> str:
    """The commented ctx.yaml text. It validates as an IncidentContext before it is returned."""
    ns = facts.namespace
    stateless = [w.name for w in facts.workloads if w.kind != "StatefulSet"]
    stateful = [w.name for w in facts.workloads if w.kind == "StatefulSet"]
    sources: dict[str, str] = {}
    for w in facts.workloads:
        for cm, uses in w.configmaps.items():
            for key in facts.configmap_keys.get(cm, []):
                glob = CONFIG_FILE_KEYS.get(key)
                if glob and glob not in sources:
                    sources[glob] = f"configmap/{cm}:{key}"
            for use in uses:
                if use.startswith("mounted at "):
                    sources.setdefault(f"file:{use[len('mounted at '):].rstrip('/')}/*", f"configmap/{cm}")
    extra: dict[str, Any] = {}
    if len(facts.helm_releases) == 1:
        extra["helm_release"] = facts.helm_releases[0]
    body = {"id": ns, "title": f"Production context for namespace {ns}", "namespaces": [ns],
            "components": [w.name for w in facts.workloads]}
    IncidentContext.model_validate({**body, "restartable": stateless, "not_restartable": stateful,
                                    "declared_sources": sources, "extra": extra})
    lines = [
        f"# A starting guard context for namespace {ns}, written by `guardrail context init` from {facts.server}.",
        "# It holds what the cluster can tell. Every line marked REVIEW is a decision for your team: the guard",
        "# enforces this file, so a wrong entry either blocks your agent or lets it do what you did not mean.",
        "",
        _block(body),
        "",
        "# Workloads found (kind, replicas, images, configuration):",
    ]
    for w in facts.workloads:
        lines.append(f"#   {w.kind} {w.name}: {w.replicas} replica(s), {', '.join(w.images) or 'no image'}"
                     + (f", Helm release {w.helm_release}" if w.helm_release else ""))
        for cm, uses in sorted(w.configmaps.items()):
            keys = ", ".join(facts.configmap_keys.get(cm, [])) or "not found in the namespace"
            lines.append(f"#     ConfigMap {cm} ({'; '.join(uses)}): keys {keys}")
    lines += [
        "",
        "# REVIEW: the restart probe restarts these (a rollout restart, as `kubectl rollout restart` does) to check",
        "# that a repair survives. Listed: the Deployments and DaemonSets. Remove any whose restart hurts users.",
        _block({"restartable": stateless}),
        "# REVIEW: StatefulSets are listed as not restartable (stores: a restart can cost a failover or a warm",
        "# cache). Move one to `restartable` if a restart of it is routine for you.",
        _block({"not_restartable": stateful}),
        "",
        "# REVIEW: where each family of settings is declared, for the persistence check (key glob -> source:",
        "# configmap/NAME[:KEY], helm/RELEASE[:VALUES.PATH], or a catalogue entry id). Derived from the ConfigMaps",
        "# the workloads mount; settings that come from Helm values need their values path added by hand.",
        _block({"declared_sources": sources}),
        "",
        "# REVIEW: settings your agent must never change (dotted keys, e.g. postgres.max_connections), ceilings the",
        "# runbook states, and constraints in words. The cluster cannot know them.",
        _block({"protected_settings": [], "ceilings": {}, "constraints": []}),
        "",
        "# SLOs: keep them in an SLO file (Sloth or the guard's own form) and run the guard with",
        f"# `--prometheus {prometheus or 'URL'} --slo slo.yaml`; see docs/production.md.",
        "# Helm releases in the namespace: " + (", ".join(facts.helm_releases) or "none") + ".",
        "# REVIEW: `helm_release` names the release the catalogue's Helm reads use when a change does not say one.",
        _block({"extra": extra}),
    ]
    return "\n".join(lines) + "\n"
