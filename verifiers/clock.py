"""The real clock adapter: wall-clock seconds (the epoch, as Prometheus timestamps are) and a real sleep.

Library code never sleeps by itself: it waits through an injected `Clock` (verifiers.protocols.Clock). The twin
brings a virtual clock; a live or Kubernetes environment, and the Prometheus integration test, use this one.
This is the one place in the verifiers that calls `time.sleep`.
"""

from __future__ import annotations

import time

__all__ = ["RealClock"]


class RealClock:
    """Wall-clock time in epoch seconds, and a real sleep."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)
