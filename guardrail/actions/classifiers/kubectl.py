"""kubectl: verbs, resources and the settings they change (scale -> k8s.replicas, set env -> k8s.env.<NAME> ...).

Registered for `kubectl` and `oc`; called by `Normaliser.dispatch`. `kubectl exec` itself is unwrapped by
`guardrail.actions.wrappers.kubectl_exec` (with `parse_exec` from here), which classifies the inner command on its
own. Verb semantics and kind names come from catalogue.yaml.
"""

from __future__ import annotations

import json
import re
from typing import Any

from guardrail.actions.catalogue import catalogue
from guardrail.actions.classifiers.base import OptionSpec, Parsed, flatten, load_yaml, register
from guardrail.actions.invocation import (STDIN_PATHS, Invocation, Unreadable, read_at_decision,
                                          stdin_at_decision)
from guardrail.actions.model import UNKNOWN, Action, KeyChange, Layer, Target
from guardrail.actions.filewrite import file_write
from guardrail.actions.words import Word

__all__ = ["Kubectl", "KUBECTL_GLOBAL", "parse_exec", "kind_of", "container_specs", "container_argv",
           "container_commands"]

_VALUE_OPTS = [
    "-n", "--namespace", "--context", "--kubeconfig", "--cluster", "--user", "-s", "--server", "--token", "--as",
    "--as-group", "-l", "--selector", "-o", "--output", "-c", "--container", "-f", "--filename", "--field-selector",
    "-p", "--patch", "--type", "--replicas", "--image", "--timeout", "--since", "--tail", "--sort-by",
    "--template", "-L", "--label-columns", "--request-timeout", "-k", "--kustomize", "--from-literal",
    "--from-file", "--from-env-file", "--grace-period", "--current-replicas", "--resource-version", "--revision",
    "--to-revision", "--field-manager", "--max-unavailable", "-e", "--env", "--pod-running-timeout", "--overrides",
    "--restart", "--port", "--chunk-size", "--limits", "--requests", "--min", "--max", "--cpu-percent",
    "--containers", "--from", "--keys", "--prefix", "--since-time", "--limit-bytes", "--subresource",
    "--clusterrole", "--role", "--serviceaccount", "--group", "--verb", "--resource", "--resource-name",
    "--duration", "--docker-server", "--docker-username", "--docker-password", "--cert", "--key",
    "--target", "--profile", "--copy-to", "--for", "--patch-file", "--local-ssd-count", "--pod-selector",
    "--override-type", "--hard", "--scopes",
]
_ALIASES = {"--namespace": "-n", "--selector": "-l", "--output": "-o", "--container": "-c", "--filename": "-f",
            "--patch": "-p", "--label-columns": "-L", "--kustomize": "-k", "--env": "-e", "--server": "-s"}
KUBECTL_GLOBAL = OptionSpec.of(_VALUE_OPTS, _ALIASES)
# `kubectl logs -f -p`: follow and previous are flags there, not a filename and a patch.
_LOGS = OptionSpec.of([o for o in _VALUE_OPTS if o not in ("-f", "--filename", "-p", "--patch")],
                      {k: v for k, v in _ALIASES.items() if v not in ("-f", "-p")})
_EXEC = OptionSpec.of(["-n", "--namespace", "-c", "--container", "--context", "--kubeconfig", "--cluster",
                       "--user", "--as", "--as-group", "--pod-running-timeout", "-f", "--filename",
                       "--request-timeout", "-s", "--server", "--token"],
                      {"--namespace": "-n", "--container": "-c", "--filename": "-f", "--server": "-s"})


_PROBE_KEY = re.compile(r"(readiness|liveness|startup)Probe$", re.I)


def _probe_removals(obj: Any, path: str) -> list[tuple[str, Any]]:
    """(key, value) of every probe a patch document removes, however deep (lists walked by item name)."""
    out: list[tuple[str, Any]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            key = f"{path}.{k}"
            if _PROBE_KEY.search(str(k)) and (v is None or isinstance(v, dict) and v.get("$patch") == "delete"):
                out.append((key, None))
            else:
                out += _probe_removals(v, key)
    elif isinstance(obj, list):
        for i, item in enumerate(obj):
            name = item.get("name") if isinstance(item, dict) else None
            out += _probe_removals(item, f"{path}.{name if isinstance(name, str) and name else i}")
    return out


def kind_of(name: str) -> str:
    kinds = catalogue().kubectl.kinds
    n = name.lower()
    if n in kinds:
        return kinds[n]
    base = n.split(".", 1)[0]
    return kinds.get(base, n)


# A label or annotation key (`app`, `kubectl.kubernetes.io/restartedAt`), as written before the `=` of KEY=VALUE.
_LABEL_KEY = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.]*(/[A-Za-z0-9][-A-Za-z0-9_.]*)?=")


