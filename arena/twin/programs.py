"""The generic programs of the operator shell: sleep, echo, cat, true, false, date, jq-less helpers, kubectl, curl
and helm. Output imitates the real tools (kubectl tables, curl bodies and exit codes, helm YAML).

Registered by `arena.twin.engine.TwinEnvironment` on its `Shell`; substrate programs (psql, redis-cli, mysql,
restart-svc.sh ...) come from `Substrate.commands()`. Handlers read the world only through components'
operator surfaces (`http`, `exec`, `logs`), never through the gates' truth.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from arena.twin.host import TwinHost
from arena.twin.shell import Invocation

__all__ = ["install_generic"]

SA = "system:serviceaccount:sre:agent"


def install_generic(env: TwinHost) -> None:
    sh = env.shell
    sh.register("sleep", lambda inv: _sleep(inv))
    sh.register("echo", lambda inv: (_echo(inv.argv[1:]), "", 0, 0.0))
    sh.register("printf", lambda inv: (_printf(inv.argv[1:]), "", 0, 0.0))
    sh.register("cat", lambda inv: (inv.stdin, "", 0, 0.0) if len(inv.argv) == 1 or inv.argv[1:] == ["-"]
                else ("", f"cat: {inv.argv[1]}: No such file or directory\n", 1, 0.0))
    sh.register("true", lambda inv: ("", "", 0, 0.0))
    sh.register("false", lambda inv: ("", "", 1, 0.0))
    sh.register("date", lambda inv: (_date(env, inv.argv), "", 0, 0.0))
    sh.register("head", lambda inv: _headtail(inv, head=True))
    sh.register("tail", lambda inv: _headtail(inv, head=False))
    sh.register("grep", _grep)
    sh.register("wc", lambda inv: (f"{len(inv.stdin.splitlines())}\n" if "-l" in inv.argv else
                                   f"{len(inv.stdin.splitlines())} {len(inv.stdin.split())} {len(inv.stdin)}\n",
                                   "", 0, 0.0))
    sh.register("kubectl", lambda inv: Kubectl(env)(inv))
    sh.register("curl", lambda inv: Curl(env)(inv))
    sh.register("helm", lambda inv: Helm(env)(inv))
    # Advisory in Incident-Arena: it records the agent's findings and never ends the session.
    sh.register("submit_incident_report", lambda inv: ("incident report recorded (advisory; "
                                                        "declare_repair_complete ends the episode)\n", "", 0, 0.2))


def _sleep(inv: Invocation) -> tuple[str, str, int, float]:
    if len(inv.argv) < 2:
        return "", "sleep: missing operand\nTry 'sleep --help' for more information.\n", 1, 0.0
    total = 0.0
    for a in inv.argv[1:]:
        m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", a)
        if not m:
            return "", f"sleep: invalid time interval '{a}'\nTry 'sleep --help' for more information.\n", 1, 0.0
        total += float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    return "", "", 0, total


def _echo(args: list[str]) -> str:
    nl = True
    if args and args[0] == "-n":
        nl, args = False, args[1:]
    return " ".join(args) + ("\n" if nl else "")


def _printf(args: list[str]) -> str:
    if not args:
        return ""
    fmt = args[0].replace("\\n", "\n")
    try:
        return fmt % tuple(args[1:]) if "%" in fmt else fmt
    except TypeError:
        return fmt


def _date(env: TwinHost, argv: list[str]) -> str:
    from arena.twin.world import _ts

    return _ts(env.clock.now()) + "\n"  # always UTC, ISO 8601, whatever the flags


def _headtail(inv: Invocation, head: bool) -> tuple[str, str, int, float]:
    n = 10
    a = inv.argv[1:]
    for i, x in enumerate(a):
        if x == "-n" and i + 1 < len(a):
            n = int(a[i + 1])
        elif re.fullmatch(r"-\d+", x):
            n = int(x[1:])
    lines = inv.stdin.splitlines(keepends=True)
    return "".join(lines[:n] if head else lines[-n:]), "", 0, 0.0


def _grep(inv: Invocation) -> tuple[str, str, int, float]:
    flags = [a for a in inv.argv[1:] if a.startswith("-")]
    pats = [a for a in inv.argv[1:] if not a.startswith("-")]
    if not pats:
        return "", "Usage: grep [OPTION]... PATTERNS [FILE]...\n", 2, 0.0
    ic = any("i" in f for f in flags)
    inv_match = any("v" in f for f in flags)
    try:
        rx = re.compile(pats[0], re.I if ic else 0)
    except re.error:
        rx = re.compile(re.escape(pats[0]), re.I if ic else 0)
    lines = [ln for ln in inv.stdin.splitlines(keepends=True) if bool(rx.search(ln)) != inv_match]
    return "".join(lines), "", 0 if lines else 1, 0.0


def _age(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60}s" if s < 600 else f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60}m"


def jsonpath(doc: Any, template: str) -> str:
    """kubectl's `-o jsonpath=` for the forms operators use: {.a.b}, {.a[0]}, {.a[*].b}, {.a[?(@.k=="v")].b},
    keys with escaped dots ({.data.app\\.yaml}), and literal text between expressions."""
    out: list[str] = []
    for lit, expr in re.findall(r"([^{]*)(?:\{([^}]*)\})?", template):
        out.append(lit.replace("\\n", "\n"))
        if not expr:
            continue
        vals = _jp_eval([doc], expr.strip())
        out.append(" ".join(v if isinstance(v, str) else json.dumps(v) for v in vals))
    return "".join(out)


class JsonPathError(Exception):
    """kubectl's 'is not found' template error."""


