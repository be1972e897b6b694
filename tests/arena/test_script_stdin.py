"""A script step's `stdin:` reaches the helper in the unguarded arm, and the guard reads that same write.

`arena.episode` hands a step's stdin to the environment (and to the guard) as a heredoc. This checks the twin's
shell passes it to `restart-svc.sh` (the role's config changes), that the guard's normaliser keys the same write,
and, as a control, that the same step without a stdin only reloads the role.
"""

from __future__ import annotations

import pytest

from arena.episode import _with_stdin
from arena.scenario import load_scenario
from arena.world import TwinWorld
from guardrail.actions import normalise

BODY = '{"db":{"hold_ms":7}}'


def _hold_after(text: str) -> object:
    world = TwinWorld.build(load_scenario("ia-017").twin, 0)
    role = world.world.substrate.roles["message"]
    before = role.db("hold_ms")
    assert before != 7
    res = world.env.run(text)
    assert res.exit_code == 0, res.stderr
    world.clock.sleep(30.0)  # past the reload
    return role.db("hold_ms"), before


@pytest.mark.parametrize("text", [
    _with_stdin("restart-svc.sh message", BODY),          # a script step's `stdin:`
    f"echo '{BODY}' | restart-svc.sh message",
    f"printf '%s' '{BODY}' | restart-svc.sh message",
    f"cat <<'EOF' | restart-svc.sh message\n{BODY}\nEOF",
], ids=["step stdin", "echo pipe", "printf pipe", "cat heredoc pipe"])
def test_the_twin_passes_a_steps_stdin_to_the_helper_and_the_guard_reads_the_same_write(text):
    after, _ = _hold_after(text)
    assert after == 7
    keys = [(k.key, k.value) for a in normalise(text, stdin="") if a.tool == "restart-svc.sh" for k in a.keys]
    assert keys == [("app.roles.message.db.hold_ms", 7)]


def test_the_same_step_without_stdin_only_reloads_and_the_guard_says_so():
    after, before = _hold_after("restart-svc.sh message")
    assert after == before
    (a,) = normalise("restart-svc.sh message", stdin="")  # the episode's commands run with no stdin
    assert a.is_mutating and a.keys == []
