"""Data files with errors that name the file and line: read YAML/JSON, validate with pydantic.

The bottom layer's one loader, so every data file — persistence catalogues (verifiers), contexts, scenarios and
solution scripts (through guardrail.yamlio) — fails the same way: `path:line: field: message`, which the CLI
prints on one line before exiting 2. `DataFileError` is the shape; guardrail.errors.InputError and
verifiers.errors.CatalogueError are both of it.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

__all__ = ["DataFileError", "read_data", "read_input_bytes", "decode_text", "line_of", "json_node_tree", "validate", "load_model",
           "MAX_DATA_BYTES", "MAX_EXPANSION"]

# The largest data file read (contexts, criteria, scenarios, scripts, policy data, --input): configuration, not
# bulk data. Larger ones are bad input, before a byte is parsed.
MAX_DATA_BYTES = 16 * 1024 * 1024
# Values a YAML document may come to once its aliases are expanded: EXPANSION_FACTOR times the values it writes
# out, plus MAX_EXPANSION. A 366-byte document of nested aliases (a "billion laughs") expands to billions, and every
# reader after the parser (pydantic, the policy input's JSON) walks the expansion.
MAX_EXPANSION = 100_000
EXPANSION_FACTOR = 4

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


def decode_text(raw: bytes, *, path: str | Path, error: type[DataFileError] = DataFileError) -> str:
    """UTF-8 text of a file's bytes; undecodable bytes are bad input naming the file and the line they are on."""
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")  # a byte-order mark is not content
    except UnicodeDecodeError as e:
        bad = raw[e.start:e.end]
        raise error(f"not UTF-8 text (undecodable byte 0x{bad[0]:02x})" if bad else "not UTF-8 text",
                    path=str(path), line=raw.count(b"\n", 0, e.start) + 1) from e


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def _duplicate_key(node: yaml.Node | None) -> tuple[str, int, int] | None:
    """The first mapping key that appears twice in its mapping: (key, its line, the first one's line)."""
    seen_nodes: set[int] = set()
    stack = [node] if node is not None else []
    while stack:
        n = stack.pop()
        if id(n) in seen_nodes:  # an alias shares its anchor's node (and may be recursive)
            continue
        seen_nodes.add(id(n))
        if isinstance(n, yaml.MappingNode):
            keys: dict[tuple[str, str], int] = {}
            for k, v in n.value:
                if isinstance(k, yaml.ScalarNode):
                    ident = (k.tag, k.value)
                    if ident in keys:
                        return k.value, k.start_mark.line + 1, keys[ident]
                    keys[ident] = k.start_mark.line + 1
                stack.append(v)
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)
    return None


def _looks_json(p: Path, text: str) -> bool:
    return p.suffix.lower() == ".json" or text.lstrip().startswith(("{", "["))


