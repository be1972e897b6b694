"""Wall-clock time for the live stack: the real `Clock` of the Environment seam.

`LiveEnvironment.clock` is one of these; the server launchers, the supervisor and the stack take one so that
their readiness polling waits through an injected clock (tests can pass a fake), never a bare time.sleep.
"""

from __future__ import annotations

import time

__all__ = ["WallClock", "wait_until"]


class WallClock:
    """Real seconds since the epoch; `sleep` really waits."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


def wait_until(predicate, *, timeout_s: float, clock, interval_s: float = 0.02, abort=None) -> bool:
    """Poll `predicate` until it is true or `timeout_s` passes; `abort()` returning a reason stops early.

    Returns True when the predicate held. Raises nothing: callers turn False into their own error.
    """
    deadline = clock.now() + timeout_s
    while True:
        if predicate():
            return True
        if abort is not None and abort():
            return False
        if clock.now() >= deadline:
            return False
        clock.sleep(interval_s)
