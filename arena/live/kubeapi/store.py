"""The emulated API server's object store: typed resources, resourceVersion/uid/generation bookkeeping, label and
field selectors, and the change history that watches stream from.

Used by `arena.live.kubeapi.server` (the HTTP side) and `arena.live.kubeapi.controller` (the workload
controllers). Everything is held in memory under one lock; a change notifies the watchers through a Condition.
"""

from __future__ import annotations

import base64
import copy
import re
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

__all__ = ["Resource", "RESOURCES", "resource_for", "ApiError", "Store", "LabelSelector", "FieldSelector",
           "timestamp"]


@dataclass(frozen=True)
class Resource:
    """One REST resource of the API (pods, deployments.apps ...), as discovery lists it."""

    plural: str
    kind: str
    group: str = ""
    version: str = "v1"
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    # A spec change bumps metadata.generation; status is written only through the status subresource.
    has_status: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


RESOURCES: tuple[Resource, ...] = (
    Resource("namespaces", "Namespace", namespaced=False, short_names=("ns",), subresources=("status",)),
    Resource("pods", "Pod", short_names=("po",), subresources=("status", "log"), categories=("all",),
             has_status=True),
    Resource("configmaps", "ConfigMap", short_names=("cm",)),
    Resource("secrets", "Secret"),
    Resource("services", "Service", short_names=("svc",), subresources=("status",), categories=("all",),
             has_status=True),
    Resource("events", "Event", short_names=("ev",)),
    Resource("serviceaccounts", "ServiceAccount", short_names=("sa",)),
    Resource("deployments", "Deployment", "apps", short_names=("deploy",), subresources=("status", "scale"),
             categories=("all",), has_status=True),
    Resource("statefulsets", "StatefulSet", "apps", short_names=("sts",), subresources=("status", "scale"),
             categories=("all",), has_status=True),
    Resource("daemonsets", "DaemonSet", "apps", short_names=("ds",), subresources=("status",),
             categories=("all",), has_status=True),
    Resource("replicasets", "ReplicaSet", "apps", short_names=("rs",), subresources=("status", "scale"),
             categories=("all",), has_status=True),
    Resource("controllerrevisions", "ControllerRevision", "apps"),
)


def resource_for(group: str, version: str, plural: str) -> Resource | None:
    return next((r for r in RESOURCES if r.group == group and r.version == version and r.plural == plural), None)


def timestamp(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    """An API failure, answered as a meta/v1 Status with its HTTP code and reason."""

    def __init__(self, code: int, reason: str, message: str, res: Resource | None = None, name: str = ""):
        super().__init__(message)
        self.code, self.reason, self.message, self.res, self.name = code, reason, message, res, name

    def status(self) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.res is not None:
            details = {"name": self.name, "group": self.res.group, "kind": self.res.plural}
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": self.message,
                "reason": self.reason, "details": details, "code": self.code}