def read_input_bytes(path: str | Path, *, error: type[DataFileError] = DataFileError,
                     limit: int = MAX_DATA_BYTES) -> bytes:
    """The bytes of an input file, or `error` naming it: a regular file only (a device such as /dev/zero, a FIFO,
    a socket or a directory is refused before it is read), opened non-blocking (so a FIFO cannot hold the open),
    at most `limit` bytes (checked on the size and again while reading: a file that grows is cut off, refused).
    Every CLI option that reads a file comes here, through read_data or directly."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise error(f"cannot read: {e.strerror or e}", path=str(p)) from e
    try:
        st = os.fstat(fd)  # of what was opened: no window between a check and the open
        if stat.S_ISDIR(st.st_mode):
            raise error("is a directory, not a file", path=str(p))
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a file")
            raise error(f"is {kind}, not a regular file: give the path of a file", path=str(p))
        too_big = f"is larger than {limit:,} bytes, the limit for this input"
        if st.st_size > limit:
            raise error(too_big, path=str(p))
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise error(too_big, path=str(p))
        return b"".join(chunks)
    except OSError as e:
        raise error(f"cannot read: {e.strerror or e}", path=str(p)) from e
    finally:
        os.close(fd)


def _expansion_error(node: yaml.Node | None, p: Path, error: type[DataFileError]) -> None:
    """Refuse a YAML document whose aliases expand past EXPANSION_FACTOR times the values it writes out, plus
    MAX_EXPANSION (counted on the node tree, each shared node once: linear in the document). A value that
    holds itself (`r: &r [*r]`) counts once: PyYAML builds it as one shared object, and the models reject it.
    (Numbers that are not finite are the models' to refuse, naming the field.)"""
    if node is None:
        return
    sizes: dict[int, int] = {}
    distinct = 0
    active: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    while stack:
        n, done = stack.pop()
        if done:
            active.discard(id(n))
            kids = n.value if isinstance(n, yaml.SequenceNode) else \
                [x for kv in n.value for x in kv] if isinstance(n, yaml.MappingNode) else []
            sizes[id(n)] = 1 + sum(sizes.get(id(k), 1) for k in kids)
            if sizes[id(n)] > EXPANSION_FACTOR * distinct + MAX_EXPANSION:
                raise error(f"its aliases expand to more than {MAX_EXPANSION:,} values (an alias bomb?): write the "
                            "values out", path=str(p), line=n.start_mark.line + 1)
            continue
        if id(n) in sizes:
            continue
        if isinstance(n, yaml.ScalarNode) or id(n) in active:
            distinct += 1
            sizes[id(n)] = 1
            continue
        distinct += 1
        active.add(id(n))
        stack.append((n, True))
        kids = n.value if isinstance(n, yaml.SequenceNode) else [x for kv in n.value for x in kv]
        stack.extend((k, False) for k in reversed(kids) if id(k) not in sizes)


def read_data(path: str | Path, *, error: type[DataFileError] = DataFileError) -> tuple[Any, yaml.Node | None, str]:
    """Parse a YAML (or JSON) file. Returns the data, its node tree (for line numbers) and the text.

    JSON (a `.json` file, or text that starts with `{` or `[` and parses as JSON) is read with the json module,
    so JSON that YAML does not accept (tab indentation) loads too; anything else is YAML. Undecodable bytes and
    a key given twice in one mapping are errors naming the line."""
    p = Path(path)
    raw = read_input_bytes(p, error=error)
    text = decode_text(raw, path=p, error=error)
    try:
        return _parse(p, text, error)
    except RecursionError as e:  # a document nested thousands deep: no configuration file is
        raise error("nested too deeply to read", path=str(p)) from e


def _parse(p: Path, text: str, error: type[DataFileError]) -> tuple[Any, yaml.Node | None, str]:
    if _looks_json(p, text):
        try:
            data = json.loads(text, object_pairs_hook=_no_duplicates)
        except _DuplicateKey as e:
            dup = _duplicate_key(_compose_json(text))
            if dup is not None and dup[0] == e.key:
                raise error(f"duplicate key {e.key!r} (first given at line {dup[2]})", path=str(p),
                            line=dup[1]) from e
            raise error(f"duplicate key {e.key!r}", path=str(p)) from e
        except json.JSONDecodeError as e:
            if p.suffix.lower() == ".json":
                raise error(f"bad JSON: {e.msg}", path=str(p), line=e.lineno) from e
            # Not JSON after all (a flow-style YAML mapping, say): read it as YAML below.
        else:
            return data, _compose_json(text), text
    try:
        loader = yaml.SafeLoader(text)  # a character YAML does not allow (NUL, ...) fails here already
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = (mark.line + 1) if mark else _line_of_bad_char(text, getattr(e, "position", None))
        why = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise error(f"bad YAML: {why}", path=str(p), line=where) from e
    try:
        node = loader.get_single_node()
        _expansion_error(node, p, error)
        dup = _duplicate_key(node)
        if dup is not None:
            raise error(f"duplicate key {dup[0]!r} (first given at line {dup[2]})", path=str(p), line=dup[1])
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        raise error(f"bad YAML: {problem}", path=str(p), line=(mark.line + 1) if mark else None) from e
    finally:
        loader.dispose()
    return data, node, text


def _line_of_bad_char(text: str, position: int | None) -> int | None:
    return text.count("\n", 0, position) + 1 if isinstance(position, int) else None


def _compose_json(text: str) -> yaml.Node | None:
    """The YAML node tree of a JSON text, for line numbers (None when YAML cannot read it)."""
    try:
        # A tab is only whitespace between JSON tokens (never raw inside a string): a space keeps every line.
        return yaml.compose(text.replace("\t", " "), Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None


def json_node_tree(text: str) -> yaml.Node | None:
    """The node tree of a JSON text already parsed with the json module, for `line_of` (None if YAML cannot
    read it)."""
    return _compose_json(text)


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
