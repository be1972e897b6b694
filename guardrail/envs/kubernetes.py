"""KubernetesEnvironment: the guard on a real cluster, through the Kubernetes API (the production environment).

Registered as the `kubernetes` entry of the `guardrail.environments` group: `guardrail mcp|shell --env
kubernetes[:NAMESPACE] [--kubeconfig FILE] [--context-name NAME]` (the in-cluster service account when the guard
runs in a pod and no kubeconfig is given). The API is reached only through `guardrail.clients.kube`.

- `run`: the agent's command in a real bash (a `LocalEnvironment`), with KUBECONFIG pointing at an overlay that
  selects the same cluster, context and namespace, so the agent's kubectl acts where the guard looks;
- `describe`: the namespace's Deployments, StatefulSets and DaemonSets with ready/updated/available replicas; a
  workload is restartable when the context says so and the cluster has it;
- `restart`: what `kubectl rollout restart` does (the pod template's `kubectl.kubernetes.io/restartedAt`
  annotation), then the conditions `kubectl rollout status` waits on, in the environment's clock, with a bounded
  timeout; the receipt names the old and new pods, the images, and why a rollout did not complete;
- `read_declared` (verifiers.protocols.DeclaredLayerReader): ConfigMaps, a workload's env (through the
  ConfigMaps it takes env from) and Helm release values from the release Secret, for the persistence check only;
- `sli`: from an injected SLI source (`sli_source`), none by default.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import shutil
import tempfile
import weakref
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import yaml

from guardrail.clients.kube import KIND_NAMES, WORKLOAD_KINDS, KubeClient, KubeError, in_cluster
from guardrail.context import IncidentContext
from guardrail.envs.local import LocalEnvironment
from guardrail.errors import EnvironmentError_, InputError
from guardrail.policy import goruntime
from verifiers.clock import RealClock
from verifiers.context import PublicContext
from verifiers.criteria import Criteria
from verifiers.protocols import (Clock, CommandResult, ComponentInfo, DeclaredRef, EnvironmentDescription,
                                 RestartResult, Sample, SLISource)

__all__ = ["KubernetesEnvironment", "RolloutState", "rollout_state", "helm_release_values", "make",
           "RESTARTED_AT"]

RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
WORKLOAD_ALIASES = {alias: kind for kind, aliases in (
    ("deployment", ("deployment", "deployments", "deploy")), ("statefulset", ("statefulset", "statefulsets", "sts")),
    ("daemonset", ("daemonset", "daemonsets", "ds"))) for alias in aliases}


class RolloutState:
    """Where a rollout stands, in `kubectl rollout status` terms: done, or why not (and whether it is stuck)."""

    def __init__(self, done: bool, message: str, *, failed: bool = False, observed: bool = True):
        self.done, self.message, self.failed, self.observed = done, message, failed, observed


def rollout_state(obj: Mapping[str, Any]) -> RolloutState:
    """The checks of kubectl's rollout status viewers (DeploymentStatusViewer, StatefulSetStatusViewer,
    DaemonSetStatusViewer) on one workload object."""
    kind = obj.get("kind", "")
    meta, spec, st = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    name = f"{kind.lower()} {meta.get('name')!r}"
    gen, observed = int(meta.get("generation") or 0), int(st.get("observedGeneration") or 0)
    if gen > observed:
        return RolloutState(False, f"waiting for the {name} spec update to be observed (generation {gen}, "
                                   f"observedGeneration {observed})", observed=False)
    if kind == "Deployment":
        for c in st.get("conditions") or ():
            if c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded":
                return RolloutState(False, f"{name} exceeded its progress deadline: {c.get('message', '')}",
                                    failed=True)
        want = int(spec.get("replicas", 1))
        updated, total = int(st.get("updatedReplicas") or 0), int(st.get("replicas") or 0)
        available = int(st.get("availableReplicas") or 0)
        if updated < want:
            return RolloutState(False, f"{name}: {updated} out of {want} new replicas have been updated")
        if total > updated:
            return RolloutState(False, f"{name}: {total - updated} old replicas are pending termination")
        if available < updated:
            return RolloutState(False, f"{name}: {available} of {updated} updated replicas are available")
        return RolloutState(True, f"{name} successfully rolled out")
    if kind == "StatefulSet":
        want = int(spec.get("replicas", 1))
        ready = int(st.get("readyReplicas") or 0)
        if ready < want:
            return RolloutState(False, f"{name}: waiting for {want - ready} pods to be ready")
        strategy = spec.get("updateStrategy") or {}
        partition = int((strategy.get("rollingUpdate") or {}).get("partition") or 0)
        if strategy.get("type", "RollingUpdate") == "RollingUpdate" and partition > 0:
            if int(st.get("updatedReplicas") or 0) < want - partition:
                return RolloutState(False, f"{name}: waiting for partitioned roll out to finish")
            return RolloutState(True, f"{name}: partitioned roll out complete")
        if st.get("updateRevision") != st.get("currentRevision"):
            return RolloutState(False, f"{name}: {st.get('updatedReplicas', 0)} pods at revision "
                                       f"{st.get('updateRevision')}, waiting for the rest")
        return RolloutState(True, f"{name}: rolling update complete")
    if kind == "DaemonSet":
        want = int(st.get("desiredNumberScheduled") or 0)
        if int(st.get("updatedNumberScheduled") or 0) < want:
            return RolloutState(False, f"{name}: {st.get('updatedNumberScheduled', 0)} out of {want} new pods "
                                       f"have been updated")
        if int(st.get("numberAvailable") or 0) < want:
            return RolloutState(False, f"{name}: {st.get('numberAvailable', 0)} of {want} updated pods are "
                                       f"available")
        return RolloutState(True, f"{name} successfully rolled out")
    return RolloutState(False, f"{name}: not a workload kubectl rollout knows", failed=True)


def helm_release_values(secrets: list[Mapping[str, Any]], release: str) -> dict[str, Any]:
    """The user-supplied values (`helm get values`) of a release's newest deployed revision, from Helm 3's release
    Secrets: data.release is base64 (the API's) of base64 of gzipped JSON; `.config` holds the values."""
    def version(s: Mapping[str, Any]) -> int:
        try:
            return int(((s.get("metadata") or {}).get("labels") or {}).get("version") or 0)
        except ValueError:
            return 0

    mine = [s for s in secrets if ((s.get("metadata") or {}).get("labels") or {}).get("name") == release]
    if not mine:
        raise LookupError(f"no Helm release {release!r} (no Secret labelled owner=helm,name={release})")
    deployed = [s for s in mine if ((s.get("metadata") or {}).get("labels") or {}).get("status") == "deployed"]
    newest = max(deployed or mine, key=version)
    raw = base64.b64decode(base64.b64decode((newest.get("data") or {}).get("release") or ""))
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return dict(json.loads(raw).get("config") or {})


def _images(obj: Mapping[str, Any]) -> str:
    pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    return ",".join(str(c.get("image", "")) for c in pod.get("containers") or ())


class KubernetesEnvironment:
    """One namespace of a cluster: commands through a real shell, reads and restarts through the API."""

    # Real time and a real cluster: a session may answer a read while a declaration is held (adapters/session.py).
    concurrent_commands = True

    def __init__(self, kube: KubeClient, *, context: IncidentContext | None = None, namespace: str | None = None,
                 clock: Clock | None = None, sli_source: SLISource | None = None, kubeconfig: str | None = None,
                 kube_context: str | None = None, rollout_timeout_s: float = 300.0, poll_s: float = 2.0,
                 runner: LocalEnvironment | None = None, work_dir: str | Path | None = None,
                 shell_env: Mapping[str, str] | None = None):
        self.kube = kube
        self.namespace = namespace or kube.namespace
        self.context = context or IncidentContext()
        self.public = PublicContext.of(self.context)
        self._clock: Clock = clock or RealClock()
        self.sli_source = sli_source
        self.rollout_timeout_s = rollout_timeout_s
        self.poll_s = poll_s
        self._work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="guardrail-kube-"))
        if work_dir is None:  # the overlay kubeconfig's directory goes with the environment
            weakref.finalize(self, shutil.rmtree, str(self._work), True)
        # `shell_env` adds to the agent's shell environment (a PATH that puts a particular kubectl first).
        self._shell = {**self._shell_env(kubeconfig, kube_context), **(shell_env or {})}
        self.runner = runner or LocalEnvironment(env=self._shell)

    @property
    def clock(self) -> Clock:
        return self._clock

    # -- the agent's shell ---------------------------------------------------------------------------------------

    def _shell_env(self, kubeconfig: str | None, kube_context: str | None) -> dict[str, str]:
        """The guard's child environment, with KUBECONFIG = an overlay (current context and namespace) followed by
        the user's kubeconfig, so relative paths in the user's file still resolve against it."""
        env = goruntime.child_env()
        if kubeconfig is None and kube_context is None and in_cluster():
            return env  # kubectl in a pod uses the service account, as the guard does
        base = kubeconfig or env.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
        doc = {}
        for path in base.split(os.pathsep):
            try:
                doc = yaml.safe_load(Path(path).read_text()) or {}
            except (OSError, yaml.YAMLError):
                continue
            if doc.get("contexts"):
                break
        name = kube_context or doc.get("current-context") or ""
        ctx = next((c.get("context") or {} for c in doc.get("contexts") or () if c.get("name") == name), None)
        if ctx is None:
            env["KUBECONFIG"] = base
            return env
        overlay = self._work / "kubeconfig.guardrail.yaml"
        overlay.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "guardrail",
            "contexts": [{"name": "guardrail", "context": {**ctx, "namespace": self.namespace}}]}))
        env["KUBECONFIG"] = os.pathsep.join([str(overlay), base])
        return env

    def run(self, command: str) -> CommandResult:
        return self.runner.run(command)

    def shell_variables(self) -> dict[str, str]:
        """What an agent's own shell needs to act where the guard looks (`guardrail shell` runs the real tools in
        the agent's shell once the guard allows them): KUBECONFIG, when the guard set one."""
        return {k: self._shell[k] for k in ("KUBECONFIG",) if k in self._shell}

    def sli(self, query: str, window: float, *, labels: Mapping[str, str] | None = None,
            step: float | None = None) -> list[Sample]:
        if self.sli_source is None:
            return []
        return self.sli_source.sli(query, window, labels=labels, step=step)

    # -- describe ------------------------------------------------------------------------------------------------

    def describe(self) -> EnvironmentDescription:
        try:
            workloads = self.kube.workloads(self.namespace)
            pods = self.kube.list("", "pods", self.namespace)
        except KubeError as e:
            raise EnvironmentError_(f"cannot list the workloads of namespace {self.namespace}: {e.message}") from e
        comps = []
        for w in workloads:
            meta, spec, st = w["metadata"], w.get("spec") or {}, w.get("status") or {}
            mine = [p for p in pods if self._owned_by(p, w)]
            if w["kind"] == "DaemonSet":
                want, ready = int(st.get("desiredNumberScheduled") or 0), int(st.get("numberReady") or 0)
                updated, available = st.get("updatedNumberScheduled"), st.get("numberAvailable")
            else:
                want, ready = int(spec.get("replicas", 1)), int(st.get("readyReplicas") or 0)
                updated, available = st.get("updatedReplicas"), st.get("availableReplicas")
            comps.append(ComponentInfo(
                name=meta["name"], kind=w["kind"], namespace=self.namespace, replicas=want, ready_replicas=ready,
                restarts=sum(int(c.get("restartCount") or 0) for p in mine
                             for c in (p.get("status") or {}).get("containerStatuses") or ()),
                stateful=w["kind"] == "StatefulSet",
                restartable=meta["name"] in self.public.restartable and self.public.may_restart(meta["name"]),
                image=_images(w), updated_replicas=int(updated or 0), available_replicas=int(available or 0)))
        return EnvironmentDescription(name="kubernetes", components=tuple(comps), namespaces=(self.namespace,),
                                      extra={"server": self.kube.server},
                                      observes_slis=self.sli_source is not None)

    @staticmethod
    def _owned_by(pod: Mapping[str, Any], workload: Mapping[str, Any]) -> bool:
        """A pod belongs to a workload when its selector matches the pod's labels (what kubectl uses too)."""
        sel = ((workload.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return bool(sel) and all(labels.get(k) == v for k, v in sel.items())

    # -- restart -------------------------------------------------------------------------------------------------

    def _find_workload(self, target: str) -> tuple[str, dict[str, Any]]:
        """`name`, or `kind/name` as kubectl spells it (deploy/web, statefulsets.apps/db)."""
        kind, _, name = target.rpartition("/")
        kinds = list(WORKLOAD_KINDS)
        if kind:
            k = WORKLOAD_ALIASES.get(kind.lower().split(".")[0])
            if k is None:
                raise EnvironmentError_(f"{target!r}: only Deployments, StatefulSets and DaemonSets are restarted")
            kinds = [k]
        for k in kinds:
            try:
                obj = self.kube.workload(k, name, self.namespace)
            except KubeError as e:
                raise EnvironmentError_(f"cannot read {k} {name}: {e.message}") from e
            if obj is not None:
                obj["kind"] = KIND_NAMES[k]
                return k, obj
        raise EnvironmentError_(f"no Deployment, StatefulSet or DaemonSet named {name!r} in namespace "
                                f"{self.namespace}")

    def _pod_ids(self, obj: Mapping[str, Any]) -> list[tuple[str, str]]:
        pods = self.kube.pods((obj.get("spec") or {}).get("selector"), self.namespace)
        return sorted((p["metadata"]["name"], p["metadata"]["uid"]) for p in pods
                      if not p["metadata"].get("deletionTimestamp"))

    @staticmethod
    def _names(pods: list[tuple[str, str]], other: list[tuple[str, str]]) -> str:
        """Pod names; a name the other side has too (a StatefulSet's ordinal pod) carries its uid's first part."""
        reused = {n for n, u in other if (n, u) not in pods}
        return ",".join(f"{n}@{u[:8]}" if n in reused else n for n, u in pods)

    def restart(self, target: str) -> RestartResult:
        kind, obj = self._find_workload(target)
        name = obj["metadata"]["name"]
        start = self._clock.now()
        before = self._pod_ids(obj)
        image_before = _images(obj)
        stamp = datetime.fromtimestamp(start, tz=timezone.utc).isoformat(timespec="microseconds")
        try:
            self.kube.patch("apps", WORKLOAD_KINDS[kind], name, {
                "spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: stamp}}}}}, self.namespace)
        except KubeError as e:
            raise EnvironmentError_(f"cannot restart {kind} {name}: {e.message}") from e
        state, obj = self._wait_rollout(kind, name)
        after = self._pod_ids(obj)
        new = [p for p in after if p not in before]
        if state.done:
            rollout, ready = "complete", True
        elif not state.observed or not new:
            rollout, ready = "stalled", False
        else:
            rollout, ready = "not_ready", False
        detail = state.message if state.done else (
            f"the rollout of {kind}/{name} did not complete within {self.rollout_timeout_s:g} s: {state.message}"
            + ("" if new else "; no new pod was created"))
        return RestartResult(target=name, old_id=self._names(before, after), new_id=self._names(new, before),
                             ready=ready, image_before=image_before, image_after=_images(obj),
                             duration_s=self._clock.now() - start, detail=detail, rollout=rollout)

    def _wait_rollout(self, kind: str, name: str) -> tuple[RolloutState, dict[str, Any]]:
        deadline = self._clock.now() + self.rollout_timeout_s
        while True:
            obj = self.kube.workload(kind, name, self.namespace) or {}
            obj["kind"] = KIND_NAMES[kind]
            state = rollout_state(obj)
            if state.done or state.failed or self._clock.now() >= deadline:
                return state, obj
            self._clock.sleep(self.poll_s)

    # -- declared-layer reads (persistence) ------------------------------------------------------------------------

    def read_declared(self, ref: DeclaredRef) -> str:
        ns = ref.namespace or self.namespace
        try:
            if ref.kind == "helm_values":
                return json.dumps(helm_release_values(self.kube.helm_release_secrets(ns, ref.name), ref.name))
            if ref.kind == "configmap":
                cm = self.kube.configmap(ref.name, ns)
                if cm is None:
                    raise LookupError(f"no ConfigMap {ref.name!r} in namespace {ns}")
                if ref.key:
                    return str((cm.get("data") or {}).get(ref.key, ""))  # an absent key reads empty, as jsonpath
                return yaml.safe_dump({"data": cm.get("data") or {}})
            if ref.kind == "workload_env":
                return self._workload_env(ref.workload_kind, ref.name, ref.key, ns)
        except KubeError as e:
            raise RuntimeError(f"the Kubernetes API refused the declared read of {ref.kind} {ref.name}: "
                               f"{e.message}") from e
        raise LookupError(f"no declared read of kind {ref.kind!r}")

    def _workload_env(self, kind: str, name: str, var: str, ns: str) -> str:
        """The value a fresh container of the workload gets for `var`: its env entry (a value, or a ConfigMap key
        it references), else the ConfigMaps it takes envFrom; '' when nothing sets it (as kubectl's jsonpath)."""
        obj = self.kube.workload(kind.lower(), name, ns)
        if obj is None:
            raise LookupError(f"no {kind} {name!r} in namespace {ns}")
        containers = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
        for c in containers[:1]:
            for e in c.get("env") or ():
                if e.get("name") != var:
                    continue
                if "value" in e:
                    return str(e["value"])
                ref = (e.get("valueFrom") or {}).get("configMapKeyRef")
                if ref:
                    cm = self.kube.configmap(ref.get("name", ""), ns) or {}
                    return str((cm.get("data") or {}).get(ref.get("key"), ""))
                return ""
            for src in reversed(c.get("envFrom") or ()):  # a later source wins, as the kubelet does
                ref = src.get("configMapRef")
                if ref:
                    cm = self.kube.configmap(ref.get("name", ""), ns) or {}
                    key = var[len(src.get("prefix", "")):] if var.startswith(src.get("prefix", "")) else None
                    if key is not None and key in (cm.get("data") or {}):
                        return str(cm["data"][key])
        return ""


def make(spec: str = "", context: IncidentContext | None = None, *, kubeconfig: str | None = None,
         context_name: str | None = None, sli_source: SLISource | None = None,
         criteria: Any = None) -> KubernetesEnvironment:
    """Entry-point factory: `kubernetes` or `kubernetes:<namespace>`, with --kubeconfig and --context-name.

    `restart()` waits on the rollout itself, and the restart probe takes its answer as final: so the rollout wait is
    the criteria's `restart.ready_timeout_s`, the bound the probe would have waited on readiness."""
    if kubeconfig is not None and not Path(kubeconfig).is_file():
        raise InputError("no such kubeconfig file", path=f"--kubeconfig {kubeconfig}")
    namespace = spec or None
    if namespace is None and context is not None and context.namespaces:
        namespace = context.namespaces[0]
    try:
        kube = KubeClient(kubeconfig=kubeconfig, context=context_name, namespace=namespace)
    except KubeError as e:
        raise InputError(e.message, path=kubeconfig or "--env kubernetes") from e
    return KubernetesEnvironment(kube, context=context, namespace=namespace, sli_source=sli_source,
                                 kubeconfig=kubeconfig, kube_context=context_name,
                                 rollout_timeout_s=Criteria.coerce(criteria).restart.ready_timeout_s)
