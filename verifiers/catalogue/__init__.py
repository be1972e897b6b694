"""The persistence catalogue: where each setting's declared source lives, and how an operator reads both layers.

Data, not code: `*.yaml` files beside this module (shipped) plus any file a team adds (`load_catalogue(extra)`;
the team's entries come first, so they override). Each entry maps a key pattern (a regex over the dotted keys
of `guardrail.actions.model.KeyChange`, e.g. `redis.maxmemory`, `app.roles.channel.db.pool_size`) to:

    effective:  the operator command that reads the value the running system uses, and how to parse it
    declared:   the command that reads the declared source a restart re-reads (Helm values, a ConfigMap,
                pg_db_role_setting, pg_file_settings, my.cnf, a durable row), or `same_as_effective` when the
                write itself lands in a durable store (grants, ALTER ROLE ... SET)
    durable:    the durable way to make the change, shown to the agent on NOT_DURABLE
    in_container_via: wrappers (e.g. `kubectl exec`) that make a change in-container and ephemeral
    baseline:   what the setting runs on where nobody changed it (the product's default as the server reports it,
                the values its peers run, or whether the deployment overrides it), which the scope audit
                compares a change with (verifiers/scope.py, `ChangeScope`)

Templates name variables as `${name}`: the key's regex groups, `${key}`, `${value}`, `${scope.<k>}`,
`${target.name|kind|namespace}`, `${context.namespace}`, `${context.extra.<k>}`, and the entry's own `vars`
(each a list of candidates; the first that renders wins). Validated with pydantic on load; a bad file raises
`verifiers.errors.CatalogueError` with its path and line. Used by the persistence, restart and scope verifiers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from verifiers.datafile import load_model
from verifiers.errors import CatalogueError

__all__ = [
    "ParseStep",
    "Read",
    "DeclaredRead",
    "BaselineRule",
    "CatalogueEntry",
    "Catalogue",
    "Missing",
    "render",
    "parse_output",
    "normalize",
    "load_catalogue",
    "builtin_paths",
    "parse_source",
]

_HERE = Path(__file__).resolve().parent
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_.\-]*)\}")


class Missing(KeyError):
    """A template names a variable this key, action or context does not have."""


class ParseStep(BaseModel):
    """One step of turning command output into a value; exactly one field is set."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    line: int | None = None  # the Nth non-empty line (negative counts from the end)
    regex: str | None = None  # first match's group 1 (or the whole match), multi-line
    contains: str | None = None  # "true" if the regex matches anywhere, else "false"
    json_path: str | list[str] | None = Field(None, alias="json")  # a dotted path (or its parts) into JSON output
    yaml_path: str | list[str] | None = Field(None, alias="yaml")  # the same into YAML output
    join: str | None = None  # join a list into one string with this separator
    strip: str | None = None  # strip these characters

    @field_validator("regex", "contains")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None and "${" not in v:
            re.compile(v)
        return v

    @model_validator(mode="after")
    def _one(self) -> "ParseStep":
        set_fields = [k for k, v in self.__dict__.items() if v is not None]
        if len(set_fields) != 1:
            raise ValueError(f"a parse step sets exactly one of line/regex/contains/json/yaml/join/strip, "
                             f"got {set_fields or 'none'}")
        return self


