"""One meaning per write: every spelling of a change to one setting comes to one canonical key, scope and layer.

The table is the `settings:` section of catalogue.yaml (validated by `guardrail.actions.catalogue`). `normalise`
calls `canonical(actions)` once, after every classifier and wrapper has run, so that the policies, the journal and
the verifiers see `app.roles.channel.db.pool_size` (scope role) whether the agent ran the task helper, PUT the
admin API, patched the ConfigMap or edited the rendered file. A raw key that is a setting of its own too (a Helm
values path, a ConfigMap data key, a file) stays beside the canonical one, and the action's `details.derived_keys`
names the canonical keys made from it: the persistence checks read the raw key, which is what the command wrote.
"""

from __future__ import annotations

import configparser
import re
from typing import Any, Iterable

from guardrail.actions.catalogue import Setting, SettingWrite, catalogue
from guardrail.actions.classifiers.base import DocumentTooLarge, flatten, load_yaml
from guardrail.actions.model import UNKNOWN, Action, KeyChange, Layer, Target

__all__ = ["canonical", "component_of", "match_key"]

# A pod's suffix: a StatefulSet ordinal (redis-cache-0), or a ReplicaSet hash and pod id (svc-a-7d9f8c6b5-x2x9q).
# (A hash carries a digit, so that `redis-master-cache` is not read as a pod of `redis`.)
_POD_SUFFIX = re.compile(r"(?:-[0-9]+|-(?=[a-z]*[0-9])[a-z0-9]{6,10}-[a-z0-9]{5})$")
_COMPONENT_KINDS = {"component", "pod", "deployment", "statefulset", "daemonset", "replicaset", "service"}
# A document larger than this is not searched for settings (its raw key still stands).
_MAX_DOCUMENT = 256 * 1024


def component_of(target: Target) -> str:
    """The component a target names: a host or workload as it is, a pod without its controller's suffix."""
    if target.kind not in _COMPONENT_KINDS or not target.name:
        return ""
    return _POD_SUFFIX.sub("", target.name) if target.kind == "pod" else target.name


def canonical(actions: Iterable[Action]) -> list[Action]:
    """The actions with each key the table knows in its canonical form (and layer); others unchanged."""
    return [_canonical(a) for a in actions]


def _canonical(a: Action) -> Action:
    if not a.keys:
        return a
    try:
        return _canonical_keys(a)
    except DocumentTooLarge as e:  # a document inside the write (a ConfigMap's app.yaml) past the bound
        return a.model_copy(update={"mutating": UNKNOWN, "opaque_reason": f"a document it writes has {e}: pass "
                                                                          "the plain values instead"})


def _canonical_keys(a: Action) -> Action:
    keys: list[KeyChange] = []
    layers: set[str] = set()
    settings: list[str] = []
    derived: list[str] = []
    hit = False
    for k in a.keys:
        found = match_key(a, k)
        if found is None:
            keys.append(k)
            continue
        hit = True
        setting, write, canon = found
        if write.keep_raw or not canon:
            keys.append(k)
            derived += [c.key for c in canon]
        keys.extend(canon)
        if canon:
            settings.append(setting.id)
            if write.layer is not None:
                layers.add(write.layer.value)
    if not hit:
        return a
    unique = list({(k.key, tuple(sorted(k.scope.items())), repr(k.value)): k for k in keys}.values())
    update: dict[str, Any] = {"keys": unique}
    if len(layers) == 1:
        update["layer"] = Layer(layers.pop())
    if settings:
        update["details"] = {**a.details, "settings": sorted(set(settings))}
    if derived:
        # Beside a raw key that is a setting of its own: for the rules. The persistence checks read the raw key
        # (the values path, the ConfigMap key, the file), which is what this command wrote.
        update["details"]["derived_keys"] = sorted(set(derived))
    return a.model_copy(update=update)


def match_key(a: Action, k: KeyChange) -> tuple[Setting, SettingWrite, list[KeyChange]] | None:
    """The first write of the table this raw key is, with the canonical keys it comes to."""
    for setting in catalogue().settings:
        for write in setting.writes:
            if a.tool not in write.tool or (write.api and not re.fullmatch(write.api, str(a.details.get("api")))):
                continue
            m = re.fullmatch(write.key, k.key)
            if m is None:
                continue
            groups: dict[str, str] = {"component": component_of(a.target)}
            if write.target is not None:
                # The component a client or a pod names, else the object's own name (a ConfigMap's).
                t = re.fullmatch(write.target, groups["component"] or a.target.name)
                if t is None:
                    continue
                groups.update(_named(t))
            groups.update({n: str(v) for n, v in k.scope.items() if v})
            groups.update(_named(m))
            if write.document is None:
                out = _render(setting, write, groups, k.value)
                if out is None:
                    continue
                return setting, write, [out]
            return setting, write, _from_document(setting, write, groups, k.value)
    return None


def _named(m: re.Match[str]) -> dict[str, str]:
    return {n: v for n, v in m.groupdict().items() if v is not None}


def _render(setting: Setting, write: SettingWrite, groups: dict[str, str], value: Any) -> KeyChange | None:
    values = dict(groups)
    try:
        values.update({n: t.format(**groups) for n, t in write.bind.items()})
        key = setting.key.format(**values)
    except (KeyError, IndexError, ValueError):
        return None
    scope = {n: values[n] for n in setting.scope if values.get(n)}
    if len(scope) < len(setting.scope):
        return None  # the write does not say which one (no role, no component): left as the classifier said
    return KeyChange(key=key, value=value, scope=scope)


def _from_document(setting: Setting, write: SettingWrite, groups: dict[str, str], text: Any) -> list[KeyChange]:
    """The settings a document (a ConfigMap key's value, a file's new content) sets, by its dotted paths."""
    out: list[KeyChange] = []
    for path, value in _leaves(write.document or "", text):
        m = re.fullmatch(write.leaf or "", path)
        if m is None:
            continue
        kc = _render(setting, write, {**groups, **_named(m)}, value)
        if kc is not None:
            out.append(kc)
    return out


def _leaves(kind: str, text: Any) -> list[tuple[str, Any]]:
    if not isinstance(text, str) or not text.strip() or len(text) > _MAX_DOCUMENT:
        return []
    if kind == "yaml":
        doc = load_yaml(text)  # bounded: an alias bomb raises DocumentTooLarge (_canonical makes the action opaque)
        return flatten(doc, "") if isinstance(doc, dict) else []
    if kind == "conf":  # redis.conf: `name value ...` lines; the last one of a name wins, as redis reads it
        pairs = [ln.split(None, 1) for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        return list({p[0].lower(): (p[0].lower(), p[1].strip() if len(p) > 1 else "") for p in pairs}.values())
    if kind == "ini":  # my.cnf: `name = value` under any group; dashes and underscores are one
        parser = configparser.ConfigParser(allow_no_value=True, strict=False, interpolation=None)
        try:
            parser.read_string(text if text.lstrip().startswith("[") else "[mysqld]\n" + text)
        except configparser.Error:
            return []
        return [(n.replace("-", "_").lower(), v) for s in parser.sections() for n, v in parser.items(s)]
    return []
