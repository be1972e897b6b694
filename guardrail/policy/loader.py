"""Find and load a policies/ tree: Rego modules, their tests, and data documents, with file:line load errors.

Called by both engines (EmbeddedOPA, OPAServer), the stand-in REST server and `guardrail policy test`. A tree
is every `*.rego` below the root (`*_test.rego` are tests, left out of decisions) plus every `data.json`,
`data.yaml` or `data.yml`, merged at its folder's path as `opa run DIR` does (policies/data.yaml -> data,
policies/ops/data.yaml -> data.ops).

A tree of its own (`--policy DIR`) either replaces the library or adds to it. One with a `package guardrail`
decision module (not a test), which builds `data.guardrail.decision`, is a whole library and replaces it. Any
other tree, such as a team's `package guardrail.rules.<team>` rules importing `data.guardrail.lib`, is layered on
the library: its modules and data are loaded with the library's decision modules and data (data merged object by
object; a value both set is an error), and only its own tests are its tests. The library is GUARDRAIL_POLICY_DIR
when set, else the shipped one; a GUARDRAIL_POLICY_DIR of one's own rules is itself layered on the shipped one.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from guardrail.errors import PolicyLoadError
from guardrail.policy.exceptions import RULE_ID, exception_problem, rule_ids
from guardrail.resources import policy_dir, shipped_policy_dir
from guardrail.yamlio import read_data
from verifiers.datafile import decode_text, read_input_bytes

__all__ = ["RegoModule", "PolicyTree", "DECISION_PACKAGE", "opa_error_location", "load_error",
           "shipped_rule_ids"]

_PACKAGE = re.compile(r"^package\s+([A-Za-z_][\w.]*)", re.MULTILINE)
# A test rule is a top-level rule head named test_*, as `opa test` finds them (functions are not tests).
_TEST_RULE = re.compile(r"^(test_\w+)\s*(?:if\b|:=|=|\{)", re.MULTILINE)
# OPA names the module and line of the first error: "... policies/x.rego:12: rego_parse_error: unexpected }".
_OPA_LOCATION = re.compile(r"(?P<path>[^\s:][^:\n]*?\.rego):(?P<line>\d+):(?:\d+:)?\s*(?P<msg>[^\n]+)")
_DATA_FILES = ("data.json", "data.yaml", "data.yml")
# The packages whose `deny` and `warn` sets policies/guardrail.rego gathers: one level below guardrail.rules.
RULES_PREFIX = "guardrail.rules."
# A top-level head of a deny or warn rule (opa fmt puts every head at column 0).
_FINDING_HEAD = re.compile(r"^(deny|warn)\b(.*)$")
_INPUT_CONTEXT = re.compile(r"\binput\s*(\.\s*context\b|\[\s*\"context\"\s*\])")
# What a rule's text refers to, once its comments and string literals are blanked out (check_references).
_INPUT_REF = re.compile(r"\binput\.([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?)?")
_STRINGS = re.compile(r'"(?:[^"\\\n]|\\.)*"|`[^`\n]*`')
_LIB_IMPORT = re.compile(r"^import\s+data\.guardrail\.lib(?:\s+as\s+(\w+))?\s*$", re.M)
# A top-level rule or function head: `name := ...`, `name if`, `name(x) := ...`, `name contains`, `default name`.
_RULE_HEAD = re.compile(r"^(?:default\s+)?([A-Za-z_]\w*)\s*(?:\(|:=|=|\bif\b|\bcontains\b|\[|\{)", re.M)
# The input document the guard sends (guardrail/policy/embedded.py; `context` is checked on its own).
_INPUT_FIELDS = ("action", "command", "observed", "context_ref")


@dataclass(frozen=True)
class RegoModule:
    """One .rego file: where it is, its text, its package, and (for *_test.rego) its test rule names."""

    path: Path
    source: str
    package: str
    relpath: str
    # Where the module is uploaded to an OPA server (its id there): relpath, under "overlay/<digest of its root>/"
    # for a module of a tree layered on the library, so that team/rules/data.rego cannot replace the library's
    # rules/data.rego, nor one layer's rules.rego another's.
    upload_id: str = ""

    @property
    def id(self) -> str:
        return self.upload_id or self.relpath

    @property
    def is_test(self) -> bool:
        return self.path.name.endswith("_test.rego")

    @property
    def tests(self) -> list[str]:
        seen: dict[str, None] = {}
        for name in _TEST_RULE.findall(self.source):
            seen.setdefault(name, None)
        return list(seen)


DECISION_PACKAGE = "guardrail"


@dataclass(frozen=True)
class PolicyTree:
    """The modules and data documents below one policy root (and, for a tree layered on the library, the
    library's decision modules and data too; `library` is then the library's root)."""

    root: Path
    modules: tuple[RegoModule, ...]
    data: dict[str, Any] = field(default_factory=dict)
    library: Path | None = None

    @classmethod
    def load(cls, root: str | Path | None = None) -> "PolicyTree":
        """The tree at `root` (GUARDRAIL_POLICY_DIR, else the shipped library, when None). A tree whose decision
        modules lack the decision package is layered on the library: on `load(None)` for a `root` of its own,
        and on the shipped library for GUARDRAIL_POLICY_DIR itself (see the module's docstring). Its exceptions
        must name rules it has (guardrail/policy/exceptions.py)."""
        tree = cls._layered(root)
        if "exceptions" in tree.data:
            problem = exception_problem(tree.data["exceptions"], rule_ids(m.source for m in tree.decision_modules))
            if problem is not None:
                where = next((d / n for d in (tree.root, tree.library) if d is not None and d.is_dir()
                              for n in _DATA_FILES if (d / n).is_file() and "exceptions" in (d / n).read_text()),
                             tree.root)
                line = next((n for n, ln in enumerate(where.read_text().splitlines(), 1)
                             if re.match(r'\s*[{,]?\s*"?exceptions"?\s*:', ln)), None) if where.is_file() else None
                raise PolicyLoadError(problem, path=str(where), line=line)
        return tree

    @classmethod
    def _layered(cls, root: str | Path | None = None) -> "PolicyTree":
        tree = cls._load_one(root)
        if any(m.package == DECISION_PACKAGE for m in tree.decision_modules):
            return tree
        base = cls._layered(None) if root is not None else cls._load_one(shipped_policy_dir())
        if base.root.resolve() == tree.root.resolve():
            return base if root is not None else tree  # the same tree twice; or the shipped one, as it is
        if tree.root.resolve().is_relative_to(base.root.resolve()):
            # A part of the library itself (policies/rules): the library, with that part's tests.
            return cls(tree.root, base.decision_modules + tree.test_modules, base.data, base.root)
        data: dict[str, Any] = json.loads(json.dumps(base.data))
        _merge_data(data, tree.data, where=tree.root, other=base.root)
        # Each layer uploads under a prefix of its own (two layers may both have a rules.rego); a module that is
        # the library's own file (a symlink into it) is not loaded twice.
        prefix = "overlay/" + hashlib.sha1(str(tree.root.resolve()).encode()).hexdigest()[:8]
        known = {m.path.resolve() for m in base.decision_modules}
        own = tuple(replace(m, upload_id=f"{prefix}/{m.relpath}") for m in tree.modules
                    if m.path.resolve() not in known)
        check_layer(own, base.decision_modules)
        ids = [m.id for m in base.decision_modules + own]
        clash = next((i for i in ids if ids.count(i) > 1), None)
        if clash is not None:
            raise PolicyLoadError(f"two modules would be uploaded as {clash!r}", path=str(tree.root))
        return cls(tree.root, base.decision_modules + own, data, base.root)

    @classmethod
    def _load_one(cls, root: str | Path | None) -> "PolicyTree":
        root = Path(root) if root is not None else policy_dir()
        if not root.exists():
            raise PolicyLoadError("no such policy directory", path=str(root))
        files = [root] if root.is_file() else sorted(root.rglob("*.rego"))
        base = root.parent if root.is_file() else root
        modules = []
        for f in files:
            # The shared bounded reader: a FIFO or device named *.rego cannot hold the load, a huge one is refused.
            text = decode_text(read_input_bytes(f, error=PolicyLoadError), path=f, error=PolicyLoadError)
            m = _PACKAGE.search(text)
            if m is None:
                raise PolicyLoadError("no package declaration", path=str(f), line=1)
            modules.append(RegoModule(f, text, m.group(1), f.relative_to(base).as_posix()))
        data: dict[str, Any] = {}
        if root.is_dir():
            for name in _DATA_FILES:
                for f in sorted(root.rglob(name)):
                    doc, _, _ = read_data(f, error=PolicyLoadError)
                    if doc is None:
                        continue
                    if not isinstance(doc, dict):
                        raise PolicyLoadError("a data document must be a mapping", path=str(f), line=1)
                    _merge_at(data, f.parent.relative_to(root).parts, doc)
        if not modules and not data:  # a tree of data alone (exceptions for a deployment) adds to the library
            raise PolicyLoadError("no .rego files and no data.json/data.yaml", path=str(root))
        return cls(root, tuple(modules), data)

    @property
    def decision_modules(self) -> tuple[RegoModule, ...]:
        return tuple(m for m in self.modules if not m.is_test)

    @property
    def test_modules(self) -> tuple[RegoModule, ...]:
        return tuple(m for m in self.modules if m.is_test)

    def by_path(self, name: str) -> Path | None:
        # The engines name a module by its path (EmbeddedOPA) or its upload id (an OPA server).
        return next((m.path for m in self.modules if name in (str(m.path), m.id)), None)


def check_layer(own: tuple[RegoModule, ...], library: tuple[RegoModule, ...]) -> None:
    """The mistakes in a team's own rules that OPA accepts and that would leave a rule never enforced, caught when
    the tree is loaded (PolicyLoadError naming file and line): a deny/warn that is not a set of findings (`deny if`,
    `deny := ...`: the decision reads only sets), deny/warn in a package the decision never reads (outside
    guardrail.rules, or nested below it), a package the library already uses (its helper rules would clash), and
    `input.context`, which is absent when the guard decides (it passes the context by reference; lib.context reads
    it). Tests are not checked: they build their own input."""

    library_packages = {m.package for m in library}
    library_ids = rule_ids(m.source for m in library)
    for m in own:
        if m.is_test:
            continue
        lines = m.source.splitlines()
        package_line = next((n for n, ln in enumerate(lines, 1) if ln.startswith("package ")), 1)
        heads = [(n, h.group(1), h.group(2)) for n, ln in enumerate(lines, 1) if (h := _FINDING_HEAD.match(ln))]
        for n, name, rest in heads:
            if not re.match(r"\s+contains\b", rest):
                raise PolicyLoadError(
                    f"{name} is not a set of findings, so it never denies or warns: write `{name} contains "
                    f"{{\"id\": \"TEAM-001\", \"msg\": \"...\", \"details\": {{}}}} if {{ ... }}`",
                    path=str(m.path), line=n)
        if heads:
            rest = m.package[len(RULES_PREFIX):] if m.package.startswith(RULES_PREFIX) else ""
            if not rest or "." in rest:
                raise PolicyLoadError(
                    f"{heads[0][1]} in package {m.package} is never read: the guard gathers deny and warn from "
                    f"packages one level below guardrail.rules (package {RULES_PREFIX}"
                    f"{(rest or m.package).replace('.', '_')})", path=str(m.path), line=package_line)
        if m.package in library_packages:
            raise PolicyLoadError(
                f"package {m.package} is the library's own: its rules and helpers would merge with the library's "
                f"and clash; give your rules a package of their own ({m.package}_team)",
                path=str(m.path), line=package_line)
        for n, ln in enumerate(lines, 1):
            taken = next((i for i in RULE_ID.findall(ln.split("#", 1)[0]) if i in library_ids), None)
            if taken is not None:
                raise PolicyLoadError(
                    f"rule id {taken} is the library's: findings of both would look alike, and an exception for "
                    "it would silence both; give your rule an id of its own (TEAM-...)", path=str(m.path), line=n)
            if _INPUT_CONTEXT.search(ln.split("#", 1)[0]):
                raise PolicyLoadError(
                    "input.context is absent when the guard decides (it passes the incident context by "
                    "reference): read it as lib.context (`import data.guardrail.lib`), as the library's rules do",
                    path=str(m.path), line=n)
    check_references(own, library)


def check_references(own: tuple[RegoModule, ...], library: tuple[RegoModule, ...]) -> None:
    """A misspelt field of the input (`input.action.tols`) or a lib rule that does not exist (`lib.tagret_kind`)
    is undefined in Rego, not an error: the rule body stops there and the rule never fires. OPA checks input
    only against a schema, which the guard does not pass, so such references in a team's own (non-test) rules
    under guardrail.* are load errors naming file:line, with the nearest right name. Packages outside guardrail
    are not the guard's (`policy eval --policy` evaluates any tree on any input) and are left alone; a module
    that does not parse either is left to the engine, whose parse error names the line that matters."""
    from guardrail.actions.model import Action, Target

    lib_rules = {h for m in (*library, *own) if m.package == "guardrail.lib" for h in _RULE_HEAD.findall(m.source)}
    known = {"the guard's input": _INPUT_FIELDS, "input.action": tuple(Action.model_fields),
             "input.action.target": tuple(Target.model_fields), "data.guardrail.lib": tuple(sorted(lib_rules))}
    for m in own:
        if m.is_test or m.package == "guardrail.lib" or not m.package.startswith("guardrail."):
            continue
        problem = _unknown_reference(m, known)
        if problem is not None and _parses(m):
            owner, name, n = problem
            near = difflib.get_close_matches(name, known[owner], n=1)
            hint = f"did you mean {near[0]}?" if near else f"it has {', '.join(sorted(known[owner]))}"
            raise PolicyLoadError(f"{owner} has no {name}, so a rule reading it never fires ({hint})",
                                  path=str(m.path), line=n)


def _unknown_reference(m: RegoModule, known: Mapping[str, tuple[str, ...]]) -> tuple[str, str, int] | None:
    """The first (owner, name, line) of m that names an input field or lib rule `known` does not have."""
    aliases = sorted({a or "lib" for a in _LIB_IMPORT.findall(m.source)})
    lib_ref = re.compile(rf"(?<![\w.])(?:{'|'.join(map(re.escape, aliases))})\.([A-Za-z_]\w*)") if aliases else None
    for n, ln in enumerate(m.source.splitlines(), 1):
        code = _STRINGS.sub('""', ln).split("#", 1)[0]
        for top, field, sub in _INPUT_REF.findall(code):
            if top == "context":
                continue  # check_layer's own message
            if top not in known["the guard's input"]:
                return "the guard's input", top, n
            if top == "action" and field and field not in known["input.action"]:
                return "input.action", field, n
            if top == "action" and field == "target" and sub and sub not in known["input.action.target"]:
                return "input.action.target", sub, n
        if lib_ref is not None and known["data.guardrail.lib"]:
            name = next((x for x in lib_ref.findall(code) if x not in known["data.guardrail.lib"]), None)
            if name is not None:
                return "data.guardrail.lib", name, n
    return None


def _parses(m: RegoModule) -> bool:
    from opa_bindings import OpaEngine, OpaError

    with OpaEngine() as engine:
        try:
            engine.add_policy(m.id, m.source)
        except OpaError as e:
            return "parse" not in f"{e.code} {e.message}"
    return True


def _merge_data(into: dict[str, Any], doc: Mapping[str, Any], *, where: Path, other: Path,
                at: tuple[str, ...] = ()) -> None:
    """Merge a layered tree's data into the library's, object by object, as `opa run` merges data documents:
    a value both set (other than two objects) is a conflict, not an override. The one exception is
    data.exceptions: two lists are joined, so each layer (a deployment's, a team's) can exempt its own."""
    for k, v in doc.items():
        if k not in into:
            into[k] = json.loads(json.dumps(v))
        elif isinstance(into[k], dict) and isinstance(v, Mapping):
            _merge_data(into[k], v, where=where, other=other, at=(*at, k))
        elif at == () and k == "exceptions" and isinstance(into[k], list) and isinstance(v, list):
            into[k] = into[k] + json.loads(json.dumps(v))
        else:
            raise PolicyLoadError(f"data.{'.'.join((*at, k))} is set both by {other} and by this tree",
                                  path=str(where))


def _merge_at(data: dict[str, Any], parts: tuple[str, ...], doc: dict[str, Any]) -> None:
    node = data
    for p in parts:
        node = node.setdefault(p, {})
    node.update(json.loads(json.dumps(doc)))


def opa_error_location(message: str) -> tuple[str | None, int | None, str]:
    """The module, line and message of the first error in an OPA error text (None where it names none)."""
    m = _OPA_LOCATION.search(message)
    if m is None:
        first = message.strip().splitlines()[0] if message.strip() else "unknown OPA error"
        return None, None, first
    return m.group("path"), int(m.group("line")), m.group("msg").strip()


def load_error(message: str, tree: PolicyTree | None = None) -> PolicyLoadError:
    """Turn an OPA compile error into a PolicyLoadError naming the file (as on disk) and line."""
    name, line, msg = opa_error_location(message)
    path = name
    if name is not None and tree is not None:
        found = tree.by_path(name)
        path = str(found) if found is not None else name
    elif tree is not None:
        path = str(tree.root)
    return PolicyLoadError(msg, path=path, line=line)


@functools.lru_cache(maxsize=1)
def shipped_rule_ids() -> frozenset[str]:
    """The finding ids of the shipped library's rules (what an incident context's exceptions may name)."""
    return rule_ids(m.source for m in PolicyTree._load_one(shipped_policy_dir()).decision_modules)
