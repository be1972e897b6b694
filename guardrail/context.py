"""The public incident context: everything the guard, the policies and the verifiers may know of an incident.

This is the `public` part of a scenario (and what a production user writes for their own system). The grader
part of a scenario never reaches this model: it has no field for it, and `extra="forbid"` rejects one.
Policies read it as `input.context`.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from guardrail.errors import InputError
from guardrail.policy.exceptions import exception_problem
from guardrail.policy.loader import shipped_rule_ids
from guardrail.yamlio import line_of, read_data, validate

__all__ = ["SLO", "Constraint", "ProtectedData", "Safeguards", "IncidentContext", "load_context", "KEEP_MEANINGS"]


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
    # floor: a key that must not go below `value` ("pool_timeout_s not below 1")
    kind: Literal["keep_enabled", "keep_active", "no_restart", "no_restart_masking", "ceiling", "floor", "finite",
                  "protected", "keep_denied", "note"] = "note"
    targets: list[str] = Field(default_factory=list)
    value: Any = None

    @field_validator("value")
    @classmethod
    def _finite_value(cls, v: Any) -> Any:
        return _finite(v)


# What "keep this data" forbids: delete (DELETE, a partition detached), hide (an UPDATE that marks rows deleted,
# hidden or archived: `SET deleted_at = now()`), truncate (TRUNCATE, which SRE-DATA-003 refuses everywhere),
# overwrite (any UPDATE or upsert of its rows: for records such as a history, where repairing in place is rewriting).
KEEP_MEANINGS = ("delete", "hide", "truncate", "overwrite")
KeepMeaning = Literal["delete", "hide", "truncate", "overwrite"]


class ProtectedData(BaseModel):
    """Data an incident says to keep: a table (`name`), or everything a store holds (`component` alone)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    component: str | None = None
    keep: list[KeepMeaning] = Field(default_factory=lambda: ["delete", "hide", "truncate"])
    text: str = ""

    @field_validator("name")
    @classmethod
    def _a_table(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z_][\w$]*(\.[A-Za-z_][\w$]*)?", v):
            raise ValueError(f"{v!r} is not a table name (name or schema.name); a whole store is `component:` alone")
        return v

    @model_validator(mode="after")
    def _names_something(self) -> "ProtectedData":
        if self.name is None and self.component is None:
            raise ValueError("names nothing: give the table (`name`) or the store (`component`)")
        if not self.keep:
            raise ValueError("keep is empty: say what keeping it forbids (delete, hide, truncate, overwrite)")
        return self


class Safeguards(BaseModel):
    """Safeguard categories the incident keeps (verifiers/safeguards.yaml; `all` is every category)."""

    model_config = ConfigDict(extra="forbid")

    # "do not disable safeguards": no setting of these categories switched off (SRE-SAFE-008)
    keep_on: list[str] = Field(default_factory=list)
    # "leave (unrelated) safeguards alone": no setting of these categories changed at all (SRE-SAFE-009)
    unchanged: list[str] = Field(default_factory=list)
    text: str = ""


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
    # Settings the incident is about (key globs as in KeyChange.key, e.g. redis.maxmemory-policy): moving one of
    # them off its baseline needs no further reason in the scope audit's "changes beyond the incident".
    expected_changes: list[str] = Field(default_factory=list)
    # Capacity ceilings the runbook states (the peer budget), key -> max value.
    ceilings: dict[str, float] = Field(default_factory=dict)
    # Floors the runbook states ("pool_timeout_s not below 1"), key -> min value.
    floors: dict[str, float] = Field(default_factory=dict)
    # Components to leave alone: every key set on them, every restart, every other write (SRE-SCOPE-007).
    protected_components: list[str] = Field(default_factory=list)
    # Data to keep, and what keeping it forbids.
    protected_data: list[ProtectedData] = Field(default_factory=list)
    # Safeguard categories to keep on or leave unchanged.
    safeguards: Safeguards = Field(default_factory=Safeguards)
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
    data, node, _ = read_data(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError("expected a mapping at the top level", path=str(path), line=1)
    prefix: tuple[Any, ...] = ("public",) if "public" in data else ()
    ctx = validate(IncidentContext, data["public"] if prefix else data, path=path, node=node, loc_prefix=prefix)
    check_names(ctx, path=path, node=node, loc_prefix=prefix)
    return ctx


def check_names(ctx: IncidentContext, *, path: str | Path, node: Any = None, loc_prefix: tuple[Any, ...] = (),
                error: type[InputError] = InputError) -> None:
    """Refuse an entry the guard cannot recognise (a key it never writes, a component the context does not list,
    a safeguard category it has no library for): such an entry protects nothing and would be accepted silently.
    The error names the file, the entry's line and the nearest names the guard does use."""
    from guardrail.context_names import problems

    for loc, message in problems(ctx):
        raise error(f"{'.'.join(str(x) for x in loc_prefix + loc)}: {message}", path=str(path),
                    line=line_of(node, loc_prefix + loc))
