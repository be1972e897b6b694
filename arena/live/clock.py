"""Wall-clock time for the live stack: the real `Clock` of the Environment seam.

The live stack's environment runs on one of these; the server launchers, the supervisor and the stack take one so that
their readiness polling waits through an injected clock (tests can pass a fake), never a bare time.sleep.
"""

from __future__ import annotations

from verifiers.clock import RealClock as WallClock

__all__ = ["WallClock", "wait_until"]


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
