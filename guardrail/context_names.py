"""What a context's entries name, in the guard's own terms: the check on load and `guardrail context explain`.

`load_context` (guardrail/context.py) and the scenario loader call `problems()`: an entry the guard cannot
recognise (a setting key in no family the normaliser writes, such as `redis-queue.maxmemory` for the key the guard
names `redis.maxmemory`; a component the context does not list; a safeguard category the library lacks) protects
nothing, so it is refused with the nearest names. `explain()` says, for each entry, what it protects and which rule
or check enforces it; the CLI prints it (guardrail/cli/context.py).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Iterator

from guardrail.safeguards import ALL, safeguard_library

# `ctx` below is a guardrail.context.IncidentContext, read by attribute only: guardrail/context.py imports this
# module to check a context on load, so importing it back would make an import circle (tests/test_import_cycles.py).

__all__ = ["KEY_FAMILIES", "problems", "explain", "Entry"]

# The first segment of every key the action normaliser writes (policies/README.md, "Input"): a setting is named by
# its system (redis.maxmemory), never by the component it runs in. `grant` is how a context names privileges of
# any dialect (grant.*), `file:` a file in a container.
KEY_FAMILIES = ("app", "event", "maintenance", "helm", "k8s", "infra", "redis", "postgres", "pgbouncer", "mariadb",
                "mysql", "grant")


def _bare(name: str) -> str:
    return name.lower().removeprefix("svc-")


def _nearest(word: str, candidates: list[str], n: int = 3) -> list[str]:
    return difflib.get_close_matches(word, sorted(set(candidates)), n=n, cutoff=0.4)


def _hint(near: list[str]) -> str:
    return f" (nearest: {', '.join(near)})" if near else ""


def key_problem(pattern: str, components: tuple[str, ...]) -> str | None:
    """Why a setting key or key glob names nothing the guard writes (None: it is recognised)."""
    if pattern.startswith("file:/"):
        return None
    first = pattern.split(".", 1)[0]
    if (first in KEY_FAMILIES and "." in pattern) or pattern == "grant":
        return None
    rest = pattern.split(".", 1)[1] if "." in pattern else pattern
    # A component's name often holds its system's (redis-queue, svc-postgres): that family comes first.
    families = sorted(KEY_FAMILIES, key=lambda f: (f not in first.lower(), f))
    near = _nearest(pattern, [f"{f}.{rest}" for f in families]) or [f"{f}.{rest}" for f in families[:2]]
    why = f"{pattern!r} is not a setting key the guard writes: keys start with a system ({', '.join(KEY_FAMILIES)})"
    if _bare(first) in {_bare(c) for c in components}:
        why += (f"; {first} is a component (to protect every key and restart of it, list it under "
                "protected_components)")
    return why + _hint(near)


def component_problem(name: str, components: tuple[str, ...]) -> str | None:
    if not components or _bare(name) in {_bare(c) for c in components}:
        return None
    return f"{name!r} is not a component of this context (components: {', '.join(components)})" + \
        _hint(_nearest(name, list(components)))


def _is_key_like(target: str) -> bool:
    return "." in target or "*" in target or target.startswith("file:")


def problems(ctx: Any) -> list[tuple[tuple[Any, ...], str]]:
    """Each entry the guard cannot recognise, as (location in the context, message), in file order."""
    comps = tuple(ctx.components)
    out: list[tuple[tuple[Any, ...], str]] = []

    def key(loc: tuple[Any, ...], pattern: str) -> None:
        p = key_problem(pattern, comps)
        if p:
            out.append((loc, p))

    def comp(loc: tuple[Any, ...], name: str) -> None:
        p = component_problem(name, comps)
        if p:
            out.append((loc, p))

    for field_name in ("restartable", "not_restartable", "protected_components"):
        for i, c in enumerate(getattr(ctx, field_name)):
            comp((field_name, i), c)
    for field_name in ("protected_settings", "expected_changes"):
        for i, k in enumerate(getattr(ctx, field_name)):
            key((field_name, i), k)
    for field_name in ("ceilings", "floors"):
        for k in getattr(ctx, field_name):
            key((field_name, k), k)
    for i, d in enumerate(ctx.protected_data):
        if d.component is not None:
            comp(("protected_data", i, "component"), d.component)
    library = safeguard_library()
    for mode in ("keep_on", "unchanged"):
        for i, cat in enumerate(getattr(ctx.safeguards, mode)):
            if cat != ALL and cat not in library.categories:
                out.append((("safeguards", mode, i), f"{cat!r} is not a safeguard category (known: {ALL}, "
                            f"{', '.join(library.categories)})" + _hint(_nearest(cat, list(library.categories)))))
    for i, c in enumerate(ctx.constraints):
        for j, t in enumerate(c.targets):
            loc = ("constraints", i, "targets", j)
            if c.kind in ("ceiling", "floor", "finite"):
                key(loc, t)
            elif c.kind == "no_restart":
                comp(loc, t)
            elif c.kind == "protected" and _is_key_like(t) and ":" not in t:
                # A protected target is a key, a component, a table or `<component>.<chart path>` (SRE-HELM-002).
                first = t.split(".", 1)[0]
                if _bare(first) not in {_bare(x) for x in comps}:
                    key(loc, t)
        stated = ctx.ceilings if c.kind == "ceiling" else ctx.floors
        if c.kind in ("ceiling", "floor") and not isinstance(c.value, (int, float)) \
                and any(t not in stated for t in c.targets):
            out.append((("constraints", i, "value"), f"a {c.kind} constraint needs a number as its value (or its "
                        f"targets' values under `{c.kind}s`)"))
    return out


@dataclass
class Entry:
    """One entry of a context and what it protects, in the guard's terms."""

    field: str
    entry: str
    protects: str
    enforced_by: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "entry": self.entry, "protects": self.protects, "enforced_by": self.enforced_by}


