"""Python's cyclic garbage collector in the guard's long-lived servers (`guardrail shell`, `guardrail mcp`).

A server that decides every command of an agent holds tens of thousands of objects that are never garbage
(modules, the normaliser's classifiers, pydantic's schemas, the policy engines) and allocates a few hundred more
per decision, almost none in reference cycles (about 2 per decision). With the default thresholds (700, 10, 10)
every young collection and each older one traverses them again; while one runs, every session's thread waits
on the GIL. Under bench/guard_load.py at 400 decisions/s that put the p99 at 15-25 ms against a p50 of 1.5 ms.

`settle()` is called once a server has built its engines and sessions: it collects, freezes what exists (moved
to a generation the collector never scans), and collects the young generation every 50,000 allocations instead
of every 700. In the same bench the p99 went to 7-10 ms (docs/performance.md).
"""

from __future__ import annotations

import gc

__all__ = ["settle", "THRESHOLDS"]

THRESHOLDS = (50_000, 50, 1_000)


def settle(thresholds: tuple[int, int, int] = THRESHOLDS) -> None:
    """Collect once, freeze everything alive now, and collect less often from here on."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
