"""The Go runtime under the embedded OPA engine: garbage-collector settings for the guard's long-lived processes.

OPA allocates about 100 KB per decision, while its live heap (the compiled policies and the loaded contexts) is
about 7 MB. With Go's default GOGC=100 the collector therefore runs every ~70 decisions, and a decision that meets
a collection (mark assists, and the collector's workers taking the second of two cores) takes several times its
CPU cost: on the 2-core reference machine the embedded engine's p99 was 4.5 ms against a CPU p99 of 1.9 ms.
With GOGC=1000 a collection comes every ~700 decisions and the wall-clock p99 is close to the CPU p99
(docs/performance.md has the table).

The Go runtime reads GOGC and GOMEMLIMIT once, when the library loads, from the environment the process was
started with; changing os.environ afterwards changes nothing. So `guardrail` re-executes itself once, with these
settings in its environment, for the commands that live long and decide many actions (`LONG_LIVED`). Nothing is
changed when either variable is already set (the operator's choice wins) or when GUARDRAIL_GO_TUNING=0. GOMEMLIMIT
bounds the heap a high GOGC would otherwise let grow with a larger live heap: near the limit Go collects as often
as it must.

The settings are the guard's own: commands the guard runs for an agent, and the agent `guardrail shell` starts,
get the environment without them (`child_env`), so a kubectl (also a Go program) runs with its usual defaults.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Mapping, MutableMapping, Sequence

__all__ = ["SETTINGS", "LONG_LIVED", "MARKER", "OPT_OUT", "tuned_environ", "child_env", "reexec_tuned", "describe",
           "subcommand"]

# What the guard sets, and the variable that records which of them it added (for child_env).
SETTINGS: dict[str, str] = {"GOGC": "1000", "GOMEMLIMIT": "512MiB"}
MARKER = "GUARDRAIL_GO_TUNED"
OPT_OUT = "GUARDRAIL_GO_TUNING"
# The subcommands worth a second interpreter start (~60 ms): each decides many actions in one process.
LONG_LIVED = frozenset({"shell", "mcp", "run", "bench", "audit"})


def tuned_environ(environ: Mapping[str, str]) -> dict[str, str] | None:
    """The environment to re-execute with, or None when nothing should change."""
    if environ.get(OPT_OUT, "").strip().lower() in {"0", "false", "no", "off"}:
        return None
    if MARKER in environ or any(k in environ for k in SETTINGS):
        return None
    env = dict(environ)
    env.update(SETTINGS)
    env[MARKER] = ",".join(sorted(SETTINGS))
    return env


def child_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`environ` (default: this process's) without the settings the guard added for itself."""
    env = dict(os.environ if environ is None else environ)
    added = env.pop(MARKER, None)
    if added:
        for k in added.split(","):
            env.pop(k, None)
    return env


def subcommand(argv: Sequence[str]) -> str | None:
    """The subcommand of a `guardrail` command line (its first word that is not an option)."""
    return next((a for a in argv if not a.startswith("-")), None)


def reexec_tuned(argv: Sequence[str] | None = None, *, environ: MutableMapping[str, str] | None = None,
                 execve: Callable[[str, list[str], dict[str, str]], object] = os.execve) -> bool:
    """Re-execute this interpreter with the same command line and the tuned environment, when it is not tuned
    yet. Returns False when nothing changed (already tuned, opted out, or no way to repeat the command line);
    on success it does not return."""
    env = tuned_environ(os.environ if environ is None else environ)
    if env is None:
        return False
    orig = list(argv if argv is not None else getattr(sys, "orig_argv", ()))
    if not orig or not sys.executable:
        return False
    execve(sys.executable, [sys.executable, *orig[1:]], env)
    return True


def describe(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Go GC settings this process runs with, and who set them (for benchmark reports)."""
    env = os.environ if environ is None else environ
    by = "guardrail" if MARKER in env else ("operator" if any(k in env for k in SETTINGS) else "go default")
    return {"GOGC": env.get("GOGC", "100"), "GOMEMLIMIT": env.get("GOMEMLIMIT", "none"), "set_by": by}