_KEEP_RULES = {"delete": ("DELETE of its rows, a partition detached or exchanged out, its id sequence reset",
                          ["SRE-DATA-009", "SRE-DATA-016"]),
               "hide": ("an UPDATE that marks rows deleted, hidden or archived (SET deleted_at = now(), "
                        "is_deleted = true, status = 'deleted', visible = false)", ["SRE-DATA-017"]),
               "truncate": ("TRUNCATE (refused on every table)", ["SRE-DATA-003"]),
               "overwrite": ("any UPDATE or upsert of its rows", ["SRE-DATA-018"])}


def _settings_of(category: str, *, switchable_only: bool) -> str:
    cat = safeguard_library().categories[category]
    return ", ".join(s.key + (f" (off when {s.off_when})" if s.off_when else "") for s in cat.settings
                     if s.off_when or not switchable_only) or "none it can switch off"


def explain(ctx: Any) -> list[Entry]:
    """What each entry of the context protects, and what enforces it."""
    out: list[Entry] = []
    add = out.append
    for ns in ctx.namespaces:
        add(Entry("namespaces", ns, f"changes are allowed in namespace {ns} only", ["SRE-SCOPE-001"]))
    for c in ctx.restartable:
        add(Entry("restartable", c, f"{c} may be restarted (the restart probe may restart it to prove a repair "
                  "durable)", ["SRE-RESTART-002", "RestartProbe"]))
    for c in ctx.not_restartable:
        add(Entry("not_restartable", c, f"no restart of {c}: pod deletes, rollouts, SHUTDOWN, a signal to its "
                  "server, a chart change that rolls its pods", ["SRE-RESTART-001", "SRE-HELM-003"]))
    for c in ctx.protected_components:
        add(Entry("protected_components", c, f"everything of {c}: every setting key set on it (by any client, "
                  "helper or API), every restart, every other write (data, scaling)",
                  ["SRE-SCOPE-007", "SRE-RESTART-001"]))
    for k in ctx.protected_settings:
        add(Entry("protected_settings", k, f"setting key {k} (and keys under it) must not change, by any write "
                  "path; the scope audit re-reads it at the declaration", ["SRE-CAP-002", "SRE-HELM-002",
                                                                             "ScopeAudit"]))
    for k in ctx.expected_changes:
        add(Entry("expected_changes", k, f"setting key {k} is what the incident is about: moving it off its "
                  "baseline is not a change beyond the incident (other rules still apply)", ["ScopeAudit"]))
    for k, v in ctx.ceilings.items():
        add(Entry("ceilings", k, f"{k} <= {v:g} (0 or -1 read as unlimited where they mean it)", ["SRE-CAP-001"]))
    for k, v in ctx.floors.items():
        add(Entry("floors", k, f"{k} >= {v:g}", ["SRE-CAP-007"]))
    for d in ctx.protected_data:
        what = f"table {d.name}" + (f" on {d.component}" if d.component else "") if d.name else \
            f"everything {d.component} holds (its keys or rows)"
        forbids = "; ".join(f"no {m}: {_KEEP_RULES[m][0]}" for m in d.keep)
        rules = sorted({r for m in d.keep for r in _KEEP_RULES[m][1]})
        add(Entry("protected_data", d.name or d.component or "", f"{what}: {forbids}", rules))
    lib = safeguard_library()
    for mode, rule, verb in (("keep_on", "SRE-SAFE-008", "must not be switched off"),
                             ("unchanged", "SRE-SAFE-009", "must not change at all")):
        for cat in lib.expand(getattr(ctx.safeguards, mode)):
            settings = _settings_of(cat, switchable_only=mode == "keep_on")
            add(Entry(f"safeguards.{mode}", cat, f"{lib.categories[cat].text}: {verb}: {settings}", [rule]))
    by_kind = {"keep_enabled": ("a safeguard that must stay on", ["SRE-SAFE-001", "SRE-SAFE-004"]),
               "keep_active": ("a runtime event that must stay active", ["SRE-SAFE-006"]),
               "no_restart": ("no restart of these components", ["SRE-RESTART-001"]),
               "no_restart_masking": ("no pod restart or rescale by the agent to clear a fault", ["SRE-RESTART-005"]),
               "ceiling": ("a ceiling", ["SRE-CAP-001"]), "floor": ("a floor", ["SRE-CAP-007"]),
               "finite": ("a limit that must stay finite (no 0 or -1 meaning unlimited)", ["SRE-CAP-005"]),
               "protected": ("settings, components or data that must not change", ["SRE-CAP-002", "SRE-DATA-009",
                                                                                    "SRE-DATA-017"]),
               "keep_denied": ("an ACL that must keep denying these commands", ["SRE-ACCESS-001"]),
               "note": ("words only: no rule reads a note", [])}
    for c in ctx.constraints:
        what, rules = by_kind[c.kind]
        targets = ", ".join(c.targets) or "-"
        value = f" {c.value}" if c.value is not None else ""
        add(Entry(f"constraints.{c.kind}", c.id, f"{what}: {targets}{value} ({c.text})", rules))
    for name in ctx.protected_probes:
        add(Entry("protected_probes", name, "its output is snapshotted at the first step and compared at the "
                  "declaration", ["ScopeAudit"]))
    return out


def iter_lines(entries: list[Entry]) -> Iterator[str]:
    for e in entries:
        rules = f"  [{', '.join(e.enforced_by)}]" if e.enforced_by else "  [not enforced]"
        yield f"{e.field}: {e.entry}\n  {e.protects}\n{rules}"

