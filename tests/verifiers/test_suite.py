"""The suite as the Guard runs it: order, composition, honesty, and an end-to-end declaration through the Guard."""

from __future__ import annotations

import pathlib

import pytest

import verifiers
from tests.verifiers.fakes import FakeEnv, ManualClock, comp
from tests.verifiers.test_persistence import REDIS_ACTION, REDIS_SET, helm_upgrade_maxmemory
from verifiers.base import AllOf, AnyOf, VerifierBase
from verifiers.context import PublicContext
from verifiers.protocols import FeedbackCode, Verdict, VerdictStatus
from verifiers.suite import build_suite, declare_verifiers


class Fixed(VerifierBase):
    def __init__(self, status, code=None, name="fixed"):
        self.status, self.code, self.name, self.calls = status, code, name, 0

    def _check(self, env, journal, criteria):
        self.calls += 1
        return Verdict(self.status, self.name, self.code, self.name)


class Broken(VerifierBase):
    name = "broken"

    def _check(self, env, journal, criteria):
        raise ConnectionError("backend down")


def test_allof_stops_at_first_failure_and_anyof_at_first_pass():
    a, b, c = Fixed(VerdictStatus.PASS, name="a"), Fixed(VerdictStatus.FAIL, FeedbackCode.NOT_DURABLE, "b"), \
        Fixed(VerdictStatus.PASS, name="c")
    v = (a & b & c).check(None, None)
    assert v.code is FeedbackCode.NOT_DURABLE and c.calls == 0 and len(v.children) == 2
    v = AnyOf(b, a, c).check(None, None)
    assert v.passed and c.calls == 0
    assert AllOf(Fixed(VerdictStatus.PASS), Fixed(VerdictStatus.INCONCLUSIVE)).check(None, None).status \
        is VerdictStatus.INCONCLUSIVE


def test_backend_failure_is_an_error_verdict():
    v = Broken().check(None, None)
    assert v.status is VerdictStatus.ERROR and "backend down" in v.message


def test_declare_verifiers_order():
    names = [v.name for v in declare_verifiers({"id": "x"})]
    assert names == ["persistence", "scope_audit", "convergence", "restart_probe"]
    suite = build_suite({"id": "x"})
    assert suite.step[0].audit is suite.scope  # the step snapshot feeds the same audit


def test_verifiers_refuse_a_grader_section():
    with pytest.raises(ValueError):
        PublicContext.of({"id": "x", "grader": {"bands": {}}})


def test_no_verifier_code_reads_a_grader_field():
    """Honesty rule 1, in code: no identifier or string key `grader` outside the check that refuses it."""
    import ast

    root = pathlib.Path(verifiers.__file__).parent
    for p in list(root.rglob("*.py")) + list(root.rglob("*.yaml")):
        if p.suffix == ".yaml":
            assert "grader" not in p.read_text(), p
            continue
        hits = [n for n in ast.walk(ast.parse(p.read_text()))
                if (isinstance(n, ast.Constant) and n.value == "grader")
                or (isinstance(n, ast.Name) and n.id == "grader") or (isinstance(n, ast.Attribute) and n.attr == "grader")]
        assert len(hits) == (1 if p.name == "context.py" else 0), p


def test_public_names():
    assert set(verifiers.__all__) >= {"Verdict", "VerdictStatus", "FeedbackCode", "Environment"}
    for name in verifiers.__all__:
        assert hasattr(verifiers, name)


# -- end to end through the Guard (guardrail imports verifiers, never the reverse) --------------------------------

CTX = {"id": "e2e", "namespaces": ["frappe"], "components": ["redis-queue"], "restartable": ["redis-queue"],
       "extra": {"helm_release": "erpnext"}, "slos": [{"sli": "error_ratio", "op": "<=", "value": 0.05}]}