def _pairs(words: list[Word]) -> list[tuple[str, str]]:
    """The KEY=VALUE pairs of comma-separated lists (`app=x,tier=web`, `--limits=cpu=1,memory=1Gi`), in order; a
    part without `=` names nothing and is skipped."""
    return [(k, v) for w in words for part in str(w).split(",") for k, eq, v in [part.partition("=")] if eq]


def _computed_value(w: Word) -> bool:
    """`KEY="$(date +%s)"`: a literal key, a value computed as the command runs, and one word whatever it holds (the
    expansion quoted, or one the walker knows prints a number): a label's value, not a resource list."""
    return bool(_LABEL_KEY.match(w)) and not w.splits


def _resources(words: list[Word]) -> list[tuple[str, str | None]]:
    """`pod x y`, `pod/x`, `deploy/a svc/b`, `pods,svc` -> [(kind, name)]."""
    out: list[tuple[str, str | None]] = []
    if not words:
        return out
    if any("/" in w for w in words):
        for w in words:
            kind, _, name = str(w).partition("/")
            out.append((kind_of(kind), name or None))
        return out
    kinds = [kind_of(k) for k in str(words[0]).split(",") if k]
    names = [str(w) for w in words[1:]]
    for k in kinds:
        if names:
            out.extend((k, n) for n in names)
        else:
            out.append((k, None))
    return out


def parse_exec(args: list[Word]) -> tuple[str, str | None, str | None, list[Word]] | None:
    """`kubectl [-n NS] exec [-it] POD [-c C] -- CMD...` -> (pod, namespace, container, CMD argv)."""
    p = _EXEC.parse(args)
    pos = list(p.positionals)
    if not pos or pos[0] != "exec" or len(pos) < 2:
        return None
    pod = str(pos[1])
    if "/" in pod:
        pod = pod.split("/", 1)[1]
    inner = p.after_dashdash if p.after_dashdash is not None else pos[2:]
    ns = p.get("-n")
    c = p.get("-c")
    return pod, str(ns) if ns is not None else None, str(c) if c is not None else None, list(inner)


def _scalar(v: str) -> Any:
    try:
        return int(v)
    except ValueError:
        return v


