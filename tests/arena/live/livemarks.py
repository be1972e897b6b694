"""What the live test modules share: their pytest marks and a check that a stack left no process behind."""

from __future__ import annotations

import os

import pytest

from arena.live.stack import missing_requirements

MISSING = missing_requirements()


def live_marks(timeout_s: int) -> list:
    """The marks of a module that starts a live stack: live, slow, a timeout, and a skip naming what is missing."""
    return [pytest.mark.live, pytest.mark.slow, pytest.mark.timeout(timeout_s),
            pytest.mark.skipif(bool(MISSING), reason="the live stack needs: " + ", ".join(MISSING))]


def processes_mentioning(text: str) -> list[str]:
    """Live (non-zombie) processes whose command line or environment names `text` (a stack's directory)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                blob = f.read()
            with open(f"/proc/{pid}/environ", "rb") as f:
                blob += f.read()
        except OSError:
            continue
        if text.encode() in blob and int(pid) != os.getpid():
            argv0 = blob.split(b"\0")[0].decode(errors="replace")
            found.append(f"{pid}: {argv0}")
    return found


class LiveShell:
    """A running stack and the `KubernetesEnvironment` over it (`LiveStack.environment`), as the live tests' `env`:
    the environment's methods, plus `.stack`; `restart` is the harness's rollout restart through the API (any
    namespace), returning the environment's RestartResult."""

    def __init__(self, stack, context=None, extra_env=None):
        self.stack = stack
        stack.shell_env.update(extra_env or {})
        self.env = stack.environment(context)

    def __getattr__(self, name):
        return getattr(self.env, name)

    def restart(self, name: str):
        return self.stack.restart(name, by="guard")

    def restarts(self, name: str) -> int:
        """How many times the component's process was started again (a new pod, or a crashed process)."""
        return {**self.stack.supervisor.restarts, **self.stack.server_restarts}.get(name, 0)
