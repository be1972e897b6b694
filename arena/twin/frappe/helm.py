"""Helm for the Frappe twin: one release's values (chart defaults + user-supplied), revisions, and `helm` itself.

Built by `arena.twin.frappe.substrate.FrappeSubstrate`; the `helm` program it registers replaces the core's
generic one for this substrate because Frappe's repair needs Helm's real `--set` grammar (lists in braces,
indices, escaped dots) and its real value-merging rules. The user-supplied values live in the DeclaredStore
`helm/<release>` (what `helm get values` prints); components read the merged view through `HelmRelease.get`.

Upgrade semantics follow Helm 3: `--reuse-values` merges the new --set/-f values over the last release's;
`--reset-values`, or any --set/-f without `--reuse-values`, starts again from the chart's defaults (so the task's
own values are dropped); no values at all reuses the last ones. After an upgrade every component whose rendered
input changed rolls (the StatefulSet's checksum annotation changes), which is a restart.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any, Callable

import yaml

from guardrail.actions.helmvals import split_top, value_of
from arena.twin.state import DeclaredStore

__all__ = ["HelmRelease", "parse_set", "deep_merge", "helm_program"]


def deep_merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = copy.deepcopy(base)
        for k, v in over.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = deep_merge(out.get(k), v)
        return out
    return copy.deepcopy(over)


def parse_set(expr: str, string: bool = False) -> dict[str, Any]:
    """Helm's strvals: `a.b=c,d[0]=e,f={x,y}` -> nested values. Raises ValueError like helm on bad input."""
    out: dict[str, Any] = {}
    for pair in split_top(expr):
        if not pair:
            continue
        if "=" not in pair:
            raise ValueError(f"key \"{pair}\" has no value")
        key, _, val = pair.partition("=")
        parts = [p.replace("\\.", ".") for p in re.split(r"(?<!\\)\.", key)]
        value: Any = value_of(val, string)
        node: Any = out
        for j, part in enumerate(parts):
            m = re.fullmatch(r"(.+?)\[(\d+)\]", part)
            last = j == len(parts) - 1
            if m:
                name, idx = m.group(1), int(m.group(2))
                lst = node.setdefault(name, [])
                if not isinstance(lst, list):
                    raise ValueError(f"key \"{name}\" has a list index but is not a list")
                while len(lst) <= idx:
                    lst.append(None)
                if last:
                    lst[idx] = value
                else:
                    if not isinstance(lst[idx], dict):
                        lst[idx] = {}
                    node = lst[idx]
            else:
                if last:
                    node[part] = value
                else:
                    if not isinstance(node.get(part), dict):
                        node[part] = {}
                    node = node[part]
    return out


def _merge_lists(base: Any, over: Any) -> Any:
    """--reuse-values with an index set (`x[0]=a`) replaces only that index, as helm does."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = copy.deepcopy(base)
        for k, v in over.items():
            out[k] = _merge_lists(out.get(k), v) if v is not None else None
        return {k: v for k, v in out.items() if v is not None}
    if isinstance(base, list) and isinstance(over, list) and any(x is None for x in over):
        out = list(base)
        for i, v in enumerate(over):
            if v is None:
                continue
            while len(out) <= i:
                out.append(None)
            out[i] = v
        return out
    return copy.deepcopy(over)


class HelmRelease:
    """A deployed release: the chart's defaults, the user-supplied values (a DeclaredStore) and the history."""

    def __init__(self, name: str, chart: str, chart_defaults: dict[str, Any], store: DeclaredStore,
                 namespace: str = "default"):
        self.name, self.chart, self.namespace = name, chart, namespace
        self.chart_defaults = copy.deepcopy(chart_defaults)
        self.store = store
        self.history: list[dict[str, Any]] = [{"revision": 1, "values": copy.deepcopy(store.data),
                                               "description": "Install complete", "t": None}]

    @property
    def revision(self) -> int:
        return self.history[-1]["revision"]

    def merged(self) -> dict[str, Any]:
        return deep_merge(self.chart_defaults, self.store.data)

    def get(self, path: str, default: Any = None) -> Any:
        node: Any = self.merged()
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return copy.deepcopy(node)

    def upgrade(self, new_values: dict[str, Any], *, reuse: bool, reset: bool, now: float,
                description: str = "Upgrade complete") -> None:
        if reset or (not reuse and new_values):
            user = _merge_lists({}, new_values)
        elif reuse or not new_values:
            user = _merge_lists(self.store.data, new_values)
        else:  # pragma: no cover - the two branches above cover every case
            user = new_values
        self.store.data = user
        self.store.writes += 1
        self.history.append({"revision": self.revision + 1, "values": copy.deepcopy(user),
                             "description": description, "t": now})

    def rollback(self, revision: int, now: float) -> bool:
        for h in self.history:
            if h["revision"] == revision:
                self.store.data = copy.deepcopy(h["values"])
                self.store.writes += 1
                self.history.append({"revision": self.revision + 1, "values": copy.deepcopy(h["values"]),
                                     "description": f"Rollback to {revision}", "t": now})
                return True
        return False


