"""Data files with errors that name the file and line: read YAML/JSON, validate with pydantic.

The bottom layer's one loader, so every data file — persistence catalogues (verifiers), contexts, scenarios and
solution scripts (through guardrail.yamlio) — fails the same way: `path:line: field: message`, which the CLI
prints on one line before exiting 2. `DataFileError` is the shape; guardrail.errors.InputError and
verifiers.errors.CatalogueError are both of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

__all__ = ["DataFileError", "read_data", "line_of", "validate", "load_model"]

M = TypeVar("M", bound=BaseModel)


class DataFileError(ValueError):
    """Bad input in a file: carries the path and line so it prints as `path:line: message`."""

    default_where = "<input>"

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        self.path = path
        self.line = line
        self.message = message
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = self.path or self.default_where
        if self.line is not None:
            where = f"{where}:{self.line}"
        return f"{where}: {self.message}"


def read_data(path: str | Path, *, error: type[DataFileError] = DataFileError) -> tuple[Any, yaml.Node | None, str]:
    """Parse a YAML (or JSON) file. Returns the data, its node tree (for line numbers) and the text."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise error(f"cannot read: {e.strerror or e}", path=str(p)) from e
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        raise error(f"bad YAML: {problem}", path=str(p), line=(mark.line + 1) if mark else None) from e
    return data, node, text


def line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of the deepest node on `loc` that exists in the YAML node tree."""
    best = (node.start_mark.line + 1) if node is not None else None
    for part in loc:
        if node is None:
            break
        nxt = None
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            for k, v in node.value:
                if getattr(k, "value", None) == part:
                    best = k.start_mark.line + 1
                    nxt = v
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            nxt = node.value[part]
            best = nxt.start_mark.line + 1
        node = nxt
    return best


def validate(model: type[M], data: Any, *, path: str | Path, node: yaml.Node | None = None,
             error: type[DataFileError] = DataFileError, loc_prefix: tuple[Any, ...] = ()) -> M:
    """Validate `data` with `model`, turning the first pydantic error into `error` with file and line."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(err["loc"])
        field = ".".join(str(x) for x in loc_prefix + loc) or "<root>"
        raise error(f"{field}: {err['msg']}", path=str(path), line=line_of(node, loc_prefix + loc)) from e


def load_model(model: type[M], path: str | Path, *, key: str | None = None,
               error: type[DataFileError] = DataFileError, what: str = "a mapping") -> M:
    """Read a file and validate it (or its top-level `key`, when given and present) with `model`."""
    data, node, _ = read_data(path, error=error)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise error(f"expected {what} at the top level", path=str(path), line=1)
    prefix: tuple[Any, ...] = ()
    if key is not None and key in data:
        data = data[key]
        prefix = (key,)
    return validate(model, data, path=path, node=node, error=error, loc_prefix=prefix)
