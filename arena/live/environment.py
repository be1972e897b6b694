"""`LiveEnvironment`: the `verifiers.protocols.Environment` seam over a running `LiveStack`.

The second implementation of the seam, beside `arena.twin`. The guard, the verifiers and the agents call it as
they call the twin; nothing here knows a scenario's grader section. `run` runs the command in a real bash with the
real clients (psql, redis-cli, mariadb/mysql, curl, behind the stack's host-name wrappers) and the task helpers on
PATH, and the task's environment variables (DB_ADMIN_DSN ...). Time is real (`WallClock`). `sli` reads Prometheus
through `verifiers.clients.prometheus` when that module is present, else the load generator's ledger
(`arena.live.sli.LedgerSLISource`; `describe().extra["sli_source"]` says which). `restart` goes through the
stack's supervisor (apps) or stops and starts the server (databases, Redis).
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
from typing import Mapping

from arena.live.sli import LedgerSLISource
from arena.live.stack import LiveStack
from guardrail.errors import EnvironmentError_
from verifiers.protocols import (CommandResult, ComponentInfo, EnvironmentDescription, RestartResult, Sample,
                                 SLISource)

__all__ = ["LiveEnvironment"]

# Variables a login shell would have that are not the stack's own.
_PASS_THROUGH = ("LANG", "LC_ALL", "TERM", "TZ", "USER", "LOGNAME", "SHELL", "VIRTUAL_ENV", "PYTHONPATH")


class LiveEnvironment:
    """Commands in a real shell, real time, SLIs from Prometheus or the ledger, restarts by the supervisor."""

    def __init__(self, stack: LiveStack, *, sli_source: SLISource | None = None, command_timeout_s: float = 120.0,
                 extra_env: Mapping[str, str] | None = None):
        if stack.dir is None:
            raise EnvironmentError_("the live stack is not up: call LiveStack.up() first")
        self.stack = stack
        self.command_timeout_s = command_timeout_s
        self.extra_env = dict(extra_env or {})
        self._sli, self.sli_source_name = sli_source, "injected"
        if self._sli is None:
            self._sli, self.sli_source_name = self._default_sli()

    @property
    def clock(self):
        return self.stack.clock

    # -- SLIs ----------------------------------------------------------------------------------------------------
    def _default_sli(self) -> tuple[SLISource, str]:
        try:
            prom = importlib.import_module("verifiers.clients.prometheus")
        except ImportError:
            prom = None
        factory = getattr(prom, "PrometheusSLISource", None) if prom else None
        if factory is not None:
            return factory(self.stack.prometheus.url, clock=self.clock), "prometheus"
        # No Prometheus SLI client in this checkout yet: read the load generator's ledger instead.
        return LedgerSLISource(self.stack.ledger_path, self.clock, gauges={
            "backlog": self._backlog, "ready_replicas": self._ready, "restarts": self._restarts,
        }), "ledger"

    def _backlog(self, _component: str | None) -> float | None:
        try:
            res = self.stack.prometheus_query("sum(backlog)")
        except (OSError, EnvironmentError_):
            return None
        return float(res[0]["value"][1]) if res else None

    def _ready(self, component: str | None) -> float:
        sup = self.stack.supervisor
        names = [component] if component else list(sup.specs)
        return float(sum(1 for n in names if n in sup.specs and sup.ready(n)))

    def _restarts(self, component: str | None) -> float:
        counts = {**self.stack.supervisor.restarts, **self.stack.server_restarts}
        return float(counts.get(component, 0) if component else sum(counts.values()))

    def sli(self, query: str, window: float, *, labels: Mapping[str, str] | None = None,
            step: float | None = None) -> list[Sample]:
        return self._sli.sli(query, window, labels=labels, step=step)

    # -- commands ------------------------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        base = {k: os.environ[k] for k in _PASS_THROUGH if k in os.environ}
        return {**base, **self.stack.shell_env, **self.extra_env}

    def run(self, command: str) -> CommandResult:
        t0 = self.clock.now()
        # Its own session, so that a timed-out pipeline dies whole.
        proc = subprocess.Popen(["bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, env=self.env(), cwd=self.stack.dir, text=True,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=self.command_timeout_s)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            err += f"\nbash: command timed out after {self.command_timeout_s:.0f} s\n"
            code = 124
        return CommandResult(command=command, stdout=out, stderr=err, exit_code=code,
                             duration_s=self.clock.now() - t0)

    # -- restarts and description --------------------------------------------------------------------------------
    def restart(self, target: str) -> RestartResult:
        return self.stack.restart(target, by="guard")

    def describe(self) -> EnvironmentDescription:
        sup = self.stack.supervisor
        comps = []
        for name, spec in sup.specs.items():
            comps.append(ComponentInfo(
                name=name, kind=spec.kind, ready_replicas=1 if sup.ready(name) else 0,
                restarts=sup.restarts.get(name, 0), restartable=spec.restartable, image=sup.image(name)))
        for name, server in self.stack.servers.items():
            comps.append(ComponentInfo(
                name=name, kind="StatefulSet", stateful=True, ready_replicas=1 if server.alive() else 0,
                restarts=self.stack.server_restarts.get(name, 0), restartable=False, image=server.image()))
        return EnvironmentDescription(
            name="live", components=tuple(comps), namespaces=("default",), cycle_s=self.stack.shape.cycle_s,
            extra={
                "sli_source": self.sli_source_name,
                "substrates": [s.name for s, _ in self.stack.specs],
                "endpoints": {ep.name: ep.hostport for ep in self.stack.plan.endpoints.values()},
                "stack_dir": str(self.stack.dir),
                "prometheus_url": self.stack.prometheus.url,
            })