def helm_program(release: HelmRelease, *, now: Callable[[], float], on_upgrade: Callable[[bool], float],
                 timestamp: Callable[[float], str], allowed: bool = True) -> Callable[..., tuple[str, str, int, float]]:
    """The `helm` handler: get values/list/history/status/upgrade/rollback for the one release."""

    def run(argv: list[str], stdin: str) -> tuple[str, str, int, float]:
        a = argv[1:]
        opts = {"-n", "--namespace", "-o", "--output", "--revision", "--timeout", "-f", "--values", "--set",
                "--set-string", "--version", "--kube-context"}
        pos, flags, sets, files = [], set(), [], []
        i = 0
        while i < len(a):
            x = a[i]
            if "=" in x and x.split("=", 1)[0] in opts:
                k, v = x.split("=", 1)
                a[i:i + 1] = [k, v]
                continue
            if x in opts and i + 1 < len(a):
                if x in ("--set", "--set-string"):
                    sets.append((a[i + 1], x == "--set-string"))
                elif x in ("-f", "--values"):
                    files.append(a[i + 1])
                else:
                    flags.add(f"{x}={a[i + 1]}")
                i += 2
                continue
            if x.startswith("-"):
                flags.add(x)
            else:
                pos.append(x)
            i += 1
        out_fmt = next((f.split("=", 1)[1] for f in flags if f.startswith(("-o=", "--output="))), "table")
        if not pos:
            return "", "Error: unknown command \"\" for \"helm\"\n", 1, 0.0
        cmd = pos[0]
        if cmd in ("list", "ls"):
            if out_fmt == "json":
                return json.dumps([{"name": release.name, "namespace": release.namespace,
                                    "revision": str(release.revision), "status": "deployed",
                                    "chart": release.chart}]) + "\n", "", 0, 0.4
            w = max(len(release.name), 4)
            return (f"{'NAME'.ljust(w)}\tNAMESPACE\tREVISION\tUPDATED                                \tSTATUS  \tCHART"
                    f"          \tAPP VERSION\n{release.name.ljust(w)}\t{release.namespace}  \t{release.revision}"
                    f"       \t{timestamp(now())}\tdeployed\t{release.chart}\tv15.38.0\n"), "", 0, 0.4
        name = pos[1] if len(pos) > 1 else ""
        if cmd in ("get", "history", "status", "upgrade", "rollback") and cmd != "get" and name != release.name:
            return "", "Error: release: not found\n", 1, 0.4
        if cmd == "get":
            if len(pos) < 3 or pos[1] != "values":
                return "", "Error: unknown command for \"helm get\"; try helm get values RELEASE\n", 1, 0.0
            if pos[2] != release.name:
                return "", "Error: release: not found\n", 1, 0.4
            vals = release.merged() if ("--all" in flags or "-a" in flags) else release.store.data
            rev = next((f.split("=", 1)[1] for f in flags if f.startswith("--revision=")), None)
            if rev is not None:
                h = next((h for h in release.history if str(h["revision"]) == rev), None)
                if h is None:
                    return "", "Error: release: not found\n", 1, 0.4
                vals = h["values"]
            if out_fmt == "json":
                return json.dumps(vals) + "\n", "", 0, 0.4
            if out_fmt == "yaml":
                return yaml.safe_dump(vals, sort_keys=True, default_flow_style=False), "", 0, 0.4
            head = "COMPUTED VALUES:\n" if ("--all" in flags or "-a" in flags) else "USER-SUPPLIED VALUES:\n"
            return head + yaml.safe_dump(vals, sort_keys=True, default_flow_style=False), "", 0, 0.4
        if cmd == "history":
            rows = "REVISION\tUPDATED                 \tSTATUS    \tCHART          \tAPP VERSION\tDESCRIPTION\n"
            for j, h in enumerate(release.history):
                st = "deployed" if j == len(release.history) - 1 else "superseded"
                rows += (f"{h['revision']}       \t{timestamp(h['t'] if h['t'] is not None else -86400.0)}\t{st}"
                         f"\t{release.chart}\tv15.38.0   \t{h['description']}\n")
            return rows, "", 0, 0.4
        if cmd == "status":
            return _status(release, timestamp(now())), "", 0, 0.4
        if cmd in ("upgrade", "rollback", "install", "uninstall"):
            if not allowed:
                return "", ("Error: UPGRADE FAILED: query: failed to query with labels: secrets is forbidden: User "
                            "\"system:serviceaccount:sre:agent\" cannot list resource \"secrets\"\n"), 1, 0.8
            if cmd in ("install", "uninstall"):
                return "", f"Error: INSTALLATION FAILED: cannot re-use a name that is still in use\n", 1, 0.8
            if cmd == "rollback":
                rev = int(pos[2]) if len(pos) > 2 and pos[2].isdigit() else release.revision - 1
                if not release.rollback(rev, now()):
                    return "", f"Error: release has no {rev} version\n", 1, 0.8
                wait = on_upgrade("--wait" in flags)
                return "Rollback was a success! Happy Helming!\n", "", 0, 1.5 + wait
            if len(pos) < 3:
                return "", "Error: \"helm upgrade\" requires 2 arguments\n\nUsage:  helm upgrade [RELEASE] [CHART] " \
                           "[flags]\n", 1, 0.0
            if pos[2] not in (release.chart, release.chart.rsplit("-", 1)[0], "/opt/chart", "./chart",
                              f"/opt/charts/{release.name}"):
                return "", f"Error: path \"{pos[2]}\" not found\n", 1, 0.3
            new: dict[str, Any] = {}
            try:
                for f in files:
                    if f != "-":
                        return "", f"Error: open {f}: no such file or directory\n", 1, 0.2
                    doc = yaml.safe_load(stdin) or {}
                    if not isinstance(doc, dict):
                        return "", "Error: failed to parse -: error unmarshaling JSON\n", 1, 0.2
                    new = deep_merge(new, doc)
                for expr, string in sets:
                    new = _merge_lists(new, parse_set(expr, string))
            except (ValueError, yaml.YAMLError) as e:
                return "", f"Error: failed parsing --set data: {e}\n", 1, 0.2
            release.upgrade(new, reuse="--reuse-values" in flags, reset="--reset-values" in flags, now=now())
            wait = on_upgrade("--wait" in flags or "--atomic" in flags)
            return (f"Release \"{release.name}\" has been upgraded. Happy Helming!\n"
                    + _status(release, timestamp(now()))), "", 0, 2.0 + wait
        return "", f"Error: unknown command \"{cmd}\" for \"helm\"\n", 1, 0.0

    return run


def _status(release: HelmRelease, when: str) -> str:
    return (f"NAME: {release.name}\nLAST DEPLOYED: {when}\nNAMESPACE: {release.namespace}\nSTATUS: deployed\n"
            f"REVISION: {release.revision}\nTEST SUITE: None\n")
