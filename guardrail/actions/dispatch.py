"""What the shell walker and the wrappers call back into while a command is normalised: the `Dispatcher` (the
normaliser's side of the walk) and the `Session` one `normalise` call shares across nested scripts.

Below `shell` (the walker), `wrappers` and `normalise` (which implements `Dispatcher` as `Normaliser`), so that
the walker and the wrappers need not import the normaliser that imports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from tree_sitter import Node

from guardrail.actions.invocation import Invocation, Stdin, Where
from guardrail.actions.model import Action

__all__ = ["Session", "Dispatcher"]


@dataclass
class Session:
    """State of one `normalise` call shared by nested scripts: aliases, functions and variables it defines."""

    aliases: dict[str, str] = field(default_factory=dict)
    functions: dict[str, Node] = field(default_factory=dict)
    variables: dict[str, str | None] = field(default_factory=dict)
    # Variables this text set to the result of an arithmetic expansion (or assigned inside one): integers.
    integers: set[str] = field(default_factory=set)
    # Attributes `declare`/`local`/`typeset` gave names in this text (`-i` integer, `-A` associative, `-n` nameref).
    attributes: dict[str, str] = field(default_factory=dict)
    syntax_errors: list[str] = field(default_factory=list)
    # ERROR nodes the walker read as what bash reads there (a here-string after a redirect: `_herestrings`).
    repaired: set[int] = field(default_factory=set)
    dispatched: int = 0  # simple commands classified so far (bounded by normalise.MAX_COMMANDS)


class Dispatcher(Protocol):
    """The normaliser as the walker and the wrappers see it (guardrail.actions.normalise.Normaliser)."""

    session: Session

    def dispatch(self, inv: Invocation) -> list[Action]:
        """Classify one simple command (unwrapping wrappers first)."""
        ...

    def script(self, text: str, where: Where, stdin: Stdin | None = None) -> list[Action]:
        """Normalise a nested script (`sh -c TEXT`, a heredoc fed to a shell) in this session."""
        ...

    def prints_number(self, inv: Invocation) -> bool:
        """Whether this simple command prints only a number (its output may stand in an arithmetic context)."""
        ...
