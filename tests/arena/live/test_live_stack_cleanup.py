"""`python -m arena.live.stack` (what `make live-stack` runs) removes its temporary directory when it stops, on
Ctrl-C or SIGTERM, after it is up or while it is still starting: it left 129 MB in /tmp after each Ctrl-C. Real
servers (the saleor substrate: PostgreSQL, one app, the load generator, Prometheus); skips when they are missing."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.arena.live.livemarks import live_marks, processes_mentioning

pytestmark = live_marks(600)

# Each wait ends as soon as its line or exit comes; the bound is for a machine at load 15 starting a stack.
BOUND_S = 400


class _Lines:
    """A stream's lines read on a thread, so the test can wait for one with a bound."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self.lines.append("<eof>")
            self._cond.notify_all()

    def wait_for(self, pattern: str) -> re.Match:
        with self._cond:
            found: list[re.Match] = []

            def seen() -> bool:
                found[:] = [m for m in (re.search(pattern, line) for line in self.lines) if m][:1]
                return bool(found) or "<eof>" in self.lines

            assert self._cond.wait_for(seen, timeout=BOUND_S) and found, (pattern, self.lines[-20:])
            return found[0]


@pytest.mark.parametrize("sig,when", [(signal.SIGINT, "up"), (signal.SIGTERM, "starting")])
def test_the_stack_started_by_hand_removes_its_directory_when_stopped(sig: int, when: str):
    proc = subprocess.Popen([sys.executable, "-m", "arena.live.stack", "saleor"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            start_new_session=True)
    out, err = _Lines(proc.stdout), _Lines(proc.stderr)
    stack_dir = None
    try:
        stack_dir = Path(err.wait_for(r"stack directory (\S+)\)").group(1))
        if when == "up":
            out.wait_for(r"^stack dir: ")
        else:
            err.wait_for(r"postgres up")  # a server is running, the apps are not up yet
        assert stack_dir.is_dir() and proc.poll() is None
        proc.send_signal(sig)
        code = proc.wait(timeout=BOUND_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert code == (0 if when == "up" else 130), (out.lines[-10:], err.lines[-10:])
    assert not stack_dir.exists(), f"{stack_dir} left behind"
    assert processes_mentioning(str(stack_dir)) == []
