"""The one interface every tool classifier implements, its registry, and the option parsing they share.

`guardrail.actions.normalise` looks a command name up with `classifier_for(name)` and calls
`classify(invocation) -> list[Action]`. Each tool module (kubectl, helm, psql, ...) registers itself with
`@register`. A classifier never raises on purpose: an argv it cannot read becomes a `mutating: "unknown"` Action.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Protocol

import yaml

from guardrail.actions.invocation import Invocation
from guardrail.actions.model import Action, KeyChange
from guardrail.actions.words import Word

__all__ = ["Classifier", "register", "classifier_for", "registered", "OptionSpec", "Parsed", "flatten",
           "json_object", "keys_from"]


class Classifier(Protocol):
    """Turns one invocation of a tool into the Actions it performs."""

    commands: ClassVar[tuple[str, ...]]

    def classify(self, inv: Invocation) -> list[Action]: ...


_REGISTRY: dict[str, Classifier] = {}


def register(cls: type) -> type:
    """Class decorator: one instance serves every command name in `cls.commands`."""
    instance = cls()
    for name in cls.commands:
        _REGISTRY[name] = instance
    return cls


def classifier_for(name: str) -> Classifier | None:
    return _REGISTRY.get(name)


def registered() -> dict[str, Classifier]:
    return dict(_REGISTRY)


@dataclass
class Parsed:
    """An argv split into options (canonical name -> values), boolean flags and positionals."""

    opts: dict[str, list[Word]] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)
    positionals: list[Word] = field(default_factory=list)
    after_dashdash: list[Word] | None = None  # what follows a bare `--`, when there is one
    order: list[tuple[str, Word | None]] = field(default_factory=list)  # (name, value) as given, for -c -c ...

    def get(self, name: str, default: str | None = None) -> Word | str | None:
        v = self.opts.get(name)
        return v[-1] if v else default

    def all(self, name: str) -> list[Word]:
        return self.opts.get(name, [])

    def has(self, *names: str) -> bool:
        return any(n in self.flags or n in self.opts for n in names)

    @property
    def operands(self) -> list[Word]:
        """Every word that is not an option: the positionals and what follows a bare `--`. For a wrapper, its
        command (`command -- rm -rf /`, `exec -- ...`: the words after `--` were dropped, and nothing was judged)."""
        return list(self.positionals) + list(self.after_dashdash or [])


def resolve_long(arg: str, known: Iterable[str]) -> str:
    """`arg` with a GNU long-option abbreviation spelled out (`--in-pl=.bak` -> `--in-place=.bak`), as getopt_long
    reads it: an exact name wins, a prefix of exactly one known name is that name, anything else stays."""
    if not arg.startswith("--") or len(arg) <= 2:
        return arg
    name, eq, value = arg.partition("=")
    known = set(known)
    if name in known:
        return arg
    hits = [k for k in known if k.startswith(name)]
    return f"{hits[0]}{eq}{value}" if len(hits) == 1 else arg


@dataclass(frozen=True)
class OptionSpec:
    """Which options of a tool take a value, and their canonical names (`--namespace` -> `-n`)."""

    takes_value: frozenset[str] = frozenset()
    aliases: dict[str, str] = field(default_factory=dict)
    # Wrappers stop at the wrapped command's name: the rest of argv belongs to it.
    stop_at_positional: bool = False
    # Tools whose `-abc` is one long option (`-name`), not three flags (find, kubectl's `-o=json` is handled).
    long_single_dash: bool = False
    # GNU getopt_long: a long option may be abbreviated to any unambiguous prefix (`rm --rec` is --recursive,
    # `sort --compress-prog=sh`). The tool's long options, those without a value too, so that canon() can resolve
    # a prefix as the tool does: an exact name wins, an ambiguous prefix stays as written (the tool rejects it).
    long_flags: frozenset[str] = frozenset()

    @staticmethod
    def of(takes_value: Iterable[str] = (), aliases: dict[str, str] | None = None, **kw: Any) -> "OptionSpec":
        al = dict(aliases or {})
        tv = {al.get(t, t) for t in takes_value}
        if "long_flags" in kw:
            # The long options that take a value are long options too, under the names they were written with.
            kw["long_flags"] = frozenset(kw["long_flags"]) | {t for t in takes_value if t.startswith("--")}
        return OptionSpec(takes_value=frozenset(tv), aliases=al, **kw)

    def canon(self, name: str) -> str:
        if self.long_flags and name.startswith("--") and len(name) > 2:
            name = resolve_long(name, self.long_flags | {n for n in self.takes_value | set(self.aliases)
                                                         if n.startswith("--")})
        return self.aliases.get(name, name)

    def parse(self, args: list[Word]) -> Parsed:
        p = Parsed()
        i = 0
        n = len(args)
        while i < n:
            a = args[i]
            if a == "--":
                p.after_dashdash = list(args[i + 1:])
                break
            if a.startswith("--") and len(a) > 2:
                name, eq, val = a.partition("=")
                c = self.canon(name)
                if eq:
                    self._add(p, c, Word.of(val, dynamic=a.dynamic))
                elif c in self.takes_value and i + 1 < n:
                    i += 1
                    self._add(p, c, args[i])
                else:
                    p.flags.add(c)
                    p.order.append((c, None))
            elif a.startswith("-") and len(a) > 1 and not a.dynamic:
                name, eq, val = a.partition("=")
                c = self.canon(name)
                if eq and (c in self.takes_value or len(name) == 2):
                    self._add(p, c, Word.of(val))
                elif c in self.takes_value:
                    if i + 1 < n:
                        i += 1
                        self._add(p, c, args[i])
                    else:
                        p.flags.add(c)
                elif self.long_single_dash:
                    p.flags.add(c)
                    p.order.append((c, None))
                else:
                    # -sSfL, -XPUT, -d@file, -n5: letters until one that takes a value.
                    j = 1
                    while j < len(a):
                        c = self.canon("-" + a[j])
                        if c in self.takes_value:
                            rest = a[j + 1:]
                            if rest:
                                self._add(p, c, Word.of(rest[1:] if rest.startswith("=") else rest))
                            elif i + 1 < n:
                                i += 1
                                self._add(p, c, args[i])
                            else:
                                p.flags.add(c)
                            break
                        p.flags.add(c)
                        p.order.append((c, None))
                        j += 1
            else:
                p.positionals.append(a)
                if self.stop_at_positional:
                    p.positionals.extend(args[i + 1:])
                    break
            i += 1
        return p

    @staticmethod
    def _add(p: Parsed, name: str, value: Word) -> None:
        p.opts.setdefault(name, []).append(value)
        p.order.append((name, value))


# A document an agent hands the guard (a patch, a values file, a manifest on stdin) is read whole; YAML aliases can make
# a few hundred bytes expand to 10^8 values ("billion laughs"). Past this many values, as expanded, it is not judged.
MAX_DOCUMENT_VALUES = 50_000
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DocumentTooLarge(ValueError):
    """A document whose values, with YAML aliases expanded, number more than MAX_DOCUMENT_VALUES."""


def bounded(doc: Any, limit: int = MAX_DOCUMENT_VALUES) -> Any:
    """`doc` itself, or DocumentTooLarge when it expands to more than `limit` values (counted as a reader that
    walks it would meet them: a node shared by aliases counts each time it is reached; the count stops at the
    limit, so this costs at most `limit` steps)."""
    stack, n = [doc], 0
    while stack:
        d = stack.pop()
        n += 1
        if n > limit:
            raise DocumentTooLarge(f"more than {limit:,} values once its aliases are expanded")
        if isinstance(d, dict):
            stack.extend(d.values())
        elif isinstance(d, list):
            stack.extend(d)
    return doc


def load_yaml(text: str, *, stream: bool = False) -> Any:
    """One YAML document (or with `stream`, the list of a stream's documents), bounded: None when it does not parse
    or holds a value YAML cannot build (2024-13-45), DocumentTooLarge when it expands past the bound."""
    try:
        doc = list(yaml.load_all(text, Loader=_YAML_LOADER)) if stream else yaml.load(text, Loader=_YAML_LOADER)
    except (yaml.YAMLError, ValueError):
        return None
    return bounded(doc)


def flatten(obj: Any, prefix: str) -> list[tuple[str, Any]]:
    """{"db": {"pool_size": 20}} under "app" -> [("app.db.pool_size", 20)]. Lists stay whole values."""
    if isinstance(obj, dict) and obj:
        out: list[tuple[str, Any]] = []
        for k, v in obj.items():
            out.extend(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return [(prefix, obj)]


def json_object(text: str | None) -> dict[str, Any] | None:
    """A JSON object from text, or None when the text is missing or not a JSON object."""
    if text is None:
        return None
    try:
        v = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return v if isinstance(v, dict) else None


def keys_from(pairs: Iterable[tuple[str, Any]], scope: dict[str, str] | None = None) -> list[KeyChange]:
    return [KeyChange(key=k, value=v, scope=scope or {}) for k, v in pairs]
