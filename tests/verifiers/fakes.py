"""Fakes at the verifiers' seams: a manual clock, a journal, and a small environment with layered settings.

The environment keeps every setting in two layers, as the twin does: `declared` (what a restart re-reads) and
`runtime` (what the running process uses until it restarts). Its shell answers the operator read commands of
the shipped persistence catalogue from those layers, so the persistence and restart verifiers really tell the
layers apart. Its SLI source cuts time into load cycles (peak then trough) and asks a `health` function for
each segment's value, so convergence tests control the telemetry exactly.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import yaml

from verifiers.protocols import (
    CommandResult,
    ComponentInfo,
    EnvironmentDescription,
    RestartResult,
    Sample,
)


class ManualClock:
    """Virtual seconds; sleep advances time and calls the environment's tick hooks."""

    def __init__(self, t: float = 0.0):
        self.t = float(t)
        self.sleeps: list[float] = []
        self.on_advance: list[Callable[[float], None]] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += max(0.0, float(seconds))
        for hook in self.on_advance:
            hook(self.t)


class FakeJournal:
    """The JournalView of guardrail.journal.Journal, in memory."""

    def __init__(self, clock: ManualClock):
        self.clock = clock
        self._records: list[dict[str, Any]] = []

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        rec = {"seq": len(self._records) + 1, "kind": kind, "t": self.clock.now(), **fields}
        self._records.append(rec)
        return rec

    def run(self, env: "FakeEnv", command: str, actions: list[dict[str, Any]] | None = None) -> CommandResult:
        """What the guard does for one agent command: journal the actions, run, journal the result."""
        rec = self.append("command", command=command, actions=actions or [], ran=True)
        res = env.run(command)
        self.append("result", ref=rec["seq"], exit_code=res.exit_code, stdout_head=res.stdout[:512])
        return res

    def records(self) -> list[dict[str, Any]]:
        return list(self._records)

    def executed(self) -> list[dict[str, Any]]:
        results = {r["ref"]: r for r in self._records if r["kind"] == "result"}
        out = []
        for r in self._records:
            if r["kind"] == "command" and r.get("ran") and r["seq"] in results:
                res = results[r["seq"]]
                out.append({"seq": r["seq"], "t": res["t"], "command": r["command"],
                            "exit_code": res["exit_code"], "actions": r["actions"]})
        return out


def action(tool: str, verb: str, keys: list[dict[str, Any]] | None = None, *, layer: str = "none",
           mutating: Any = True, target: dict[str, Any] | None = None, via: list[str] | None = None,
           raw: str = "") -> dict[str, Any]:
    """An Action as the journal stores it (guardrail.actions.model.Action.to_input())."""
    return {"tool": tool, "verb": verb, "target": target or {"kind": "", "name": "", "namespace": None},
            "keys": keys or [], "layer": layer, "mutating": mutating, "raw": raw, "via": via or [],
            "opaque_reason": None, "details": {}}


@dataclass
class LoadShape:
    """Open-loop cycles: a peak of `peak_s` then a trough, from `start`; the cycle label counts from 0."""

    cycle_s: float = 60.0
    peak_s: float = 20.0
    start: float = 0.0

    def segments(self, t0: float, t1: float) -> list[tuple[int, str, float, float]]:
        out = []
        c = max(0, math.floor((t0 - self.start) / self.cycle_s))
        while True:
            base = self.start + c * self.cycle_s
            if base >= t1:
                break
            for phase, a, b in (("peak", base, base + self.peak_s), ("trough", base + self.peak_s,
                                                                      base + self.cycle_s)):
                a2, b2 = max(a, t0), min(b, t1)
                if b2 > a2 and b2 > self.start:
                    out.append((c, phase, a2, b2))
            c += 1
        return out


Health = Callable[[str, Mapping[str, str], str, float, int], "tuple[float | None, int] | float | None"]


@dataclass
class Layered:
    """One component's settings in two layers; the effective value is runtime over declared."""

    declared: dict[str, Any] = field(default_factory=dict)
    runtime: dict[str, Any] = field(default_factory=dict)

    def effective(self, k: str) -> Any:
        return self.runtime.get(k, self.declared.get(k))


