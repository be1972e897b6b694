"""The twin's virtual clock: the `Clock` of the Environment seam, in simulated seconds.

Sits under `arena.twin.world.World`, which owns one. `sleep(n)` does not wait: it asks the world to simulate the
next n seconds (load, components, events) and returns when virtual time has reached them. The guard's waits, the
agent's think time and a command's own duration all go through here, so nothing in the twin ever blocks.
"""

from __future__ import annotations

from typing import Callable

__all__ = ["VirtualClock"]


class VirtualClock:
    """Virtual seconds; `sleep` simulates the world forward instead of blocking."""

    def __init__(self, start: float = 0.0, advance: Callable[[float], None] | None = None):
        self._now = float(start)
        self._advance = advance

    def bind(self, advance: Callable[[float], None]) -> None:
        """Attach the world's simulator: advance(t) must run the world up to t and then call `set`."""
        self._advance = advance

    def now(self) -> float:
        return self._now

    def set(self, t: float) -> None:
        if t < self._now - 1e-9:
            raise ValueError(f"virtual time cannot go back: {t} < {self._now}")
        self._now = float(t)

    def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        target = self._now + float(seconds)
        if self._advance is None:
            self._now = target
        else:
            self._advance(target)
