"""Server-side printing for `kubectl get`: the meta.k8s.io/v1 Table the API server answers to
`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`, with the columns the real server prints per kind.

Called by `arena.live.kubeapi.server` for list and get requests that ask for a Table.
"""

from __future__ import annotations

import calendar
import time
from typing import Any, Callable

__all__ = ["table", "age"]


def age(created: str | None, now: float) -> str:
    """kubectl's short duration (HumanDuration): 45s, 3m20s, 12m, 5h, 3d."""
    if not created:
        return "<unknown>"
    try:
        t = calendar.timegm(time.strptime(created, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return "<invalid>"
    s = max(0, int(now - t))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    return f"{h // 24}d"


def _containers(o: dict[str, Any]) -> list[dict[str, Any]]:
    return ((o.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []


def _selector(o: dict[str, Any]) -> str:
    sel = (o.get("spec") or {}).get("selector") or {}
    labels = sel.get("matchLabels", sel if all(isinstance(v, str) for v in sel.values()) else {})
    return ",".join(f"{k}={v}" for k, v in labels.items()) or "<none>"


def _pod_row(o: dict[str, Any], now: float) -> list[Any]:
    st = o.get("status") or {}
    cs = st.get("containerStatuses") or []
    total = len((o.get("spec") or {}).get("containers") or []) or len(cs)
    ready = sum(1 for c in cs if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in cs)
    phase = st.get("phase") or "Pending"
    waiting = next((c["state"]["waiting"].get("reason") for c in cs
                    if (c.get("state") or {}).get("waiting")), None)
    status = "Terminating" if o["metadata"].get("deletionTimestamp") else (waiting or phase)
    return [o["metadata"]["name"], f"{ready}/{total}", status, restarts,
            age(o["metadata"].get("creationTimestamp"), now), st.get("podIP") or "<none>",
            (o.get("spec") or {}).get("nodeName") or "<none>", "<none>", "<none>"]


def _st(o: dict[str, Any], k: str) -> int:
    return int((o.get("status") or {}).get(k) or 0)


def _sp(o: dict[str, Any], k: str, default: int = 1) -> int:
    v = (o.get("spec") or {}).get(k)
    return default if v is None else int(v)


def _wide(o: dict[str, Any]) -> list[str]:
    cs = _containers(o)
    return [",".join(c.get("name", "") for c in cs), ",".join(c.get("image", "") for c in cs), _selector(o)]


S, I = "string", "integer"
COLUMNS: dict[str, list[tuple[str, str, int]]] = {
    "Pod": [("Name", S, 0), ("Ready", S, 0), ("Status", S, 0), ("Restarts", I, 0), ("Age", S, 0), ("IP", S, 1),
            ("Node", S, 1), ("Nominated Node", S, 1), ("Readiness Gates", S, 1)],
    "Deployment": [("Name", S, 0), ("Ready", S, 0), ("Up-to-date", I, 0), ("Available", I, 0), ("Age", S, 0),
                   ("Containers", S, 1), ("Images", S, 1), ("Selector", S, 1)],
    "StatefulSet": [("Name", S, 0), ("Ready", S, 0), ("Age", S, 0), ("Containers", S, 1), ("Images", S, 1)],
    "DaemonSet": [("Name", S, 0), ("Desired", I, 0), ("Current", I, 0), ("Ready", I, 0), ("Up-to-date", I, 0),
                  ("Available", I, 0), ("Node Selector", S, 0), ("Age", S, 0), ("Containers", S, 1),
                  ("Images", S, 1), ("Selector", S, 1)],
    "ReplicaSet": [("Name", S, 0), ("Desired", I, 0), ("Current", I, 0), ("Ready", I, 0), ("Age", S, 0),
                   ("Containers", S, 1), ("Images", S, 1), ("Selector", S, 1)],
    "ConfigMap": [("Name", S, 0), ("Data", I, 0), ("Age", S, 0)],
    "Secret": [("Name", S, 0), ("Type", S, 0), ("Data", I, 0), ("Age", S, 0)],
    "Service": [("Name", S, 0), ("Type", S, 0), ("Cluster-IP", S, 0), ("External-IP", S, 0), ("Port(s)", S, 0),
                ("Age", S, 0), ("Selector", S, 1)],
    "Namespace": [("Name", S, 0), ("Status", S, 0), ("Age", S, 0)],
    "Event": [("Last Seen", S, 0), ("Type", S, 0), ("Reason", S, 0), ("Object", S, 0), ("Message", S, 0)],
}

ROWS: dict[str, Callable[[dict[str, Any], float], list[Any]]] = {
    "Pod": _pod_row,
    "Deployment": lambda o, now: [o["metadata"]["name"], f"{_st(o, 'readyReplicas')}/{_sp(o, 'replicas')}",
                                  _st(o, "updatedReplicas"), _st(o, "availableReplicas"),
                                  age(o["metadata"].get("creationTimestamp"), now), *_wide(o)],
    "StatefulSet": lambda o, now: [o["metadata"]["name"], f"{_st(o, 'readyReplicas')}/{_sp(o, 'replicas')}",
                                   age(o["metadata"].get("creationTimestamp"), now), *_wide(o)[:2]],
    "DaemonSet": lambda o, now: [o["metadata"]["name"], _st(o, "desiredNumberScheduled"),
                                 _st(o, "currentNumberScheduled"), _st(o, "numberReady"),
                                 _st(o, "updatedNumberScheduled"), _st(o, "numberAvailable"),
                                 ",".join(f"{k}={v}" for k, v in (((o.get("spec") or {}).get("template") or {})
                                          .get("spec", {}).get("nodeSelector") or {}).items()) or "<none>",
                                 age(o["metadata"].get("creationTimestamp"), now), *_wide(o)],
    "ReplicaSet": lambda o, now: [o["metadata"]["name"], _sp(o, "replicas"), _st(o, "replicas"),
                                  _st(o, "readyReplicas"), age(o["metadata"].get("creationTimestamp"), now),
                                  *_wide(o)],
    "ConfigMap": lambda o, now: [o["metadata"]["name"], len(o.get("data") or {}) + len(o.get("binaryData") or {}),
                                 age(o["metadata"].get("creationTimestamp"), now)],
    "Secret": lambda o, now: [o["metadata"]["name"], o.get("type", "Opaque"), len(o.get("data") or {}),
                              age(o["metadata"].get("creationTimestamp"), now)],
    "Service": lambda o, now: [o["metadata"]["name"], (o.get("spec") or {}).get("type", "ClusterIP"),
                               (o.get("spec") or {}).get("clusterIP") or "<none>", "<none>",
                               ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}"
                                        for p in (o.get("spec") or {}).get("ports") or []) or "<none>",
                               age(o["metadata"].get("creationTimestamp"), now),
                               ",".join(f"{k}={v}" for k, v in ((o.get("spec") or {}).get("selector") or {})
                                        .items()) or "<none>"],
    "Namespace": lambda o, now: [o["metadata"]["name"], (o.get("status") or {}).get("phase", "Active"),
                                 age(o["metadata"].get("creationTimestamp"), now)],
    "Event": lambda o, now: [age(o.get("lastTimestamp") or o["metadata"].get("creationTimestamp"), now),
                             o.get("type", "Normal"), o.get("reason", ""),
                             f"{(o.get('involvedObject') or {}).get('kind', '').lower()}/"
                             f"{(o.get('involvedObject') or {}).get('name', '')}", o.get("message", "")],
}


def table(kind: str, objects: list[dict[str, Any]], now: float, rv: str, include: str = "Object") -> dict[str, Any]:
    cols = COLUMNS.get(kind, [("Name", S, 0), ("Age", S, 0)])
    row = ROWS.get(kind, lambda o, now: [o["metadata"]["name"], age(o["metadata"].get("creationTimestamp"), now)])
    rows = []
    for o in objects:
        r: dict[str, Any] = {"cells": row(o, now)}
        if include == "Object":
            r["object"] = o
        elif include != "None":
            r["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                           "metadata": o["metadata"]}
        rows.append(r)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv},
            "columnDefinitions": [{"name": n, "type": t, "format": "name" if n == "Name" else "",
                                   "description": n, "priority": p} for n, t, p in cols],
            "rows": rows}
