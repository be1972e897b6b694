"""Persistence: does every setting the agent changed hold the same value in the declared layer a restart reads?

Called by the Guard on a declaration (and by the restart probe, which re-reads the same keys after a restart).
For each key that a journalled, executed, mutating action changed, `PersistenceReader` (measuring) runs the
operator commands the persistence catalogue gives for the effective and the declared value (a read with an `api`
form goes through the environment's API instead when it offers one, `DeclaredLayerReader`: a Kubernetes
environment reads ConfigMaps and Helm release Secrets itself, unseen by the agent); `evaluate()`
(judging, pure) turns the readings into one Verdict: NOT_DURABLE with the key, both values and the durable way;
INCONCLUSIVE for a key with no catalogue entry (with how to add one); ERROR when a read fails.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from tenacity import Retrying, retry_if_result, stop_after_attempt, wait_fixed

from verifiers.base import VerifierBase, is_mutating_action
from verifiers.catalogue import (ApiRead, Catalogue, CatalogueEntry, Missing, ParseStep, load_catalogue, normalize,
                                 parse_output, render)
from verifiers.context import PublicContext
from verifiers.protocols import (DeclaredLayerReader, DeclaredRef, Environment, FeedbackCode, Verdict,
                                 VerdictStatus)

__all__ = ["ChangedKey", "KeyReading", "changed_keys", "changes_of", "prior_values", "capture_prior", "exec_wrapper",
           "PersistenceReader", "evaluate", "PersistenceCheck"]


@dataclass(frozen=True)
class ChangedKey:
    """The last change an executed, mutating action made to one key (in one scope, on one target)."""

    key: str
    scope: Mapping[str, str]
    value: Any
    layer: str
    target: Mapping[str, Any]
    via: tuple[str, ...] = ()
    seq: int = 0
    command: str = ""
    # The action's own text (one simple command of `command`): where the agent said how to reach the server.
    raw: str = ""
    # The container a change through `kubectl exec -c C` was made in (the read goes through the same one).
    container: str = ""

    @property
    def ident(self) -> tuple[str, tuple[tuple[str, str], ...], str]:
        return (self.key, tuple(sorted(self.scope.items())), str(self.target.get("name") or ""))

    def label(self) -> str:
        where = ", ".join(f"{k}={v}" for k, v in sorted(self.scope.items()))
        tgt = self.target.get("name")
        bits = [b for b in (where, f"on {tgt}" if tgt else "") if b]
        return f"{self.key} ({'; '.join(bits)})" if bits else self.key


@dataclass(frozen=True)
class KeyReading:
    """What the reads of one changed key showed."""

    key: ChangedKey
    # durable | not_durable | diverged (declared differs, but is not the value the agent replaced) | in_container |
    # no_entry | unreadable | error
    status: str
    entry_id: str | None = None
    effective: Any = None
    declared: Any = None
    effective_source: str = ""
    declared_source: str = ""
    durable_way: str = ""
    message: str = ""
    commands: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key.key, "scope": dict(self.key.scope), "target": self.key.target.get("name"),
                "set_value": self.key.value, "layer": self.key.layer, "via": list(self.key.via),
                "status": self.status, "entry": self.entry_id, "effective": self.effective,
                "declared": self.declared, "effective_source": self.effective_source,
                "declared_source": self.declared_source, "durable_way": self.durable_way,
                "message": self.message, "commands": list(self.commands), "seq": self.key.seq}


def prior_values(journal: Any) -> dict[tuple, Any]:
    """The value each key had before the agent first changed it, from the journal's `snapshot` records
    ({key, scope, before[, target]}) that the guard writes before running a command (see `capture_prior`)."""
    out: dict[tuple, Any] = {}
    for r in journal.records() if journal is not None else ():
        if r.get("kind") != "snapshot" or not r.get("key"):
            continue
        ident = (str(r["key"]), tuple(sorted(dict(r.get("scope") or {}).items())), str(r.get("target") or ""))
        out.setdefault(ident, r.get("before"))  # the earliest capture is the state the agent started from
    return out


def changed_keys(journal: Any) -> list[ChangedKey]:
    """Every key executed mutating actions changed, last change wins; commands that failed changed nothing."""
    out: dict[tuple, ChangedKey] = {}
    for e in journal.executed() if journal is not None else ():
        for ck in changes_of(e, e.get("exit_code")):
            out.pop(ck.ident, None)  # re-insert so the order is that of the last change
            out[ck.ident] = ck
    return list(out.values())


def changes_of(command: Mapping[str, Any], exit_code: Any) -> list[ChangedKey]:
    """The keys one executed command changed, in its actions' order; none when it failed."""
    if exit_code not in (0, None):
        return []
    out = []
    for a in command.get("actions") or ():
        if not is_mutating_action(a):
            continue
        # A key the normaliser derived beside a raw one (a chart value's replica count, a ConfigMap's app.yaml
        # roles): the rules judge it; what the command wrote, and what is read back, is the raw key.
        derived = set((a.get("details") or {}).get("derived_keys") or ())
        for k in a.get("keys") or ():
            if str(k.get("key")) in derived:
                continue
            out.append(ChangedKey(key=str(k.get("key")), scope=dict(k.get("scope") or {}), value=k.get("value"),
                                  layer=str(a.get("layer") or "none"), target=dict(a.get("target") or {}),
                                  via=tuple(a.get("via") or ()), seq=int(command.get("seq") or 0),
                                  command=str(command.get("command") or ""), raw=str(a.get("raw") or ""),
                                  container=str((a.get("details") or {}).get("container") or "")))
    return out


