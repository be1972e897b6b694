"""A text that expands to more commands than the guard can decide in time is one opaque action, at once.

Nested loops and functions that call functions grow geometrically; each simple command is a policy decision.
Three nested 32-value loops were 32,768 actions (the guard was still deciding after 15 minutes at 1.2 GB)."""

from __future__ import annotations

import time

import pytest

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


def _alias_bomb(levels: int = 8) -> str:
    lines = ['  a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    for i in range(1, levels):
        lines.append(f"  a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 10)}]")
    return "\n".join(lines)


@pytest.mark.parametrize("head", ["kubectl apply -f - <<'YAML'\nkind: Job\nmetadata: {name: x}\nspec:",
                                  "helm upgrade x ./c --reuse-values -f - <<'YAML'\nvalues:"])
def test_a_yaml_alias_bomb_is_one_opaque_action_in_well_under_a_second(head):
    # About 300 bytes that expand to 10^8 values: the guard stops counting at 50,000 and does not judge it.
    t0 = time.perf_counter()
    actions = normalise(f"{head}\n{_alias_bomb()}\nYAML")
    assert time.perf_counter() - t0 < 5  # generous: it takes ~0.05 s; unbounded it took 13 s and 60+ s
    assert [(a.verb, a.mutating) for a in actions] == [("too-large", "unknown")]
    assert "50,000 values" in actions[0].opaque_reason


def test_a_document_that_shares_a_node_a_few_times_is_still_read():
    cmd = "helm upgrade x ./c --reuse-values -f - <<'YAML'\nbase: &b {replicas: 2}\nweb: *b\nworker: *b\nYAML"
    (a,) = normalise(cmd)
    assert {k.key for k in a.keys} >= {"helm.web.replicas", "helm.worker.replicas"}
