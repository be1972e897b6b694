"""The bench's time estimate: how long the episodes still to run will take, from the ones this run has finished.

Called by `guardrail bench` (arena/cli.py) for its progress bar and its plain progress lines. A count of episodes
per second misleads twice: rows kept from an earlier run (`--resume`) arrive at once and took no time here, and
the plan's episodes do not cost the same (a scenario's episodes run ten times longer than another's, a guarded
one longer than an unguarded one) nor finish in the plan's order. So each finished episode's own `wall_s` is
kept per group (scenario, agent, arm); what is left costs, per group, its episodes still to run times the group's
mean (the scenario's mean, then the run's, for a group not seen yet); and that work is converted into wall time by
this run's own ratio of elapsed time to episode time run (the workers' parallelism, the pool's overhead). The clock
is injected.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any, Callable, Iterable, Mapping

__all__ = ["BenchETA", "format_eta"]


def _group(scenario: str, agent: str, arm: str) -> tuple[str, str, str]:
    return (scenario, agent, arm)


class _Mean:
    __slots__ = ("total", "n")

    def __init__(self) -> None:
        self.total = 0.0
        self.n = 0

    def add(self, x: float) -> None:
        self.total += x
        self.n += 1

    def value(self) -> float | None:
        return self.total / self.n if self.n else None


class BenchETA:
    """Seconds left for a bench run, from the wall time of the episodes it has finished, weighted by what is left."""

    def __init__(self, episodes: Iterable[Any], *, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._left: Counter[tuple[str, str, str]] = Counter(_group(e.scenario, e.agent, e.arm) for e in episodes)
        self._by_group: dict[tuple[str, str, str], _Mean] = {}
        self._by_scenario: dict[str, _Mean] = {}
        self._all = _Mean()
        self._start = clock()
        self._run_s = 0.0  # episode wall time of the episodes run in this invocation
        self._last: float | None = None  # when the last of them finished
        self._elapsed_at_last = 0.0
        self._lock = threading.Lock()  # the progress bar's refresh thread reads while the main thread records

    def _done(self, row: Mapping[str, Any]) -> float | None:
        g = _group(row["scenario"], row["agent"], row["arm"])
        if self._left[g] > 0:
            self._left[g] -= 1
        w = row.get("wall_s")
        if not isinstance(w, (int, float)) or w < 0:
            return None
        self._by_group.setdefault(g, _Mean()).add(float(w))
        self._by_scenario.setdefault(g[0], _Mean()).add(float(w))
        self._all.add(float(w))
        return float(w)

    def reused(self, row: Mapping[str, Any]) -> None:
        """A row kept from an earlier run: one episode fewer to run, and what it cost; no time spent here."""
        with self._lock:
            self._done(row)

    def ran(self, row: Mapping[str, Any]) -> None:
        """An episode this run has just finished."""
        with self._lock:
            w = self._done(row)
            now = self._clock()
            if w is not None:
                self._run_s += w
            self._last = now
            self._elapsed_at_last = now - self._start

    def work_left_s(self) -> float | None:
        """Episode wall time still to run (summed over the episodes, as if one worker ran them), or None while no
        episode time is known."""
        overall = self._all.value()
        if overall is None:
            return None
        total = 0.0
        for g, n in self._left.items():
            if n:
                m = self._by_group.get(g) or self._by_scenario.get(g[0])
                total += n * (m.value() if m is not None else overall)
        return total

    def seconds_left(self) -> float | None:
        """Wall seconds until the last episode, or None until this run has finished an episode."""
        with self._lock:
            work = self.work_left_s()
            if work is None or self._last is None or self._run_s <= 0:
                return None
            rate = self._elapsed_at_last / self._run_s  # wall s per episode s, as this run has gone so far
            return max(0.0, work * rate - (self._clock() - self._last))


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA -:--:--"
    s = int(round(seconds))
    return f"ETA {s // 3600}:{s // 60 % 60:02}:{s % 60:02}"
