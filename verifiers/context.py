"""The public incident context as the verifiers read it, without importing guardrail.

The guard passes `IncidentContext.model_dump()` (a plain mapping); `PublicContext.of()` turns that, or anything
with `model_dump()`, into the few read-only fields the verifiers use. The grader part of a scenario has no field
here, and `of()` refuses a mapping that carries one, so a verifier cannot be handed the answer key by mistake.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["SLOSpec", "PublicContext"]


@dataclass(frozen=True)
class SLOSpec:
    """One public SLO: `sli op value`, optionally for one driver and one load phase."""

    sli: str
    op: str
    value: float
    driver: str | None = None
    phase: str | None = None


@dataclass(frozen=True)
class PublicContext:
    """The read-only view of the public context that verifiers use."""

    id: str = "adhoc"
    namespaces: tuple[str, ...] = ()
    components: tuple[str, ...] = ()
    restartable: tuple[str, ...] = ()
    not_restartable: tuple[str, ...] = ()
    protected_settings: tuple[str, ...] = ()
    slos: tuple[SLOSpec, ...] = ()
    declared_sources: Mapping[str, str] = field(default_factory=dict)
    protected_probes: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, context: Any) -> "PublicContext":
        if isinstance(context, PublicContext):
            return context
        if context is None:
            return cls()
        if hasattr(context, "model_dump"):
            context = context.model_dump(mode="json")
        if not isinstance(context, Mapping):
            raise TypeError(f"expected a context mapping, got {type(context).__name__}")
        if "grader" in context:
            # Honesty rule 1: the verifiers see the public part only.
            raise ValueError("a verifier context must be the public part only; it has a 'grader' key")
        # A component to leave alone is not restarted either, not even by the restart probe.
        forbidden = set(context.get("not_restartable") or ()) | set(context.get("protected_components") or ())
        for c in context.get("constraints") or ():
            if isinstance(c, Mapping) and c.get("kind") == "no_restart":
                forbidden.update(c.get("targets") or ())
        slos = tuple(
            SLOSpec(sli=s["sli"], op=s["op"], value=float(s["value"]), driver=s.get("driver"), phase=s.get("phase"))
            for s in context.get("slos") or ()
        )
        return cls(
            id=str(context.get("id", "adhoc")),
            namespaces=tuple(context.get("namespaces") or ()),
            components=tuple(context.get("components") or ()),
            restartable=tuple(context.get("restartable") or ()),
            not_restartable=tuple(sorted(forbidden)),
            protected_settings=tuple(context.get("protected_settings") or ()),
            slos=slos,
            declared_sources=dict(context.get("declared_sources") or {}),
            protected_probes=dict(context.get("protected_probes") or {}),
            extra=dict(context.get("extra") or {}),
            raw=dict(context),
        )

    @property
    def namespace(self) -> str:
        return self.namespaces[0] if self.namespaces else "default"

    def may_restart(self, component: str) -> bool:
        """Only what the context lists as restartable, and never what it forbids."""
        return component in self.restartable and component not in self.not_restartable

    def template_vars(self) -> dict[str, Any]:
        """What catalogue and probe templates may name as `{context.<field>}`."""
        return {"id": self.id, "namespace": self.namespace, "namespaces": list(self.namespaces),
                "components": list(self.components), "extra": dict(self.extra)}
