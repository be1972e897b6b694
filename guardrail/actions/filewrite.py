"""The Action of writing one file, shared by the shell walker's redirections and the file tools' classifiers.

Imported by `shell` (`> file`, `>> file`), `wrappers` and the classifiers (cp, tee, sed -i, curl -o, kubectl cp
...): it sits below all of them, so that no classifier imports the walker.
"""

from __future__ import annotations

from typing import Any

from guardrail.actions.invocation import Invocation, clean_path, host_part
from guardrail.actions.model import Action, KeyChange

__all__ = ["NULL_SINKS", "file_write"]

# Where writing is not a change to anything.
NULL_SINKS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"})


def file_write(inv: Invocation, path: str, *, verb: str = "write", content: str | None = None,
               by: str = "", **details: Any) -> Action:
    """The Action of writing (or deleting, `verb="delete"`) one file, shared by redirections and file tools.

    A file of the host's own (a program in a bin directory, /proc, /sys, /etc/hosts ...) carries `host_change`: a
    change to the machine every service on it shares. A path through a process's root (`/proc/1/root/var/lib/x`)
    is the file under it."""
    resolved = clean_path(path)
    if resolved != path and (path.startswith("/") or not resolved.startswith("..")):
        # The path as the kernel reads it (`/tmp/../etc` is /etc, `//var/./lib` is /var/lib): every rule and the
        # guard's own-files check compare this one; the spelling typed is kept beside it.
        details = {**details, "written_as": path}
        path = resolved
    d: dict[str, Any] = {"path": path, **details}
    host = host_part(resolved)
    if host:
        d["host_change"] = f"{verb} {resolved} ({host})"
    if by:
        d["by"] = by
    if content is not None:
        d["content"] = content
    value = None if verb == "delete" else content
    return inv.action("file", verb, target=inv.file_target(path), keys=[KeyChange(key=f"file:{path}", value=value)],
                      layer=inv.file_layer, mutating=True, details=d)
