"""Load YAML/JSON data files and validate them with pydantic, with errors that name the file and line.

Used by every guardrail and arena loader of data (contexts, scenarios, solution scripts). The machinery is
verifiers.datafile (the bottom layer, which the persistence catalogue uses too); here the error defaults to
guardrail's InputError, so a bad file reads `path:line: field: message` and exits 2 from the CLI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel

from guardrail.errors import InputError
from verifiers import datafile
from verifiers.datafile import line_of

__all__ = ["read_data", "line_of", "validate", "load_model"]

M = TypeVar("M", bound=BaseModel)


def read_data(path: str | Path, *, error: type[InputError] = InputError) -> tuple[Any, yaml.Node | None, str]:
    """Parse a YAML (or JSON) file. Returns the data, its node tree (for line numbers) and the text."""
    return datafile.read_data(path, error=error)


def validate(model: type[M], data: Any, *, path: str | Path, node: yaml.Node | None = None,
             error: type[InputError] = InputError, loc_prefix: tuple[Any, ...] = ()) -> M:
    """Validate `data` with `model`, turning the first pydantic error into an InputError with file and line."""
    return datafile.validate(model, data, path=path, node=node, error=error, loc_prefix=loc_prefix)


def load_model(model: type[M], path: str | Path, *, key: str | None = None,
               error: type[InputError] = InputError) -> M:
    """Read a file and validate it (or its top-level `key`, when given and present) with `model`."""
    return datafile.load_model(model, path, key=key, error=error)