# redis-cli options that say where the server is and who connects (each takes a value).
REDIS_CONNECTION_OPTIONS = ("-h", "-p", "-s", "-n", "-u", "-a", "--user", "--pass")
# Other redis-cli options that take a value: skipped with it, so that what follows them is still read.
REDIS_VALUE_OPTIONS = ("-r", "-i", "-d", "-D", "-e", "--cacert", "--cacertdir", "--cert", "--key", "--sni",
                       "--tls-ciphers", "--tls-ciphersuites", "--pattern", "--count", "--quoted-pattern", "--eval",
                       "--rdb", "--functions-rdb", "--memkeys-samples", "--cluster")


def redis_connection_args(raw: str) -> list[str] | None:
    """The connection options (-h, -p, -s, -n, -u, -a, --user, --pass) the first redis-cli of `raw` was given,
    quoted for a shell: [] when it gave none, None when `raw` runs no redis-cli or cannot be split."""
    try:
        words = shlex.split(raw)
    except ValueError:
        return None
    at = next((i for i, w in enumerate(words) if w.rsplit("/", 1)[-1] == "redis-cli"), None)
    if at is None:
        return None
    args = words[at + 1:]
    keep: list[str] = []
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] in REDIS_CONNECTION_OPTIONS and i + 1 < len(args):
            keep += [args[i], shlex.quote(args[i + 1])]
            i += 2
        elif args[i] in REDIS_VALUE_OPTIONS:
            i += 2
        else:
            i += 1
    return keep


def exec_wrapper(ck: ChangedKey) -> str:
    """`kubectl exec POD [-n NS] [-c C] --` when the change ran through `kubectl exec` into a named pod, else ""."""
    name, ns = ck.target.get("name"), ck.target.get("namespace")
    if not ck.via or not ck.via[0].startswith("kubectl exec") or ck.target.get("kind") != "pod" or not name:
        return ""
    return " ".join(["kubectl exec", shlex.quote(str(name)), *(["-n", shlex.quote(str(ns))] if ns else []),
                     *(["-c", shlex.quote(ck.container)] if ck.container else []), "--"])


