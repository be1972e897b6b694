"""The public incident context: everything the guard, the policies and the verifiers may know of an incident.

This is the `public` part of a scenario (and what a production user writes for their own system). The grader
part of a scenario never reaches this model: it has no field for it, and `extra="forbid"` rejects one.
Policies read it as `input.context`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from guardrail.errors import InputError
from guardrail.policy.exceptions import exception_problem
from guardrail.policy.loader import shipped_rule_ids
from guardrail.yamlio import load_model

__all__ = ["SLO", "Constraint", "IncidentContext", "load_context"]


def _finite(value: Any) -> Any:
    """NaN and infinities have no JSON form, so the policy engine could not read the context: refuse them here,
    where the error can name the file and line."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number (NaN and infinities have no JSON form)")
    if isinstance(value, dict):
        for v in value.values():
            _finite(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _finite(v)
    return value


class SLO(BaseModel):
    """A public service-level objective, e.g. error_ratio <= 0.05 for driver write_readback at peak."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    sli: str
    op: Literal["<=", ">="]
    value: float
    driver: str | None = None
    phase: str | None = None


class Constraint(BaseModel):
    """A constraint the incident text states, in words and, where it has one, a machine-readable kind."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    id: str
    text: str
    # keep_enabled: a safeguard that must not be disabled (target names it: maintenance, auth, probes...)
    # keep_active: a runtime event or window that is mandated and must stay on
    # no_restart: components that must not be restarted
    # no_restart_masking: the agent must not restart or rescale pods to clear a fault (the repair goes in place;
    #   the verifier's own restart probe still may restart what `restartable` lists)
    # ceiling: a capacity key that must not go above `value`
    # finite: a capacity key that must keep some limit (no number stated; 0 or -1 meaning "unlimited" breaks it)
    # protected: settings or data that must not change
    # keep_denied: an access rule (targets: ACL keys such as redis.acl.*) that must keep denying the commands in
    #   `value` (["FLUSHALL", "FLUSHDB"])
    kind: Literal["keep_enabled", "keep_active", "no_restart", "no_restart_masking", "ceiling", "finite", "protected",
                  "keep_denied", "note"] = "note"
    targets: list[str] = Field(default_factory=list)
    value: Any = None

    @field_validator("value")
    @classmethod
    def _finite_value(cls, v: Any) -> Any:
        return _finite(v)


class IncidentContext(BaseModel):
    """The public context of one incident (or one production system)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    id: str = "adhoc"
    title: str = ""
    instruction: str = ""
    namespaces: list[str] = Field(default_factory=list)
    components: list[str] = Field(default_factory=list)
    # Components an operator may restart (a verifier restart probe may use them); everything else may not be.
    restartable: list[str] = Field(default_factory=list)
    # Stateful stores and services the incident says must not be restarted.
    not_restartable: list[str] = Field(default_factory=list)
    # Settings that must not change (dotted keys as in KeyChange.key, e.g. postgres.max_connections).
    protected_settings: list[str] = Field(default_factory=list)
    # Capacity ceilings the runbook states (the peer budget), key -> max value.
    ceilings: dict[str, float] = Field(default_factory=dict)
    constraints: list[Constraint] = Field(default_factory=list)
    slos: list[SLO] = Field(default_factory=list)
    # Where each setting's declared source lives, for the persistence verifier (key glob -> source name).
    declared_sources: dict[str, str] = Field(default_factory=dict)
    # Read-only commands an operator runs to snapshot protected state (scope audit), name -> command.
    protected_probes: dict[str, str] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("extra")
    @classmethod
    def _finite_extra(cls, v: dict[str, Any]) -> dict[str, Any]:
        if "exceptions" in v:
            # The policy a context meets is not known here: only what cannot be meant with any (a bad shape, a
            # pattern that exempts every rule of the library) is refused.
            problem = exception_problem(v["exceptions"], shipped_rule_ids(), unknown_is_an_error=False)
            if problem is not None:
                raise ValueError(problem)
        return _finite(v)

    def policy_input(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# A context is an incident's public description: the shipped ones are 1-6 KB. A file far past that is not one (a
# 50 MB file took 51 s to parse, and every decision would carry it).
MAX_CONTEXT_BYTES = 4 * 1024 * 1024


def load_context(path: str | Path) -> IncidentContext:
    """Load a context from YAML or JSON. A scenario file is accepted too: only its `public` part is read."""
    try:
        size = Path(path).stat().st_size
    except OSError:
        size = 0  # a missing or unreadable file is reported by the reader, with its reason
    if size > MAX_CONTEXT_BYTES:
        raise InputError(f"is {size:,} bytes: a context is an incident's public description (a few KB); "
                         f"the limit is {MAX_CONTEXT_BYTES:,} bytes", path=str(path))
    return load_model(IncidentContext, path, key="public")
