"""The verifiers' own input error: a bad persistence catalogue file, with its path and line.

verifiers may not import guardrail (the layers run arena -> guardrail -> verifiers), so the shape lives here,
in verifiers.datafile.DataFileError, which guardrail.errors.InputError shares; the guard's CLI prints either
the same way and exits 2.
"""

from __future__ import annotations

from verifiers.datafile import DataFileError

__all__ = ["CatalogueError"]


class CatalogueError(DataFileError):
    """A persistence catalogue that does not parse or validate: `path:line: message`."""

    default_where = "<catalogue>"
