"""The one error tree of sre-guardrail. Every error the project raises on purpose is a GuardrailError.

    GuardrailError
    ├── InputError            bad user input: a missing file, bad YAML/JSON, a Rego syntax error (CLI exit 2)
    │   ├── ScenarioError     a scenario file that fails validation
    │   └── PolicyLoadError   a policy file that does not compile
    ├── PolicyEngineError     the engine failed while deciding (the guard fails closed on it)
    ├── JournalError          the journal could not be written
    └── EnvironmentError_     the environment failed to run a command or answer a query

An InputError names the file and, where known, the line, so the CLI can print one line: `path:line: message`.
It is a verifiers.datafile.DataFileError, the shape every bad data file raises (a persistence catalogue's
CatalogueError too), and the CLI turns any DataFileError into that line and exit 2.
"""

from __future__ import annotations

from verifiers.datafile import DataFileError

__all__ = [
    "GuardrailError",
    "InputError",
    "ScenarioError",
    "PolicyLoadError",
    "PolicyEngineError",
    "JournalError",
    "EnvironmentError_",
]


class GuardrailError(Exception):
    """Base of every error sre-guardrail raises on purpose."""


class InputError(GuardrailError, DataFileError):
    """Bad user input. Carries the file and line so the CLI prints `path:line: message` and exits 2."""


class ScenarioError(InputError):
    """A scenario or solution file that fails to parse or validate."""


class PolicyLoadError(InputError):
    """A Rego module that does not parse or compile."""


class PolicyEngineError(GuardrailError):
    """The policy engine failed while deciding; the guard fails closed on it."""


class JournalError(GuardrailError):
    """The journal could not be appended to or read."""


class EnvironmentError_(GuardrailError):
    """The environment could not run a command or answer a query."""
