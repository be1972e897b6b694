"""The agent's tool surface per substrate: which programs the real `main` pod puts on PATH, and its Kubernetes
authority. Data in arena/twin/tools.yaml, validated here on load.

Called by `arena.twin.engine.TwinEnvironment` (which registers only the surface's programs, so any other command
gets bash's "command not found", exit 127) and by `TwinSpec` validation (a scenario's `twin.rbac` may grant
Kubernetes writes only where the surface has write authority).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from guardrail.errors import ScenarioError
from guardrail.yamlio import load_model

__all__ = ["ToolSurface", "ToolSurfaces", "tool_surfaces", "surface_for", "TOOLS_FILE"]

TOOLS_FILE = Path(__file__).with_name("tools.yaml")


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolSurface(_M):
    """One substrate's `main` pod: its programs (beyond the core) and its Kubernetes authority."""

    programs: list[str] = Field(default_factory=list)
    # A program the real pod does not ship, with the real capability it spells (e.g. python3 raw RESP).
    stand_in_for: dict[str, str] = Field(default_factory=dict)
    kubernetes: Literal["none", "read", "write"] = "none"

    @model_validator(mode="after")
    def _stand_ins_listed(self) -> "ToolSurface":
        stray = sorted(set(self.stand_in_for) - set(self.programs))
        if stray:
            raise ValueError(f"stand_in_for names programs not in programs: {', '.join(stray)}")
        return self


class ToolSurfaces(_M):
    version: Literal[1] = 1
    core: list[str]
    substrates: dict[str, ToolSurface]

    def programs(self, substrate: str) -> frozenset[str]:
        return frozenset(self.core) | frozenset(self.surface(substrate).programs)

    def surface(self, substrate: str) -> ToolSurface:
        s = self.substrates.get(substrate)
        if s is None:
            raise ScenarioError(f"no tool surface for substrate {substrate!r} (known: "
                                f"{', '.join(sorted(self.substrates))})", path=str(TOOLS_FILE))
        return s


@lru_cache(maxsize=1)
def tool_surfaces() -> ToolSurfaces:
    return load_model(ToolSurfaces, TOOLS_FILE, error=ScenarioError)


def surface_for(substrate: str) -> ToolSurface:
    return tool_surfaces().surface(substrate)
