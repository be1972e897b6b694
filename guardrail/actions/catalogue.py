"""The tool catalogue: which commands only read, kubectl verbs and kinds, redis command classes, and the settings
with several spellings and their one canonical key (catalogue.yaml; `guardrail.actions.settings` applies those).

Loaded once, validated with pydantic (bad data fails with file and line, as every data file here does), and
read by the classifiers in `guardrail.actions.classifiers`. Anything the catalogue does not list is unknown.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
import re
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from guardrail.actions.model import Layer
from guardrail.yamlio import load_model

__all__ = ["Catalogue", "VerbRule", "Setting", "SettingWrite", "catalogue", "CATALOGUE_PATH"]

CATALOGUE_PATH = Path(__file__).with_name("catalogue.yaml")


class VerbRule(BaseModel):
    """Whether a verb mutates, and which layer its change lands in."""

    model_config = ConfigDict(extra="forbid")

    mutating: Union[bool, Literal["unknown"]]
    layer: Layer = Layer.NONE


class KubectlCatalogue(BaseModel):
    """kubectl verbs, rollout sub-verbs and resource kind names."""

    model_config = ConfigDict(extra="forbid")

    verbs: dict[str, VerbRule]
    rollout: dict[str, VerbRule]
    kinds: dict[str, str]


class RedisCatalogue(BaseModel):
    """redis-cli commands by what they do."""

    model_config = ConfigDict(extra="forbid")

    read: list[str]
    destructive: list[str]
    server: list[str]
    data: list[str]
    opaque: list[str]

    def kind_of(self, command: str) -> str | None:
        """read | destructive | server | data | opaque, for "GET" or "CONFIG GET"; None when not listed."""
        table = _redis_table(self)
        return table.get(command.upper())


class SettingWrite(BaseModel):
    """One spelling of a change to a setting: which classifier's raw key it is, and where it lands."""

    model_config = ConfigDict(extra="forbid")

    via: str
    tool: list[str]
    api: str | None = None
    key: str
    target: str | None = None
    document: Literal["yaml", "conf", "ini"] | None = None
    leaf: str | None = None
    bind: dict[str, str] = Field(default_factory=dict)
    layer: Layer | None = None
    keep_raw: bool = False
    example: str

    @field_validator("key", "target", "leaf")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None:
            re.compile(v)
        return v

    @model_validator(mode="after")
    def _leaf_with_document(self) -> "SettingWrite":
        if (self.document is None) != (self.leaf is None):
            raise ValueError("a write names a `document` and its `leaf` together, or neither")
        return self


class SettingExpectation(BaseModel):
    """What every example write of a setting comes to."""

    model_config = ConfigDict(extra="forbid")

    key: str
    scope: dict[str, str] = Field(default_factory=dict)
    value: Any = None


class Setting(BaseModel):
    """A setting with several spellings, its canonical key template and scope."""

    model_config = ConfigDict(extra="forbid")

    id: str
    description: str = ""
    key: str
    scope: list[str] = Field(default_factory=list)
    expect: SettingExpectation
    writes: list[SettingWrite]

    @model_validator(mode="after")
    def _groups_named(self) -> "Setting":
        wanted = set(re.findall(r"\{(\w+)\}", self.key)) | set(self.scope)
        for w in self.writes:
            have = {"component"} | set(w.bind) | set(re.compile(w.key).groupindex) \
                | set(re.compile(w.target).groupindex if w.target else ()) \
                | set(re.compile(w.leaf).groupindex if w.leaf else ())
            # A scope value may also come from the raw key's own scope (kubectl's workload name).
            missing = {g for g in wanted - have if g not in self.scope}
            if missing:
                raise ValueError(f"setting {self.id}: the write {w.via!r} has no group for {sorted(missing)}")
        return self


class Catalogue(BaseModel):
    """Everything in catalogue.yaml."""

    model_config = ConfigDict(extra="forbid")

    read_only: list[str]
    programmable: list[str] = Field(default_factory=list)
    kubectl: KubectlCatalogue
    redis: RedisCatalogue
    settings: list[Setting] = Field(default_factory=list)


_TABLES: dict[int, dict[str, str]] = {}


def _redis_table(r: RedisCatalogue) -> dict[str, str]:
    t = _TABLES.get(id(r))
    if t is None:
        t = {}
        for kind in ("read", "destructive", "server", "data", "opaque"):
            for c in getattr(r, kind):
                t[c.upper()] = kind
        _TABLES[id(r)] = t
    return t


@lru_cache(maxsize=1)
def catalogue() -> Catalogue:
    return load_model(Catalogue, CATALOGUE_PATH)