def _guard(env):
    from guardrail import guard as guard_mod
    from guardrail.context import IncidentContext
    from guardrail.journal import Journal
    from guardrail.policy.base import Decision, Outcome

    class AllowAll:
        def decide(self, input):
            return Decision(Outcome.ALLOW, "d")

    def normalise(cmd):
        from guardrail.actions.model import Action

        if cmd == REDIS_SET:
            return [Action.model_validate(REDIS_ACTION)]
        if cmd.startswith("helm upgrade"):
            return [Action(tool="helm", verb="upgrade", layer="declared", mutating=True,
                           keys=[{"key": "helm.redis-queue.master.extraFlags"}],
                           target={"kind": "release", "name": "erpnext"})]
        return [Action(tool="kubectl", verb="get", mutating=False)]

    ctx = IncidentContext.model_validate(CTX)
    suite = build_suite(ctx.model_dump(mode="json"), criteria={"restart": {"post_ready_wait_s": 5}})
    g = guard_mod.Guard(AllowAll(), ctx, env=env, journal=Journal(None, clock=env.clock), normaliser=normalise,
                        declaration_checks=suite.declare, step_checks=suite.step,
                        criteria={"restart": {"post_ready_wait_s": 5}})
    return g


def _world(fixed_at: list):
    env = FakeEnv(clock=ManualClock(600.0), components=[comp("redis-queue", kind="StatefulSet")],
                  health=lambda sli, lab, ph, t, c: ((0.01 if fixed_at and t >= fixed_at[0] and
                                                      env.layer("redis-queue").effective("maxmemory") != "2097152"
                                                      else 0.3), 100))
    env.helm["erpnext"] = {"redis-queue": {"master": {"extraFlags": ["--maxmemory 2mb"]}}}
    env.layer("redis-queue").declared["maxmemory"] = "2097152"
    return env


def test_guard_rejects_the_ephemeral_fix_and_accepts_the_durable_one_after_waiting():
    fixed_at: list = []
    env = _world(fixed_at)
    g = _guard(env)
    g.execute("kubectl get pods")
    g.execute(REDIS_SET)
    fixed_at.append(env.clock.now())
    out = g.on_declare()
    assert not out.accepted and out.feedback[0].code == "NOT_DURABLE"
    assert env.clock.now() == fixed_at[0]  # the cheap check answered before any waiting

    env.handle(r"helm upgrade .*", lambda m: helm_upgrade_maxmemory(env, "64mb", 67108864) or "deployed")
    g.execute("helm upgrade erpnext chart --reuse-values -f values.yaml")
    t_fix = env.clock.now()
    out = g.on_declare()
    assert out.accepted, [f.to_dict() for f in out.feedback]
    assert [v.verifier for v in out.verdicts] == ["persistence", "scope_audit", "convergence", "restart_probe"]
    assert env.restarts == ["redis-queue"]
    assert env.clock.now() - t_fix >= 2 * 60  # held for two full load cycles, in virtual time
    import json

    json.dumps([v.to_dict() for v in out.verdicts])  # evidence is plain JSON, as the journal writes it


def test_before_run_takes_the_first_snapshot_and_returns_prior_values():
    from tests.verifiers.fakes import FakeJournal

    env = FakeEnv(clock=ManualClock(0.0), components=[comp("redis-queue", kind="StatefulSet")])
    env.layer("redis-queue").declared["maxmemory"] = "2097152"
    env.helm["erpnext"] = {"redis-queue": {"master": {"extraFlags": ["--maxmemory 2mb"]}}}
    env.handle(r"redis-cli -h redis-queue CONFIG GET maxmemory-policy", lambda m: "maxmemory-policy\nnoeviction\n")
    suite = build_suite(dict(CTX, protected_probes={"policy": "redis-cli -h redis-queue CONFIG GET maxmemory-policy"}))
    j = FakeJournal(env.clock)
    snaps = suite.before_run(env, j, [REDIS_ACTION])
    assert suite.scope.snapshot_at_start is not None
    assert snaps == [{"key": "redis.maxmemory", "scope": {}, "target": "redis-queue", "before": 2097152,
                      # what the scope audit judges a change against: redis's compiled default (no cap)
                      "baseline": {"kind": "default", "default": 0, "unset": False,
                                   "source": "redis's compiled default (what a server runs where no config file or "
                                             "flag sets it)"}}]
    assert suite.before_run(env, j, [dict(REDIS_ACTION, mutating=False)]) == []
