"""EmbeddedOPA's hot-path savings: the trimmed wire input and the decision memo.

The trim drops action fields that no rule reads; the check below fails the day a rule starts reading one. The
memo must return the very findings an evaluation gives, under a fresh decision id, and must miss whenever any
part of the input (action, command or context) differs.
"""

from __future__ import annotations

import re

import pytest

from guardrail.actions import normalise
from guardrail.context import IncidentContext
from guardrail.policy.base import Outcome
from guardrail.policy.embedded import UNREAD_ACTION_FIELDS, UNREAD_DETAIL_FIELDS, EmbeddedOPA
from guardrail.resources import policy_dir

CTX = IncidentContext(id="wire", namespaces=["slack"], restartable=["svc-channel"], not_restartable=["postgres"],
                      protected_settings=["postgres.max_connections"]).policy_input()


def _input(cmd: str, ctx: dict = CTX) -> dict:
    return {"action": normalise(cmd)[0].to_input(), "context": ctx, "command": cmd}


@pytest.fixture(scope="module")
def engine():
    with EmbeddedOPA() as e:
        yield e


NAMES = sorted(UNREAD_ACTION_FIELDS | UNREAD_DETAIL_FIELDS)
_READ = re.compile(r"[.\"\[]\s*(" + "|".join(map(re.escape, NAMES)) + r")\b")
_WRITTEN = re.compile(r"\"(" + "|".join(map(re.escape, NAMES)) + r")\"\s*:")


def reads_of_trimmed_fields(source: str) -> list[int]:
    """Lines of Rego source that read a trimmed field (a key in an output object, `"via": x`, is a write)."""
    out = []
    for i, line in enumerate(source.splitlines(), 1):
        code = _WRITTEN.sub("", line.split("#", 1)[0])
        if _READ.search(code):
            out.append(i)
    return out


def test_no_rule_reads_a_trimmed_field():
    readers = [f"{f.name}:{i}" for f in policy_dir().rglob("*.rego") if not f.name.endswith("_test.rego")
               for i in reads_of_trimmed_fields(f.read_text())]
    assert not readers, f"a rule reads a field EmbeddedOPA trims from the wire input: {readers}"


@pytest.mark.parametrize("line", ['x if input.action.via[_] == "sh"', 'k := lib.details.resources',
                                  'k := object.get(lib.details, "resources", [])', 'y := d["via"]'])
def test_the_check_sees_a_read(line):
    assert reads_of_trimmed_fields(line) == [1]


def test_the_check_ignores_an_output_key():
    assert reads_of_trimmed_fields('"details": {"via": input.action.tool},') == []


def test_trim_leaves_the_callers_input_alone(engine):
    inp = _input("kubectl get pods -n slack")
    inp["action"]["via"] = ["sh -c"]
    before = repr(inp)
    wire = engine._wire_input(inp)
    assert "via" not in wire["action"] and "resources" not in wire["action"]["details"]
    assert "context" not in wire and wire["context_ref"]
    assert repr(inp) == before


def test_a_memo_hit_gives_the_same_findings_under_a_fresh_id():
    with EmbeddedOPA() as e:
        inp = _input("redis-cli -h redis-queue FLUSHALL")
        first, second = e.decide(inp), e.decide(inp)
        assert first.outcome is Outcome.DENY and "SRE-DATA-001" in first.rule_ids
        assert second.denies == first.denies and second.warns == first.warns
        assert second.exempted == first.exempted
        assert second.decision_id != first.decision_id
        assert e.cache_stats()["hits"] == 1 and e.cache_stats()["misses"] == 1


def test_the_memo_misses_when_the_context_differs():
    """Same action, a context that protects what it changes: the decision must differ, so the key must."""
    with EmbeddedOPA() as e:
        cmd = "redis-cli -h redis-queue CONFIG SET maxmemory 64mb"
        open_ctx = IncidentContext(id="a").policy_input()
        strict = IncidentContext(id="a", protected_settings=["redis.maxmemory"]).policy_input()
        a, b = e.decide(_input(cmd, open_ctx)), e.decide(_input(cmd, strict))
        assert "SRE-CAP-002" not in a.rule_ids and "SRE-CAP-002" in b.rule_ids
        assert e.cache_stats()["hits"] == 0


def test_the_memo_misses_when_the_command_differs():
    with EmbeddedOPA() as e:
        a = _input("kubectl get pods -n slack")
        b = dict(a, command=a["command"] + " -o wide")
        e.decide(a), e.decide(b)
        assert e.cache_stats()["hits"] == 0 and e.cache_stats()["misses"] == 2


def test_the_memo_is_bounded():
    with EmbeddedOPA(decision_cache=3) as e:
        for i in range(10):
            e.decide(_input(f"kubectl get pods -n slack -l run=r{i}"))
        assert e.cache_stats()["size"] == 3


def test_an_engine_failure_is_not_remembered(tmp_path):
    """A fail-closed answer is not cached: the next call evaluates again."""
    (tmp_path / "guardrail.rego").write_text(
        "package guardrail\n\ndecision := {\"deny\": [], \"warn\": []} if input.action.tool == \"ok\"\n")
    with EmbeddedOPA(tmp_path) as e:
        inp = {"action": {"tool": "nope", "mutating": True}, "command": "nope"}
        d1, d2 = e.decide(inp), e.decide(inp)
        assert d1.error and d2.error
        assert e.cache_stats()["size"] == 0 and e.cache_stats()["hits"] == 0