class ApiRead(BaseModel):
    """The same read through the platform's API, used when the environment offers one
    (verifiers.protocols.DeclaredLayerReader): it answers with the text `command` would print, so `parse` applies
    unchanged. Fields are templates like the command's."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["helm_values", "configmap", "workload_env"]
    name: str
    namespace: str = ""
    key: str = ""  # configmap: one key (else the object as YAML); workload_env: the variable
    workload_kind: str = "deployment"


class Read(BaseModel):
    """An operator command that reads one value, and how to parse its output."""

    model_config = ConfigDict(extra="forbid")

    command: str
    parse: list[ParseStep] = Field(default_factory=list)
    source: str = ""  # what is read, in words (shown in evidence)
    api: ApiRead | None = None


class AbsentRule(BaseModel):
    """What an absent declared value means: a known default (per name), or another read that gives it."""

    model_config = ConfigDict(extra="forbid")

    value: Any = None
    values: dict[str, Any] = Field(default_factory=dict)
    read: Read | None = None
    note: str = ""


class DeclaredRead(Read):
    """The declared source's read; `same_as_effective` when the write lands in the durable store itself."""

    command: str = ""
    same_as_effective: bool = False
    when_absent: AbsentRule | None = None

    @model_validator(mode="after")
    def _has_read(self) -> "DeclaredRead":
        if not self.same_as_effective and not self.command:
            raise ValueError("declared needs a command, or same_as_effective: true")
        return self


class BaselineRule(BaseModel):
    """What a setting runs on where nobody changed it, read when the agent first changes it: a change that moves
    a setting off its baseline needs a reason (verifiers/scope.py); one that finds it already off has one.

    One of: the product's default (`read` from the server, e.g. pg_settings.boot_val; else `values` by the
    key's `name`, else `value`; `unset`: no value at all, as an absent pg_db_role_setting row, is the default),
    the values its peers run (`fleet`: a read that parses to a mapping of peer -> document, `fleet_path` in each),
    or the deployment's overrides (`overrides`: a read that parses to a mapping; the setting is at its default
    unless the mapping names it, in snake_case or camelCase)."""

    model_config = ConfigDict(extra="forbid")

    source: str = ""
    read: Read | None = None
    values: dict[str, Any] = Field(default_factory=dict)
    value: Any = None
    unset: bool = False
    fleet: Read | None = None
    fleet_path: str = ""
    overrides: Read | None = None


class CatalogueEntry(BaseModel):
    """How one family of keys is read in both layers, and made durable."""

    model_config = ConfigDict(extra="forbid")

    id: str
    match: str  # a regex over the key; named groups become template variables
    scope_requires: list[str] = Field(default_factory=list)  # scope keys that must be present (role, database)
    scope_forbids: list[str] = Field(default_factory=list)  # scope keys that must be absent
    description: str = ""
    vars: dict[str, list[str]] = Field(default_factory=dict)
    effective: Read | None = None
    declared: DeclaredRead | None = None
    normalize: Literal["string", "number", "bool", "bytes", "pg", "auto"] = "auto"
    durable: str
    in_container_via: list[str] = Field(default_factory=list)
    ephemeral_note: str = ""
    # The effective read sees the in-container state itself (the edited file), so an in-container change that now
    # equals the declared source (a fresh container would get the same) is not lost on a pod replacement.
    in_container_compare: bool = False
    baseline: BaselineRule | None = None

    @field_validator("match")
    @classmethod
    def _regex(cls, v: str) -> str:
        re.compile(v)
        return v

    def matches(self, key: str, scope: Mapping[str, str]) -> re.Match[str] | None:
        if any(not scope.get(s) for s in self.scope_requires) or any(scope.get(s) for s in self.scope_forbids):
            return None
        return re.fullmatch(self.match, key)


