"""Progress of a held declaration: what a verifier that waits says while it waits, and who hears it.

A verifier calls `report()` (the convergence verifier after each measurement: windows in band so far, how long
it has waited of at most how long); the Guard's `on_declare` installs the listener with `reporting_to()` for the
length of one declaration. The adapters pass it on: MCP progress notifications (guardrail/adapters/mcp_server.py)
and the shell shim's stderr line (guardrail/adapters/shell). A listener lives in a context variable, so two
sessions declaring on two threads never hear each other, and a verifier run with no listener reports to no one.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Any, Callable, Iterator

__all__ = ["Progress", "report", "reporting_to"]


@dataclass(frozen=True)
class Progress:
    """One progress report: which check, a one-line message, and how far (done of total, when known)."""

    stage: str
    message: str
    done: float | None = None
    total: float | None = None
    waited_s: float | None = None
    max_wait_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "message": self.message, "done": self.done, "total": self.total,
                "waited_s": self.waited_s, "max_wait_s": self.max_wait_s}


_listener: contextvars.ContextVar[Callable[[Progress], None] | None] = contextvars.ContextVar(
    "guardrail_progress", default=None)


def report(stage: str, message: str, **kw: Any) -> None:
    """Tell the current listener, if any. A listener that fails never fails the check that reports."""
    listener = _listener.get()
    if listener is None:
        return
    try:
        listener(Progress(stage, message, **kw))
    except Exception:  # noqa: BLE001 - progress is advisory; the verdict is what counts
        pass


@contextlib.contextmanager
def reporting_to(listener: Callable[[Progress], None] | None) -> Iterator[None]:
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)
