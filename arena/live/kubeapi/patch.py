"""The three patch types of the Kubernetes API: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic
merge patch, used by the emulated API server (`arena.live.kubeapi.server`) for PATCH requests.

Strategic merge follows the API server's rules for the built-in types: lists whose Go field carries a patch merge
key (containers by name, env by name, ports by containerPort ...) are merged element by element, other lists are
replaced; the directives `$patch` (replace, delete, merge), `$setElementOrder/<list>`, `$deleteFromPrimitiveList/
<list>` and `$retainKeys` are honoured. The merge keys are those of the Kubernetes API's types (the `patchMergeKey`
struct tags), looked up by field name, since this emulator keeps no typed schema.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["PatchError", "json_patch", "merge_patch", "strategic_merge_patch", "MERGE_KEYS"]


class PatchError(ValueError):
    """A patch that cannot be applied (a bad path, a failed test op): the API answers 422."""


# Field name -> merge key, from the patchMergeKey tags of core/v1, apps/v1 and meta/v1.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "ports": "containerPort",  # a Service's ports are merged by port; see _merge_key
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
}
# Lists of scalars merged as sets (patchStrategy "merge" with no key).
MERGED_SCALAR_LISTS = {"finalizers"}


def _merge_key(field: str, items: list[Any]) -> str | None:
    key = MERGE_KEYS.get(field)
    if field == "ports" and items and isinstance(items[0], dict) and "port" in items[0] \
            and "containerPort" not in items[0]:
        return "port"  # a Service's ServicePort
    return key


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str]) -> Any:
    for p in parts:
        if isinstance(doc, list):
            try:
                doc = doc[int(p)]
            except (ValueError, IndexError) as e:
                raise PatchError(f"no index {p!r}") from e
        elif isinstance(doc, dict):
            if p not in doc:
                raise PatchError(f"no key {p!r}")
            doc = doc[p]
        else:
            raise PatchError(f"cannot descend into {p!r}")
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902: add, remove, replace, move, copy and test, applied in order to a copy."""
    if not isinstance(ops, list):
        raise PatchError("a JSON patch is a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"bad operation {op!r}")
        kind, parts = op["op"], _pointer(str(op["path"]))

        def remove(parts: list[str]) -> Any:
            parent = _walk(doc, parts[:-1])
            last = parts[-1]
            if isinstance(parent, list):
                try:
                    return parent.pop(int(last))
                except (ValueError, IndexError) as e:
                    raise PatchError(f"no index {last!r}") from e
            if not isinstance(parent, dict) or last not in parent:
                raise PatchError(f"unable to remove nonexistent key {last!r}")
            return parent.pop(last)

        def add(parts: list[str], value: Any) -> None:
            nonlocal doc
            if not parts:
                doc = value
                return
            parent = _walk(doc, parts[:-1])
            last = parts[-1]
            if isinstance(parent, list):
                idx = len(parent) if last == "-" else int(last)
                if idx > len(parent):
                    raise PatchError(f"index {idx} out of range")
                parent.insert(idx, value)
            elif isinstance(parent, dict):
                parent[last] = value
            else:
                raise PatchError(f"cannot add at {op['path']!r}")

        if kind == "add":
            add(parts, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            remove(parts)
        elif kind == "replace":
            _walk(doc, parts)  # the value replaced must exist
            if parts:
                remove(parts)
            add(parts, copy.deepcopy(op.get("value")))
        elif kind in ("move", "copy"):
            src = _pointer(str(op.get("from", "")))
            value = copy.deepcopy(_walk(doc, src))
            if kind == "move":
                remove(src)
            add(parts, value)
        elif kind == "test":
            if _walk(doc, parts) != op.get("value"):
                raise PatchError(f"test failed at {op['path']!r}")
        else:
            raise PatchError(f"unknown operation {kind!r}")
    return doc


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    """Strategic merge of `patch` into `target` (both decoded JSON), as the API server does for built-in types."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    orders: dict[str, list[Any]] = {}
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys"):
            continue
        if k.startswith("$setElementOrder/"):
            orders[k.split("/", 1)[1]] = v
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            name = k.split("/", 1)[1]
            out[name] = [x for x in out.get(name) or [] if x not in (v or [])]
            continue
        if v is None:
            out.pop(k, None)
        elif isinstance(v, list):
            out[k] = _merge_list(k, out.get(k), v)
        elif isinstance(v, dict):
            merged = strategic_merge_patch(out.get(k), v, k)
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        else:
            out[k] = v
    for name, order in orders.items():
        if isinstance(out.get(name), list):
            out[name] = _ordered(name, out[name], order)
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _merge_list(field: str, current: Any, patch: list[Any]) -> list[Any]:
    current = current if isinstance(current, list) else []
    if field in MERGED_SCALAR_LISTS:
        return current + [x for x in patch if x not in current]
    key = _merge_key(field, patch or current)
    if key is None or not all(isinstance(x, dict) for x in patch):
        if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
            return [x for x in patch if not (isinstance(x, dict) and "$patch" in x)]
        return copy.deepcopy(patch)
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return [copy.deepcopy(x) for x in patch if "$patch" not in x]
    out = copy.deepcopy(current)
    for item in patch:
        at = next((i for i, c in enumerate(out) if isinstance(c, dict) and c.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if at is not None:
                out.pop(at)
            continue
        if at is None:
            out.append(strategic_merge_patch({}, item, field))
        else:
            out[at] = strategic_merge_patch(out[at], item, field)
    return out


def _ordered(field: str, items: list[Any], order: list[Any]) -> list[Any]:
    key = _merge_key(field, items)
    ident = (lambda x: x.get(key) if isinstance(x, dict) else x) if key else (lambda x: x)
    wanted = [ident(o) for o in order]
    ranked = [x for w in wanted for x in items if ident(x) == w]
    return ranked + [x for x in items if ident(x) not in wanted]