def test_memo_off():
    with EmbeddedOPA(decision_cache=0) as e:
        inp = _input("kubectl get pods -n slack")
        e.decide(inp), e.decide(inp)
        assert e.cache_stats() == {"hits": 0, "misses": 0, "size": 0, "capacity": 0}


# -- one evaluation per command ------------------------------------------------------------------------------


def test_decide_all_gives_what_decide_gives_for_every_multi_action_command():
    """Every corpus command with two or more actions, in each snapshot context: one batched evaluation yields
    the findings of deciding each action alone (memo off on both sides, so both really evaluate)."""
    from test_policy_equivalence import contexts, corpus_actions  # beside this file

    by_cmd: dict[str, list[dict]] = {}
    for _, cmd, action in corpus_actions():
        by_cmd.setdefault(cmd, []).append(action)
    multi = {c: a for c, a in by_cmd.items() if len(a) > 1}
    assert len(multi) >= 30
    with EmbeddedOPA(decision_cache=0) as batched, EmbeddedOPA(decision_cache=0) as single:
        for name, ctx in contexts().items():
            for cmd, actions in multi.items():
                inputs = [{"action": a, "context": ctx, "command": cmd} for a in actions]
                got = [(d.outcome, d.denies, d.warns, d.exempted, d.error) for d in batched.decide_all(inputs)]
                want = [(d.outcome, d.denies, d.warns, d.exempted, d.error) for d in map(single.decide, inputs)]
                assert got == want, (name, cmd)


def test_decide_all_uses_and_fills_the_memo():
    with EmbeddedOPA() as e:
        cmd = "redis-cli -h redis-queue FLUSHALL; kubectl get pods -n slack"
        inputs = [{"action": a.to_input(), "context": CTX, "command": cmd} for a in normalise(cmd)]
        first = e.decide_all(inputs)
        assert e.cache_stats()["misses"] == 2 and e.cache_stats()["size"] == 2
        second = e.decide_all(inputs)
        assert e.cache_stats()["hits"] == 2
        assert [d.denies for d in first] == [d.denies for d in second]
        assert len({d.decision_id for d in first + second}) == 4


def test_decide_all_fails_closed_for_each_action(tmp_path):
    (tmp_path / "guardrail.rego").write_text("package guardrail\n\ndecision := 1 if input.action.tool == \"x\"\n")
    with EmbeddedOPA(tmp_path) as e:
        inputs = [{"action": {"tool": "a", "mutating": True}, "context": {}, "command": "a; b"},
                  {"action": {"tool": "b", "mutating": False}, "context": {}, "command": "a; b"}]
        out = e.decide_all(inputs)
        assert [d.outcome for d in out] == [Outcome.DENY, Outcome.DENY] and all(d.error for d in out)  # reads too


def test_decide_all_decides_unrelated_inputs_one_by_one():
    with EmbeddedOPA() as e:
        a, b = _input("redis-cli -h redis-queue FLUSHALL"), _input("kubectl get pods -n slack")
        out = e.decide_all([a, b])
        assert "SRE-DATA-001" in out[0].rule_ids and out[1].outcome is Outcome.ALLOW


class _CountingData:
    """Counts the engine's add_data calls: each one makes OPA prepare its queries again."""

    def __init__(self, engine: EmbeddedOPA):
        self.calls = 0
        inner = engine._slot.engine.add_data

        def add_data(*a, **k):
            self.calls += 1
            return inner(*a, **k)

        engine._slot.engine.add_data = add_data


def test_warm_loads_the_context_so_the_first_command_changes_no_data():
    cmd = "redis-cli -h redis-queue FLUSHALL"
    with EmbeddedOPA() as cold:
        expected = cold.decide(_input(cmd))
    with EmbeddedOPA() as e:
        data = _CountingData(e)
        e.warm(CTX)
        # One change of the data document per new context: the context and what lib derives from it together.
        assert data.calls == 1
        assert len(e._slot.loaded) == 1
        assert e.cache_stats()["hits"] == e.cache_stats()["misses"] == 0  # warm() is not a decision
        first = e.decide(_input(cmd))
        assert data.calls == 1  # the first command found its context loaded
        assert (first.outcome, first.denies, first.warns) == (expected.outcome, expected.denies, expected.warns)
        e.warm(CTX)  # a context already loaded is not loaded again
        assert data.calls == 1


def test_warm_never_raises_and_a_context_it_cannot_load_goes_inline():
    with EmbeddedOPA() as e:
        e.warm({"bad": float("nan")})  # not JSON: no ref, nothing loaded
        assert e._slot.loaded == set()
        assert e.decide(_input("kubectl get pods -n slack")).outcome is Outcome.ALLOW


def test_the_warm_up_action_is_what_the_normaliser_gives_for_true():
    from guardrail.policy.embedded import _WARM_ACTION, _trim_action

    assert _trim_action(normalise("true")[0].to_input()) == _WARM_ACTION
