"""helm: releases and the values they change (`--set a.b=c` -> `helm.a.b`, layer declared).

Registered for `helm`; called by `Normaliser.dispatch`. Values files given with `-f -` are read from stdin when
their text is known; other values files are named in `details.values_files` (their content is not visible).
"""

from __future__ import annotations

import json
import re
from typing import Any

from guardrail.actions.helmvals import split_top, value_of
from guardrail.actions.classifiers.base import OptionSpec, flatten, load_yaml, register
from guardrail.actions.invocation import (STDIN_PATHS, Invocation, Unreadable, read_at_decision,
                                          stdin_at_decision)
from guardrail.actions.model import UNKNOWN, Action, KeyChange, Layer, Target

__all__ = ["Helm", "parse_set"]

_SPEC = OptionSpec.of(
    ["-n", "--namespace", "--kube-context", "--kubeconfig", "-f", "--values", "--set", "--set-string",
     "--set-file", "--set-json", "--set-literal", "--version", "--timeout", "-o", "--output", "--revision",
     "--repo", "--description", "--post-renderer", "--history-max", "--max", "--username", "--password",
     "--registry-config", "--repository-config", "--repository-cache", "--ca-file", "--cert-file", "--key-file",
     "--kube-token", "--kube-apiserver", "--kube-as-user", "--kube-as-group", "--wait-for-jobs-timeout", "-l",
     "--selector", "--filter", "--template", "--name-template"],
    {"--namespace": "-n", "--values": "-f", "--output": "-o", "--selector": "-l"})

_READ = {"list", "ls", "status", "get", "history", "hist", "show", "inspect", "template", "search", "lint",
         "version", "env", "help", "diff", "verify", "completion", "dependency"}
_WRITE = {"upgrade", "install", "rollback", "uninstall", "delete", "del", "un", "test"}
_LOCAL = {"repo", "plugin", "registry", "pull", "fetch", "package", "push", "create"}


def parse_set(text: str, *, string: bool = False) -> list[tuple[str, Any]]:
    """`a.b=1,c=x\\,y,d={p,q}` -> [("a.b", 1), ("c", "x,y"), ("d", ["p", "q"])], as helm's strvals parses --set
    (a `{...}` value is a list, and its commas do not end the pair)."""
    out: list[tuple[str, Any]] = []
    for part in split_top(text):
        k, eq, v = part.partition("=")
        if not eq or not k:
            continue
        out.append((k.strip().replace("\\.", "."), value_of(v, string)))
    return out


# The Bitnami Redis chart passes `<role>.extraFlags` to redis-server as command-line flags, and redis-server takes
# any config directive as `--name value`: so `--maxmemory 64mb` there is redis.maxmemory, declared in Helm values.
_SERVER_FLAGS = re.compile(
    r"^helm\.(?:(?P<prefix>.+)\.)?(?P<role>master|replica|primary|secondary)\.extraFlags(?:\[\d+\])?$")
_FLAG_START = re.compile(r"\s*--[a-z]")
_ONE_FLAG = re.compile(r"--([a-z][a-z0-9-]*)(?:[ =]+(.*))?$", re.S)


def redis_flag_keys(value: Any, component: str) -> list[KeyChange]:
    """The redis.<param> settings a list of redis-server flags carries (`--user name rules...` is an ACL rule,
    keyed redis.acl.<name> as ACL SETUSER is), scoped to the Redis component."""
    if isinstance(value, list):
        # Helm's list syntax gives each argv element its own entry (`{--maxmemory,512mb,--appendonly,yes}`): an
        # element that is not a flag is the value of the flag before it.
        items: list[str] = []
        for v in value:
            arg = str(v).lower() if isinstance(v, bool) else str(v)  # helm typed `true`; the argv holds "true"
            if _FLAG_START.match(arg) or not items:
                items.append(arg)
            else:
                items[-1] = f"{items[-1]} {arg}"
    else:
        items = re.split(r"\s+(?=--[a-z])", str(value))
    scope = {"component": component} if component else {}
    out = []
    for item in items:
        m = _ONE_FLAG.match(item.strip())
        if m is None:
            continue
        name, rest = m.group(1), (m.group(2) or "").strip()
        if name == "user" and rest:
            user, _, rules = rest.partition(" ")
            out.append(KeyChange(key=f"redis.acl.{user}", value=rules.strip() or None, scope=scope))
            continue
        out.append(KeyChange(key=f"redis.{name}", value=rest.strip("\"'") if rest else None, scope=scope))
    return out


def server_flag_keys(key: str, value: Any, release: str) -> list[KeyChange]:
    """A chart's extraFlags value as redis settings, for the Redis component it belongs to (the values path segment
    above `master`/`replica`, or the release for a Redis chart of its own)."""
    m = _SERVER_FLAGS.match(key)
    if m is None or value is None:
        return []
    prefix = m.group("prefix") or ""
    return redis_flag_keys(value, prefix.rsplit(".", 1)[-1] if prefix else release)


