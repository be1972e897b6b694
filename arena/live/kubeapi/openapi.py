"""A skeleton OpenAPI v3 for the emulated API server: enough for kubectl to find each kind's schema, its
strategic-merge keys (containers and env by name ...) and that the server takes `fieldValidation`, so a plain
`kubectl apply -f` works without `--validate=false`.

Called by `arena.live.kubeapi.server` for /openapi/v3 and /openapi/v3/<group-version>. The schemas carry only the
fields whose merge strategy matters; the rest is open (`x-kubernetes-preserve-unknown-fields`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from arena.live.kubeapi.patch import MERGE_KEYS
from arena.live.kubeapi.store import RESOURCES

__all__ = ["openapi_index", "openapi_document"]


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _ref(name: str) -> dict[str, Any]:
    return {"allOf": [{"$ref": f"#/components/schemas/{name}"}]}


def _list_of(item: str, field: str) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "array", "items": _ref(item)}
    key = MERGE_KEYS.get(field)
    if key:
        out.update({"x-kubernetes-patch-merge-key": key, "x-kubernetes-patch-strategy": "merge",
                    "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key]})
    return out


def _open(props: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": props or {}, "x-kubernetes-preserve-unknown-fields": True}


SHARED: dict[str, Any] = {
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": _open({
        "name": {"type": "string"}, "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "ownerReferences": {"type": "array", "items": {"type": "object"}, "x-kubernetes-patch-merge-key": "uid",
                            "x-kubernetes-patch-strategy": "merge"},
        "finalizers": {"type": "array", "items": {"type": "string"}, "x-kubernetes-patch-strategy": "merge"}}),
    "io.k8s.api.core.v1.EnvVar": _open({"name": {"type": "string"}, "value": {"type": "string"}}),
    "io.k8s.api.core.v1.ContainerPort": _open({"containerPort": {"type": "integer"}}),
    "io.k8s.api.core.v1.VolumeMount": _open({"mountPath": {"type": "string"}, "name": {"type": "string"}}),
    "io.k8s.api.core.v1.Volume": _open({"name": {"type": "string"}}),
    "io.k8s.api.core.v1.Container": _open({
        "name": {"type": "string"}, "image": {"type": "string"},
        "env": _list_of("io.k8s.api.core.v1.EnvVar", "env"),
        "ports": _list_of("io.k8s.api.core.v1.ContainerPort", "ports"),
        "volumeMounts": _list_of("io.k8s.api.core.v1.VolumeMount", "volumeMounts")}),
    "io.k8s.api.core.v1.PodSpec": _open({
        "containers": _list_of("io.k8s.api.core.v1.Container", "containers"),
        "initContainers": _list_of("io.k8s.api.core.v1.Container", "initContainers"),
        "volumes": _list_of("io.k8s.api.core.v1.Volume", "volumes")}),
    "io.k8s.api.core.v1.PodTemplateSpec": _open({
        "metadata": _ref("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
        "spec": _ref("io.k8s.api.core.v1.PodSpec")}),
}


def _kind_schema(r: Any) -> tuple[str, dict[str, dict[str, Any]]]:
    pkg = "core" if not r.group else r.group
    name = f"io.k8s.api.{pkg}.{r.version}.{r.kind}"
    props: dict[str, Any] = {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                             "metadata": _ref("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")}
    extra: dict[str, dict[str, Any]] = {}
    if r.kind == "Pod":
        props["spec"] = _ref("io.k8s.api.core.v1.PodSpec")
    elif r.kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"):
        spec = f"{name}Spec"
        extra[spec] = _open({"template": _ref("io.k8s.api.core.v1.PodTemplateSpec")})
        props["spec"] = _ref(spec)
    schema = _open(props)
    schema["x-kubernetes-group-version-kind"] = [{"group": r.group, "kind": r.kind, "version": r.version}]
    return name, {name: schema, **extra}


def _operation(r: Any, verb: str) -> dict[str, Any]:
    params = [{"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
              {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
              {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}}]
    return {"operationId": f"{verb}{r.kind}", "parameters": params, "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": verb,
            "x-kubernetes-group-version-kind": {"group": r.group, "kind": r.kind, "version": r.version}}


def openapi_document(gv_path: str) -> dict[str, Any] | None:
    gv_path = gv_path.split("?")[0].strip("/")
    resources = [r for r in RESOURCES if _gv_path(r.group, r.version) == gv_path]
    if not resources:
        return None
    schemas: dict[str, Any] = dict(SHARED)
    paths: dict[str, Any] = {}
    for r in resources:
        _, s = _kind_schema(r)
        schemas.update(s)
        base = f"/{gv_path}/namespaces/{{namespace}}/{r.plural}" if r.namespaced else f"/{gv_path}/{r.plural}"
        paths[base] = {"post": _operation(r, "post"), "get": _operation(r, "list")}
        paths[base + "/{name}"] = {"put": _operation(r, "put"), "patch": _operation(r, "patch"),
                                   "get": _operation(r, "get"), "delete": _operation(r, "delete")}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes (emulated)", "version": "v1.37.0"},
            "paths": paths, "components": {"schemas": schemas}}


def openapi_index() -> dict[str, Any]:
    out = {}
    for gv in sorted({_gv_path(r.group, r.version) for r in RESOURCES}):
        digest = hashlib.sha256(json.dumps(openapi_document(gv), sort_keys=True).encode()).hexdigest()[:16].upper()
        out[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={digest}"}
    return {"paths": out}
