"""`normalise(raw) -> list[Action]`: raw shell text as the typed Actions it would perform, in execution order.

The guard (`guardrail.guard.Guard.before`), `guardrail check` and the audit replay call it on every command an
agent sends. The pipeline: tree-sitter parse (`shell`), walk in execution order (`ShellWalker`), unwrap wrappers
(`wrappers`: `sh -c`, `kubectl exec`, `sudo`, `xargs` ...), then one classifier per tool (`classifiers`). Anything
whose effect cannot be known before it runs (eval, a decoded payload into a shell, a computed command name, an
unknown binary, a syntax error) comes out as `mutating: "unknown"` with an `opaque_reason`. It never raises.
"""

from __future__ import annotations

import posixpath
from guardrail.actions import wrappers
from guardrail.actions.classifiers import classifier_for
from guardrail.actions.classifiers.staples import ReadOnly
from guardrail.actions.classifiers.base import DocumentTooLarge
from guardrail.actions.invocation import NULL_DEVICE, SYSTEM_BIN_DIRS, Invocation, Stdin, Where, clean_path
from guardrail.actions.model import UNKNOWN, Action
from guardrail.actions.dispatch import Session
from guardrail.actions.settings import canonical
from guardrail.actions.shell import ShellWalker, join_continuations, parse
from tree_sitter import Node

__all__ = ["normalise", "Normaliser", "MAX_DEPTH", "MAX_COMMANDS", "MAX_CHARS", "MAX_ACTIONS"]

# Deeper nesting than this (sh -c inside sh -c inside ...) is treated as opaque rather than followed.
MAX_DEPTH = 12
# Texts longer than this are not parsed: a command this long is not one an operator reviews.
MAX_CHARS = 200_000
# Simple commands one text may expand to (loops unrolled, functions called, wrappers followed). Past it the text is
# one opaque action: nested loops and functions calling functions grow geometrically (three nested 32-value loops
# are 32,768 commands, each a policy decision), and a guard that takes minutes on one command fails its agent.
MAX_COMMANDS = 512
# Actions one text may come to (2,000 statements of one psql -c are 2,000 actions, each a decision: about half a
# millisecond each, bench/input_growth.py). Past it the text is refused whole, never cut short and judged.
MAX_ACTIONS = 4096


class TooComplex(Exception):
    """Raised out of the walk when a text expands past MAX_COMMANDS simple commands."""


class Normaliser:
    """Parses and classifies one command text; holds the aliases and functions it defines."""

    def __init__(self) -> None:
        self.session = Session()

    def script(self, text: str, where: Where, stdin: Stdin | None = None) -> list[Action]:
        """Every Action of a shell script (the top-level command, or the body of `sh -c`, a heredoc ...)."""
        text = join_continuations(text)
        inv = Invocation(argv=[], where=where, raw=text)
        if where.depth > MAX_DEPTH:
            return [inv.opaque("nested", f"wrappers nested more than {MAX_DEPTH} deep are not followed")]
        tree = parse(text)
        walker = ShellWalker(self, self.session, where)
        before = len(self.session.syntax_errors)
        walker.run(tree.root_node, stdin)
        actions = walker.actions
        if (tree.root_node.has_error and not self._repaired(tree.root_node)) or len(self.session.syntax_errors) > before:
            near = self.session.syntax_errors[before] if len(self.session.syntax_errors) > before else ""
            actions.append(inv.opaque("syntax-error", "the shell text does not parse"
                                      + (f" (near {near!r})" if near else "")
                                      + "; what a shell would do with it cannot be known"))
        return actions

    def _repaired(self, root: Node) -> bool:
        """Has the walk read every ERROR (and missing) node of this tree as bash reads it (`Session.repaired`)?"""
        stack = [root]
        while stack:
            n = stack.pop()
            if n.is_missing or (n.type == "ERROR" and n.id not in self.session.repaired):
                return False
            if n.has_error:
                stack.extend(n.children)
        return True

    def dispatch(self, inv: Invocation) -> list[Action]:
        """One simple command: a function or alias, a wrapper, a tool classifier, or an unknown command."""
        self.session.dispatched += 1
        if self.session.dispatched > MAX_COMMANDS:
            raise TooComplex()
        try:
            return inv.own_raw(self._dispatch(inv))
        except TooComplex:
            raise
        except RecursionError:
            return [inv.opaque("nested", "too deeply nested to follow")]
        except DocumentTooLarge as e:
            return [inv.opaque("too-large", f"a document it reads has {e}: pass the plain values instead")]
        except Exception as e:  # a classifier bug must not let a command through unclassified
            return [inv.opaque("unclassified", f"classifier error ({type(e).__name__}); effect not known")]

    def _dispatch(self, inv: Invocation) -> list[Action]:
        if not inv.argv:
            return []
        if inv.where.depth > MAX_DEPTH:
            return [inv.opaque("nested", f"wrappers nested more than {MAX_DEPTH} deep are not followed")]
        head = inv.argv[0]
        if head.dynamic:
            return [inv.opaque("dynamic-command", "the command name is computed at run time "
                               f"({str(head)!r}); run the plain command instead", command=str(head))]
        name = inv.name
        if "/" not in head:
            if name in self.session.functions:
                return self._function(inv, name)
            if name in self.session.aliases:
                return self._alias(inv, name)
        unwrap = wrappers.WRAPPERS.get(name)
        if unwrap is not None:
            result = unwrap(inv, self)
            if result is not None:
                return result
        classifier = classifier_for(name)
        if classifier is not None:
            if "/" in head and isinstance(classifier, ReadOnly) and not _system_path(str(head)):
                # `/tmp/ls flushall`, `./cat`: named like a reader, but a file anyone could have put there (a copy of
                # redis-cli) is not the system's reader.
                return [inv.opaque(name, f"{str(head)!r} is not the system's {name} (it is outside the system's "
                                   "bin directories); run the plain command", command=str(head))]
            return classifier.classify(inv)
        return [inv.opaque(name or "empty", f"unknown command {name!r}: its effect cannot be known before it runs")]

    def prints_number(self, inv: Invocation) -> bool:
        """Does this command print only numbers (a count, a time, a size), whatever its input? Its classifier says
        (`prints_number`), for the system's program of that name: not a function or alias of this text's."""
        check = getattr(classifier_for(inv.name), "prints_number", None)
        if check is None:
            return False
        head = inv.argv[0]
        if head.dynamic or inv.name in self.session.functions or inv.name in self.session.aliases \
                or ("/" in head and not _system_path(str(head))):
            return False
        return bool(check(inv))

    def _function(self, inv: Invocation, name: str) -> list[Action]:
        where = inv.where.inside(f"function {name}")
        if where.depth > MAX_DEPTH:
            return [inv.opaque("nested", f"function {name} recurses deeper than {MAX_DEPTH}")]
        walker = ShellWalker(self, self.session, where)
        walker.run(self.session.functions[name], inv.stdin)
        return walker.actions

    def _alias(self, inv: Invocation, name: str) -> list[Action]:
        # An alias is text substitution: its value followed by the rest of the words as typed. Its redirections
        # were read where the command stands (a heredoc as bash ends it): not re-read from the text here.
        typed = inv.words_raw if inv.words_raw is not None else inv.raw
        rest = typed.split(None, 1)[1] if len(typed.split(None, 1)) > 1 else ""
        text = f"{self.session.aliases[name]} {rest}".strip()
        aliases = self.session.aliases.pop(name)  # an alias does not expand inside itself
        try:
            return self.script(text, inv.where.inside(f"alias {name}"), inv.stdin)
        finally:
            self.session.aliases[name] = aliases