class FakeEnv:
    """A small Environment: layered settings behind real-looking operator commands, and synthetic SLIs."""

    def __init__(self, *, clock: ManualClock | None = None, load: LoadShape | None = None,
                 health: Health | None = None, components: list[ComponentInfo] | None = None,
                 extra: dict[str, Any] | None = None, ready_after_restart_s: float = 0.0):
        self._clock = clock or ManualClock()
        self.load = load or LoadShape()
        self.health: Health = health or (lambda sli, labels, phase, t, c: (0.0, 100))
        self.components = {c.name: c for c in (components or [])}
        self.extra = dict(extra or {})
        self.settings: dict[str, Layered] = {}
        self.helm: dict[str, dict[str, Any]] = {}  # release -> declared values (JSON)
        self.files: dict[tuple[str, str], str] = {}  # (pod, path) -> text, the image's files
        self.container_files: dict[tuple[str, str], str] = {}  # (pod, path) -> text, the writable layer
        self.role_settings: dict[tuple[str, str], dict[str, str]] = {}  # (role, db) -> {name: value}
        self.configmaps: dict[str, dict[str, str]] = {}
        self.pod_gen: dict[str, int] = {}
        self.ready_at: dict[str, float] = {}
        self.ready_after_restart_s = ready_after_restart_s
        self.on_restart: list[Callable[[str], None]] = []
        self.commands: list[str] = []
        self.restarts: list[str] = []
        self.sli_calls = 0
        self.sli_error: Exception | None = None
        self.handlers: list[tuple[re.Pattern[str], Callable[..., Any]]] = []
        self._builtin_handlers()

    # -- Environment ---------------------------------------------------------------------------------------------
    @property
    def clock(self) -> ManualClock:
        return self._clock

    def layer(self, component: str) -> Layered:
        return self.settings.setdefault(component, Layered())

    def run(self, command: str) -> CommandResult:
        self.commands.append(command)
        for pat, fn in self.handlers:
            m = pat.fullmatch(command)
            if m:
                out = fn(m)
                if isinstance(out, CommandResult):
                    return out
                return CommandResult(command=command, stdout=out)
        return CommandResult(command=command, stderr=f"bash: {command.split()[0]}: command not found",
                             exit_code=127)

    def sli(self, query: str, window: float, *, labels: Mapping[str, str] | None = None,
            step: float | None = None) -> list[Sample]:
        self.sli_calls += 1
        if self.sli_error is not None:
            raise self.sli_error
        now = self._clock.now()
        out = []
        for c, phase, a, b in self.load.segments(now - window, now):
            lab = {**(labels or {}), "phase": phase, "cycle": str(c)}
            got = self.health(query, lab, phase, 0.5 * (a + b), c)
            value, count = got if isinstance(got, tuple) else (got, 100)
            out.append(Sample(a, b, value, lab, count))
        return out

    def restart(self, target: str) -> RestartResult:
        old = self.pod_gen.get(target, 0)
        self.pod_gen[target] = old + 1
        self.restarts.append(target)
        self.layer(target).runtime.clear()
        for (pod, path) in list(self.container_files):
            if pod.startswith(target):
                del self.container_files[(pod, path)]
        self.ready_at[target] = self._clock.now() + self.ready_after_restart_s
        for hook in self.on_restart:
            hook(target)
        img = self.components[target].image if target in self.components else "img@sha256:1"
        return RestartResult(target=target, old_id=f"{target}-{old}", new_id=f"{target}-{old + 1}",
                             ready=self.ready_after_restart_s == 0, image_before=img, image_after=img)

    def describe(self) -> EnvironmentDescription:
        comps = []
        for c in self.components.values():
            ready = c.replicas if self._clock.now() >= self.ready_at.get(c.name, -1.0) else 0
            comps.append(ComponentInfo(c.name, c.kind, c.namespace, c.replicas, ready, c.restarts, c.stateful,
                                       c.restartable, c.image))
        return EnvironmentDescription("fake", tuple(comps), ("default",), self.load.cycle_s, self.extra)

    # -- the operator shell ------------------------------------------------------------------------------------
    def handle(self, pattern: str, fn: Callable[..., Any]) -> None:
        self.handlers.insert(0, (re.compile(pattern, re.S), fn))

    def _builtin_handlers(self) -> None:
        def redis_get(m):
            v = self.layer(m["c"]).effective(m["k"])
            return f"{m['k']}\n{v if v is not None else ''}\n"

        def redis_set(m):
            self.layer(m["c"]).runtime[m["k"]] = m["v"]
            return "OK\n"

        def helm_get(m):
            if m["r"] not in self.helm:
                return CommandResult(m.string, stderr=f"Error: release: not found", exit_code=1)
            return json.dumps(self.helm[m["r"]])

        def mysql_global(m):
            v = self.layer("mariadb").effective(m["k"])
            return f"{v}\n" if v is not None else "NULL\n"

        def mysql_set(m):
            self.layer("mariadb").runtime[m["k"]] = m["v"]
            return ""

        def cat(m):
            key = (m["pod"], m["path"])
            text = self.container_files.get(key, self.files.get(key))
            if text is None:
                return CommandResult(m.string, stderr=f"cat: {m['path']}: No such file or directory", exit_code=1)
            return text

        def admin_config(m):
            role = m["role"]
            return json.dumps({"db": {k.split(".", 1)[1]: self.layer(f"svc-{role}").effective(k)
                                      for k in set(self.layer(f"svc-{role}").declared)
                                      | set(self.layer(f"svc-{role}").runtime) if k.startswith("db.")}})

        def configmap(m):
            cm = self.configmaps.get(m["cm"])
            if cm is None:
                return CommandResult(m.string, stderr=f'Error from server (NotFound): configmaps "{m["cm"]}" '
                                                      f'not found', exit_code=1)
            return cm.get("app.yaml", "")

        def event_get(m):
            v = self.layer(m["c"]).effective(f"event.{m['name']}")
            return json.dumps({"name": m["name"], "active": bool(v)})

        def deploy_env(m):
            return str(self.layer(m["c"]).declared.get(f"env.{m['var']}", ""))

        def pg_role(m):
            vals = self.role_settings.get((m["role"], m["db"]), {})
            return "".join(f"{k}={v}\n" for k, v in vals.items())

        self.handle(r"redis-cli -h (?P<c>\S+) CONFIG GET (?P<k>\S+)", redis_get)
        self.handle(r"redis-cli -h (?P<c>\S+) CONFIG SET (?P<k>\S+) (?P<v>\S+)", redis_set)
        self.handle(r"helm get values (?P<r>\S+) -o json", helm_get)
        self.handle(r'mysql -N -B -e "SELECT @@GLOBAL\.(?P<k>\w+)"', mysql_global)
        self.handle(r'mysql -e "SET GLOBAL (?P<k>\w+)\s*=\s*(?P<v>\w+)"', mysql_set)
        self.handle(r"kubectl exec -n \S+ (?P<pod>\S+) -- cat (?P<path>\S+)", cat)
        self.handle(r"curl -s http://svc-(?P<role>[a-z0-9-]+):8000/admin/config", admin_config)
        self.handle(r"kubectl get configmap (?P<cm>\S+) -n \S+ -o jsonpath='\{\.data\.app\\\.yaml\}'", configmap)
        self.handle(r"curl -s http://(?P<c>[a-z0-9-]+):8000/admin/event\?name=(?P<name>\w+)", event_get)
        self.handle(r'kubectl get deployment (?P<c>\S+) -n \S+ -o jsonpath=.*@\.name=="(?P<var>\w+)".*', deploy_env)
        self.handle(r"psql -At -c \"SELECT unnest\(s\.setconfig\).*rolname = '(?P<role>\w+)' AND "
                    r"COALESCE\(d\.datname, ''\) = '(?P<db>\w*)'\"", pg_role)

    def set_app_yaml(self, cm: str, roles: Mapping[str, Mapping[str, Any]]) -> None:
        self.configmaps[cm] = {"app.yaml": yaml.safe_dump({"roles": {r: {"db": dict(v)} for r, v in roles.items()}})}
        for r, v in roles.items():
            for k, val in v.items():
                self.layer(f"svc-{r}").declared[f"db.{k}"] = val


def comp(name: str, *, kind: str = "Deployment", restartable: bool = True, stateful: bool = False,
         replicas: int = 1, image: str = "reg/app@sha256:abc") -> ComponentInfo:
    return ComponentInfo(name=name, kind=kind, replicas=replicas, ready_replicas=replicas, stateful=stateful,
                         restartable=restartable, image=image)
