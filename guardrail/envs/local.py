"""LocalEnvironment: agent commands run by the real shell on this machine, under a real clock.

Registered as the `local` entry of the `guardrail.environments` group and used by `guardrail mcp --env local`.
It answers `run` only: this machine has no SLI source the guard knows of (its description says so, unless the
CLI wraps it with the team's Prometheus), and restarting a component is not something a bare shell can do safely,
so `sli` returns no samples and `restart` raises a clear error.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Mapping

from guardrail.context import IncidentContext
from guardrail.errors import EnvironmentError_, InputError
from guardrail.policy import goruntime
from verifiers.clock import RealClock as WallClock
from verifiers.protocols import CommandResult, EnvironmentDescription, RestartResult, Sample

__all__ = ["WallClock", "LocalEnvironment", "make"]

# Like a shell that lost its child to a timeout (coreutils `timeout` exits 124).
TIMEOUT_EXIT_CODE = 124


class LocalEnvironment:
    """Runs each command with `bash -c` in a working directory, with a timeout."""

    # Each command is its own process under a real clock: the session may run reads while a declaration is held.
    concurrent_commands = True

    def __init__(self, *, cwd: str | Path | None = None, timeout_s: float = 120.0, shell: str = "/bin/bash",
                 env: Mapping[str, str] | None = None, clock: WallClock | None = None):
        self.cwd = str(cwd) if cwd is not None else os.getcwd()
        self.timeout_s = timeout_s
        self.shell = shell
        self._env = dict(env) if env is not None else None
        self._clock = clock or WallClock()

    @property
    def clock(self) -> WallClock:
        return self._clock

    def run(self, command: str) -> CommandResult:
        start = time.monotonic()
        try:
            proc = subprocess.run([self.shell, "-c", command], cwd=self.cwd,
                                  # without an env of its own: this process's, less the guard's Go settings
                                  env=self._env if self._env is not None else goruntime.child_env(),
                                  capture_output=True,
                                  text=True, errors="replace", timeout=self.timeout_s, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            return CommandResult(command=command, stdout=out,
                                 stderr=err + f"guardrail: command timed out after {self.timeout_s:g}s\n",
                                 exit_code=TIMEOUT_EXIT_CODE, duration_s=time.monotonic() - start)
        except OSError as e:
            # Answered, not raised: the agent reads why, and the journal gets the command's result.
            where = f" in {self.cwd}" if not os.path.isdir(self.cwd) else ""
            return CommandResult(command=command, stderr=f"guardrail: cannot start {self.shell}{where}: "
                                                         f"{e.strerror or e}\n",
                                 exit_code=126, duration_s=time.monotonic() - start)
        return CommandResult(command=command, stdout=proc.stdout, stderr=proc.stderr, exit_code=proc.returncode,
                             duration_s=time.monotonic() - start)

    def sli(self, query: str, window: float, *, labels: Mapping[str, str] | None = None,
            step: float | None = None) -> list[Sample]:
        # No telemetry source is wired to a bare shell (describe() says so, and convergence answers NO_SLI_SOURCE
        # at once); `--prometheus URL --slo FILE` wraps this environment with one (guardrail/envs/observed.py).
        return []

    def restart(self, target: str) -> RestartResult:
        raise EnvironmentError_(f"the local environment cannot restart {target!r}: restart it with your own "
                                "tooling (restart-svc.sh, kubectl rollout restart) through the guard instead")

    def describe(self) -> EnvironmentDescription:
        return EnvironmentDescription(name="local", components=(), extra={"cwd": self.cwd}, observes_slis=False)


def make(spec: str = "", context: IncidentContext | None = None) -> LocalEnvironment:
    """Entry-point factory: `local` or `local:<working directory>`; a directory that is not there is bad input."""
    if spec and not Path(spec).is_dir():
        raise InputError("no such directory to run commands in", path=f"--env local:{spec}")
    return LocalEnvironment(cwd=spec or None)