@register
class Kubectl:
    """kubectl and oc."""

    commands = ("kubectl", "oc", "k3s-kubectl")

    def classify(self, inv: Invocation) -> list[Action]:
        g = KUBECTL_GLOBAL.parse(inv.args)
        if not g.positionals:
            if inv.args_pending:
                return [inv.opaque("kubectl", "kubectl with arguments read from stdin at run time", tool="kubectl")]
            return [inv.action("kubectl", "help", mutating=False)]
        verb = str(g.positionals[0])
        raw_api = next((str(a)[6:] or "" for a in inv.args if str(a) == "--raw" or str(a).startswith("--raw=")), None)
        if raw_api is not None and verb != "get":
            # `kubectl delete --raw /api/v1/.../persistentvolumeclaims/x`: a request to the API by path, past every
            # rule that reads a kind and a name.
            return [inv.action("kubectl", verb, mutating=UNKNOWN, details={"raw_api": True},
                               opaque_reason=f"kubectl {verb} --raw sends a request by API path, which the guard "
                                             f"does not read; use kubectl {verb} <kind> <name> instead")]
        p = _LOGS.parse(inv.args) if verb == "logs" else g
        ns_word = p.get("-n")
        ns = str(ns_word) if ns_word is not None else None
        rest = list(p.positionals[1:])
        rule = catalogue().kubectl.verbs.get(verb)
        details: dict[str, Any] = {"namespace": ns}
        if p.has("-A", "--all-namespaces"):
            details["all_namespaces"] = True
        if p.get("-l") is not None:
            details["selector"] = str(p.get("-l"))
        if p.get("-o") is not None:
            details["output"] = str(p.get("-o"))
        if p.get("-f") is not None:
            details["files"] = [str(f) for f in p.all("-f")]
            # `-f <(curl ...)`: the file is another command's output, made as the command runs.
            produced = [str(f) for f in p.all("-f") if f.has_substitution]
            if produced:
                details["produced_files"] = produced
        if p.get("-k") is not None:
            details["kustomize"] = [str(k) for k in p.all("-k")]
        if verb == "rollout":
            sub = str(rest[0]) if rest else ""
            rule = catalogue().kubectl.rollout.get(sub)
            verb = f"rollout {sub}".strip()
            rest = rest[1:]
        if rule is None:
            return [inv.action("kubectl", verb, target=Target(namespace=ns), mutating=UNKNOWN,
                               opaque_reason=f"kubectl {verb!r} is not a verb the guard knows", details=details)]
        handler = getattr(self, "_" + verb.replace(" ", "_").replace("-", "_"), None)
        resources = _resources(rest) if verb not in ("logs", "exec", "cp", "auth", "config", "run",
                                                      "create", "top", "attach", "port-forward") else []
        target = self._target(resources, ns)
        if resources:
            details["resources"] = [{"kind": k, "name": n} for k, n in resources]
            # `kubectl delete all -l app=x`: `all` is the category of pods, services and the workload controllers.
            details["resource_kinds"] = sorted({c for k, _ in resources for c in (_ALL_KINDS if k == "all" else (k,))})
        mutating = rule.mutating
        layer = rule.layer
        if mutating is True and (p.has("--dry-run") or p.get("--dry-run") is not None):
            dry = str(p.get("--dry-run") or "client")
            if dry in ("client", "server", "true"):
                details["dry_run"] = dry
                mutating, layer = False, Layer.NONE
        act = inv.action("kubectl", verb, target=target, layer=layer if mutating is not False else Layer.NONE,
                         mutating=mutating, details=details)
        if handler is not None:
            handler(inv, act, p, rest, resources, ns)
        if act.details.get("dest_path"):
            # The file the copy writes in the pod, judged as any write of that file (a datastore's data file).
            return [act, file_write(inv, act.details["dest_path"], by="kubectl cp", pod=act.target.name)]
        computed = [str(w) for w in rest if w.dynamic and not (verb in ("label", "annotate") and _computed_value(w))]
        if act.mutating is True and verb not in ("exec", "cp", "run", "port-forward", "attach", "debug") and (
                computed or inv.args_pending):
            # `kubectl delete $(kubectl get pvc -o name)`, `... -o name | xargs kubectl delete`: which resources it
            # changes is only known as it runs (every PVC, a protected workload's pods).
            what = computed[0] if computed else "what xargs reads"
            act.mutating = UNKNOWN
            act.opaque_reason = (f"the resources kubectl {verb} changes come from {what} as it runs; list them "
                                 f"first (kubectl get ...), then {verb} the ones you mean by name")
        return [act]

    @staticmethod
    def _target(resources: list[tuple[str, str | None]], ns: str | None) -> Target:
        if not resources:
            return Target(namespace=ns)
        kind, name = resources[0]
        return Target(kind=kind, name=name or "", namespace=ns)

    # ---- verb details (each edits the Action in place) --------------------------------------------------------

    def _logs(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any, ns: str | None) -> None:
        if rest:
            kind, _, name = str(rest[0]).rpartition("/")
            a.target = Target(kind=kind_of(kind) if kind else "pod", name=name, namespace=ns)
        if p.get("-c") is not None:
            a.details["container"] = str(p.get("-c"))

    def _top(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any, ns: str | None) -> None:
        if rest:
            a.target = Target(kind=kind_of(str(rest[0])), name=str(rest[1]) if len(rest) > 1 else "", namespace=ns)

    def _scale(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any, ns: str | None) -> None:
        r = p.get("--replicas")
        if r is None:
            return
        value = _scalar(str(r))
        a.details["replicas"] = value
        a.keys = [KeyChange(key="k8s.replicas", value=value, scope=self._scope(a))]

    def _delete(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any, ns: str | None) -> None:
        files = a.details.get("files", [])
        if files:
            # What a manifest names is deleted: read it from a heredoc, or (as apply does) from a local file at
            # decision time, `-f - < file` too; a remote or produced manifest, or one on a pipe, cannot be known.
            remote = any(str(f).lower().startswith(("http://", "https://")) for f in files)
            local = not STDIN_PATHS.intersection(files) and not remote and not a.details.get("produced_files")
            text = None
            reason = ""
            try:
                if STDIN_PATHS.intersection(files) and inv.stdin is not None and inv.stdin.text is not None:
                    text = inv.stdin.text
                elif STDIN_PATHS.intersection(files) and inv.stdin is not None and inv.stdin.source == "file":
                    text = stdin_at_decision(inv.stdin, inv.where)
                elif local:
                    text = "\n---\n".join(read_at_decision(str(f), inv.where) for f in files)
            except Unreadable as e:
                reason = f" (it cannot be read now: {e})"
            if text is not None:
                self._manifests(a, text, ns)
                if a.target.kind == "":
                    a.target = Target(kind="manifest", name=files[0], namespace=ns)
            elif a.mutating is True:
                a.mutating = UNKNOWN
                a.opaque_reason = (f"kubectl delete -f {files[0]} deletes what the manifest names, which the guard "
                                   f"does not read{reason}; delete the objects by kind and name, or from a readable "
                                   "file of at most 1 MB")
        elif a.details.get("kustomize") and a.mutating is True:
            a.mutating = UNKNOWN
            a.opaque_reason = (f"kubectl delete -k {a.details['kustomize'][0]} deletes what the kustomization "
                               "builds, which the guard does not read; delete the objects by kind and name")
        kinds = a.details.get("resource_kinds", [])
        if "pod" in kinds:
            a.details["restart"] = True
            if set(kinds) == {"pod"} and a.mutating is True:
                a.layer = Layer.NONE
        if p.has("--all"):
            a.details["all"] = True

    def _rollout_restart(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any,
                         ns: str | None) -> None:
        a.details["restart"] = True

    def _set(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any, ns: str | None) -> None:
        sub = str(rest[0]) if rest else ""
        a.verb = f"set {sub}".strip()
        objs = _resources([w for w in rest[1:] if "=" not in w and not str(w).endswith("-")][:2])
        if objs:
            a.target = self._target(objs, ns)
            a.details["resources"] = [{"kind": k, "name": n} for k, n in objs]
            a.details["resource_kinds"] = sorted({k for k, _ in objs})
        scope = self._scope(a)
        if p.get("-c") is not None:
            scope = {**scope, "container": str(p.get("-c"))}
        if sub == "env":
            if p.has("--list") or "--list" in p.flags:
                a.mutating, a.layer = False, Layer.NONE
                return
            pairs = [w for w in rest[1:] if "=" in w or (str(w).endswith("-") and not str(w).startswith("-"))]
            pairs += p.all("-e")
            for w in pairs:
                k, eq, v = str(w).partition("=")
                if eq:
                    a.keys.append(KeyChange(key=f"k8s.env.{k}", value=v, scope=scope))
                else:
                    a.keys.append(KeyChange(key=f"k8s.env.{k.rstrip('-')}", value=None, scope=scope))
                    a.details.setdefault("removed", []).append(k.rstrip("-"))
            if p.get("--from") is not None:
                a.details["from"] = str(p.get("--from"))
        elif sub == "image":
            for w in rest[1:]:
                k, eq, v = str(w).partition("=")
                if eq:
                    a.keys.append(KeyChange(key=f"k8s.image.{k}", value=v, scope=scope))
        elif sub == "selector":
            # The whole selector is replaced by these pairs (one comma-separated list, `app=x,tier=web`): the pods
            # the Service sends traffic to change.
            a.keys += [KeyChange(key=f"k8s.spec.selector.{k}", value=v, scope=scope) for k, v in _pairs(rest[1:])]
        elif sub == "resources":
            for opt in ("--limits", "--requests"):
                a.keys += [KeyChange(key=f"k8s.resources.{opt[2:]}.{k}", value=v, scope=scope)
                           for k, v in _pairs(p.all(opt))]
        if a.mutating is True and sub in _TEMPLATE_SETS and a.target.kind in _WORKLOAD_KINDS:
            a.details["restart"] = True  # the pod template changes: the controller replaces every pod

    def _rollout_undo(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any,
                      ns: str | None) -> None:
        if a.mutating is True:
            a.details["restart"] = True  # the previous pod template comes back: every pod is replaced

    def _patch(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any, ns: str | None) -> None:
        body = p.get("-p")
        text = str(body) if body is not None else None
        if text is None and p.get("--patch-file") is None:
            return
        if body is not None and body.dynamic and a.mutating is True:
            # `-p "$(cat /tmp/p.json)"`, `-p "$PATCH"`: the patch is made as the command runs.
            a.mutating = UNKNOWN
            a.opaque_reason = (f"the patch {text!r} is expanded as the command runs, so what it changes cannot be "
                               "seen; pass the patch itself inline with -p '...'")
            return
        if text is None:
            # The patch is in a file: read now (bounded), as an inline -p holding it would be; unreadable, what it
            # changes cannot be known.
            a.details["patch_file"] = str(p.get("--patch-file"))
            try:
                text = read_at_decision(a.details["patch_file"], inv.where)
            except Unreadable as e:
                a.mutating = UNKNOWN
                a.opaque_reason = (f"the patch is in the file {a.details['patch_file']}, which the guard cannot read "
                                   f"now ({e}); pass it inline with -p '...'")
                return
        a.details["patch_type"] = str(p.get("--type") or "strategic")
        a.details["patch"] = text
        scope = self._scope(a)
        try:
            doc = json.loads(text) if text is not None else None
        except ValueError:
            doc = load_yaml(text) if text is not None else None
        if isinstance(doc, dict):
            for k, v in flatten(doc, "k8s"):
                a.keys.append(KeyChange(key=k, value=v, scope=scope))
            # A probe removed inside a container list (flatten keeps lists whole): `readinessProbe: null` / `~`, or
            # {"$patch": "delete"}, under containers[name=web].
            seen = {k.key for k in a.keys}
            for k, v in _probe_removals(doc, "k8s"):
                if k not in seen:
                    a.keys.append(KeyChange(key=k, value=v, scope=scope))
            replicas = (doc.get("spec") or {}).get("replicas") if isinstance(doc.get("spec"), dict) else None
            if replicas is not None:
                a.details["replicas"] = replicas
                a.keys.append(KeyChange(key="k8s.replicas", value=replicas, scope=scope))
        elif isinstance(doc, list):
            for op in doc:
                if not (isinstance(op, dict) and "path" in op) or op.get("op") == "test":
                    continue  # a `test` op only compares
                path = str(op["path"])
                value = op.get("value")
                replicas = path.endswith("/spec/replicas")
                if replicas and op.get("op") == "remove":
                    value = 1  # the API's default for a workload's replicas
                a.keys.append(KeyChange(key="k8s" + path.replace("/", "."), value=value, scope=scope))
                if not replicas:
                    continue
                if op.get("op") in ("copy", "move"):
                    # The count is whatever the live object holds at `from`: unknown before it runs (0, or any).
                    a.mutating = UNKNOWN
                    a.opaque_reason = (f"the replica count is {op['op']}d from {op.get('from')} of the live object, "
                                       "a value unknown until it runs; set replicas with kubectl scale --replicas=N")
                a.details["replicas"] = value
                # The same key a merge patch or `kubectl scale` gives, so the replica rules read it.
                a.keys.append(KeyChange(key="k8s.replicas", value=value, scope=scope))
        if any(k.key.endswith("restartedAt") for k in a.keys):
            a.details["restart"] = True  # the annotation `kubectl rollout restart` writes: the pods roll
        elif a.mutating is True and a.target.kind in _WORKLOAD_KINDS and any(
                k.key.startswith("k8s.spec.template.") for k in a.keys):
            a.details["restart"] = True  # the pod template changes (image, env, annotations ...): every pod is replaced
        elif a.mutating is True and a.target.kind == "pod" and any(
                k.key.startswith(("k8s.spec.containers", "k8s.spec.initContainers", "k8s.spec.activeDeadlineSeconds"))
                for k in a.keys):
            a.details["restart"] = True  # a container's image changed restarts it; a deadline ends the pod

    def _edit(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any, ns: str | None) -> None:
        a.details["interactive"] = True
        if not p.has("-h", "--help"):
            # The change is whatever is typed into the editor (or what $KUBE_EDITOR does): not visible.
            a.mutating = UNKNOWN
            a.opaque_reason = ("kubectl edit changes the object in an editor, which the guard does not see; make the "
                               "change with kubectl patch, set, scale or apply, spelled out")

    def _apply(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any, ns: str | None) -> None:
        files = a.details.get("files", [])
        remote = next((f for f in files if str(f).lower().startswith(("http://", "https://"))), None)
        remote = remote or next((k for k in a.details.get("kustomize", []) if _remote_kustomization(k)), None)
        if a.details.get("produced_files"):
            a.mutating = UNKNOWN
            a.opaque_reason = (f"the manifest is the output of {a.details['produced_files'][0]}, made when the command "
                               "runs, and cannot be judged; write it to a file, read it, and apply the file")
        elif remote is not None:
            # Fetched as the command runs: whatever the server sends then is applied, and the guard never sees it.
            a.mutating = UNKNOWN
            a.opaque_reason = (f"the manifest comes from {remote} when the command runs and cannot be judged; "
                               "download it, read it, and apply the file (or pipe it through a heredoc)")
        elif STDIN_PATHS.intersection(files) and inv.stdin is not None and inv.stdin.text is not None:
            self._manifests(a, inv.stdin.text, ns)
        elif STDIN_PATHS.intersection(files) and inv.stdin is not None and inv.stdin.source == "file":
            try:  # `-f - < deploy.yaml`: the file, read now as `-f deploy.yaml` is
                self._manifests(a, stdin_at_decision(inv.stdin, inv.where), ns)
            except Unreadable as e:
                a.mutating = UNKNOWN
                a.opaque_reason = (f"kubectl {a.verb} -f -: the manifest on stdin cannot be read now ({e}); apply "
                                   "a readable file of at most 1 MB, or a heredoc")
        elif STDIN_PATHS.intersection(files) and inv.stdin is not None:
            a.mutating = UNKNOWN
            a.opaque_reason = (f"the manifest on stdin comes from {inv.stdin.producer or inv.stdin.source} and is "
                               "not visible; apply it from a heredoc or a file you have read")
        elif files and not STDIN_PATHS.intersection(files) and a.mutating is not False:
            # Read now, as a heredoc holding it would be: `kubectl apply -f m.yaml` was allowed unread while the
            # same manifest from a heredoc was denied.
            try:
                text = "\n---\n".join(read_at_decision(str(f), inv.where) for f in files)
            except Unreadable as e:
                a.target = Target(kind="manifest", name=files[0], namespace=ns)
                a.mutating = UNKNOWN
                a.opaque_reason = (f"kubectl {a.verb} -f: the manifest cannot be read now ({e}), so what it changes "
                                   "is not known; apply a readable file of at most 1 MB, or a heredoc")
            else:
                self._manifests(a, text, ns)
                if a.target.kind == "":
                    a.target = Target(kind="manifest", name=files[0], namespace=ns)
        elif files and a.target.kind == "":
            a.target = Target(kind="manifest", name=files[0], namespace=ns)
        elif a.details.get("kustomize") and a.target.kind == "":
            a.target = Target(kind="kustomization", name=a.details["kustomize"][0], namespace=ns)
        if a.mutating is True and a.verb == "apply" and p.has("--prune"):
            # Every object the selector matches that the manifest lacks is deleted: a set only the cluster knows.
            a.mutating = UNKNOWN
            a.opaque_reason = ("kubectl apply --prune deletes every matching object the manifest does not list, "
                               "which the guard cannot see; apply without --prune, and delete what you mean by name")

    def _replace(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any, ns: str | None) -> None:
        self._apply(inv, a, p, rest, res, ns)
        if a.mutating is True and p.has("--force") and str(p.get("--force", "true")).lower() != "false":
            # --force deletes each object and creates it again: a workload's pods all go at once.
            if a.target.kind in ("manifest", "kustomization"):
                a.mutating = UNKNOWN
                a.opaque_reason = (f"kubectl replace --force deletes and re-creates what {a.target.name} names, "
                                   "which the guard does not read; apply the change without --force")
            elif {"pod", *_WORKLOAD_KINDS} & set(a.details.get("resource_kinds", [])):
                a.details["restart"] = True

    def _create(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any, ns: str | None) -> None:
        if a.details.get("files"):
            self._apply(inv, a, p, rest, res, ns)
            return
        if not rest:
            return
        kind = kind_of(str(rest[0]))
        name = str(rest[1]) if len(rest) > 1 else ""
        if kind == "token":
            kind = "serviceaccount token"
        elif kind == "secret" and len(rest) > 2:
            name = str(rest[2])
        a.target = Target(kind=kind, name=name, namespace=ns)
        a.details["resource_kinds"] = [kind]
        a.details["resources"] = [{"kind": kind, "name": name}]
        for opt in ("--clusterrole", "--role", "--serviceaccount", "--user", "--group"):
            if p.get(opt) is not None:
                a.details[opt[2:]] = [str(v) for v in p.all(opt)]
        if kind in ("role", "clusterrole"):
            rule = {f: [x for w in p.all(f"--{f[:-1]}") for x in str(w).split(",")] for f in ("verbs", "resources")}
            if _wildcard_rule(rule):
                a.details["wildcard_role"] = True
        if kind == "resourcequota":
            # `--hard=pods=0,cpu=2`: the limits, keyed as a patch of spec.hard would be.
            scope = self._scope(a)
            a.keys += [KeyChange(key=f"k8s.spec.hard.{k.strip()}", value=_scalar(v.strip()), scope=scope)
                       for k, v in _pairs(p.all("--hard"))]
        if kind == "serviceaccount token":
            a.layer = Layer.NONE

    def _manifests(self, a: Action, text: str, ns: str | None) -> None:
        docs = [d for d in load_yaml(text, stream=True) or [] if isinstance(d, dict)]
        # A `kind: List` holds its objects under items.
        docs = [i for d in docs for i in ([x for x in d.get("items") or [] if isinstance(x, dict)]
                                         if str(d.get("kind", "")).endswith("List") else [d])]
        objs = [(kind_of(str(d.get("kind", ""))), _name_of(d)) for d in docs]
        # What the manifest's containers run (a Job's `command: [redis-cli, FLUSHALL]`): the kubectl wrapper
        # judges each as a command run in that pod, and takes this list out of the details.
        # The whole document: a `kind: List` holds its objects under items.
        commands = [(name, argv) for d, (_, name) in zip(docs, objs) for c in container_specs(d)
                    for argv in container_commands(c, [])]
        if commands:
            a.details["container_commands"] = commands
        if objs:
            a.target = Target(kind=objs[0][0], name=objs[0][1], namespace=ns)
            a.details["resources"] = [{"kind": k, "name": n} for k, n in objs]
            a.details["resource_kinds"] = sorted({k for k, _ in objs})
        # A workload's replicas, as `kubectl scale` sets them (`replicas: 0` in an applied Deployment); the role a
        # binding grants (as `create rolebinding --clusterrole=admin`); a quota's hard limits (as `create quota`).
        for d, (kind, name) in zip(docs, objs):
            spec = d.get("spec")
            scope = {"kind": kind, "name": name, **({"namespace": ns} if ns else {})}
            ref = d.get("roleRef")
            if kind in ("rolebinding", "clusterrolebinding") and isinstance(ref, dict) and a.verb != "delete":
                field = "clusterrole" if str(ref.get("kind", "")).lower() == "clusterrole" else "role"
                a.details.setdefault(field, []).append(str(ref.get("name", "")))
            if kind in ("role", "clusterrole") and any(_wildcard_rule(r) for r in d.get("rules") or []):
                a.details["wildcard_role"] = True
            if kind == "resourcequota" and isinstance(spec, dict) and isinstance(spec.get("hard"), dict):
                a.keys += [KeyChange(key=f"k8s.spec.hard.{k}", value=v, scope=scope) for k, v in spec["hard"].items()]
            if isinstance(spec, dict) and "replicas" in spec and a.verb != "delete":
                a.keys.append(KeyChange(key="k8s.replicas", value=spec["replicas"], scope=scope))
                a.details.setdefault("replicas", spec["replicas"])

    def _cp(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any, ns: str | None) -> None:
        if len(rest) < 2:
            return
        src, dst = str(rest[0]), str(rest[-1])
        if ":" in dst:
            pod, _, path = dst.partition(":")
            if "/" in pod:
                ns, pod = pod.split("/", 1)
            a.target = Target(kind="pod", name=pod, namespace=ns)
            a.keys = [KeyChange(key=f"file:{path}", value=None)]
            a.layer = Layer.RUNTIME
            a.details["dest_path"] = path
        else:
            a.target = Target(kind="file", name=dst)
            a.keys = [KeyChange(key=f"file:{dst}", value=None)]
            a.layer = Layer.DECLARED
        a.details["source"] = src

    def _auth(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any, ns: str | None) -> None:
        sub = str(rest[0]) if rest else ""
        a.verb = f"auth {sub}".strip()
        if sub not in ("can-i", "whoami"):
            a.mutating, a.layer = True, Layer.DECLARED
        files = a.details.get("files", [])
        if sub == "reconcile" and files and not (a.details.get("dry_run") or p.has("--dry-run")):
            # The roles and bindings in the manifest are created or widened: read them from a heredoc, else they
            # cannot be known.
            if STDIN_PATHS.intersection(files) and inv.stdin is not None and inv.stdin.text is not None:
                self._manifests(a, inv.stdin.text, ns)
            else:
                a.mutating = UNKNOWN
                a.opaque_reason = (f"kubectl auth reconcile -f {files[0]} creates or widens the RBAC the manifest "
                                   "names, which the guard does not read; give the manifest in a heredoc "
                                   "(-f - <<EOF) so it can be checked")

    def _config(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any, ns: str | None) -> None:
        sub = str(rest[0]) if rest else ""
        a.verb = f"config {sub}".strip()
        if sub and not (sub in ("view", "current-context") or sub.startswith("get-")):
            a.mutating, a.layer = True, Layer.NONE

    def _label(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any, ns: str | None) -> None:
        field = "labels" if a.verb == "label" else "annotations"
        objs = _resources([w for w in rest if "=" not in w and not str(w).endswith("-")])
        if objs:
            a.target = self._target(objs, ns)
            a.details["resources"] = [{"kind": k, "name": n} for k, n in objs]
            a.details["resource_kinds"] = sorted({k for k, _ in objs})
        for w in rest:
            k, eq, v = str(w).partition("=")
            if eq:
                # A value made as the command runs (`checked-at="$(date -u +%FT%TZ)"`) is kept as written: it names
                # no component, so a selected label overwritten with it is judged as any other value.
                if w.dynamic:
                    a.details.setdefault("computed_values", []).append(k)
                a.keys.append(KeyChange(key=f"k8s.{field}.{k}", value=v, scope=self._scope(a)))
            elif k.endswith("-") and not k.startswith("-") and len(k) > 1:
                # `app-` removes the label (a pod leaves the Services that select on it).
                a.keys.append(KeyChange(key=f"k8s.{field}.{k[:-1]}", value=None, scope=self._scope(a)))
        # Without --overwrite kubectl refuses to change a label the object already has: it can only add one.
        if p.has("--overwrite") and str(p.get("--overwrite", "true")).lower() != "false":
            a.details["overwrite"] = True

    _annotate = _label

    def _run(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any, ns: str | None) -> None:
        if rest:
            a.target = Target(kind="pod", name=str(rest[0]), namespace=ns)
        if p.get("--image") is not None:
            a.details["image"] = str(p.get("--image"))

    def _debug(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any, ns: str | None) -> None:
        if rest:
            kind, _, name = str(rest[0]).rpartition("/")
            a.target = Target(kind=kind_of(kind) if kind else "pod", name=name, namespace=ns)

    def _cordon(self, inv: Invocation, a: Action, p: Parsed, rest: list[Word], res: Any, ns: str | None) -> None:
        names = [str(w).split("/")[-1] for w in rest if "=" not in w and ":" not in w and kind_of(str(w)) != "node"]
        if names:
            a.target = Target(kind="node", name=names[0])

    _uncordon = _cordon
    _drain = _cordon
    _taint = _cordon

    @staticmethod
    def _scope(a: Action) -> dict[str, str]:
        s = {}
        if a.target.kind:
            s["kind"] = a.target.kind
        if a.target.name:
            s["name"] = a.target.name
        if a.target.namespace:
            s["namespace"] = a.target.namespace
        return s


