"""The slack-spine application roles: one `svc-<role>` pod per role, all from the shared `slack-app` image.

Built by `arena.twin.slack.substrate.SlackSpine`. Each role has a DB pool whose settings come from the
`app.yaml` ConfigMap (`roles.<role>.db.*`), an in-process runtime-event registry (`/admin/event`), and the admin
API. How the layers work here, as in the real service:

- At container start the entrypoint renders the ConfigMap into the writable file `/srv/app/config/app.yaml`; the
  process reads that file at start and on `POST /admin/reload`.
- `PUT /admin/config` validates a `{"db": {...}}` patch and persists it through the runtime-config broker into
  the ConfigMap (durable) and the rendered file, but the running process keeps its old pool until a reload.
- A `kubectl exec` edit of the rendered file lives in the container's writable layer: a reload applies it, a
  pod restart re-renders the file from the ConfigMap and loses it.
- `/admin/event` toggles live in process memory; a restart clears them. Their hold doses are deploy-time env
  (`ACL_HOLD_MS`, `STORE_HOLD_MS`).
- A reload rebuilds the DB engine: the pod fails readiness for `reload_s` and receives no traffic meanwhile.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from typing import Any

import yaml

from arena.twin.state import UNSET
from arena.twin.world import Component

__all__ = ["SlackRole", "ROLE_NAMES", "HEALTHY_HOLD_MS", "DB_KEYS", "KNOWN_EVENTS"]

ROLE_NAMES = ("auth", "channel", "file", "message", "notification", "platform", "search", "thread", "workspace")
HEALTHY_HOLD_MS = {"auth": 5, "workspace": 8, "channel": 10, "message": 150, "thread": 12, "file": 8, "search": 8,
                   "notification": 8, "platform": 8}
DB_KEYS = {"pool_size": int, "max_overflow": int, "pool_timeout_s": float, "hold_ms": int, "seq_lock_hold_ms": int}
KNOWN_EVENTS = ("read_consistency_strict", "store_consistency_strict")
CONFIG_PATH = "/srv/app/config/app.yaml"


class SlackRole(Component):
    """One slack-spine role pod (svc-<role>:8000)."""

    def __init__(self, role: str, *, reload_s: float, boot_s: float = 8.0):
        super().__init__(f"svc-{role}", image="ghcr.io/abundant-ai/sre-world/slack-app@sha256:"
                         "5f0c3e1d9a7b2c4e6f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6",
                         boot_s=boot_s, hosts=(f"svc-{role}", f"svc-{role}:8000"))
        self.role = role
        self.reload_s = reload_s
        self.events: set[str] = set()
        self._files: dict[str, str] | None = {}
        self._file_src: dict[str, Any] = {}
        self.reloading_until = -1e18
        self.reloads = 0
        self.pod_env: dict[str, str] = {}

    # --- layers -------------------------------------------------------------------------------------------
    @property
    def cm(self):
        assert self.world is not None
        return self.world.stores["configmap/app-config"]

    @property
    def helm(self):
        assert self.world is not None
        return self.world.stores["helm/slack"]

    def load_declared(self) -> None:
        # The entrypoint renders the ConfigMap into the writable config file; the process reads the file.
        # (Rendered to text lazily: most pods never have their file read by an operator.)
        self._files = None
        self._file_src = copy.deepcopy(self.cm.data)
        db = self.cm.get(f"roles.{self.role}.db", {}) or {}
        for k in DB_KEYS:
            if k in db:
                self.settings.declare(f"db.{k}", db[k])
        self.pod_env = {k: str(v) for k, v in (self.helm.get(f"app.roles.{self.role}.env", {}) or {}).items()}
        # The SEQUENCER_MODE / checkpoint handoff mode are deploy-time env too.
        for k, v in self.pod_env.items():
            self.settings.declare(f"env.{k}", v)

    def reset_runtime(self) -> None:
        # The event registry is seeded from RUNTIME_EVENTS, which is normally unset: a new process starts clean.
        self.events = {e.strip() for e in self.pod_env.get("RUNTIME_EVENTS", "").split(",") if e.strip()}
        self.reloading_until = -1e18

    def _apply_file(self, now: float) -> str | None:
        try:
            doc = _load_yaml(self.files.get(CONFIG_PATH, "")) or {}
            db = ((doc.get("roles") or {}).get(self.role) or {}).get("db") or {}
            vals = {k: DB_KEYS[k](db[k]) for k in DB_KEYS if k in db}
        except (yaml.YAMLError, AttributeError, TypeError, ValueError) as e:
            return f"config file invalid: {e}"
        for k, v in vals.items():
            lay = self.settings.layered(f"db.{k}")
            # What the process now runs: the declared value, or a runtime value that differs from it.
            lay.runtime = UNSET if v == lay.declared else v
        return None

    @property
    def files(self) -> dict[str, str]:
        if self._files is None:
            self._files = {CONFIG_PATH: yaml.safe_dump(self._file_src, sort_keys=True)}
        return self._files

    @files.setter
    def files(self, value: dict[str, str]) -> None:
        self._files = value

    def ready(self, now: float) -> bool:
        return now >= self.ready_at and now >= self.reloading_until

    def next_change(self, now: float) -> float:
        t = super().next_change(now)
        return min(t, self.reloading_until) if self.reloading_until > now else t

    # --- what the mechanisms read ------------------------------------------------------------------------
    def db(self, key: str) -> Any:
        return self.settings.get(f"db.{key}")

    def env_ms(self, name: str) -> float:
        try:
            return float(self.pod_env.get(name, "0"))
        except ValueError:
            return 0.0

    def authz_extra_ms(self) -> float:
        return self.env_ms("ACL_HOLD_MS") if "read_consistency_strict" in self.events else 0.0

    def store_extra_ms(self) -> float:
        return self.env_ms("STORE_HOLD_MS") if "store_consistency_strict" in self.events else 0.0

    def on_event(self, event, active: bool, now: float) -> None:
        if event.kind != "admin_event":
            return
        if active:
            self.events.add(event.name)
        else:
            self.events.discard(event.name)
        self.say(now, f"INFO admin_event name={event.name} active={str(active).lower()} source=loadgen")

    # --- truth and config ---------------------------------------------------------------------------------
    def truth(self) -> dict[str, Any]:
        out = super().truth()
        for e in KNOWN_EVENTS:
            out[f"events.{e}"] = e in self.events
        out["reloads"] = self.reloads
        return out

    def config(self) -> dict[str, Any]:
        return {k: v for k, v in self.settings.effective().items() if k.startswith("db.")}

    # --- operator surfaces --------------------------------------------------------------------------------
    def http(self, method: str, path: str, body: str, now: float) -> tuple[int, str]:
        path, _, query = path.partition("?")
        path = path.rstrip("/") or "/"
        if path in ("/healthz", "/readyz") and method == "GET":
            return 200, json.dumps({"status": "ok", "service": self.name})
        if path == "/admin/config":
            if method == "GET":
                eff = {k[3:]: v for k, v in self.settings.effective().items() if k.startswith("db.")}
                return 200, json.dumps({"service": self.name, "role": self.role, "db": eff}, sort_keys=True)
            if method == "PUT":
                return self._put_config(body, now)
            return 405, json.dumps({"detail": "Method Not Allowed"})
        if path == "/admin/reload":
            if method != "POST":
                return 405, json.dumps({"detail": "Method Not Allowed"})
            err = self._apply_file(now)
            if err:
                self.say(now, f"ERROR reload failed: {err}")
                return 500, json.dumps({"error": "reload_failed", "detail": err})
            self.reloads += 1
            self.reloading_until = now + self.reload_s
            self.say(now, f"INFO reload: rebuilding db engine pool_size={self.db('pool_size')} "
                          f"max_overflow={self.db('max_overflow')}; not ready for {self.reload_s:g}s")
            return 202, json.dumps({"status": "reloading", "service": self.name})
        if path == "/admin/event":
            if method == "GET" and "name=" in query:
                name = re.search(r"(?:^|&)name=([^&]*)", query)
                n = name.group(1) if name else ""
                if n not in KNOWN_EVENTS:
                    return 404, json.dumps({"detail": f"unknown event {n!r}"})
                return 200, json.dumps({"service": self.name, "name": n, "active": n in self.events})
            if method == "GET":
                return 200, json.dumps({"service": self.name, "events": [
                    {"name": e, "active": e in self.events} for e in KNOWN_EVENTS]})
            if method == "PUT":
                try:
                    doc = json.loads(body or "{}")
                    name, active = doc["name"], doc["active"]
                    if not isinstance(active, bool):
                        raise TypeError
                except (ValueError, KeyError, TypeError):
                    return 422, json.dumps({"detail": "body must be {\"name\": str, \"active\": bool}"})
                if name not in KNOWN_EVENTS:
                    return 404, json.dumps({"detail": f"unknown event {name!r}"})
                if active:
                    self.events.add(name)
                else:
                    self.events.discard(name)
                self.say(now, f"INFO admin_event name={name} active={str(active).lower()} source=admin")
                return 200, json.dumps({"service": self.name, "name": name, "active": active})
            return 405, json.dumps({"detail": "Method Not Allowed"})
        return 404, json.dumps({"detail": "Not Found"})

    def _put_config(self, body: str, now: float) -> tuple[int, str]:
        try:
            doc = json.loads(body or "")
        except ValueError:
            return 400, json.dumps({"detail": "invalid JSON body"})
        db = doc.get("db") if isinstance(doc, dict) else None
        if not isinstance(db, dict):
            return 422, json.dumps({"detail": "body must be {\"db\": {...}}"})
        bad = [k for k in db if k not in DB_KEYS]
        if bad:
            return 422, json.dumps({"detail": f"unknown db keys: {', '.join(sorted(bad))}"})
        try:
            vals = {k: DB_KEYS[k](v) for k, v in db.items()}
        except (TypeError, ValueError):
            return 422, json.dumps({"detail": "db values must be numbers"})
        if any(v < 0 for v in vals.values()):
            return 422, json.dumps({"detail": "db values must be >= 0"})
        for k, v in vals.items():
            # The runtime-config broker persists the patch into the ConfigMap and the rendered file.
            self.cm.set(f"roles.{self.role}.db.{k}", v)
            lay = self.settings.layered(f"db.{k}")
            if lay.runtime is UNSET:
                lay.runtime = lay.declared  # the running process keeps its value until a reload
            lay.declared = v
        doc_file = _load_yaml(self.files.get(CONFIG_PATH, "")) or {}
        doc_file.setdefault("roles", {}).setdefault(self.role, {}).setdefault("db", {}).update(vals)
        self.files[CONFIG_PATH] = yaml.safe_dump(doc_file, sort_keys=True)
        self.say(now, f"INFO admin config staged {json.dumps(vals, sort_keys=True)}; reload required")
        return 200, json.dumps({"status": "staged", "reload_required": True, "db": vals}, sort_keys=True)

    def exec(self, argv: list[str], stdin: str, now: float) -> tuple[str, str, int]:
        prog = argv[0].rsplit("/", 1)[-1]
        if prog in ("sh", "bash") and len(argv) >= 3 and argv[1] == "-c":
            try:
                inner = shlex.split(argv[2])
            except ValueError as e:
                return "", f"sh: syntax error: {e}\n", 2
            return self.exec(inner, stdin, now) if inner else ("", "", 0)
        if prog == "cat":
            outs = []
            for f in argv[1:]:
                if f not in self.files:
                    return "".join(outs), f"cat: {f}: No such file or directory\n", 1
                outs.append(self.files[f])
            return "".join(outs), "", 0
        if prog in ("env", "printenv"):
            env = {"HOSTNAME": self.pod, "SERVICE_ROLE": self.role, **self.pod_env}
            if prog == "printenv" and len(argv) > 1:
                v = env.get(argv[1])
                return (v + "\n", "", 0) if v is not None else ("", "", 1)
            return "".join(f"{k}={v}\n" for k, v in sorted(env.items())), "", 0
        if prog == "ls":
            return "app.yaml\n", "", 0
        if prog == "sed":
            return self._sed(argv[1:])
        if prog == "tee":
            files = [a for a in argv[1:] if not a.startswith("-")]
            for f in files:
                self.files[f] = stdin
            return stdin, "", 0
        return "", f"sh: 1: {argv[0]}: not found\n", 127

    def _sed(self, args: list[str]) -> tuple[str, str, int]:
        inplace, exprs, files = False, [], []
        i = 0
        while i < len(args):
            a = args[i]
            if a == "-i" or a.startswith("-i"):
                inplace = True
            elif a == "-e" and i + 1 < len(args):
                exprs.append(args[i + 1])
                i += 1
            elif not exprs and not a.startswith("-") and not files and "/" in a and a.startswith("s"):
                exprs.append(a)
            else:
                files.append(a)
            i += 1
        if not exprs or not files:
            return "", "Usage: sed [OPTION]... {script-only-if-no-other-script} [input-file]...\n", 1
        out = []
        for f in files:
            if f not in self.files:
                return "", f"sed: can't read {f}: No such file or directory\n", 2
            text = self.files[f]
            for e in exprs:
                m = re.fullmatch(r"s(.)(.*?)\1(.*?)\1(g?)", e)
                if not m:
                    return "", f"sed: -e expression #1, char {len(e)}: unknown command: `{e[:1]}'\n", 1
                try:
                    rx = re.compile(m.group(2))
                except re.error:
                    return "", f"sed: -e expression #1, char {len(e)}: invalid regular expression\n", 1
                repl = m.group(3).replace("\\/", "/").replace("&", "\\g<0>")
                text = "".join(rx.sub(repl, ln, count=0 if m.group(4) else 1)
                               for ln in text.splitlines(keepends=True))
            if inplace:
                self.files[f] = text
            else:
                out.append(text)
        return "".join(out), "", 0


def _load_yaml(text: str) -> Any:
    """yaml.safe_load with libyaml's parser where PyYAML has it (the same objects, faster); a bad file is parsed
    again by the pure-Python loader so that the error the role reports reads exactly as it always has."""
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return yaml.safe_load(text)