def _jp_eval(cur: list[Any], expr: str) -> list[Any]:
    i = 0
    if expr.startswith("$"):
        i = 1
    while i < len(expr):
        if expr[i] == ".":
            m = re.match(r"\.((?:\\.|[^.\[])+)", expr[i:])
            if not m:
                i += 1
                continue
            key = m.group(1).replace("\\.", ".")
            nxt = [c[key] for c in cur if isinstance(c, dict) and key in c]
            if cur and not nxt and all(isinstance(c, dict) for c in cur):
                raise JsonPathError(f"{key} is not found")
            cur = nxt
            i += m.end()
        elif expr[i] == "[":
            j = expr.index("]", i) if "?(" not in expr[i:i + 3] else expr.index(")]", i) + 1
            sel = expr[i + 1:j]
            if sel == "*":
                cur = [x for c in cur for x in (c if isinstance(c, list) else c.values() if isinstance(c, dict)
                                                else [])]
            elif sel.startswith("?("):
                m = re.fullmatch(r"\?\(@\.([\w.-]+)\s*==\s*['\"]?([^'\"]*)['\"]?\)", sel)
                if m:
                    k, v = m.group(1), m.group(2)
                    cur = [x for c in cur if isinstance(c, list) for x in c
                           if isinstance(x, dict) and str(x.get(k)) == v]
                else:
                    cur = []
            else:
                try:
                    n = int(sel)
                    cur = [c[n] for c in cur if isinstance(c, list) and -len(c) <= n < len(c)]
                except ValueError:
                    cur = []
            i = j + 1
        else:
            i += 1
    return cur


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join("   ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n" for r in rows)