class CatalogueFile(BaseModel):
    """One catalogue file."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    entries: list[CatalogueEntry]


# -- templates ---------------------------------------------------------------------------------------------------

class _Attr:
    """Dotted access into nested mappings; a missing name raises Missing."""

    def __init__(self, data: Any, path: str = ""):
        self._data = data
        self._path = path

    def get(self, dotted: str) -> Any:
        cur: Any = self._data
        for part in dotted.split("."):
            if isinstance(cur, Mapping) and part in cur and cur[part] is not None:
                cur = cur[part]
            else:
                raise Missing(dotted)
        return cur


def render(template: str, variables: Mapping[str, Any]) -> str:
    """Fill `${a.b}` from nested variables; raise Missing for a name that is not there."""
    env = _Attr(variables)

    def sub(m: re.Match[str]) -> str:
        v = env.get(m.group(1))
        if isinstance(v, (dict, list)):
            return json.dumps(v)
        if isinstance(v, bool):
            return "true" if v else "false"
        return str(v)

    return _VAR.sub(sub, template)


# -- parsing and normalising ------------------------------------------------------------------------------------

# libyaml's parser where PyYAML has it: the same safe constructor, several times faster on a kubectl -o yaml dump.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

def _path(data: Any, path: str | list[str]) -> Any:
    parts = path if isinstance(path, list) else [p for p in path.split(".") if p]
    cur = data
    for p in parts:
        if isinstance(cur, Mapping) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and p.lstrip("-").isdigit() and -len(cur) <= int(p) < len(cur):
            cur = cur[int(p)]
        else:
            return None
    return cur


def parse_output(text: str, steps: Sequence[ParseStep], variables: Mapping[str, Any]) -> Any:
    """Apply the parse steps to command output. None means the value is absent from the source."""
    cur: Any = text
    for st in steps:
        if cur is None:
            return None
        if st.line is not None:
            lines = [ln.strip() for ln in str(cur).splitlines() if ln.strip()]
            cur = lines[st.line] if -len(lines) <= st.line < len(lines) else None
        elif st.regex is not None:
            m = re.search(render(st.regex, variables), str(cur), re.MULTILINE)
            cur = (m.group(1) if m and m.groups() else (m.group(0) if m else None))
        elif st.contains is not None:
            cur = "true" if re.search(render(st.contains, variables), str(cur), re.MULTILINE) else "false"
        elif st.json_path is not None or st.yaml_path is not None:
            if isinstance(cur, str):
                if not cur.strip():
                    return None
                try:
                    cur = json.loads(cur) if st.json_path is not None else yaml.load(cur, Loader=_YAML_LOADER)
                except (ValueError, yaml.YAMLError):
                    return None
            path = st.json_path if st.json_path is not None else st.yaml_path
            cur = _path(cur, [render(p, variables) for p in path] if isinstance(path, list)
                        else render(path, variables))
        elif st.join is not None:
            cur = st.join.join(str(x) for x in cur) if isinstance(cur, list) else cur
        elif st.strip is not None:
            cur = str(cur).strip(st.strip)
    if isinstance(cur, str) and not cur.strip():
        return None
    return cur


_BYTES = {"": 1, "b": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3}
_PG_UNITS = {"ms": 1.0, "s": 1000.0, "min": 60000.0, "h": 3600000.0, "d": 86400000.0,
             "b": 1.0, "kb": 1024.0, "mb": 1024.0**2, "gb": 1024.0**3, "tb": 1024.0**4}
_TRUE = {"true", "on", "yes", "1", "active", "enabled"}
_FALSE = {"false", "off", "no", "0", "inactive", "disabled"}


def normalize(value: Any, how: str) -> Any:
    """A comparable form: `64mb` and 67108864 are the same maxmemory; `10s` and `10000` the same timeout."""
    if value is None:
        return None
    if isinstance(value, bool):
        return value if how in ("bool", "auto") else str(value).lower()
    s = str(value).strip().strip("'\"")
    low = s.lower()
    if how == "bool" or (how == "auto" and low in _TRUE | _FALSE and not low.isdigit()):
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        return low
    if how in ("bytes", "pg", "number", "auto"):
        m = re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*([a-z]*)", low)
        if m:
            num, unit = float(m.group(1)), m.group(2)
            table = _BYTES if how == "bytes" else _PG_UNITS
            if unit == "" or (how != "number" and unit in table):
                n = num * (table.get(unit, 1.0) if unit else 1.0)
                return int(n) if n == int(n) else n
    return s if how != "auto" else s


# -- the catalogue -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Catalogue:
    """Entries in precedence order (a team's files first, then the shipped ones)."""

    entries: tuple[CatalogueEntry, ...]
    files: tuple[str, ...] = ()

    def lookup(self, key: str, scope: Mapping[str, str] | None = None,
               pinned: Mapping[str, str] | None = None) -> tuple[CatalogueEntry, dict[str, str]] | None:
        """The first entry for this key (a context's `declared_sources` may pin one by id), and its groups."""
        scope = scope or {}
        source: dict[str, str] = {}
        for pattern, value in (pinned or {}).items():
            if not re.fullmatch(_glob(pattern), key):
                continue
            for e in self.entries:
                m = e.matches(key, scope) if e.id == value else None
                if m:
                    return e, _groups(key, m)
            source = parse_source(value)
            break
        wanted = _API_KIND.get(source.get("source_kind", ""))
        matching = [(e, m) for e in self.entries for m in (e.matches(key, scope),) if m]
        # A pinned source (`configmap/redis-config:redis.conf`) picks the first entry that reads that kind of
        # source; without one (or none reads it), the first entry for the key.
        e_m = next(((e, m) for e, m in matching if wanted and e.declared is not None and e.declared.api is not None
                    and e.declared.api.kind == wanted), None) or (matching[0] if matching else None)
        if e_m is not None:
            return e_m[0], {**_groups(key, e_m[1]), **source}
        return None

    def get(self, entry_id: str) -> CatalogueEntry | None:
        return next((e for e in self.entries if e.id == entry_id), None)


_API_KIND = {"configmap": "configmap", "helm": "helm_values"}


def parse_source(value: str) -> dict[str, str]:
    """A context's `declared_sources` value that is not an entry id: `helm/<release>:<values path>`,
    `configmap/<name>:<key>`, or any `<kind>/<name>[:<path>]`, as template variables that override the entry's."""
    # Anything after the first blank is a description for people ("configmap/app-config key app.yaml (...)").
    m = re.match(r"(?P<kind>[a-z0-9_-]+)/(?P<name>[^\s:]+)(?::(?P<path>\S+))?(?:\s+key\s+(?P<key>\S+))?",
                 value.strip())
    if not m:
        return {}
    kind, name, path = m["kind"], m["name"], m["path"] or m["key"] or ""
    out = {"source_kind": kind, "source_name": name, "source_path": path}
    if kind == "helm":
        out.update(release=name, **({"values_path": path} if path else {}))
    elif kind == "configmap":
        out.update(configmap=name, **({"configmap_key": path} if path else {}))
    return out


def _glob(pattern: str) -> str:
    return "".join(".*" if ch == "*" else re.escape(ch) for ch in pattern)


def _groups(key: str, m: re.Match[str]) -> dict[str, str]:
    groups = {k: v for k, v in m.groupdict().items() if v is not None}
    groups.setdefault("name", key.split(".", 1)[-1] if "." in key else key)
    # MariaDB and PostgreSQL accept a setting's name with dashes or underscores in config files.
    groups["name_re"] = re.escape(groups["name"]).replace("_", "[-_]").replace("\\-", "[-_]")
    return groups


def builtin_paths() -> list[Path]:
    return sorted(_HERE.glob("*.yaml"))


def load_file(path: str | Path) -> CatalogueFile:
    return load_model(CatalogueFile, path, error=CatalogueError, what="a mapping with `entries:`")


def load_catalogue(extra: Sequence[str | Path] = (), *, builtin: bool = True) -> Catalogue:
    """A team's catalogue files (first, so they override), then the shipped ones. Entry ids must be unique."""
    paths = [Path(p) for p in extra] + (builtin_paths() if builtin else [])
    entries: list[CatalogueEntry] = []
    seen: dict[str, str] = {}
    for p in paths:
        for e in load_file(p).entries:
            if e.id in seen and seen[e.id] != str(p):
                continue  # a team's entry with a shipped id replaces the shipped one
            if e.id in seen:
                raise CatalogueError(f"duplicate entry id {e.id!r}", path=str(p))
            seen[e.id] = str(p)
            entries.append(e)
    return Catalogue(tuple(entries), tuple(str(p) for p in paths))
