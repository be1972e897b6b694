"""The scope audit: protected state the public context names, snapshotted at the first step and diffed on the
declaration, so a change that slipped past the pre-action policy (an opaque command, a side effect, a tool the
normaliser did not know) is still caught, as SCOPE_DRIFT, with a rollback where one can be built.

Protected state is the context's `protected_probes` (name -> a read-only operator command; its output is the
state) and `protected_settings` (dotted keys, read with the persistence catalogue's effective read). The Guard
runs `ScopeAudit.baseline_step` as a step check (it takes the snapshot once, on the first step) and the audit
itself on the declaration. A rollback comes from the journal's `snapshot` records ({key, scope, before}, written
by the guard before a change) or else the baseline value, rendered through the catalogue's durable-way template.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from verifiers.base import VerifierBase, mutations
from verifiers.catalogue import Catalogue, Missing, normalize, render
from verifiers.context import PublicContext
from verifiers.persistence import ChangedKey, PersistenceReader
from verifiers.protocols import Environment, FeedbackCode, Verdict, VerdictStatus

__all__ = ["ScopeSnapshot", "ScopeAudit", "diff"]


@dataclass
class ScopeSnapshot:
    """Protected state at one moment: probe outputs and setting values, plus what could not be read."""

    t: float
    values: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    volatile: set[str] = field(default_factory=set)  # outputs that change on their own: not judged
    after_seq: int = 0  # how many executed commands had run when it was taken

    def to_dict(self) -> dict[str, Any]:
        return {"t": self.t, "values": dict(self.values), "errors": dict(self.errors),
                "volatile": sorted(self.volatile), "after_seq": self.after_seq}


def diff(before: ScopeSnapshot, after: ScopeSnapshot) -> list[dict[str, Any]]:
    """What moved between two snapshots (pure); volatile items and items unreadable at the baseline are skipped."""
    return [{"item": k, "before": before.values[k], "after": after.values.get(k)}
            for k in sorted(before.values)
            if k not in before.volatile and k in after.values and after.values[k] != before.values[k]]


def _setting_key(item: str) -> ChangedKey:
    return ChangedKey(key=item, scope={}, value=None, layer="none", target={})


class ScopeAudit(VerifierBase):
    """Protected state unchanged since the first step?"""

    name = "scope_audit"

    def __init__(self, context: Any = None, catalogue: Catalogue | None = None):
        self.context = PublicContext.of(context)
        self.reader = PersistenceReader(self.context, catalogue)
        self.snapshot_at_start: ScopeSnapshot | None = None
        self.baseline_step = _BaselineStep(self)

    def items(self) -> list[str]:
        return [f"probe:{n}" for n in self.context.protected_probes] + list(self.context.protected_settings)

    def read(self, env: Environment) -> ScopeSnapshot:
        snap = ScopeSnapshot(t=env.clock.now())
        for name, template in self.context.protected_probes.items():
            try:
                cmd = render(template, {"context": self.context.template_vars()})
            except Missing as m:
                snap.errors[f"probe:{name}"] = f"template needs ${{{m.args[0]}}}"
                continue
            res = env.run(cmd)
            if res.ok:
                snap.values[f"probe:{name}"] = res.stdout.strip()
            else:
                snap.errors[f"probe:{name}"] = f"exit {res.exit_code}: {(res.stderr or res.stdout).strip()[:200]}"
        for key in self.context.protected_settings:
            try:
                v = self.reader.read_effective(env, _setting_key(key))
            except Exception as e:  # noqa: BLE001 - unreadable protected state is reported, not fatal
                snap.errors[key] = f"{type(e).__name__}: {e}"
                continue
            if v is None and self.reader.entry_for(_setting_key(key)) is None:
                snap.errors[key] = "no persistence catalogue entry to read it with"
            else:
                snap.values[key] = v
        return snap

    def take_baseline(self, env: Environment, journal: Any = None) -> ScopeSnapshot:
        """The first-step snapshot; read twice so output that moves on its own is marked volatile."""
        first = self.read(env)
        second = self.read(env)
        first.volatile = {k for k in first.values if second.values.get(k) != first.values[k]}
        first.after_seq = len(journal.executed()) if journal is not None else 0
        # Settings the guard snapshotted before a change that ran ahead of the baseline: their prior value wins.
        seen: set[str] = set()
        for rec in _snapshots(journal):
            key = rec.get("key")
            if key in self.context.protected_settings and not rec.get("scope") and key not in seen:
                seen.add(key)  # the earliest capture is the state before the first change
                hit = self.reader.entry_for(_setting_key(key))
                first.values[key] = normalize(rec.get("before"), hit[0].normalize) if hit else rec.get("before")
                first.errors.pop(key, None)
        self.snapshot_at_start = first
        return first

    def rollback_for(self, item: str, before: Any, journal: Any) -> str | None:
        if item.startswith("probe:"):
            return None
        value = before
        for rec in _snapshots(journal):
            if rec.get("key") == item and not rec.get("scope"):
                value = rec.get("before")
                break  # the earliest capture is the state before the first change
        ck = ChangedKey(key=item, scope={}, value=value, layer="none", target={})
        hit = self.reader.entry_for(ck)
        if hit is None:
            return None
        try:
            vs = self.reader.variables(hit[0], hit[1], ck, value=value)
            return " ".join(render(hit[0].durable, vs).split())
        except Missing:
            return None

    def _check(self, env: Environment, journal: Any, criteria: Any) -> Verdict:
        items = self.items()
        if not items:
            return Verdict(VerdictStatus.PASS, self.name, message="the context names no protected state")
        base = self.snapshot_at_start
        if base is None:
            if mutations(journal):
                return Verdict(VerdictStatus.INCONCLUSIVE, self.name, message=(
                    "no first-step snapshot of protected state was taken (run ScopeAudit.baseline_step as a step "
                    "check); cannot tell what changed"))
            base = self.take_baseline(env, journal)  # nothing has changed yet, so now is the first step
        now = self.read(env)
        moved = diff(base, now)
        ev = {"baseline": base.to_dict(), "now": now.to_dict(), "changed": moved}
        if moved:
            for m in moved:
                m["rollback"] = self.rollback_for(m["item"], m["before"], journal)
            lines = [f"{m['item']}: {m['before']!r} -> {m['after']!r}"
                     + (f" (roll back: {m['rollback']})" if m["rollback"] else "") for m in moved]
            return Verdict(VerdictStatus.FAIL, self.name, FeedbackCode.SCOPE_DRIFT,
                           "protected state changed since the first step: " + "; ".join(lines)
                           + ". Restore it; the incident forbids these changes.", ev)
        lost = [k for k in base.values if k in now.errors]
        if lost:
            return Verdict(VerdictStatus.ERROR, self.name, message=(
                "protected state could not be re-read: " + "; ".join(f"{k}: {now.errors[k]}" for k in lost)),
                evidence=ev)
        unread = sorted(set(base.errors))
        if unread:
            return Verdict(VerdictStatus.INCONCLUSIVE, self.name, message=(
                f"no protected state moved, but {', '.join(unread)} could not be read"), evidence=ev)
        return Verdict(VerdictStatus.PASS, self.name, evidence=ev,
                       message=f"{len(base.values) - len(base.volatile)} protected item(s) unchanged")


class _BaselineStep(VerifierBase):
    """The step check that takes the scope audit's snapshot once, on the first step."""

    name = "scope_baseline"

    def __init__(self, audit: ScopeAudit):
        self.audit = audit

    def _check(self, env: Environment, journal: Any, criteria: Any) -> Verdict:
        if self.audit.snapshot_at_start is None and self.audit.items():
            snap = self.audit.take_baseline(env, journal)
            return Verdict(VerdictStatus.PASS, self.name, message="protected state snapshotted",
                           evidence=snap.to_dict())
        return Verdict(VerdictStatus.PASS, self.name, message="snapshot already taken")


def _snapshots(journal: Any) -> list[Mapping[str, Any]]:
    if journal is None:
        return []
    return [r for r in journal.records() if r.get("kind") == "snapshot"]