# A kustomization kubectl fetches: a URL, an scp-like git address, or a `host.tld/path` (kustomize reads
# `github.com/org/repo//dir?ref=v1` as a git repository). A local directory has no dotted first segment.
_REMOTE_KUSTOMIZATION = re.compile(r"^(\w[\w+.-]*://|git@|[a-z0-9-]+(\.[a-z0-9-]+)+(:\d+)?/)|\?ref=", re.I)


def _remote_kustomization(path: str) -> bool:
    return bool(_REMOTE_KUSTOMIZATION.search(path))


# `kubectl set` subcommands that change a workload's pod template, and the kinds whose controller then replaces its
# pods (a restart of the component, as `rollout restart` is).
_TEMPLATE_SETS = frozenset({"env", "image", "resources", "serviceaccount", "sa"})
_WORKLOAD_KINDS = frozenset({"deployment", "statefulset", "daemonset", "replicaset"})
# The kinds in kubectl's `all` category (`kubectl delete all`).
_ALL_KINDS = ("pod", "service", "deployment", "replicaset", "statefulset", "daemonset", "job", "cronjob", "hpa",
              "replicationcontroller")


def _wildcard_rule(rule: Any) -> bool:
    """An RBAC rule that allows every verb on every resource (`verbs: ["*"], resources: ["*"]`)."""
    return isinstance(rule, dict) and all(isinstance(rule.get(f), list) and "*" in rule[f]
                                          for f in ("verbs", "resources"))