def normalise(raw: str, stdin: str | None = None) -> list[Action]:
    """Raw shell text -> one Action per simple command, in execution order. Never raises.

    `stdin`: what the text's commands read on stdin where the text does not say (no heredoc, pipe or `<`), when the
    caller knows it: "" for a run with no stdin (Guard.execute: an Environment runs a command with none), a
    payload otherwise. None: not known, and a tool that reads its body there is judged opaque, never as empty."""
    try:
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", "replace")
        elif not isinstance(raw, str):
            raw = str(raw)
        # Lone surrogates cannot be journalled or sent to the policy engine as JSON; a shell never sees them either.
        raw = raw.encode("utf-8", "replace").decode("utf-8")
        if not raw.strip():
            return []
        if len(raw) > MAX_CHARS:
            return [_over_limit("oversized", raw, f"the command is longer than {MAX_CHARS} characters")]
        # One meaning per write: every spelling of a setting's change as its one key, scope and layer.
        given = None if stdin is None else Stdin("file", text=stdin, producer=NULL_DEVICE) if stdin == "" \
            else Stdin("pipe", text=stdin, producer="the caller")
        actions = canonical(Normaliser().script(raw, Where(), given))
        if len(actions) > MAX_ACTIONS:
            return [_over_limit("too-many-actions", raw, f"the command comes to more than {MAX_ACTIONS} actions "
                                                         "(statements, files, URLs ...)")]
        return actions
    except TooComplex:
        return [_over_limit("too-complex", str(raw), f"the text expands to more than {MAX_COMMANDS} commands "
                                                     "(loops, functions)")]
    except Exception as e:  # the guard must get an answer for every text; unknown is the safe one
        return [Action(tool="shell", verb="unclassified", mutating=UNKNOWN, raw=str(raw)[:1000],
                       opaque_reason=f"normalisation failed ({type(e).__name__}); effect not known")]


def _over_limit(verb: str, raw: str, why: str) -> Action:
    """A text past one of the normaliser's limits: one opaque action marked `details.limit`, which the guard refuses
    without asking the policy (guardrail.policy.decisions.refuse_over_limit). Its raw is cut for the journal only:
    nothing of it is judged."""
    return Action(tool="shell", verb=verb, mutating=UNKNOWN, raw=raw[:1000],
                  opaque_reason=f"{why}; send the commands you mean to run, a few at a time",
                  details={"limit": verb})


def _system_path(path: str) -> bool:
    return posixpath.dirname(clean_path(path)) in SYSTEM_BIN_DIRS
