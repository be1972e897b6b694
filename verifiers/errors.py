"""The verifiers' own input error: a bad persistence catalogue file, with its path and line.

verifiers may not import guardrail (the layers run arena -> guardrail -> verifiers), so this mirrors
`guardrail.errors.InputError`'s shape (`path`, `line`, `message`, `one_line()`); the guard's CLI can print it the
same way and exit 2.
"""

from __future__ import annotations

__all__ = ["CatalogueError"]


class CatalogueError(ValueError):
    """A persistence catalogue that does not parse or validate: `path:line: message`."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        self.path = path
        self.line = line
        self.message = message
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = self.path or "<catalogue>"
        if self.line is not None:
            where = f"{where}:{self.line}"
        return f"{where}: {self.message}"
