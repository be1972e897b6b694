"""A text that expands to more commands than the guard can decide in time is one opaque action, at once.

Nested loops and functions that call functions grow geometrically; each simple command is a policy decision.
Three nested 32-value loops were 32,768 actions (the guard was still deciding after 15 minutes at 1.2 GB)."""

from __future__ import annotations

import time

from guardrail.actions import normalise
from guardrail.actions.model import UNKNOWN
from guardrail.actions.normalise import MAX_COMMANDS

SEQ = " ".join(str(i) for i in range(1, 33))


def _one_opaque(text: str) -> None:
    start = time.process_time()
    actions = normalise(text)
    assert time.process_time() - start < 5  # generous: bounded by MAX_COMMANDS, not by the expansion
    assert [(a.tool, a.verb, a.mutating) for a in actions] == [("shell", "too-complex", UNKNOWN)]
    assert str(MAX_COMMANDS) in actions[0].opaque_reason


def test_nested_loops_that_expand_past_the_limit_are_one_opaque_action():
    _one_opaque(f"for a in {SEQ}; do for b in {SEQ}; do for c in {SEQ}; do redis-cli GET x; done; done; done")


def test_functions_that_call_functions_past_the_limit_are_one_opaque_action():
    calls = lambda f: ";".join([f] * 10)  # noqa: E731
    _one_opaque(f"a(){{ redis-cli GET x; }}; b(){{ {calls('a')}; }}; c(){{ {calls('b')}; }}; d(){{ {calls('c')}; }}; d")


def test_a_long_list_of_commands_past_the_limit_is_one_opaque_action():
    _one_opaque("redis-cli GET x; " * (MAX_COMMANDS + 1))


def test_a_loop_within_the_limit_is_still_unrolled():
    actions = normalise(f"for a in {SEQ}; do for b in 1 2 3; do redis-cli GET k$a$b; done; done")
    assert len(actions) == 96
    assert all(a.mutating is False and a.opaque_reason is None for a in actions)
    assert actions[-1].details["command"] == "GET k323"  # the loop variables are bound in each unrolled body
