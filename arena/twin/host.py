"""What the operator shell's generic programs read of the twin: its shell, world, clock and the agent's RBAC.

`arena.twin.engine.TwinEnvironment` is one; `arena.twin.programs` types its handlers against this protocol, so
the programs module sits below the engine that installs them instead of importing it back.
"""

from __future__ import annotations

from typing import Protocol

from arena.twin.clock import VirtualClock
from arena.twin.shell import Shell
from arena.twin.world import World

__all__ = ["TwinHost"]


class TwinHost(Protocol):
    """The twin as its shell programs see it."""

    world: World
    shell: Shell

    @property
    def clock(self) -> VirtualClock: ...

    def rbac_allows(self, verb: str) -> bool: ...
