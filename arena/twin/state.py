"""Layered state: how a setting's effective value comes from its declared, runtime and session layers.

Used by every twin component (arena/twin/slack, frappe, saleor). The rule that makes ephemeral repairs fail as in
production lives here once: a component restart drops the runtime layer and re-reads the declared one from its
`DeclaredStore` (a ConfigMap, Helm values, the PostgreSQL catalog, a durable DB row...). Pooled connections keep
what they inherited at connect time (`SessionCohorts`), so a declared change reaches only new sessions.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Iterator

__all__ = ["UNSET", "Layered", "SettingTable", "DeclaredStore", "Cohort", "SessionCohorts"]


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Any = _Unset()


class Layered:
    """One setting: a declared value (durable) and an optional runtime override (process memory)."""

    __slots__ = ("declared", "runtime")

    def __init__(self, declared: Any = UNSET, runtime: Any = UNSET):
        self.declared = declared
        self.runtime = runtime

    @property
    def effective(self) -> Any:
        return self.declared if self.runtime is UNSET else self.runtime

    @property
    def layer(self) -> str:
        return "runtime" if self.runtime is not UNSET else "declared"

    def __repr__(self) -> str:
        return f"Layered(declared={self.declared!r}, runtime={self.runtime!r})"


class SettingTable:
    """A component's settings by key. `boot` re-reads declared values and drops every runtime override."""

    def __init__(self) -> None:
        self._s: dict[str, Layered] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._s

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._s))

    def layered(self, key: str) -> Layered:
        return self._s.setdefault(key, Layered())

    def get(self, key: str, default: Any = None) -> Any:
        s = self._s.get(key)
        if s is None:
            return default
        v = s.effective
        return default if v is UNSET else v

    def declare(self, key: str, value: Any) -> None:
        self.layered(key).declared = value

    def set_runtime(self, key: str, value: Any) -> None:
        self.layered(key).runtime = value

    def drop_runtime(self) -> None:
        for s in self._s.values():
            s.runtime = UNSET

    def effective(self) -> dict[str, Any]:
        return {k: s.effective for k, s in sorted(self._s.items()) if s.effective is not UNSET}

    def declared(self) -> dict[str, Any]:
        return {k: s.declared for k, s in sorted(self._s.items()) if s.declared is not UNSET}


class DeclaredStore:
    """A durable source a component reads at boot (ConfigMap, Helm values, catalog, config file, DB row).

    It survives every component restart. Paths are dotted: `roles.channel.db.pool_size`.
    """

    def __init__(self, name: str, data: dict[str, Any] | None = None, *, file_key: str | None = None):
        self.name = name
        self.data: dict[str, Any] = copy.deepcopy(data or {})
        self.writes = 0
        # A ConfigMap that holds one file (kubectl shows `data: {file_key: <the document as YAML>}`).
        self.file_key = file_key

    def get(self, path: str, default: Any = None) -> Any:
        node: Any = self.data
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return copy.deepcopy(node)

    def peek(self, path: str, default: Any = None) -> Any:
        """Like `get` without the copy, for hot read paths. The caller must not mutate what it gets."""
        node: Any = self.data
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def set(self, path: str, value: Any) -> None:
        parts = path.split(".")
        node = self.data
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = copy.deepcopy(value)
        self.writes += 1

    def delete(self, path: str) -> None:
        parts = path.split(".")
        node: Any = self.data
        for part in parts[:-1]:
            node = node.get(part, {})
        if isinstance(node, dict):
            node.pop(parts[-1], None)
            self.writes += 1

    def flat(self, prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}

        def walk(node: Any, path: str) -> None:
            if isinstance(node, dict) and node:
                for k in sorted(node):
                    walk(node[k], f"{path}.{k}" if path else str(k))
            else:
                out[f"{prefix}{path}"] = node

        walk(self.data, "")
        return out


@dataclass
class Cohort:
    """Connections that opened at the same time and so inherited the same session settings."""

    count: int
    inherited: dict[str, Any] = field(default_factory=dict)
    opened_at: float = 0.0


class SessionCohorts:
    """A pool's live connections grouped by what they inherited at connect time (the session layer)."""

    def __init__(self) -> None:
        self.cohorts: list[Cohort] = []

    @property
    def size(self) -> int:
        return sum(c.count for c in self.cohorts)

    def open(self, n: int, inherited: dict[str, Any], now: float) -> None:
        if n <= 0:
            return
        for c in self.cohorts:
            if c.inherited == inherited:
                c.count += n
                return
        self.cohorts.append(Cohort(n, dict(inherited), now))

    def close(self, n: int) -> None:
        """Close the n oldest connections (pools recycle the oldest first)."""
        while n > 0 and self.cohorts:
            c = self.cohorts[0]
            k = min(n, c.count)
            c.count -= k
            n -= k
            if c.count == 0:
                self.cohorts.pop(0)

    def terminate(self, match: dict[str, Any] | None = None) -> int:
        """pg_terminate_backend on the matching cohorts (all when no match). Returns how many were closed."""
        gone = 0
        keep = []
        for c in self.cohorts:
            if match is None or all(c.inherited.get(k) == v for k, v in match.items()):
                gone += c.count
            else:
                keep.append(c)
        self.cohorts = keep
        return gone

    def share(self, key: str, value: Any) -> float:
        """The fraction of live connections whose inherited `key` equals `value`."""
        total = self.size
        if total == 0:
            return 0.0
        return sum(c.count for c in self.cohorts if c.inherited.get(key) == value) / total
