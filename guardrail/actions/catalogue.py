"""The tool catalogue: which commands only read, kubectl verbs and kinds, redis command classes (catalogue.yaml).

Loaded once, validated with pydantic (bad data fails with file and line, as every data file here does), and
read by the classifiers in `guardrail.actions.classifiers`. Anything the catalogue does not list is unknown.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from guardrail.actions.model import Layer
from guardrail.yamlio import load_model

__all__ = ["Catalogue", "VerbRule", "catalogue", "CATALOGUE_PATH"]

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


class Catalogue(BaseModel):
    """Everything in catalogue.yaml."""

    model_config = ConfigDict(extra="forbid")

    read_only: list[str]
    programmable: list[str] = Field(default_factory=list)
    kubectl: KubectlCatalogue
    redis: RedisCatalogue


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
