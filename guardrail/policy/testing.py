"""Run a policies/ tree's `test_` rules, as `opa test` does: each test passes when its rule evaluates to true.

Called by `guardrail policy test` and by the project's pytest suite. All modules, tests included, load into one
engine; each test rule is then one query `x := data.<package>.<test_name>`.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from opa_bindings import OpaError

from guardrail.policy.embedded import compile_tree
from guardrail.policy.loader import PolicyTree

__all__ = ["RegoTestResult", "RegoTestReport", "run_rego_tests"]


@dataclass(frozen=True)
class RegoTestResult:
    """One test rule's result: PASS, FAIL (false or undefined) or ERROR (evaluation failed)."""

    package: str
    name: str
    path: str
    status: str
    message: str = ""
    duration_ms: float = 0.0
    line: int | None = None  # of the test rule's first head in its file

    @property
    def where(self) -> str:
        """The file, and for a test that did not pass its line (editors jump to `path:line`)."""
        return f"{self.path}:{self.line}" if self.line is not None and not self.passed else self.path

    @property
    def passed(self) -> bool:
        return self.status == "PASS"


@dataclass(frozen=True)
class RegoTestReport:
    """Every test's result, in file order."""

    results: tuple[RegoTestResult, ...]

    @property
    def passed(self) -> int:
        return sum(r.passed for r in self.results)

    @property
    def failed(self) -> int:
        return len(self.results) - self.passed

    def summary(self) -> str:
        return f"{self.passed} passed, {self.failed} failed"

    def to_json(self) -> dict:
        """The report as `guardrail policy test --json` prints it."""
        return {"passed": self.passed, "failed": self.failed,
                "tests": [{"package": r.package, "name": r.name, "path": r.path, "line": r.line,
                           "status": r.status, "message": r.message, "duration_ms": round(r.duration_ms, 3)}
                          for r in self.results]}


def run_rego_tests(root: str | Path | None = None, *, run: re.Pattern[str] | None = None,
                   clock: Callable[[], float] = time.perf_counter) -> RegoTestReport:
    """Load the tree (PolicyLoadError on a bad module) and evaluate every test rule, or with `run` only those
    whose full name `data.<package>.<test_name>` it matches (searched, as `opa test --run` does).

    Each test package is evaluated as one document (one prepared query per package, not per test: preparing a
    query is the expensive part); a package whose evaluation errors, or of which `run` selects only some tests,
    is run test by test (so a broken test `run` leaves out cannot fail the ones it selects).
    """
    tree = PolicyTree.load(root)
    engine = compile_tree(tree, tests=True)
    results = []
    try:
        for m in tree.test_modules:
            chosen = [n for n in m.tests if run is None or run.search(f"data.{m.package}.{n}")]
            if not chosen:
                continue
            if len(chosen) < len(m.tests):
                results.extend(_one_by_one(engine, m, clock, chosen))
                continue
            start = clock()
            try:
                rows = engine.eval_query(f"x := data.{m.package}")
                doc = rows[0].get("x", {}) if rows else {}
            except OpaError:
                results.extend(_one_by_one(engine, m, clock))
                continue
            each = (clock() - start) * 1000 / max(1, len(m.tests))
            for name in m.tests:
                if name not in doc:
                    results.append(RegoTestResult(m.package, name, m.relpath, "FAIL", "undefined", each,
                                                  _line_of(m, name)))
                elif doc[name] is not True:
                    results.append(RegoTestResult(m.package, name, m.relpath, "FAIL", "not true", each,
                                                  _line_of(m, name)))
                else:
                    results.append(RegoTestResult(m.package, name, m.relpath, "PASS", "", each))
    finally:
        engine.close()
    return RegoTestReport(tuple(results))


def _one_by_one(engine, m, clock, names=None) -> list[RegoTestResult]:
    out = []
    for name in m.tests if names is None else names:
        start = clock()
        try:
            rows = engine.eval_query(f"x := data.{m.package}.{name}")
            ok = bool(rows) and rows[0].get("x") is True
            status, msg = ("PASS", "") if ok else ("FAIL", "undefined" if not rows else "not true")
        except OpaError as e:
            status, msg = "ERROR", e.message.splitlines()[0] if e.message else e.code
        out.append(RegoTestResult(m.package, name, m.relpath, status, msg, (clock() - start) * 1000,
                                  _line_of(m, name)))
    return out


def _line_of(m, name: str) -> int | None:
    return next((n for n, ln in enumerate(m.source.splitlines(), 1) if re.match(rf"{re.escape(name)}\b", ln)), None)