@register
class Helm:
    """helm releases."""

    commands = ("helm", "helm3")

    def classify(self, inv: Invocation) -> list[Action]:
        p = _SPEC.parse(inv.args)
        ns = str(p.get("-n")) if p.get("-n") is not None else None
        if not p.positionals:
            if inv.args_pending:
                return [inv.opaque("helm", "helm with arguments read from stdin at run time", tool="helm")]
            return [inv.action("helm", "help", mutating=False)]
        verb = str(p.positionals[0])
        rest = [str(w) for w in p.positionals[1:]]
        release = rest[0] if rest else ""
        details: dict[str, Any] = {"namespace": ns}
        if verb in ("get", "show", "inspect", "repo", "plugin", "dependency", "registry") and rest:
            verb, release = f"{verb} {rest[0]}", rest[1] if len(rest) > 1 else ""
        target = Target(kind="release", name=release, namespace=ns)
        base = verb.split()[0]
        if base in _READ or verb in ("repo list", "plugin list", "repo index"):
            return [inv.action("helm", verb, target=target, mutating=False, details=details)]
        if base in _LOCAL:
            return [inv.action("helm", verb, target=Target(), mutating=True, details=details)]
        if base not in _WRITE:
            return [inv.action("helm", verb, target=target, mutating=UNKNOWN,
                               opaque_reason=f"helm {verb!r} is not a verb the guard knows", details=details)]
        if p.get("--post-renderer") is not None:
            # The rendered manifests go through a local program before they are applied: what lands is its output.
            details["post_renderer"] = str(p.get("--post-renderer"))
            return [inv.action("helm", verb, target=target, mutating=UNKNOWN, details=details,
                               opaque_reason=f"--post-renderer {details['post_renderer']} rewrites the manifests "
                                             "before they are applied; run the upgrade without it")]
        if len(rest) > 1:
            details["chart" if base in ("upgrade", "install") else "revision"] = rest[1]
        keys: list[KeyChange] = []
        scope = {"release": release} if release else {}
        for name, value in p.order:
            if value is None:
                continue
            if name in ("--set", "--set-string", "--set-literal"):
                pairs = parse_set(str(value), string=name != "--set") if name != "--set-literal" else \
                    [tuple(str(value).split("=", 1))] if "=" in value else []
                keys += [KeyChange(key=f"helm.{k}", value=v, scope=scope) for k, v in pairs]
            elif name == "--set-json":
                k, _, v = str(value).partition("=")
                try:
                    # An object sets every value under it: flattened, as --set a.b=... would give them.
                    keys += [KeyChange(key=kk, value=vv, scope=scope) for kk, vv in flatten(json.loads(v), f"helm.{k}")]
                except ValueError:
                    keys.append(KeyChange(key=f"helm.{k}", value=v, scope=scope))
            elif name == "--set-file":
                k, _, v = str(value).partition("=")
                keys.append(KeyChange(key=f"helm.{k}", value=None, scope=scope))
                details.setdefault("set_files", []).append(v)
            elif name == "-f":
                details.setdefault("values_files", []).append(str(value))
                # Read now, a file as `-f -` from a heredoc is: its values are the changes (they were never read).
                try:
                    text = stdin_at_decision(inv.stdin, inv.where) if str(value) in STDIN_PATHS \
                        else read_at_decision(str(value), inv.where)
                    keys += self._values(text, scope)
                except Unreadable as e:
                    details.setdefault("unread_values", []).append(str(e))
        flags = [d for k in keys for d in server_flag_keys(k.key, k.value, release)]
        if flags:
            # A flags list is rewritten whole, so it restates flags it does not mean to change; rules that forbid
            # touching a setting read this to tell a restatement from a change (the scope audit checks the value).
            details["server_flags"] = sorted({f.key for f in flags})
            keys += flags
        if p.has("--reset-values") and str(p.get("--reset-values") or "true").lower() not in ("false", "0"):
            # Helm ignores --reuse-values beside --reset-values: the chart's defaults win.
            details["reset_values"] = True
        elif p.has("--reuse-values") or p.has("--reset-then-reuse-values"):
            details["reuse_values"] = True
        if base in ("uninstall", "delete", "del", "un"):
            details["uninstall"] = True
        if base == "rollback":
            details["rollback"] = True
        if p.has("--dry-run") or p.get("--dry-run") is not None:
            details["dry_run"] = True
            return [inv.action("helm", verb, target=target, keys=keys, mutating=False, details=details)]
        if details.get("unread_values"):
            return [inv.action("helm", verb, target=target, keys=keys, layer=Layer.DECLARED, mutating=UNKNOWN,
                               opaque_reason=f"helm -f: a values file cannot be read now ({details['unread_values'][0]}), "
                                             "so what it changes is not known; pass a readable file of at most 1 MB, "
                                             "or the values with --set", details=details)]
        return [inv.action("helm", verb, target=target, keys=keys, layer=Layer.DECLARED, mutating=True,
                           details=details)]

    @staticmethod
    def _values(text: str, scope: dict[str, str]) -> list[KeyChange]:
        doc = load_yaml(text)
        if not isinstance(doc, dict):
            return []
        return [KeyChange(key=f"helm.{k}", value=v, scope=scope) for k, v in flatten(doc, "")]