class PersistenceReader:
    """Reads a changed key's effective and declared values with the catalogue's operator commands."""

    def __init__(self, context: Any = None, catalogue: Catalogue | None = None, *, read_attempts: int = 4,
                 retry_wait_s: float = 5.0):
        self.context = PublicContext.of(context)
        self.catalogue = catalogue or load_catalogue()
        self.read_attempts = read_attempts
        self.retry_wait_s = retry_wait_s

    def entry_for(self, ck: ChangedKey) -> tuple[CatalogueEntry, dict[str, str]] | None:
        return self.catalogue.lookup(ck.key, ck.scope, self.context.declared_sources)

    def variables(self, entry: CatalogueEntry, groups: Mapping[str, str], ck: ChangedKey,
                  value: Any = None) -> dict[str, Any]:
        vs: dict[str, Any] = {
            **groups, "key": ck.key, "value": ck.value if value is None else value, "scope": dict(ck.scope),
            "target": {k: v for k, v in ck.target.items() if v}, "context": self.context.template_vars(),
        }
        # A declared source path that names a context component (erpnext.redis-queue.master.extraFlags) tells
        # which component an unscoped key (a protected `redis.maxmemory-policy`) is about.
        path_parts = set(str(groups.get("source_path", "")).split("."))
        hint = next((c for c in self.context.components if c in path_parts), None)
        if hint:
            vs["component_hint"] = hint
        # How the agent reached the server, when it said so (`redis-cli -h 127.0.0.1 -p 6380 ...`): its command
        # worked, so the read goes the same way.
        if not ck.via:
            redis_opts = redis_connection_args(ck.raw)
            if redis_opts:
                vs["agent"] = {"redis_cli": " ".join(redis_opts)}
        elif (through := exec_wrapper(ck)):
            # Through `kubectl exec POD` the agent's options were for a client inside that pod: the effective read
            # goes the same way (through the same pod), which is what reaches a server the guard cannot reach
            # directly from outside the cluster.
            vs["through"] = through
            redis_opts = redis_connection_args(ck.raw)
            if redis_opts:
                vs["agent"] = {"redis_cli": " ".join(redis_opts)}
        for name, candidates in entry.vars.items():
            if name in groups:
                continue  # the key's own regex groups and the context's declared source win over defaults
            for cand in candidates:
                try:
                    got = render(cand, vs)
                except Missing:
                    continue
                if got or cand == "":
                    vs[name] = got
                    break
            else:
                raise Missing(name)
        return vs

    def _run(self, env: Environment, template: str, steps: Any, vs: Mapping[str, Any],
             commands: list[str], attempts: int | None = None, api: ApiRead | None = None,
             through: str = "") -> Any:
        if api is not None and isinstance(env, DeclaredLayerReader):
            return self._read_api(env, api, steps, vs, commands)
        cmd = " ".join(render(template, vs).split())
        if through and not cmd.startswith("kubectl "):
            cmd = f"{through} {cmd}"
        commands.append(cmd)
        # A read can fail while a pod rolls (connection refused right after a reload): retry a few times in the
        # environment's clock before calling it a backend failure.
        retrying = Retrying(sleep=env.clock.sleep, wait=wait_fixed(self.retry_wait_s),
                            stop=stop_after_attempt(attempts or self.read_attempts),
                            retry=retry_if_result(lambda r: not r.ok),
                            retry_error_callback=lambda rs: rs.outcome.result())
        res = retrying(env.run, cmd)
        if not res.ok:
            raise RuntimeError(f"`{cmd}` exited {res.exit_code}: {(res.stderr or res.stdout).strip()[:200]}")
        return parse_output(res.stdout, steps, vs)

    @staticmethod
    def _read_api(env: DeclaredLayerReader, api: ApiRead, steps: Any, vs: Mapping[str, Any],
                  commands: list[str]) -> Any:
        """The read through the environment's API (the guard's own read: the agent never sees it run)."""
        ref = DeclaredRef(kind=api.kind, name=render(api.name, vs), namespace=render(api.namespace, vs),
                          key=render(api.key, vs), workload_kind=render(api.workload_kind, vs))
        commands.append(f"<api: {ref.kind} {ref.namespace + '/' if ref.namespace else ''}{ref.name}"
                        f"{' key ' + ref.key if ref.key else ''}>")
        try:
            text = env.read_declared(ref)
        except LookupError as e:
            raise RuntimeError(str(e).strip("'\"")) from e
        return parse_output(text, steps, vs)

    def read_effective(self, env: Environment, ck: ChangedKey, *, attempts: int | None = None) -> Any:
        """The normalised effective value alone (the restart probe's before/after probe). None if unreadable.
        `attempts=1` for reads taken while the agent waits on its command (a snapshot before a change, the scope
        baseline): nothing is rolling then, and retrying an unreachable server stalls every command."""
        found = self.entry_for(ck)
        if found is None or found[0].effective is None:
            return None
        entry, groups = found
        vs = self.variables(entry, groups, ck)
        return normalize(self._run(env, entry.effective.command, entry.effective.parse, vs, [], attempts,
                                   entry.effective.api, vs.get("through", "")), entry.normalize)

    def capture(self, env: Environment, action: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Snapshot records for the keys a mutating action is about to change: their current effective values."""
        if not is_mutating_action(action):
            return []
        out = []
        for k in action.get("keys") or ():
            ck = ChangedKey(key=str(k.get("key")), scope=dict(k.get("scope") or {}), value=k.get("value"),
                            layer=str(action.get("layer") or "none"), target=dict(action.get("target") or {}),
                            via=tuple(action.get("via") or ()), raw=str(action.get("raw") or ""))
            try:
                before = self.read_effective(env, ck, attempts=1)
            except Exception:  # noqa: BLE001 - an unreadable prior value is simply not captured
                continue
            if before is not None or self.entry_for(ck) is not None:
                rec = {"key": ck.key, "scope": dict(ck.scope), "target": ck.target.get("name") or "",
                       "before": before}
                base = self.baseline(env, ck)
                if base is not None:
                    rec["baseline"] = base
                out.append(rec)
        return out

    def baseline(self, env: Environment, ck: ChangedKey) -> dict[str, Any] | None:
        """What the setting runs on where nobody changed it (the entry's `baseline` rule), read now: {kind:
        default, default} | {kind: fleet, values} | {kind: overrides, overridden}, with its source in words.
        None when the entry has no rule or the read fails (the scope audit then does not judge the change)."""
        found = self.entry_for(ck)
        if found is None or found[0].baseline is None:
            return None
        entry, groups = found
        rule = entry.baseline
        try:
            vs = self.variables(entry, groups, ck)
            src = render(rule.source, vs)
            if rule.fleet is not None:
                peers = self._run(env, rule.fleet.command, rule.fleet.parse, vs, [], 1, rule.fleet.api)
                if not isinstance(peers, Mapping):
                    return None
                path = render(rule.fleet_path, vs)
                values = {str(p): normalize(parse_output(doc, [ParseStep(json=path)], vs),
                                            entry.normalize) for p, doc in peers.items()}
                return {"kind": "fleet", "values": {p: v for p, v in values.items() if v is not None}, "source": src}
            if rule.overrides is not None:
                doc = self._run(env, rule.overrides.command, rule.overrides.parse, vs, [], 1, rule.overrides.api)
                name = str(groups.get("name") or ck.key.rsplit(".", 1)[-1])
                camel = re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), name)
                named = isinstance(doc, Mapping) and (name in doc or camel in doc)
                return {"kind": "overrides", "overridden": named, "source": src}
            if rule.read is not None:
                default = self._run(env, rule.read.command, rule.read.parse, vs, [], 1, rule.read.api)
                if default is None:
                    return None
            elif groups.get("name") in rule.values:
                default = rule.values[groups["name"]]
            elif rule.value is not None:
                default = rule.value
            elif rule.unset:
                default = None
            else:
                return None
            return {"kind": "default", "default": normalize(default, entry.normalize), "unset": rule.unset,
                    "source": src}
        except Exception:  # noqa: BLE001 - an unreadable baseline leaves the change unjudged, not the agent stuck
            return None

    def _read_layers(self, env: Environment, entry: CatalogueEntry, groups: Mapping[str, str],
                     vs: Mapping[str, Any], commands: list[str]) -> tuple[Any, Any, str, str]:
        """(effective, declared, where each was read): the entry's two reads, a declared value that is absent
        filled in by its `when_absent` rule. Raises RuntimeError or Missing when a read fails."""
        assert entry.effective is not None and entry.declared is not None
        eff_raw = self._run(env, entry.effective.command, entry.effective.parse, vs, commands,
                            api=entry.effective.api, through=vs.get("through", ""))
        eff_src = render(entry.effective.source, vs)
        if entry.declared.same_as_effective:
            return eff_raw, eff_raw, eff_src, render(entry.declared.source, vs) or eff_src
        dec_raw = self._run(env, entry.declared.command, entry.declared.parse, vs, commands, api=entry.declared.api)
        dec_src = render(entry.declared.source, vs)
        absent = entry.declared.when_absent
        if dec_raw is None and absent is not None:
            if absent.read is not None:
                dec_raw = self._run(env, absent.read.command, absent.read.parse, vs, commands, api=absent.read.api)
            elif groups.get("name") in absent.values:
                dec_raw = absent.values[groups["name"]]
            elif absent.value is not None:
                dec_raw = absent.value
            if absent.note:
                dec_src = f"{dec_src} (absent: {absent.note})"
        return eff_raw, dec_raw, eff_src, dec_src

    def read(self, env: Environment, ck: ChangedKey, prior: Any = None) -> KeyReading:
        found = self.entry_for(ck)
        if found is None:
            return KeyReading(ck, "no_entry", message=(
                f"no persistence catalogue entry for {ck.key}: add one (a regex `match`, the `effective` and "
                f"`declared` reads, and the `durable` way) in a YAML file passed to the guard's catalogue"))
        entry, groups = found
        commands: list[str] = []
        in_container = any(v.startswith(w) for v in ck.via for w in entry.in_container_via)
        try:
            vs = self.variables(entry, groups, ck)
            durable_way = " ".join(render(entry.durable, vs).split())
        except Missing as m:
            if not in_container:
                return KeyReading(ck, "unreadable", entry.id, message=(
                    f"catalogue entry {entry.id} needs ${{{m.args[0]}}}, which neither the action nor the context "
                    f"gives (set it in the context's extra, or add a scope to the change)"))
            # An in-container change is lost at the next pod start whether or not its source can be read.
            try:
                durable_way = " ".join(render(entry.durable, {**groups, "key": ck.key}).split())
            except Missing:
                durable_way = " ".join(entry.durable.split())
            vs = {}
        if in_container:
            # An in-container edit is lost at the next pod start, unless what a fresh container gets from the
            # declared source is the same (the source was changed to match since). Only for entries whose effective
            # read sees the in-container state itself; an unreadable side leaves the edit judged ephemeral.
            if vs and entry.in_container_compare and entry.effective is not None and entry.declared is not None \
                    and not entry.declared.same_as_effective:
                try:
                    eff_raw, dec_raw, eff_src, dec_src = self._read_layers(env, entry, groups, vs, commands)
                except (RuntimeError, Missing):
                    eff_raw = dec_raw = None
                eff = normalize(eff_raw, entry.normalize)
                if eff is not None and eff == normalize(dec_raw, entry.normalize):
                    return KeyReading(ck, "durable", entry.id, eff_raw, dec_raw, eff_src, dec_src, "", (
                        "changed in-container, and the declared source now gives a fresh container the same "
                        "content"), tuple(commands))
            note = entry.ephemeral_note or "a change made inside a running container"
            return KeyReading(ck, "in_container", entry.id, durable_way=durable_way, commands=tuple(commands),
                              message=(f"{ck.label()} was changed in-container ({', '.join(ck.via)}): {note}; it is "
                                       f"lost when the pod is replaced"))
        if entry.effective is None and entry.declared is not None and entry.declared.same_as_effective:
            return KeyReading(ck, "durable", entry.id, declared_source=render(entry.declared.source, vs),
                              durable_way=durable_way, message="written to a durable store")
        if entry.effective is None or entry.declared is None:
            return KeyReading(ck, "unreadable", entry.id, durable_way=durable_way, message=(
                f"catalogue entry {entry.id} has no reads for {ck.key}; add `effective` and `declared` reads"))
        try:
            eff_raw, dec_raw, eff_src, dec_src = self._read_layers(env, entry, groups, vs, commands)
        except (RuntimeError, Missing) as e:
            return KeyReading(ck, "error", entry.id, durable_way=durable_way, commands=tuple(commands),
                              message=f"could not read {ck.key}: {e}")
        eff, dec = normalize(eff_raw, entry.normalize), normalize(dec_raw, entry.normalize)
        if eff == dec:
            return KeyReading(ck, "durable", entry.id, eff_raw, dec_raw, eff_src, dec_src, durable_way, "",
                              tuple(commands))
        wanted = normalize(ck.value, entry.normalize) if ck.value is not None else None
        if wanted is not None and wanted != eff and wanted == dec:
            # The agent's value is the declared one, yet something put the old value back at runtime.
            return KeyReading(ck, "not_durable", entry.id, eff_raw, dec_raw, eff_src, dec_src, durable_way, (
                f"{ck.label()}: you set {ck.value!r}, but it is {eff_raw!r} again ({eff_src}); something re-applies "
                f"it at runtime (a scheduled event, a controller, a restart of another writer). Find what sets it"),
                tuple(commands))
        if prior is not None and normalize(prior, entry.normalize) not in (dec, eff):
            # A restart would load the declared value, which is not the state the agent started from (the
            # incident's value was runtime only): the repair does not come undone into the fault. Reported, not
            # failed; the restart probe still checks what a restart really does where one is allowed.
            return KeyReading(ck, "diverged", entry.id, eff_raw, dec_raw, eff_src, dec_src, durable_way, (
                f"{ck.label()}: effective {eff_raw!r} but declared {dec_raw!r}; a restart would load {dec_raw!r}, "
                f"not the {prior!r} you replaced"), tuple(commands))
        return KeyReading(ck, "not_durable", entry.id, eff_raw, dec_raw, eff_src, dec_src, durable_way, (
            f"{ck.label()}: effective {eff_raw!r} ({eff_src}) but declared {dec_raw!r} ({dec_src}); a restart would "
            f"bring back {dec_raw!r}"), tuple(commands))


def evaluate(readings: Sequence[KeyReading]) -> Verdict:
    """Judge the readings: any ephemeral key fails; then read errors; then keys nobody knows how to read."""
    ev = {"keys": [r.to_dict() for r in readings]}
    bad = [r for r in readings if r.status in ("not_durable", "in_container")]
    if bad:
        lines = [f"{r.message}. Durable way: {r.durable_way}" for r in bad]
        return Verdict(VerdictStatus.FAIL, "persistence", FeedbackCode.NOT_DURABLE,
                       f"{len(bad)} change(s) would not survive a restart: " + " | ".join(lines), ev)
    errors = [r for r in readings if r.status == "error"]
    if errors:
        return Verdict(VerdictStatus.ERROR, "persistence",
                       message="could not read: " + " | ".join(r.message for r in errors), evidence=ev)
    unknown = [r for r in readings if r.status in ("no_entry", "unreadable")]
    if unknown:
        return Verdict(VerdictStatus.INCONCLUSIVE, "persistence",
                       message="persistence unknown for: " + " | ".join(r.message for r in unknown), evidence=ev)
    if not readings:
        return Verdict(VerdictStatus.PASS, "persistence", message="no settings were changed", evidence=ev)
    diverged = [r for r in readings if r.status == "diverged"]
    note = (" Note: " + " | ".join(f"{r.message}. To make it durable: {r.durable_way}" for r in diverged)) \
        if diverged else ""
    return Verdict(VerdictStatus.PASS, "persistence",
                   message=f"{len(readings) - len(diverged)} of {len(readings)} changed setting(s) hold the same "
                           f"value in the declared layer; no change would revert into the state it replaced.{note}",
                   evidence=ev)


class PersistenceCheck(VerifierBase):
    """For each key the agent changed: effective value == declared value?"""

    name = "persistence"

    def __init__(self, context: Any = None, catalogue: Catalogue | None = None):
        self.reader = PersistenceReader(context, catalogue)

    def readings(self, env: Environment, journal: Any) -> list[KeyReading]:
        priors = prior_values(journal)
        return [self.reader.read(env, ck, priors.get(ck.ident)) for ck in changed_keys(journal)]

    def _check(self, env: Environment, journal: Any, criteria: Any) -> Verdict:
        return evaluate(self.readings(env, journal))


def capture_prior(env: Environment, actions: Sequence[Mapping[str, Any]], context: Any = None,
                  catalogue: Catalogue | None = None, reader: PersistenceReader | None = None) -> list[dict[str, Any]]:
    """What a guard journals (kind "snapshot") before running a command: each key's value before the change.

    With it, persistence tells a change that a restart would undo into the incident's state (NOT_DURABLE) from
    one whose declared value is simply different (reported, not failed), and the scope audit can roll back.
    """
    reader = reader or PersistenceReader(context, catalogue)
    return [snap for a in actions for snap in reader.capture(env, a)]
