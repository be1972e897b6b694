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
from guardrail.policy.decisions import (DecisionIds, MalformedDecision, decide_without_broken, fail_closed,
                                        from_document, rule_packages)
from guardrail.policy.exceptions import glob_matches
from guardrail.policy.loader import PolicyTree, shipped_policy_dir

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
        allow_readonly_on_error: bool = False,
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
        self._rule_packages: list[str] = []
        if upload:
            self.tree = PolicyTree.load(policy_dir)
            self._upload(self.tree, data)
            self._rule_packages = rule_packages(self.tree.decision_modules, shipped_policy_dir() / "guardrail.rego")

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
            salvaged = self._salvage(input, e, decision_id, start)
            if salvaged is not None:
                return salvaged
            return fail_closed(input, str(e), decision_id=decision_id, engine=self.name,
                               duration_ms=(self._clock() - start) * 1000.0,
                               allow_readonly_on_error=self.allow_readonly_on_error,
                               timed_out=_timed_out(e))

    def _salvage(self, input: Mapping[str, Any], error: Exception, decision_id: str,
                 start: float) -> Decision | None:
        """As EmbeddedOPA: when the decision is in error because of a rule (not the server being away), each rules
        package is asked for alone and the broken ones fail closed on their own (decisions.decide_without_broken).
        Only for a tree this engine uploaded, so it knows the packages."""
        if not self._rule_packages or not _in_the_rules(error):
            return None

        def part(path: str) -> Any:
            doc = self.client.document(path, input)
            return [] if doc is UNDEFINED else doc

        def evaluate(pkg: str) -> tuple[Any, Any]:
            return part(f"guardrail/rules/{pkg}/deny"), part(f"guardrail/rules/{pkg}/warn")

        def exempt(found: list[dict[str, Any]]) -> list[int]:
            # The REST Data API evaluates documents, not calls: the patterns are read and matched here
            # as guardrail.rego's glob.match does.
            patterns = [p for p in part("guardrail/exception_patterns") if isinstance(p, str)]
            return [n for n, f in enumerate(found) if any(glob_matches(p, f["id"]) for p in patterns)]

        return decide_without_broken(input, str(error), self._rule_packages, evaluate, exempt,
                                     decision_id=decision_id, engine=self.name,
                                     duration_ms=lambda: (self._clock() - start) * 1000.0,
                                     allow_readonly_on_error=self.allow_readonly_on_error)

    def healthy(self) -> bool:
        return self.client.healthy()

    def close(self) -> None:
        self.client.close()


def _timed_out(e: BaseException) -> bool:
    """The server did not answer in time (guardrail.clients.opa_rest's read deadline), not an error answer."""
    return str(e).endswith(" timed out")


def _in_the_rules(e: Exception) -> bool:
    """An error the policy's rules made (the server answered with an evaluation error, or a decision that is not
    one), not a server that is away or slow."""
    return isinstance(e, MalformedDecision) or "eval_" in str(e) or "conflict" in str(e)
