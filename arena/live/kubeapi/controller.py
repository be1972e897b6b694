"""The emulated control plane's controllers and kubelet: Deployments (through ReplicaSets), StatefulSets and
DaemonSets roll their pods when the pod template changes, pods become ready after a delay, and owned objects are
garbage-collected when their owner goes.

Driven by `arena.live.kubeapi.KubeAPI`: `reconcile()` is one pass in the injected clock (tests step it), and
`start()`/`stop()` run it in a background thread. A stopped controller is the negative control of every restart
test: generation moves, status does not, and no pod is replaced.

Simplified on purpose, and what only a real cluster shows: a Deployment's new ReplicaSet is scaled to the full count
at once and the old ones to zero when the new pods are ready (maxSurge/maxUnavailable are not applied; Recreate
waits for the old pods to go first); `minReadySeconds` is not applied (available = ready); StatefulSets keep no
ControllerRevisions (`rollout history sts` has nothing to show); a pod is deleted at once (no Terminating grace);
DaemonSets run on one node.

A pod is bound to something real through a `PodRuntime` (the live stack binds pods to its processes,
`arena.live.cluster.StackPods`): it is told when a pod starts and stops, says whether the pod's process is ready,
and gives its log.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
from typing import Any, Protocol

from arena.live.kubeapi.store import Resource, Store, resource_for, timestamp

__all__ = ["PodRuntime", "InertRuntime", "Controller", "template_hash"]

NODE = "emulated-node"
_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"  # the API server's name-suffix alphabet


class PodRuntime(Protocol):
    """What runs a pod: told when one starts and stops; says whether it is ready; gives its log."""

    def pod_started(self, pod: dict[str, Any]) -> None: ...

    def pod_stopped(self, pod: dict[str, Any]) -> None: ...

    def pod_ready(self, pod: dict[str, Any]) -> bool: ...

    def pod_log(self, pod: dict[str, Any], container: str) -> str: ...


class InertRuntime:
    """Pods that run nothing: ready once started, with a log of their lifecycle."""

    def __init__(self) -> None:
        self.logs: dict[str, list[str]] = {}
        self.started: list[str] = []
        self.stopped: list[str] = []

    def pod_started(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        self.started.append(name)
        for c in pod.get("spec", {}).get("containers") or []:
            self.logs.setdefault(pod["metadata"]["uid"], []).append(
                f"started container {c.get('name')} from image {c.get('image')}")

    def pod_stopped(self, pod: dict[str, Any]) -> None:
        self.stopped.append(pod["metadata"]["name"])

    def pod_ready(self, pod: dict[str, Any]) -> bool:
        return True

    def pod_log(self, pod: dict[str, Any], container: str) -> str:
        return "".join(line + "\n" for line in self.logs.get(pod["metadata"]["uid"], []))


def template_hash(template: Any) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def _res(plural: str, group: str = "apps") -> Resource:
    r = resource_for(group, "v1", plural)
    assert r is not None
    return r


PODS, RS, DEPLOY, STS, DS, EVENTS = (_res("pods", ""), _res("replicasets"), _res("deployments"),
                                     _res("statefulsets"), _res("daemonsets"), _res("events", ""))


class Controller:
    """One reconcile pass over every workload and pod; a thread repeats it while started."""

    def __init__(self, store: Store, runtime: PodRuntime | None = None, *, ready_delay_s: float = 0.5,
                 interval_s: float = 0.05, seed: int | None = None):
        self.store = store
        self.runtime: PodRuntime = runtime or InertRuntime()
        self.ready_delay_s = ready_delay_s
        self.interval_s = interval_s
        self._rand = random.Random(seed)
        self._running_pods: dict[str, dict[str, Any]] = {}
        self._started_at: dict[str, float] = {}
        self._progress: dict[str, tuple[Any, float]] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        store.listeners.append(lambda kind, res, obj: self._wake.set())

    @property
    def clock(self) -> Any:
        return self.store.clock

    # -- the loop -------------------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="kubeapi-controller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.reconcile()
            self._wake.wait(self.interval_s)
            self._wake.clear()

    def reconcile(self) -> None:
        with self.store.lock:
            self._collect_garbage()
            for d in self._all(DEPLOY):
                self._deployment(d)
            for rs in self._all(RS):
                self._replicaset(rs)
            for s in self._all(STS):
                self._statefulset(s)
            for d in self._all(DS):
                self._daemonset(d)
            self._kubelet()

    # -- helpers --------------------------------------------------------------------------------------------------

    def _all(self, res: Resource) -> list[dict[str, Any]]:
        return self.store.list(res)[0]

    def _owned(self, res: Resource, owner: dict[str, Any]) -> list[dict[str, Any]]:
        uid = owner["metadata"]["uid"]
        return [o for o in self.store.list(res, owner["metadata"]["namespace"])[0]
                if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or ())]

    @staticmethod
    def _owner_ref(owner: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}

    def _suffix(self) -> str:
        return "".join(self._rand.choice(_SUFFIX) for _ in range(5))

    def event(self, obj: dict[str, Any], reason: str, message: str, component: str, type_: str = "Normal") -> None:
        meta = obj["metadata"]
        now = timestamp(self.clock.now())
        self.store.create(EVENTS, meta["namespace"], {
            "metadata": {"name": f"{meta['name']}.{self._rand.getrandbits(64):016x}"},
            "involvedObject": {"kind": obj["kind"], "name": meta["name"], "namespace": meta["namespace"],
                               "uid": meta["uid"], "apiVersion": obj["apiVersion"],
                               "resourceVersion": meta.get("resourceVersion", "")},
            "reason": reason, "message": message, "type": type_, "count": 1, "source": {"component": component},
            "firstTimestamp": now, "lastTimestamp": now, "reportingComponent": component})

    def _set_status(self, res: Resource, obj: dict[str, Any], status: dict[str, Any]) -> None:
        if obj.get("status") != status:
            obj["status"] = status
            self.store.update(res, obj["metadata"]["namespace"], obj["metadata"]["name"], obj,
                              subresource="status", check_rv=False)

    def _new_pod(self, owner: dict[str, Any], name: str, template: dict[str, Any], labels: dict[str, str]) -> None:
        tmeta = template.get("metadata") or {}
        pod = {"metadata": {"name": name, "labels": {**(tmeta.get("labels") or {}), **labels},
                            "annotations": dict(tmeta.get("annotations") or {}),
                            "ownerReferences": [self._owner_ref(owner)]},
               "spec": {**(template.get("spec") or {}), "nodeName": NODE}}
        self.store.create(PODS, owner["metadata"]["namespace"], pod)
        self.event(owner, "SuccessfulCreate", f"Created pod: {name}", f"{owner['kind'].lower()}-controller")

    def _delete_pod(self, owner: dict[str, Any], pod: dict[str, Any]) -> None:
        self.store.delete(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
        self.event(owner, "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}",
                   f"{owner['kind'].lower()}-controller")

    @staticmethod
    def _ready(pod: dict[str, Any]) -> bool:
        return any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (pod.get("status") or {}).get("conditions") or ())

    def _collect_garbage(self) -> None:
        uids = {o["metadata"]["uid"] for o in self.store.objects.values()}
        for (plural, group, ns, name), o in list(self.store.objects.items()):
            refs = o["metadata"].get("ownerReferences") or ()
            if refs and not any(r.get("uid") in uids for r in refs):
                res = resource_for(group, "v1", plural)
                if res is not None:
                    self.store.delete(res, ns, name)

    # -- Deployments ----------------------------------------------------------------------------------------------

    def _deployment(self, d: dict[str, Any]) -> None:
        spec, meta = d["spec"], d["metadata"]
        want = int(spec.get("replicas", 1))
        h = template_hash(spec.get("template"))
        sets = self._owned(RS, d)
        revs = [int((r["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision") or 0)
                for r in sets]
        new = next((r for r in sets if r["metadata"]["labels"].get("pod-template-hash") == h), None)
        recreate = (spec.get("strategy") or {}).get("type") == "Recreate"
        old = [r for r in sets if r is not new]
        old_pods = sum(len(self._owned(PODS, r)) for r in old)
        if new is None:
            template = json.loads(json.dumps(spec.get("template") or {}))
            template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = h
            sel = json.loads(json.dumps(spec.get("selector") or {}))
            sel.setdefault("matchLabels", {})["pod-template-hash"] = h
            rev = str(max(revs, default=0) + 1)
            self.store.create(RS, meta["namespace"], {
                "metadata": {"name": f"{meta['name']}-{h}", "labels": dict(template["metadata"]["labels"]),
                             "annotations": {"deployment.kubernetes.io/revision": rev,
                                             "deployment.kubernetes.io/desired-replicas": str(want)},
                             "ownerReferences": [self._owner_ref(d)]},
                "spec": {"replicas": 0 if (recreate and old_pods) else want, "selector": sel,
                         "template": template}})
            self.event(d, "ScalingReplicaSet", f"Scaled up replica set {meta['name']}-{h} from 0 to {want}",
                       "deployment-controller")
            if (meta.get("annotations") or {}).get("deployment.kubernetes.io/revision") != rev:
                d.setdefault("metadata", {}).setdefault("annotations", {})["deployment.kubernetes.io/revision"] = rev
                d = self.store.update(DEPLOY, meta["namespace"], meta["name"], d, check_rv=False)
            return  # the next pass sees the new ReplicaSet
        if not (recreate and old_pods) and new["spec"].get("replicas") != want:
            new["spec"]["replicas"] = want
            self.store.update(RS, meta["namespace"], new["metadata"]["name"], new, check_rv=False)
        new_status = new.get("status") or {}
        new_done = int(new_status.get("readyReplicas") or 0) >= want and \
            int(new_status.get("replicas") or 0) == want
        for r in old:
            if r["spec"].get("replicas") and (recreate or new_done):
                self.event(d, "ScalingReplicaSet", f"Scaled down replica set {r['metadata']['name']} from "
                                                   f"{r['spec']['replicas']} to 0", "deployment-controller")
                r["spec"]["replicas"] = 0
                self.store.update(RS, meta["namespace"], r["metadata"]["name"], r, check_rv=False)
        # Status, from the pods the ReplicaSets own now.
        pods = {rs["metadata"]["name"]: self._owned(PODS, rs) for rs in sets}
        all_pods = [p for ps in pods.values() for p in ps]
        updated = pods.get(new["metadata"]["name"], [])
        ready = sum(1 for p in all_pods if self._ready(p))
        complete = len(updated) == want and len(all_pods) == want and ready == want
        sig = (len(all_pods), len(updated), ready, meta.get("generation"))
        last_sig, since = self._progress.get(meta["uid"], (None, self.clock.now()))
        if sig != last_sig:
            since = self.clock.now()
            self._progress[meta["uid"]] = (sig, since)
        deadline = float(spec.get("progressDeadlineSeconds") or 600)
        now = timestamp(self.clock.now())
        if complete:
            progressing = {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                           "message": f'ReplicaSet "{new["metadata"]["name"]}" has successfully progressed.'}
        elif self.clock.now() - since > deadline:
            progressing = {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                           "message": f'ReplicaSet "{new["metadata"]["name"]}" has timed out progressing.'}
        else:
            progressing = {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                           "message": f'ReplicaSet "{new["metadata"]["name"]}" is progressing.'}
        available = {"type": "Available", "status": "True" if ready >= want else "False",
                     "reason": "MinimumReplicasAvailable" if ready >= want else "MinimumReplicasUnavailable",
                     "message": "Deployment has minimum availability." if ready >= want
                     else "Deployment does not have minimum availability."}
        old_conds = {c["type"]: c for c in (d.get("status") or {}).get("conditions") or ()}
        conds = []
        for c in (available, progressing):
            prev = old_conds.get(c["type"])
            same = prev is not None and all(prev.get(k) == c[k] for k in ("status", "reason"))
            conds.append({**c, "lastUpdateTime": prev["lastUpdateTime"] if same else now,
                          "lastTransitionTime": prev["lastTransitionTime"] if same and prev.get("lastTransitionTime")
                          else now})
        status = {"observedGeneration": meta.get("generation", 1), "replicas": len(all_pods),
                  "updatedReplicas": len(updated), "readyReplicas": ready, "availableReplicas": ready,
                  "unavailableReplicas": max(0, want - ready), "conditions": conds}
        status = {k: v for k, v in status.items() if v or k in ("observedGeneration", "conditions")}
        self._set_status(DEPLOY, d, status)

    # -- ReplicaSets ----------------------------------------------------------------------------------------------

    def _replicaset(self, rs: dict[str, Any]) -> None:
        want = int(rs["spec"].get("replicas", 1))
        pods = self._owned(PODS, rs)
        for _ in range(want - len(pods)):
            self._new_pod(rs, f"{rs['metadata']['name']}-{self._suffix()}", rs["spec"].get("template") or {}, {})
        if len(pods) > want:
            # Not-ready pods go first, then the newest (the ReplicaSet controller's ranking, simplified).
            victims = sorted(pods, key=lambda p: (self._ready(p), p["metadata"]["creationTimestamp"]))
            for p in victims[: len(pods) - want]:
                self._delete_pod(rs, p)
        pods = self._owned(PODS, rs)
        ready = sum(1 for p in pods if self._ready(p))
        status = {"replicas": len(pods), "fullyLabeledReplicas": len(pods), "readyReplicas": ready,
                  "availableReplicas": ready, "observedGeneration": rs["metadata"].get("generation", 1)}
        self._set_status(RS, rs, {k: v for k, v in status.items() if v or k in ("replicas", "observedGeneration")})

    # -- StatefulSets ---------------------------------------------------------------------------------------------

    def _statefulset(self, s: dict[str, Any]) -> None:
        spec, meta = s["spec"], s["metadata"]
        want = int(spec.get("replicas", 1))
        rev = f"{meta['name']}-{template_hash(spec.get('template'))}"
        status = dict(s.get("status") or {})
        current_rev = status.get("currentRevision") or rev
        pods = {p["metadata"]["name"]: p for p in self._owned(PODS, s)}
        parallel = spec.get("podManagementPolicy") == "Parallel"
        for i in range(want):
            name = f"{meta['name']}-{i}"
            if name in pods:
                continue
            if not parallel and not all(self._ready(pods[f"{meta['name']}-{j}"]) for j in range(i)
                                        if f"{meta['name']}-{j}" in pods):
                break
            revision = rev if (i >= int(((spec.get("updateStrategy") or {}).get("rollingUpdate") or {})
                                        .get("partition") or 0)) else current_rev
            self._new_pod(s, name, spec.get("template") or {}, {
                "controller-revision-hash": revision, "statefulset.kubernetes.io/pod-name": name,
                "apps.kubernetes.io/pod-index": str(i)})
            if not parallel:
                break
        for name in sorted(pods, key=lambda n: -int(n.rsplit("-", 1)[1]) if n.rsplit("-", 1)[1].isdigit() else 0):
            idx = name.rsplit("-", 1)[1]
            if idx.isdigit() and int(idx) >= want:
                self._delete_pod(s, pods.pop(name))
                break  # one at a time, highest ordinal first
        pods = {p["metadata"]["name"]: p for p in self._owned(PODS, s)}
        strategy = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate")
        partition = int(((spec.get("updateStrategy") or {}).get("rollingUpdate") or {}).get("partition") or 0)
        if strategy == "RollingUpdate" and len(pods) == want and all(self._ready(p) for p in pods.values()):
            stale = [n for n, p in pods.items() if p["metadata"]["labels"].get("controller-revision-hash") != rev
                     and int(n.rsplit("-", 1)[1]) >= partition]
            if stale:
                self._delete_pod(s, pods[max(stale, key=lambda n: int(n.rsplit("-", 1)[1]))])
        pods = {p["metadata"]["name"]: p for p in self._owned(PODS, s)}
        ready = sum(1 for p in pods.values() if self._ready(p))
        updated = sum(1 for p in pods.values() if p["metadata"]["labels"].get("controller-revision-hash") == rev)
        if updated == want and ready == want and len(pods) == want:
            current_rev = rev
        current = sum(1 for p in pods.values()
                      if p["metadata"]["labels"].get("controller-revision-hash") == current_rev)
        self._set_status(STS, s, {"observedGeneration": meta.get("generation", 1), "replicas": len(pods),
                                  "readyReplicas": ready, "availableReplicas": ready, "currentReplicas": current,
                                  "updatedReplicas": updated, "currentRevision": current_rev,
                                  "updateRevision": rev, "collisionCount": 0})

    # -- DaemonSets -----------------------------------------------------------------------------------------------

    def _daemonset(self, d: dict[str, Any]) -> None:
        spec, meta = d["spec"], d["metadata"]
        h = template_hash(spec.get("template"))
        pods = self._owned(PODS, d)
        if not pods:
            self._new_pod(d, f"{meta['name']}-{self._suffix()}", spec.get("template") or {},
                          {"controller-revision-hash": h})
        elif (spec.get("updateStrategy") or {}).get("type", "RollingUpdate") == "RollingUpdate":
            for p in pods:
                if p["metadata"]["labels"].get("controller-revision-hash") != h:
                    self._delete_pod(d, p)
        pods = self._owned(PODS, d)
        ready = sum(1 for p in pods if self._ready(p))
        updated = sum(1 for p in pods if p["metadata"]["labels"].get("controller-revision-hash") == h)
        self._set_status(DS, d, {"observedGeneration": meta.get("generation", 1), "desiredNumberScheduled": 1,
                                 "currentNumberScheduled": len(pods), "numberReady": ready,
                                 "updatedNumberScheduled": updated, "numberAvailable": ready,
                                 "numberUnavailable": max(0, 1 - ready), "numberMisscheduled": 0})

    # -- kubelet --------------------------------------------------------------------------------------------------

    def _kubelet(self) -> None:
        now = self.clock.now()
        pods = self._all(PODS)
        alive = {p["metadata"]["uid"] for p in pods}
        for uid in [u for u in self._running_pods if u not in alive]:
            self._started_at.pop(uid, None)
            self.runtime.pod_stopped(self._running_pods.pop(uid))
        for p in pods:
            uid, st = p["metadata"]["uid"], dict(p.get("status") or {})
            containers = (p.get("spec") or {}).get("containers") or []
            if uid not in self._running_pods:
                self._running_pods[uid] = p
                self._started_at[uid] = now
                self.runtime.pod_started(p)
                st.update({"phase": "Pending", "startTime": timestamp(now), "hostIP": "10.0.0.1",
                           "podIP": f"10.244.0.{len(self._running_pods) % 250 + 2}"})
                self.event(p, "Scheduled", f"Successfully assigned {p['metadata']['namespace']}/"
                                           f"{p['metadata']['name']} to {NODE}", "default-scheduler")
            started = st.get("startTime")
            up = now - self._started_at.setdefault(uid, now) >= self.ready_delay_s
            ready = up and self.runtime.pod_ready(p)
            st["phase"] = "Running" if up else "Pending"
            st["conditions"] = [{"type": t, "status": "True" if ok else "False"} for t, ok in (
                ("PodScheduled", True), ("Initialized", True), ("ContainersReady", ready), ("Ready", ready))]
            st["containerStatuses"] = [{
                "name": c.get("name"), "image": c.get("image"), "imageID": f"emulated://{c.get('image')}",
                "ready": ready, "started": up, "restartCount": 0,
                "containerID": f"emulated://{uid[:12]}-{c.get('name')}",
                "state": {"running": {"startedAt": started}} if up else
                {"waiting": {"reason": "ContainerCreating"}}} for c in containers]
            if p.get("status") != st:
                self._set_status(PODS, p, st)
