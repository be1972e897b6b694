"""Progress lines for a long live run: what is starting, each server up, each stage of the episode, and a line now
and then while one stage lasts.

Called by `guardrail run --env live` (arena/cli.py), which hands a `StageLog` writing to stderr to
`arena.live.world.run_live_episode`; the stack (arena.live.stack) and the episode call it with one line per step.
A stack coming up takes a minute or more and an episode's convergence waits run in real time: without these lines
the command printed nothing for 93 s. stdout (`--json -`) is not touched. The clock is injected; the heartbeat
thread only calls `tick()`, which tests call themselves.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

__all__ = ["StageLog"]


def _mmss(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60}:{s % 60:02}"


class StageLog:
    """Prints each stage as it begins and, while one lasts longer than `every_s`, that it is still going."""

    def __init__(self, write: Callable[[str], None], *, clock: Callable[[], float] = time.monotonic,
                 every_s: float = 30.0, prefix: str = "live"):
        self._write = write
        self._clock = clock
        self.every_s = every_s
        self.prefix = prefix
        self._start = clock()
        self._stage = ""
        self._stage_at = self._start
        self._last_line = self._start
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, text: str) -> None:
        """A new stage begins (`starting the servers`): said now, and again while it lasts."""
        with self._lock:
            now = self._clock()
            self._stage, self._stage_at = text, now
            self._line(now, text)

    def note(self, text: str) -> None:
        """A step within the current stage (a server up): said, and the stage goes on."""
        with self._lock:
            self._line(self._clock(), text)

    def _line(self, now: float, text: str) -> None:
        self._last_line = now
        self._write(f"{self.prefix} [{_mmss(now - self._start)}] {text}")

    def tick(self) -> None:
        """Say the current stage is still going when nothing has been said for `every_s`."""
        with self._lock:
            now = self._clock()
            if self._stage and now - self._last_line >= self.every_s:
                self._line(now, f"still {self._stage} ({_mmss(now - self._stage_at)})")

    def __enter__(self) -> "StageLog":
        self._thread = threading.Thread(target=self._beat, name="live-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _beat(self) -> None:
        while not self._stop.wait(min(self.every_s, 5.0)):
            self.tick()
