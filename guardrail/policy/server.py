"""OPAServer: the PolicyEngine that asks an OPA server over its REST Data API (opa-python-client).

For deployments that run OPA as a sidecar or a shared service. It uploads the same policies/ tree the embedded
engine loads (PUT /v1/policies/<relative path>, tests left out) unless told the server already has them, then
asks `POST /v1/data/guardrail/decision` for every input. An unreachable or slow server, an error or an
undefined answer fails closed (guardrail.policy.decisions). The HTTP itself lives in guardrail.clients.opa_rest.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Mapping

from guardrail.clients.opa_rest import UNDEFINED, OPARestClient
from guardrail.errors import PolicyLoadError
from guardrail.policy.base import Decision
from guardrail.policy.decisions import DecisionIds, MalformedDecision, fail_closed, from_document
from guardrail.policy.loader import PolicyTree

__all__ = ["OPAServer", "DECISION_PATH"]

DECISION_PATH = "guardrail/decision"


class OPAServer:
    """An OPA server's REST Data API as a PolicyEngine."""

    name = "opa-server"

    def __init__(
        self,
        url: str = "http://127.0.0.1:8181",
        policy_dir: str | Path | None = None,
        *,
        upload: bool = True,
        data: Mapping[str, Any] | None = None,
        timeout_s: float = 1.0,
        retries: int = 0,
        allow_readonly_on_error: bool = True,
        token: str | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        """With `upload`, the policy tree (and `data`, e.g. {"exceptions": [...]}) is pushed to the server now;
        a module the server rejects raises PolicyLoadError, an unreachable server PolicyEngineError."""
        self.client = OPARestClient(url, timeout_s=timeout_s, retries=retries, token=token)
        self.allow_readonly_on_error = allow_readonly_on_error
        self._clock = clock
        self._ids = DecisionIds("opasrv")
        self.tree: PolicyTree | None = None
        if upload:
            self.tree = PolicyTree.load(policy_dir)
            self._upload(self.tree, data)

    def _upload(self, tree: PolicyTree, data: Mapping[str, Any] | None) -> None:
        # Modules may call functions of modules not yet uploaded; retry the rejected ones until no progress.
        pending = sorted(tree.decision_modules, key=lambda m: (not m.relpath.startswith("lib/"), m.id))
        while pending:
            failed: list[tuple[Any, PolicyLoadError]] = []
            for m in pending:
                try:
                    self.client.put_policy(m.id, m.source)
                except PolicyLoadError as e:
                    failed.append((m, e))
            if len(failed) == len(pending):
                m, e = failed[0]
                found = tree.by_path(e.path or "") or m.path
                raise PolicyLoadError(e.message, path=str(found), line=e.line) from e
            pending = [m for m, _ in failed]
        merged = {**tree.data, **(dict(data) if data else {})}
        if merged:
            self.client.put_data("", merged)

    def decide(self, input: Mapping[str, Any]) -> Decision:
        start = self._clock()
        decision_id = self._ids()
        try:
            doc = self.client.document(DECISION_PATH, input)
            if doc is UNDEFINED:
                raise MalformedDecision("data.guardrail.decision is undefined on the server")
            return from_document(doc, decision_id=decision_id, engine=self.name,
                                 duration_ms=(self._clock() - start) * 1000.0)
        except Exception as e:  # noqa: BLE001  (any failure of the server or its answer fails closed)
            return fail_closed(input, str(e), decision_id=decision_id, engine=self.name,
                               duration_ms=(self._clock() - start) * 1000.0,
                               allow_readonly_on_error=self.allow_readonly_on_error)

    def healthy(self) -> bool:
        return self.client.healthy()

    def close(self) -> None:
        self.client.close()
