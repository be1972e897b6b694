"""Load YAML/JSON data files and validate them with pydantic, with errors that name the file and line.

Used by every loader of data (contexts, scenarios, solution scripts, the persistence catalogue) so that bad
input always reads `path:line: field: message` and exits 2 from the CLI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from guardrail.errors import InputError

__all__ = ["read_data", "validate", "load_model"]

M = TypeVar("M", bound=BaseModel)


def read_data(path: str | Path, *, error: type[InputError] = InputError) -> tuple[Any, yaml.Node | None, str]:
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
             error: type[InputError] = InputError, loc_prefix: tuple[Any, ...] = ()) -> M:
    """Validate `data` with `model`, turning the first pydantic error into an InputError with file and line."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(err["loc"])
        field = ".".join(str(x) for x in loc_prefix + loc) or "<root>"
        raise error(f"{field}: {err['msg']}", path=str(path), line=line_of(node, loc_prefix + loc)) from e


def load_model(model: type[M], path: str | Path, *, key: str | None = None,
               error: type[InputError] = InputError) -> M:
    """Read a file and validate it (or its top-level `key`, when given and present) with `model`."""
    data, node, _ = read_data(path, error=error)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise error("expected a mapping at the top level", path=str(path), line=1)
    prefix: tuple[Any, ...] = ()
    if key is not None and key in data:
        data = data[key]
        prefix = (key,)
    return validate(model, data, path=path, node=node, error=error, loc_prefix=prefix)