def _name_of(doc: dict) -> str:
    meta = doc.get("metadata")
    return str(meta.get("name", "")) if isinstance(meta, dict) else ""


def container_specs(doc: Any, limit: int = 10_000) -> list[dict]:
    """Every container spec in a pod spec or manifest: spec.containers / initContainers, and a template's. Each
    node is visited once (YAML aliases share nodes: a billion-laughs document is thousands of nodes, not 10^8)
    and at most `limit` nodes are visited."""
    out: list[dict] = []
    stack, seen = [doc], set()
    while stack and len(seen) < limit:
        d = stack.pop()
        if not isinstance(d, (dict, list)) or id(d) in seen:
            continue
        seen.add(id(d))
        if isinstance(d, dict):
            for key, v in d.items():
                if key in ("containers", "initContainers", "ephemeralContainers") and isinstance(v, list):
                    out += [c for c in v if isinstance(c, dict)]
                else:
                    stack.append(v)
        else:
            stack.extend(d)
    return out


def container_commands(c: dict, image_cmd: list[str]) -> list[list[str]]:
    """Every command a container spec runs: its main command and args, and the exec hooks and probes the kubelet
    runs in it (lifecycle.postStart/preStop, readiness/liveness/startup probes)."""
    out = [argv] if (argv := container_argv(c, image_cmd)) else []
    lifecycle = c.get("lifecycle") if isinstance(c.get("lifecycle"), dict) else {}
    handlers = [lifecycle.get("postStart"), lifecycle.get("preStop")]
    handlers += [c.get(p) for p in ("readinessProbe", "livenessProbe", "startupProbe")]
    for h in handlers:
        ex = h.get("exec") if isinstance(h, dict) else None
        cmd = ex.get("command") if isinstance(ex, dict) else None
        if isinstance(cmd, list) and cmd:
            out.append([str(x) for x in cmd])
    return out


def container_argv(c: dict, image_cmd: list[str]) -> list[str]:
    """What a container spec runs, as argv: its command and args (args after `image_cmd`, the image's own
    entrypoint as far as the caller knows it, when there is no command); [] when it sets neither."""
    cmd, args = c.get("command"), c.get("args")
    if not isinstance(cmd, list) and not isinstance(args, list):
        return []
    argv = [str(x) for x in cmd] if isinstance(cmd, list) else list(image_cmd)
    return argv + ([str(x) for x in args] if isinstance(args, list) else [])
