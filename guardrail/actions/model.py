"""The typed Action: what one shell command (or one part of it) does, in SRE terms.

Produced by `guardrail.actions.normalise(raw)`; consumed by the policy engine (as `input.action`), the journal,
and the verifiers (the keys an agent changed, and in which layer). Pure data, JSON-round-trippable.
"""

from __future__ import annotations

import enum
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Layer", "Target", "KeyChange", "Action", "Mutating", "UNKNOWN"]

UNKNOWN: Literal["unknown"] = "unknown"
# true, false, or "unknown" (opaque). Unknown is treated as mutating everywhere.
Mutating = Union[bool, Literal["unknown"]]


class Layer(str, enum.Enum):
    """Where a change lands. A restart drops `runtime` and `session` and re-reads `declared`."""

    RUNTIME = "runtime"  # CONFIG SET, SET GLOBAL, /admin/event toggles, PUT /admin/config before reload, exec edits
    DECLARED = "declared"  # Helm values, ConfigMaps, ALTER SYSTEM, ALTER ROLE, grants, durable DB rows
    SESSION = "session"  # SET SESSION / SET in one connection
    NONE = "none"  # reads, or no setting at all


class Target(BaseModel):
    """What an action acts on: a component (svc-channel, redis-queue, postgres) or a Kubernetes kind/name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str = ""  # component | pod | deployment | configmap | secret | role | database | file | url | ...
    name: str = ""
    namespace: str | None = None


class KeyChange(BaseModel):
    """One setting the action touches, with its new value when the command states it.

    `key` is dotted and tool-qualified: `redis.maxmemory`, `mariadb.max_user_connections`,
    `postgres.statement_timeout`, `app.roles.channel.db.pool_size`, `event.read_consistency_strict`,
    `helm.<values path>`, `k8s.env.<NAME>`, `file:/etc/redis/redis.conf`, `grant.DELETE`. `scope` narrows it
    (role, database, user, component).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    value: Any = None
    scope: dict[str, str] = Field(default_factory=dict)


class Action(BaseModel):
    """One typed action. `details` holds classifier-specific facts the policies read (sql kind, grantee, ...)."""

    model_config = ConfigDict(extra="forbid")

    tool: str  # kubectl | helm | psql | mysql | redis-cli | curl | restart-svc.sh | file | shell | sleep | declare
    verb: str  # get, exec, scale, "config set", "alter role", "PUT", "write", ...
    target: Target = Field(default_factory=Target)
    keys: list[KeyChange] = Field(default_factory=list)
    layer: Layer = Layer.NONE
    mutating: Mutating = UNKNOWN
    raw: str = ""
    # The words of its invocation as the program receives them: parsed, quotes and escapes removed (`'NOSAVE'`,
    # `NOS\AVE` and `"-A"` are NOSAVE and -A). Rules that match text match these, never the raw text.
    words: list[str] = Field(default_factory=list)
    via: list[str] = Field(default_factory=list)  # wrappers it was found inside: "bash -c", "kubectl exec", ...
    opaque_reason: str | None = None  # why its content cannot be known before it runs
    details: dict[str, Any] = Field(default_factory=dict)

    @property
    def is_mutating(self) -> bool:
        """Unknown counts as mutating."""
        return self.mutating is not False

    def to_input(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