def not_found(res: Resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{res.qualified} "{name}" not found', res, name)


# -- selectors ---------------------------------------------------------------------------------------------------

_SET_RE = re.compile(r"^\s*(?P<key>[^\s!=]+)\s+(?P<op>in|notin)\s+\((?P<vals>[^)]*)\)\s*$")


def _split_requirements(text: str) -> list[str]:
    """Comma-separated requirements; commas inside `in (a,b)` belong to their requirement."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [r.strip() for r in out if r.strip()]


class LabelSelector:
    """A label selector in its string form: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`."""

    def __init__(self, text: str | None):
        self.reqs: list[Callable[[dict[str, str]], bool]] = []
        for req in _split_requirements(text or ""):
            m = _SET_RE.match(req)
            if m:
                vals = {v.strip() for v in m["vals"].split(",") if v.strip()}
                key, op = m["key"], m["op"]
                self.reqs.append((lambda k, vs: lambda L: L.get(k) in vs)(key, vals) if op == "in"
                                 else (lambda k, vs: lambda L: L.get(k) not in vs)(key, vals))
            elif "!=" in req:
                k, v = (s.strip() for s in req.split("!=", 1))
                self.reqs.append((lambda k, v: lambda L: L.get(k) != v)(k, v))
            elif "=" in req:
                k, v = (s.strip() for s in req.replace("==", "=").split("=", 1))
                self.reqs.append((lambda k, v: lambda L: L.get(k) == v)(k, v))
            elif req.startswith("!"):
                self.reqs.append((lambda k: lambda L: k not in L)(req[1:].strip()))
            elif re.fullmatch(r"[A-Za-z0-9./_-]+", req):
                self.reqs.append((lambda k: lambda L: k in L)(req))
            else:
                raise ApiError(400, "BadRequest", f"unable to parse requirement: {req!r}")

    def matches(self, labels: dict[str, str] | None) -> bool:
        return all(r(labels or {}) for r in self.reqs)

    @staticmethod
    def from_match(selector: dict[str, Any] | None) -> "LabelSelector":
        """A metav1.LabelSelector (matchLabels, matchExpressions) as a LabelSelector."""
        parts = [f"{k}={v}" for k, v in ((selector or {}).get("matchLabels") or {}).items()]
        for e in (selector or {}).get("matchExpressions") or ():
            op, key, vals = e.get("operator"), e.get("key"), ",".join(e.get("values") or ())
            parts.append({"In": f"{key} in ({vals})", "NotIn": f"{key} notin ({vals})", "Exists": key,
                          "DoesNotExist": f"!{key}"}.get(op, key))
        return LabelSelector(",".join(parts))


def _field_value(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for p in path.split("."):
        cur = cur.get(p) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


class FieldSelector:
    """A field selector (`metadata.name=x,status.phase!=Running`, `involvedObject.uid=...`) over any field path."""

    def __init__(self, text: str | None):
        self.reqs: list[tuple[str, bool, str]] = []
        for req in _split_requirements(text or ""):
            neg = "!=" in req
            k, v = (s.strip() for s in (req.split("!=", 1) if neg else req.replace("==", "=").split("=", 1)))
            self.reqs.append((k, neg, v))

    def matches(self, obj: dict[str, Any]) -> bool:
        return all((_field_value(obj, k) != v) if neg else (_field_value(obj, k) == v) for k, neg, v in self.reqs)


# -- the store ---------------------------------------------------------------------------------------------------

@dataclass
class WatchEvent:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    res: Resource
    obj: dict[str, Any]


@dataclass
class Store:
    """Every object, keyed by (resource plural, group, namespace, name), with a global resourceVersion."""

    clock: Any
    objects: dict[tuple[str, str, str, str], dict[str, Any]] = field(default_factory=dict)
    history: list[WatchEvent] = field(default_factory=list)
    rv: int = 1
    history_limit: int = 20000
    lock: threading.RLock = field(default_factory=threading.RLock)
    changed: threading.Condition = field(init=False)
    # Called with (event type, resource, object) after every change, under the lock (the controller's wake-up).
    listeners: list[Callable[[str, Resource, dict[str, Any]], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)
        for ns in ("default", "kube-system", "kube-public"):
            self.create(resource_for("", "v1", "namespaces"), "", {"metadata": {"name": ns}})  # type: ignore[arg-type]

    @staticmethod
    def key(res: Resource, ns: str, name: str) -> tuple[str, str, str, str]:
        return (res.plural, res.group, ns if res.namespaced else "", name)

    def _record(self, kind: str, res: Resource, obj: dict[str, Any]) -> None:
        self.history.append(WatchEvent(self.rv, kind, res, copy.deepcopy(obj)))
        if len(self.history) > self.history_limit:
            del self.history[: len(self.history) - self.history_limit]
        for fn in list(self.listeners):
            fn(kind, res, obj)
        self.changed.notify_all()

    def _bump(self, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def get(self, res: Resource, ns: str, name: str) -> dict[str, Any]:
        with self.lock:
            obj = self.objects.get(self.key(res, ns, name))
            if obj is None:
                raise not_found(res, name)
            return copy.deepcopy(obj)

    def find(self, res: Resource, ns: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.get(self.key(res, ns, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, res: Resource, ns: str | None = None, labels: str | None = None,
             fields: str | None = None) -> tuple[list[dict[str, Any]], int]:
        ls, fs = LabelSelector(labels), FieldSelector(fields)
        with self.lock:
            out = [copy.deepcopy(o) for (p, g, n, _), o in sorted(self.objects.items())
                   if p == res.plural and g == res.group and (not ns or not res.namespaced or n == ns)
                   and ls.matches(o["metadata"].get("labels")) and fs.matches(o)]
            return out, self.rv

    def _normalise(self, res: Resource, obj: dict[str, Any]) -> None:
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        if res.kind == "Secret":
            data = dict(obj.get("data") or {})
            for k, v in (obj.pop("stringData", None) or {}).items():
                data[k] = base64.b64encode(str(v).encode()).decode()
            obj["data"] = data
            obj.setdefault("type", "Opaque")
        if res.kind == "Namespace":
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}

    def create(self, res: Resource, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        with self.lock:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            name = meta.get("name")
            if not name:
                raise ApiError(422, "Invalid", f"{res.kind} is invalid: metadata.name: Required value", res)
            if res.namespaced:
                if meta.get("namespace") and meta["namespace"] != ns:
                    raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the "
                                                      "namespace sent on the request")
                meta["namespace"] = ns
                nsres = resource_for("", "v1", "namespaces")
                if self.key(nsres, "", ns) not in self.objects:  # type: ignore[arg-type]
                    raise not_found(nsres, ns)  # type: ignore[arg-type]
            k = self.key(res, ns, name)
            if k in self.objects:
                raise ApiError(409, "AlreadyExists", f'{res.qualified} "{name}" already exists', res, name)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = timestamp(self.clock.now())
            meta.pop("resourceVersion", None)
            if res.has_status and res.group == "apps":
                meta["generation"] = 1
            self._normalise(res, obj)
            self._bump(obj)
            self.objects[k] = obj
            self._record("ADDED", res, obj)
            return copy.deepcopy(obj)

    def update(self, res: Resource, ns: str, name: str, obj: dict[str, Any], *, subresource: str = "",
               check_rv: bool = True) -> dict[str, Any]:
        """A PUT (or the result of a patch): keeps identity, checks resourceVersion, bumps generation on a spec
        change; the main resource keeps the stored status, the status subresource keeps the stored spec."""
        obj = copy.deepcopy(obj)
        with self.lock:
            k = self.key(res, ns, name)
            cur = self.objects.get(k)
            if cur is None:
                raise not_found(res, name)
            meta = obj.setdefault("metadata", {})
            if meta.get("name", name) != name:
                raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
            sent_rv = meta.get("resourceVersion")
            if check_rv and sent_rv and sent_rv != cur["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.qualified} "{name}": the '
                                                f"object has been modified; please apply your changes to the "
                                                f"latest version and try again", res, name)
            for keep in ("uid", "creationTimestamp", "generation", "namespace", "name"):
                if keep in cur["metadata"]:
                    meta[keep] = cur["metadata"][keep]
                else:
                    meta.pop(keep, None)
            if res.has_status:
                if subresource == "status":
                    obj["spec"] = copy.deepcopy(cur.get("spec"))
                    obj["metadata"] = copy.deepcopy(cur["metadata"])
                else:
                    if "status" in cur:
                        obj["status"] = copy.deepcopy(cur["status"])
                    else:
                        obj.pop("status", None)
                    if "generation" in cur["metadata"] and obj.get("spec") != cur.get("spec"):
                        meta["generation"] = cur["metadata"]["generation"] + 1
            self._normalise(res, obj)
            meta["resourceVersion"] = cur["metadata"]["resourceVersion"]
            if obj == cur:
                return copy.deepcopy(cur)  # a no-op write keeps the resourceVersion, as the API server does
            self._bump(obj)
            self.objects[k] = obj
            self._record("MODIFIED", res, obj)
            return copy.deepcopy(obj)

    def delete(self, res: Resource, ns: str, name: str) -> dict[str, Any]:
        with self.lock:
            k = self.key(res, ns, name)
            obj = self.objects.pop(k, None)
            if obj is None:
                raise not_found(res, name)
            self._bump(obj)
            self._record("DELETED", res, obj)
            if res.kind == "Namespace":
                for other in [kk for kk in self.objects if kk[2] == name]:
                    gone = self.objects.pop(other)
                    self._bump(gone)
                    self._record("DELETED", resource_for(other[1], "v1", other[0]) or res, gone)
            return copy.deepcopy(obj)

    def events_since(self, rv: int) -> Iterable[WatchEvent]:
        with self.lock:
            return [e for e in self.history if e.rv > rv]

    def oldest_rv(self) -> int:
        with self.lock:
            return self.history[0].rv if self.history else self.rv
