"""A text that expands to more commands than the guard can decide in time is one opaque action, at once.

Nested loops and functions that call functions grow geometrically; each simple command is a policy decision.
Three nested 32-value loops were 32,768 actions (the guard was still deciding after 15 minutes at 1.2 GB)."""

from __future__ import annotations

import pytest

from guardrail.actions import normalise
from guardrail.actions.model import UNKNOWN
from guardrail.actions.normalise import MAX_COMMANDS, Normaliser

SEQ = " ".join(str(i) for i in range(1, 33))


def _one_opaque(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The work is bounded by MAX_COMMANDS, not by the expansion: counted in simple commands classified (each one
    # a policy decision), not timed, so a busy machine cannot fail it.
    dispatched: list[int] = []
    real = Normaliser.dispatch
    monkeypatch.setattr(Normaliser, "dispatch", lambda self, inv: dispatched.append(1) or real(self, inv))
    actions = normalise(text)
    assert 0 < len(dispatched) <= MAX_COMMANDS + 1
    assert [(a.tool, a.verb, a.mutating) for a in actions] == [("shell", "too-complex", UNKNOWN)]
    assert str(MAX_COMMANDS) in actions[0].opaque_reason


def test_nested_loops_that_expand_past_the_limit_are_one_opaque_action(monkeypatch):
    _one_opaque(f"for a in {SEQ}; do for b in {SEQ}; do for c in {SEQ}; do redis-cli GET x; done; done; done",
                monkeypatch)


def test_functions_that_call_functions_past_the_limit_are_one_opaque_action(monkeypatch):
    calls = lambda f: ";".join([f] * 10)  # noqa: E731
    _one_opaque(f"a(){{ redis-cli GET x; }}; b(){{ {calls('a')}; }}; c(){{ {calls('b')}; }}; d(){{ {calls('c')}; }}; d",
                monkeypatch)


def test_a_long_list_of_commands_past_the_limit_is_one_opaque_action(monkeypatch):
    _one_opaque("redis-cli GET x; " * (MAX_COMMANDS + 1), monkeypatch)


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
def test_a_yaml_alias_bomb_is_one_opaque_action_after_a_bounded_walk(head, monkeypatch):
    # About 300 bytes that expand to 10^8 values: the guard stops counting at 50,000 and does not judge it
    # (unbounded, reading it took 13 s and 60+ s). Checked on the walk, not on a timer: the document goes through
    # the bounded walk, which gives up at the limit.
    from guardrail.actions.classifiers import base

    gave_up: list[str] = []
    real = base.bounded

    def watched(doc, *a, **kw):
        try:
            return real(doc, *a, **kw)
        except base.DocumentTooLarge as e:
            gave_up.append(str(e))
            raise

    monkeypatch.setattr(base, "bounded", watched)
    actions = normalise(f"{head}\n{_alias_bomb()}\nYAML")
    assert gave_up == [f"more than {base.MAX_DOCUMENT_VALUES:,} values once its aliases are expanded"]
    assert [(a.verb, a.mutating) for a in actions] == [("too-large", "unknown")]
    assert "50,000 values" in actions[0].opaque_reason


def test_a_document_that_shares_a_node_a_few_times_is_still_read():
    cmd = "helm upgrade x ./c --reuse-values -f - <<'YAML'\nbase: &b {replicas: 2}\nweb: *b\nworker: *b\nYAML"
    (a,) = normalise(cmd)
    assert {k.key for k in a.keys} >= {"helm.web.replicas", "helm.worker.replicas"}


def test_an_alias_bomb_inside_a_configmaps_document_is_opaque_not_expanded():
    # The settings step reads a ConfigMap's app.yaml for the keys it declares: through the same bounded walk.
    import json

    doc = "roles:\n" + _alias_bomb() + "\n"
    patch = json.dumps({"data": {"app.yaml": doc}})
    (a,) = normalise(f"kubectl patch configmap app-config --type merge -p '{patch}'")
    assert a.mutating == "unknown" and "50,000 values" in (a.opaque_reason or ""), a
    # Control: the same write with a plain document is read, its role key derived beside the raw one.
    plain = json.dumps({"data": {"app.yaml": "roles:\n  channel:\n    db:\n      pool_size: 40\n"}})
    (b,) = normalise(f"kubectl patch configmap app-config --type merge -p '{plain}'")
    assert b.opaque_reason is None and "app.roles.channel.db.pool_size" in {k.key for k in b.keys}