class Kubectl:
    """kubectl get/describe/logs/exec over the twin's components; writes are denied as the agent's RBAC does."""

    def __init__(self, env: TwinHost):
        self.env = env
        self.world = env.world

    def __call__(self, inv: Invocation) -> tuple[str, str, int, float]:
        argv = inv.argv[1:]
        ns = "default"
        args: list[str] = []
        out_fmt = ""
        i = 0
        while i < len(argv):
            a = argv[i]
            if a in ("-n", "--namespace") and i + 1 < len(argv):
                ns = argv[i + 1]
                i += 2
                continue
            if a.startswith("--namespace="):
                ns = a.split("=", 1)[1]
            elif a in ("-o", "--output") and i + 1 < len(argv):
                out_fmt = argv[i + 1]
                i += 2
                continue
            elif a.startswith("-o") and len(a) > 2 and a != "-o":
                out_fmt = a[2:].lstrip("=")
            elif a.startswith("--output="):
                out_fmt = a.split("=", 1)[1]
            elif a == "--":
                args += argv[i:]
                break
            else:
                args.append(a)
            i += 1
        if not args:
            return "", "error: You must specify the type of resource to get.\n", 1, 0.0
        verb, rest = args[0], args[1:]
        if self.env.kubernetes_authority == "none" and verb not in ("version", "help", "completion"):
            # No kubeconfig and no mounted service-account token: the client falls back to localhost:8080.
            return "", ("The connection to the server localhost:8080 was refused - did you specify the right host "
                        "or port?\n"), 1, 0.1
        if verb == "get":
            return self.get(rest, ns, out_fmt)
        if verb == "describe":
            return self.describe(rest, ns)
        if verb == "logs":
            return self.logs(rest, ns)
        if verb == "exec":
            return self.exec(rest, inv.stdin)
        if verb in ("delete", "rollout", "scale", "set", "patch", "edit", "apply", "create", "replace", "label",
                    "annotate", "cordon", "drain"):
            return self.write(verb, rest, ns)
        if verb in ("version", "config", "auth", "top", "api-resources", "cluster-info"):
            return "", f"Error from server (Forbidden): {verb} is not allowed for \"{SA}\"\n", 1, 0.3
        return "", f"error: unknown command \"{verb}\" for \"kubectl\"\nRun 'kubectl --help' for usage.\n", 1, 0.0

    def _in_ns(self, ns: str):
        return [c for c in self.world.components.values() if ns in ("--all", c.namespace)]

    def get(self, rest: list[str], ns: str, out_fmt: str) -> tuple[str, str, int, float]:
        if not rest:
            return "", "error: You must specify the type of resource to get.\n", 1, 0.0
        kind = rest[0].split("/")[0].lower()
        names = rest[1:] if "/" not in rest[0] else [rest[0].split("/", 1)[1]]
        now = self.env.clock.now()
        comps = self._in_ns(ns)
        if kind in ("po", "pod", "pods"):
            if names:
                comps = [c for c in comps if c.pod in names or c.name in names]
                if not comps:
                    return "", f"Error from server (NotFound): pods \"{names[0]}\" not found\n", 1, 0.3
            if out_fmt.startswith(("json", "yaml")):
                return self._render([self._pod_obj(c, now) for c in comps], bool(names), out_fmt)
            if not comps:
                return "", f"No resources found in {ns} namespace.\n", 0, 0.3
            rows = [["NAME", "READY", "STATUS", "RESTARTS", "AGE"]]
            for c in comps:
                ready = c.ready(now)
                rows.append([c.pod, "1/1" if ready else "0/1", "Running" if ready else "ContainerCreating",
                             str(c.restarts), _age(now - c.started_at if c.started_at > -1e9 else now + 86400)])
            return _table(rows), "", 0, 0.3
        if kind in ("deploy", "deployment", "deployments", "sts", "statefulset", "statefulsets"):
            want = "StatefulSet" if kind.startswith("s") else "Deployment"
            comps = [c for c in comps if c.kind == want and (not names or c.name in names)]
            if names and not comps:
                res = "statefulsets.apps" if want == "StatefulSet" else "deployments.apps"
                return "", f"Error from server (NotFound): {res} \"{names[0]}\" not found\n", 1, 0.3
            if not comps:
                return "", f"No resources found in {ns} namespace.\n", 0, 0.3
            if out_fmt.startswith(("json", "yaml")):
                return self._render([self._workload_obj(c, now) for c in comps], bool(names), out_fmt)
            rows = [["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]] if want == "Deployment" else \
                [["NAME", "READY", "AGE"]]
            for c in comps:
                r = "1/1" if c.ready(now) else "0/1"
                rows.append([c.name, r, "1", r[0], "1d"] if want == "Deployment" else [c.name, r, "1d"])
            return _table(rows), "", 0, 0.3
        if kind in ("svc", "service", "services"):
            rows = [["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]]
            for j, c in enumerate(comps):
                port = next((h.split(":")[1] for h in c.hosts if ":" in h), "8000")
                rows.append([c.name, "ClusterIP", f"10.43.{j // 200}.{10 + j % 200}", "<none>", f"{port}/TCP", "1d"])
            return _table(rows), "", 0, 0.3
        if kind in ("cm", "configmap", "configmaps"):
            stores = [s for s in self.world.stores.values() if s.name.startswith("configmap/")]
            if names:
                stores = [s for s in stores if s.name.split("/", 1)[1] in names]
                if not stores:
                    return "", f"Error from server (NotFound): configmaps \"{names[0]}\" not found\n", 1, 0.3
            if out_fmt.startswith(("json", "yaml")):
                return self._render([self._cm_obj(s, ns) for s in stores], bool(names), out_fmt)
            rows = [["NAME", "DATA", "AGE"]] + [[s.name.split("/", 1)[1], str(len(s.data)), "1d"] for s in stores]
            return _table(rows), "", 0, 0.3
        if kind in ("events", "event", "ev"):
            return "No resources found in %s namespace.\n" % ns, "", 0, 0.3
        return "", f"error: the server doesn't have a resource type \"{rest[0]}\"\n", 1, 0.3

    def _render(self, items: list[dict], named: bool, out_fmt: str) -> tuple[str, str, int, float]:
        doc: Any = items[0] if named and len(items) == 1 else {"apiVersion": "v1", "kind": "List", "items": items}
        if out_fmt.startswith("jsonpath"):
            tmpl = out_fmt.split("=", 1)[1] if "=" in out_fmt else ""
            try:
                return jsonpath(doc, tmpl.strip("'\"")), "", 0, 0.3
            except JsonPathError as e:
                return "", (f"error: error executing jsonpath {tmpl!r}: Error executing template: {e}. Printing more "
                            f"information for debugging the template:\n\ttemplate was:\n\t\t{tmpl}\n"), 1, 0.3
        if out_fmt == "json":
            return json.dumps(doc, indent=4) + "\n", "", 0, 0.3
        return yaml.safe_dump(doc, sort_keys=False), "", 0, 0.3

    @staticmethod
    def _env_list(c) -> list[dict]:
        return [{"name": k, "value": str(v)} for k, v in sorted(getattr(c, "pod_env", {}).items())]

    def _workload_obj(self, c, now: float) -> dict:
        r = int(c.ready(now))
        return {"apiVersion": "apps/v1", "kind": c.kind,
                "metadata": {"name": c.name, "namespace": c.namespace, "labels": {"app": c.name}},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": c.name}},
                         "template": {"metadata": {"labels": {"app": c.name}},
                                      "spec": {"containers": [{"name": c.container, "image": c.image,
                                                               "env": self._env_list(c)}]}}},
                "status": {"replicas": 1, "readyReplicas": r, "availableReplicas": r, "updatedReplicas": 1}}

    def _cm_obj(self, s, ns: str) -> dict:
        if s.file_key:
            data = {s.file_key: yaml.safe_dump(s.data, sort_keys=True)}
        else:
            data = {k: yaml.safe_dump(v, sort_keys=True) if isinstance(v, (dict, list)) else str(v)
                    for k, v in s.data.items()}
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": s.name.split("/", 1)[1], "namespace": ns}, "data": data}

    def _pod_obj(self, c, now: float) -> dict:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": c.pod, "namespace": c.namespace, "uid": c.uid, "labels": {"app": c.name}},
                "spec": {"containers": [{"name": c.container, "image": c.image, "env": self._env_list(c)}]},
                "status": {"phase": "Running", "containerStatuses": [{
                    "name": c.container, "ready": c.ready(now), "restartCount": c.restarts, "image": c.image,
                    "imageID": c.image}]}}

    def describe(self, rest: list[str], ns: str) -> tuple[str, str, int, float]:
        if len(rest) < 1:
            return "", "error: You must specify the type of resource to describe.\n", 1, 0.0
        target = rest[0].split("/", 1)[1] if "/" in rest[0] else (rest[1] if len(rest) > 1 else "")
        c = self.world.component(target)
        if c is None:
            return "", f"Error from server (NotFound): pods \"{target}\" not found\n", 1, 0.3
        now = self.env.clock.now()
        env_lines = "".join(f"      {k}:  {v}\n" for k, v in sorted(getattr(c, "pod_env", {}).items()))
        env_lines = env_lines or "      <none>\n"
        text = (f"Name:             {c.pod}\nNamespace:        {c.namespace}\nLabels:           app={c.name}\n"
                f"Status:           Running\nContainers:\n  {c.container}:\n    Image:          {c.image}\n"
                f"    Image ID:       {c.image}\n    State:          Running\n    Ready:          "
                f"{'True' if c.ready(now) else 'False'}\n    Restart Count:  {c.restarts}\n"
                f"    Environment:\n{env_lines}Events:          <none>\n")
        return text, "", 0, 0.4

    def logs(self, rest: list[str], ns: str) -> tuple[str, str, int, float]:
        tail = None
        names = []
        i = 0
        while i < len(rest):
            a = rest[i]
            if a.startswith("--tail="):
                tail = int(a.split("=", 1)[1])
            elif a == "--tail" and i + 1 < len(rest):
                tail = int(rest[i + 1])
                i += 1
            elif a in ("-c", "--container") and i + 1 < len(rest):
                i += 1
            elif not a.startswith("-"):
                names.append(a.split("/", 1)[-1])
            i += 1
        if not names:
            return "", "error: expected 'logs [-f] [-p] (POD | TYPE/NAME) [-c CONTAINER]'.\n", 1, 0.0
        c = self.world.component(names[0])
        if c is None:
            return "", f"Error from server (NotFound): pods \"{names[0]}\" not found\n", 1, 0.3
        lines = c.log[-tail:] if tail else c.log
        return "".join(x + "\n" for x in lines), "", 0, 0.4

    def exec(self, rest: list[str], stdin: str) -> tuple[str, str, int, float]:
        if "--" not in rest:
            return "", "error: you must specify at least one command for the container\n", 1, 0.0
        k = rest.index("--")
        opts, cmd = rest[:k], rest[k + 1:]
        names = []
        i = 0
        while i < len(opts):
            if opts[i] in ("-c", "--container"):
                i += 2
                continue
            if not opts[i].startswith("-"):
                names.append(opts[i].split("/", 1)[-1])
            i += 1
        if not names:
            return "", "error: expected 'exec (POD | TYPE/NAME) [-c CONTAINER] -- COMMAND [args...]'\n", 1, 0.0
        c = self.world.component(names[0])
        if c is None:
            return "", f"Error from server (NotFound): pods \"{names[0]}\" not found\n", 1, 0.3
        if not cmd:
            return "", "error: you must specify at least one command for the container\n", 1, 0.0
        if self.env.clock.now() < c.ready_at:
            return "", "error: unable to upgrade connection: container not found (\"app\")\n", 1, 0.5
        o, e, code = c.exec(cmd, stdin, self.env.clock.now())
        return o, e, code, 0.6

    def write(self, verb: str, rest: list[str], ns: str) -> tuple[str, str, int, float]:
        allowed = self.env.rbac_allows(verb)
        kind = rest[0].split("/")[0] if rest else "pods"
        name = rest[0].split("/", 1)[1] if rest and "/" in rest[0] else (rest[1] if len(rest) > 1 else "")
        if verb == "rollout" and rest:
            kind = rest[1].split("/")[0] if len(rest) > 1 else "deployment"
            name = rest[1].split("/", 1)[1] if len(rest) > 1 and "/" in rest[1] else ""
        if not allowed:
            res = {"po": "pods", "pod": "pods", "deploy": "deployments", "deployment": "deployments",
                   "sts": "statefulsets", "statefulset": "statefulsets"}.get(kind, kind)
            api = " in API group \"apps\"" if res in ("deployments", "statefulsets") else " in API group \"\""
            v = {"rollout": "patch", "scale": "patch", "set": "patch", "edit": "patch"}.get(verb, verb)
            return "", (f"Error from server (Forbidden): {res} \"{name}\" is forbidden: User \"{SA}\" cannot {v} "
                        f"resource \"{res}\"{api} in the namespace \"{ns}\"\n"), 1, 0.3
        if verb == "delete" or (verb == "rollout" and rest and rest[0] == "restart"):
            c = self.world.component(name)
            if c is None:
                return "", f"Error from server (NotFound): pods \"{name}\" not found\n", 1, 0.3
            if not c.restartable and not self.env.rbac_allows("restart-stateful"):
                return "", f"Error from server (Forbidden): {c.name} is protected\n", 1, 0.3
            old = c.pod
            self.world.restart(c.name, by="agent")
            msg = f"pod \"{old}\" deleted\n" if verb == "delete" else f"deployment.apps/{c.name} restarted\n"
            return msg, "", 0, 1.0
        return "", f"error: kubectl {verb} is not modelled by this twin\n", 1, 0.3


class Curl:
    """curl against the components' HTTP APIs (svc-channel:8000/admin/event, db-maintenance:8081/v1/...)."""

    def __init__(self, env: TwinHost):
        self.env = env

    def __call__(self, inv: Invocation) -> tuple[str, str, int, float]:
        argv = inv.argv[1:]
        method, data, url = None, None, None
        fail, include, write_out, silent = False, False, None, False
        i = 0
        while i < len(argv):
            a = argv[i]
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if a in ("-X", "--request") and nxt is not None:
                method = nxt
                i += 2
                continue
            if a in ("-d", "--data", "--data-raw", "--data-binary", "--json") and nxt is not None:
                data = inv.stdin if nxt == "@-" else nxt
                i += 2
                continue
            if a in ("-H", "--header", "-o", "--output", "-m", "--max-time", "--connect-timeout") and nxt is not None:
                i += 2
                continue
            if a in ("-w", "--write-out") and nxt is not None:
                write_out = nxt
                i += 2
                continue
            if a.startswith("-") and not a.startswith("--") and len(a) > 1:
                fail = fail or "f" in a
                include = include or "i" in a
                silent = silent or "s" in a
            elif a in ("--fail", "--fail-with-body"):
                fail = True
            elif a in ("--include",):
                include = True
            elif not a.startswith("-"):
                url = a
            i += 1
        if url is None:
            return "", "curl: no URL specified!\ncurl: try 'curl --help' for more information\n", 2, 0.0
        m = re.fullmatch(r"(?:https?://)?([^/:]+)(?::(\d+))?(/.*)?", url)
        if not m:
            return "", f"curl: (3) URL using bad/illegal format or missing URL\n", 3, 0.0
        host, port, path = m.group(1), m.group(2), m.group(3) or "/"
        method = method or ("POST" if data is not None else "GET")
        c = self.env.world.component(f"{host}:{port}" if port else host) or self.env.world.component(host)
        if c is None or (port and f"{host}:{port}" not in c.hosts and not any(
                h.split(":")[0] == host and h.endswith(f":{port}") for h in c.hosts)):
            if c is None:
                return "", f"curl: (6) Could not resolve host: {host}\n", 6, 0.0
            return "", f"curl: (7) Failed to connect to {host} port {port} after 2 ms: Couldn't connect to server\n", \
                7, 0.0
        now = self.env.clock.now()
        if not c.ready(now):
            return "", f"curl: (7) Failed to connect to {host} port {port or 80} after 1 ms: Connection refused\n", \
                7, 0.0
        status, body = c.http(method.upper(), path, data or "", now)
        if body and not body.endswith("\n"):
            body += "\n"
        out = (f"HTTP/1.1 {status} {_reason(status)}\ncontent-type: application/json\n\n" if include else "") + body
        if write_out:
            out += write_out.replace("%{http_code}", str(status)).replace("\\n", "\n")
        if fail and status >= 400:
            return "", f"curl: (22) The requested URL returned error: {status}\n", 22, 0.05
        return out, "", 0, 0.05


def _reason(status: int) -> str:
    return {200: "OK", 201: "Created", 202: "Accepted", 204: "No Content", 400: "Bad Request", 403: "Forbidden",
            404: "Not Found", 405: "Method Not Allowed", 409: "Conflict", 422: "Unprocessable Entity",
            500: "Internal Server Error", 503: "Service Unavailable"}.get(status, "")


class Helm:
    """helm get values / upgrade over the twin's Helm-values stores (`helm/<release>`)."""

    def __init__(self, env: TwinHost):
        self.env = env

    def __call__(self, inv: Invocation) -> tuple[str, str, int, float]:
        a = inv.argv[1:]
        if len(a) >= 3 and a[0] == "get" and a[1] == "values":
            rel = a[2]
            s = self.env.world.stores.get(f"helm/{rel}")
            if s is None:
                return "", "Error: release: not found\n", 1, 0.4
            if "-o" in a and a[a.index("-o") + 1:a.index("-o") + 2] == ["json"]:
                return json.dumps(s.data) + "\n", "", 0, 0.4
            return "USER-SUPPLIED VALUES:\n" + yaml.safe_dump(s.data, sort_keys=True), "", 0, 0.4
        if a and a[0] in ("upgrade", "install", "rollback", "uninstall"):
            if not self.env.rbac_allows("helm"):
                return "", (f"Error: UPGRADE FAILED: query: failed to query with labels: secrets is forbidden: "
                            f"User \"{SA}\" cannot list resource \"secrets\" in API group \"\" in the namespace "
                            f"\"default\"\n"), 1, 0.8
            sets: dict[str, str] = {}
            for i, x in enumerate(a):
                if x in ("--set", "--set-string") and i + 1 < len(a):
                    for kv in a[i + 1].split(","):
                        k, _, v = kv.partition("=")
                        sets[k] = v
            rel = a[1] if len(a) > 1 else ""
            sub = self.env.world.substrate
            handler = getattr(sub, "helm_upgrade", None)
            if handler is None or f"helm/{rel}" not in self.env.world.stores:
                return "", f"Error: UPGRADE FAILED: \"{rel}\" has no deployed releases\n", 1, 0.8
            out, err, code, dur = handler(rel, sets)
            return out, err, code, dur
        if a and a[0] in ("list", "ls"):
            rels = [s.name.split("/", 1)[1] for s in self.env.world.stores.values() if s.name.startswith("helm/")]
            rows = [["NAME", "NAMESPACE", "REVISION", "STATUS", "CHART"]] + [[r, "default", "1", "deployed", r]
                                                                          for r in rels]
            return _table(rows), "", 0, 0.4
        return "", f"Error: unknown command \"{a[0] if a else ''}\" for \"helm\"\n", 1, 0.0
