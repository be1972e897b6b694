"""The guard's own files: its journal, its policy tree, the context, criteria and SLO files and the token files it
was started with. An agent that may write them may erase the record of what it did, or rewrite the rules that
judge it, so the guard refuses any action that writes, moves, deletes or re-permissions them.

Called by guardrail.guard.Guard.before for each normalised action; the paths come from the Guard itself (its
journal, its engine's policy tree) and from whoever builds it (the CLI's --context, --criteria, --slo, token
files; guardrail.adapters.session's journal directory). The decision reads the normaliser's file targets
(`target.kind == "file"`, the path it writes), never the command's text, and compares paths after normalising
them: lexically (`/tmp/../var/log/g`), through symbolic links (a link to the journal is the journal), a relative
path as the end of any protected path (the agent's shell may have `cd`-ed anywhere), and a glob as every protected
path it could match. A write to a directory that holds a protected path (`rm -rf /var/log`, `mv dir`, `chmod -R`)
touches it too. A file in a container (`kubectl exec`) is the container's, not the guard's.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from guardrail.policy.base import Decision, Finding, Outcome

__all__ = ["OwnFiles", "OWN_FILES_RULE", "policy_dirs"]

OWN_FILES_RULE = "GUARDRAIL-SELF-001"
_GLOB = frozenset("*?[")
# Verbs of the normaliser's file actions that reach everything below a directory they name.
_ON_A_TREE = frozenset({"delete", "chmod", "chown", "chgrp", "move", "rename", "truncate", "setfacl", "chattr"})


def _variants(path: str | os.PathLike[str]) -> set[str]:
    """The path made absolute and lexically clean, and the same through its symbolic links."""
    p = posixpath.normpath(os.path.abspath(os.fspath(path)))
    out = {p}
    try:
        out.add(os.path.realpath(p))
    except (OSError, ValueError):
        pass
    return out


@dataclass
class OwnFiles:
    """The guard's own files and directories, and the test of an action against them."""

    files: set[str] = field(default_factory=set)  # each protected file, absolute (and through its links)
    dirs: set[str] = field(default_factory=set)  # each protected directory: it and everything below it

    def add_file(self, path: str | os.PathLike[str] | None) -> "OwnFiles":
        if path is not None and os.fspath(path):
            self.files |= _variants(path)
        return self

    def add_dir(self, path: str | os.PathLike[str] | None) -> "OwnFiles":
        if path is not None and os.fspath(path):
            self.dirs |= _variants(path)
        return self

    def for_guard(self, engine: Any, journal_path: str | os.PathLike[str] | None) -> "OwnFiles":
        """A copy with what a Guard knows of itself added: its journal file and its engine's policy tree."""
        out = OwnFiles(set(self.files), set(self.dirs)).add_file(journal_path)
        for d in policy_dirs(engine):
            out.add_dir(d)
        return out

    def add_files(self, paths: Iterable[str | os.PathLike[str] | None]) -> "OwnFiles":
        for p in paths:
            self.add_file(p)
        return self

    @property
    def all(self) -> set[str]:
        return self.files | self.dirs

    def touched_by(self, action: Mapping[str, Any]) -> str | None:
        """The protected path `action` (an Action's JSON) writes, moves, deletes or re-permissions, or None."""
        if not (self.files or self.dirs) or not isinstance(action, Mapping):
            return None
        if action.get("mutating") is False:
            return None
        target = action.get("target") or {}
        if not isinstance(target, Mapping) or target.get("kind") != "file":
            return None
        name = target.get("name")
        if not isinstance(name, str) or not name:
            return None
        return self._touches(name, str(action.get("verb") or "").lower() in _ON_A_TREE)

    def _touches(self, written: str, on_tree: bool = True) -> str | None:
        """`on_tree`: the verb acts on everything below a directory it names (delete, chmod -R ...), so a
        directory far above a protected path touches it; other writes to a directory only put an entry in it."""
        if _GLOB & set(written):
            return self._glob_touches(written, on_tree)
        if not written.startswith("/"):
            return self._relative_touches(written, on_tree)
        for w in _variants(written):
            for own in sorted(self.all):
                if w == own or (on_tree and _within(own, w)):  # the path itself, or a directory that holds it
                    return own
                if w == posixpath.dirname(own):  # a write into its directory may replace it by name (mv x dir/)
                    return own
            for d in sorted(self.dirs):
                if _within(w, d):  # a file inside a protected directory
                    return d
        return None

    def _relative_touches(self, written: str, on_tree: bool) -> str | None:
        # Relative to a directory the guard cannot know (the agent's shell may have cd-ed anywhere): it touches a
        # protected path that ends with it, or whose directories do (`rm -rf log/g`, `sed -i ... g/journal.jsonl`).
        parts = [p for p in posixpath.normpath(written).split("/") if p not in ("", ".", "..")]
        if not parts:
            return sorted(self.all)[0]  # `.` or `..`: a directory that may hold any of them
        tail = "/" + "/".join(parts)
        for own in sorted(self.all):
            if any(c.endswith(tail) for c in (own, *(_ancestors(own) if on_tree else ()))):
                return own
        for d in sorted(self.dirs):  # inside a protected directory named from above it (`policies/rules/x.rego`)
            if any(d.endswith("/" + "/".join(parts[:i])) for i in range(1, len(parts))):
                return d
        # ... and from the guard's own directory, the likeliest one.
        return self._touches(os.path.abspath(written), on_tree)

    def _glob_touches(self, pattern: str, on_tree: bool) -> str | None:
        """A glob is judged as every path it could match, component by component (`*` stays within one, as the
        shell's does): a protected path itself, a path inside a protected directory, or (for a verb that acts on
        a whole tree) a directory above a protected path. A relative glob is matched against their last
        components."""
        pat = [c for c in posixpath.normpath(pattern).split("/") if c not in ("", ".")]
        for own in sorted(self.all):
            comps = [c for c in own.split("/") if c]
            is_dir = own in self.dirs
            if pattern.startswith("/"):
                n = min(len(pat), len(comps))
                if not all(fnmatch.fnmatchcase(comps[i], pat[i]) for i in range(n)):
                    continue
                if len(pat) == len(comps) or (len(pat) > len(comps) and is_dir) \
                        or (len(pat) < len(comps) and (on_tree or len(pat) == len(comps) - 1)):
                    return own
            else:
                for end in range(1, len(comps) + 1):  # the pattern ending at each component of the path
                    head = comps[:end]
                    if len(pat) <= len(head) and all(fnmatch.fnmatchcase(a, b) for a, b in
                                                     zip(head[len(head) - len(pat):], pat)):
                        if end == len(comps) or on_tree:
                            return own
        return None

    def refusal(self, action: Mapping[str, Any], *, decision_id: str) -> Decision | None:
        """The guard's own refusal of an action that touches one of its files, or None."""
        own = self.touched_by(action)
        if own is None:
            return None
        target = (action.get("target") or {}).get("name")
        finding = Finding(OWN_FILES_RULE,
                          f"{target} is (or holds) the guard's own file {own}: its journal, policy or configuration. "
                          "The guard does not let a command write, move, delete or re-permission these; leave them "
                          "alone and write your own files elsewhere.",
                          {"path": target, "own": own})
        return Decision(Outcome.DENY, decision_id, (finding,), engine="guard")


def _within(path: str, directory: str) -> bool:
    return directory == "/" and path != "/" or path.startswith(directory.rstrip("/") + "/")


def _ancestors(path: str) -> list[str]:
    out = []
    p = posixpath.dirname(path)
    while p and p != "/":
        out.append(p)
        p = posixpath.dirname(p)
    return out + ["/"]


def policy_dirs(engine: Any) -> list[Path]:
    """The directories of the policy tree an engine loaded (EmbeddedOPA, OPAServer with upload, each engine of a
    pool): its root and the folder of each of its modules (a tree layered on the library has two roots)."""
    out: list[Path] = []
    for e in getattr(engine, "engines", None) or [engine]:
        tree = getattr(e, "tree", None)
        root = getattr(tree, "root", None)
        if root is not None:
            out.append(Path(root))
        for m in getattr(tree, "modules", None) or ():
            path = getattr(m, "path", None)
            if path is not None:
                out.append(Path(path).parent)
    return sorted(set(out))
