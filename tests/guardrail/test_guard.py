"""The Guard pipeline with fakes at its seams: a rule-table policy engine, a one-word normaliser, a fake env."""

from dataclasses import dataclass, field

from guardrail.actions.model import Action, KeyChange, Layer
from guardrail.context import IncidentContext
from guardrail.guard import DENIED_EXIT_CODE, Guard
from guardrail.journal import Journal
from guardrail.policy.base import Decision, Finding, Mode, Outcome
from verifiers.protocols import CommandResult, Verdict, VerdictStatus, FeedbackCode


class FakeEngine:
    """Denies any action whose verb is in `deny`, warns on `warn`; records what it was asked."""

    def __init__(self, deny=(), warn=()):
        self.deny, self.warn, self.inputs = set(deny), set(warn), []

    def decide(self, input):
        self.inputs.append(input)
        verb = input["action"]["verb"]
        if verb in self.deny:
            return Decision(Outcome.DENY, "d1", denies=(Finding("T-1", f"no {verb}; do X instead"),))
        if verb in self.warn:
            return Decision(Outcome.WARN, "d2", warns=(Finding("T-2", f"careful with {verb}"),))
        return Decision(Outcome.ALLOW, "d3")


def words(command):
    """Each `;`-separated word is one action whose verb is the word; 'set' mutates."""
    out = []
    for w in command.split(";"):
        w = w.strip()
        out.append(Action(tool="fake", verb=w, raw=w, mutating=(w == "set"),
                          keys=[KeyChange(key="k", value=1)] if w == "set" else [],
                          layer=Layer.RUNTIME if w == "set" else Layer.NONE))
    return out


@dataclass
class FakeClock:
    t: float = 0.0

    def now(self):
        return self.t

    def sleep(self, s):
        self.t += s


@dataclass
class FakeEnv:
    clock: FakeClock = field(default_factory=FakeClock)
    ran: list = field(default_factory=list)

    def run(self, command):
        self.ran.append(command)
        return CommandResult(command=command, stdout="ok\n")

    def sli(self, *a, **k):
        return []

    def restart(self, target):
        raise NotImplementedError

    def describe(self):
        raise NotImplementedError


class FixedCheck:
    def __init__(self, status, code=None, msg=""):
        self.status, self.code, self.msg, self.calls = status, code, msg, 0

    def check(self, env, journal, criteria=None):
        self.calls += 1
        return Verdict(self.status, "fixed", self.code, self.msg)


def make(deny=(), warn=(), mode=Mode.ENFORCE, checks=()):
    env = FakeEnv()
    g = Guard(FakeEngine(deny, warn), IncidentContext(id="t", namespaces=["slack"]), env=env,
              journal=Journal(None, clock=env.clock), mode=mode, normaliser=words, declaration_checks=list(checks))
    return g, env


def test_allowed_command_runs_and_is_journalled_before_and_after():
    g, env = make()
    r = g.execute("get")
    assert r.exit_code == 0 and env.ran == ["get"]
    kinds = [x["kind"] for x in g.journal.records()]
    assert kinds == ["command", "result"]
    assert g.journal.executed()[0]["command"] == "get"


def test_policy_sees_action_context_and_command():
    g, _ = make()
    g.before("get")
    inp = g.engine.inputs[0]
    assert inp["action"]["verb"] == "get" and inp["context"]["namespaces"] == ["slack"] and inp["command"] == "get"


def test_one_denied_action_blocks_the_whole_command_in_enforce_mode():
    g, env = make(deny={"flush"})
    r = g.execute("get; flush")
    assert r.exit_code == DENIED_EXIT_CODE
    assert env.ran == []
    assert "SCOPE_DENIED" in r.stderr and "T-1" in r.stderr and "do X instead" in r.stderr
    assert g.stats()["denied"] == 1 and g.stats()["feedback"] == ["SCOPE_DENIED"]
    assert g.journal.executed() == []


def test_stats_list_the_latest_feedback_codes_and_count_them_all(monkeypatch):
    import guardrail.guard as guard_mod

    monkeypatch.setattr(guard_mod, "FEEDBACK_KEPT", 3)
    g, _ = make(deny={"flush"})
    for _ in range(5):
        g.execute("flush")
    st = g.stats()
    assert st["denied"] == 5 and st["feedback"] == ["SCOPE_DENIED"] * 3  # a long session's reply stays bounded
    assert st["feedback_counts"] == {"SCOPE_DENIED": 5}


def test_dry_run_runs_and_journals_would_deny():
    g, env = make(deny={"flush"}, mode=Mode.DRY_RUN)
    r = g.execute("flush")
    assert r.exit_code == 0 and env.ran == ["flush"]
    cmd = g.journal.records("command")[0]
    assert cmd["would_deny"] == ["T-1"] and cmd["ran"] is True
    assert g.stats()["would_deny"] == 1 and g.stats()["denied"] == 0


def test_warn_only_runs_and_tells_the_agent():
    g, env = make(deny={"flush"}, mode=Mode.WARN_ONLY)
    r = g.execute("flush")
    assert env.ran == ["flush"] and "T-1" in r.stderr


def test_warn_rules_pass_through_with_a_note():
    g, env = make(warn={"set"})
    r = g.execute("set")
    assert env.ran == ["set"] and "careful with set" in r.stderr


def test_declaration_stops_at_first_failing_check_with_its_code():
    ok = FixedCheck(VerdictStatus.PASS)
    bad = FixedCheck(VerdictStatus.FAIL, FeedbackCode.NOT_DURABLE, "redis.maxmemory runtime 64mb, declared 2mb")
    never = FixedCheck(VerdictStatus.PASS)
    g, _ = make(checks=[ok, bad, never])
    out = g.on_declare()
    assert not out.accepted
    assert [f.code for f in out.feedback] == ["NOT_DURABLE"]
    assert never.calls == 0
    assert g.stats()["declarations_rejected"] == 1


def test_declaration_accepted_when_every_check_passes():
    g, _ = make(checks=[FixedCheck(VerdictStatus.PASS), FixedCheck(VerdictStatus.PASS)])
    assert g.on_declare().accepted


def test_a_verifier_that_raises_is_an_error_verdict_not_a_crash():
    class Boom:
        def check(self, env, journal, criteria=None):
            raise RuntimeError("backend down")

    g, _ = make(checks=[Boom()])
    out = g.on_declare()
    assert not out.accepted
    assert out.verdicts[0].status is VerdictStatus.ERROR and "backend down" in out.verdicts[0].message


class FakeSuite:
    """A verifier suite at the seam: one declaration check, one step check, and a before-run snapshot."""

    def __init__(self):
        self.declare = [FixedCheck(VerdictStatus.PASS)]
        self.step = [FixedCheck(VerdictStatus.FAIL, FeedbackCode.LOOP_DETECTED, "same read 5 times")]
        self.criteria = {"n": 2}
        self.before_calls = []

    def before_run(self, env, journal, actions):
        self.before_calls.append([a["verb"] for a in actions])
        return [{"key": "k", "scope": {}, "before": 0}]


def test_suite_supplies_checks_and_snapshots_before_the_command_runs():
    env = FakeEnv()
    suite = FakeSuite()
    g = Guard(FakeEngine(), IncidentContext(), env=env, journal=Journal(None, clock=env.clock), normaliser=words,
              suite=suite)
    r = g.execute("set")
    assert suite.before_calls == [["set"]]
    kinds = [x["kind"] for x in g.journal.records()]
    assert kinds.index("snapshot") < kinds.index("result")
    assert "LOOP_DETECTED" in r.stderr
    out = g.on_declare()
    assert out.accepted and suite.declare[0].calls == 1
    assert g.stats()["declaration_log"][0]["accepted"] is True


def test_a_denied_command_takes_no_snapshot():
    env = FakeEnv()
    suite = FakeSuite()
    g = Guard(FakeEngine(deny={"set"}), IncidentContext(), env=env, normaliser=words, suite=suite)
    g.execute("set")
    assert suite.before_calls == [] and env.ran == []


def test_held_failing_cycles_count_settling_segments_and_cycles_after_the_declaration():
    from guardrail.guard import _failing_cycles_after
    from verifiers.protocols import Verdict, VerdictStatus

    ev = {"settling": [{"t_start": 90.0, "t_end": 110.0, "state": "fail"}],
          "cycles": [{"t_start": 40.0, "t_end": 95.0, "state": "fail"}, {"t_start": 110.0, "t_end": 170.0, "state": "ok"},
                     {"t_start": 170.0, "t_end": 230.0, "state": "fail"}]}
    v = Verdict(VerdictStatus.PASS, "convergence", evidence=ev)
    assert _failing_cycles_after([v], 98.0) == 2  # the settling segment and the last cycle; not the one before
    assert _failing_cycles_after([v], 240.0) == 0


class WarmEngine(FakeEngine):
    """A FakeEngine that can load a context ahead of the first command, and says when it was asked to."""

    def __init__(self, log, name):
        super().__init__()
        self.log, self.name = log, name

    def warm(self, context):
        self.log.append((self.name, "warm", context["id"]))

    def decide(self, input):
        self.log.append((self.name, "decide", input["context"]["id"]))
        return super().decide(input)


def test_the_guard_has_its_engine_load_the_context_before_the_first_command():
    log = []
    ctx = IncidentContext(id="inc-9")
    g = Guard(WarmEngine(log, "e"), ctx, normaliser=words)
    assert log == [("e", "warm", "inc-9")]
    g.before("get")
    assert log[1:] == [("e", "decide", "inc-9")]
    Guard(FakeEngine(), ctx, normaliser=words)  # an engine without warm() is left alone


def test_an_engine_pool_warms_every_engine_once_per_session():
    from guardrail.adapters.session import GuardSessions

    log = []
    sessions = GuardSessions([WarmEngine(log, "a"), WarmEngine(log, "b")], IncidentContext(id="inc-9"))
    # The shared context is loaded before any session opens...
    assert sorted(log) == [("a", "warm", "inc-9"), ("b", "warm", "inc-9")]
    s = sessions.get("one")
    # ...and asked again as each session's Guard is built (a context already loaded costs one evaluation).
    assert sorted(log[2:]) == [("a", "warm", "inc-9"), ("b", "warm", "inc-9")]
    s.before("get")
    assert len(log) == 5 and log[4][1] == "decide"
    sessions.get("one")  # the same session: nothing warmed again
    assert len(log) == 5


def test_an_engine_pool_never_warms_an_engine_while_it_decides():
    import threading
    import time

    from guardrail.adapters.session import EnginePool

    class Exclusive(FakeEngine):
        """Notes any moment when two calls are inside it at once."""

        def __init__(self):
            super().__init__()
            self.inside, self.overlaps, self.lock = 0, 0, threading.Lock()

        def _enter(self, hold):
            with self.lock:
                self.inside += 1
                self.overlaps += self.inside > 1
            time.sleep(hold)
            with self.lock:
                self.inside -= 1

        def warm(self, context):
            self._enter(0.05)

        def decide(self, input):
            self._enter(0.001)
            return super().decide(input)

    engine = Exclusive()
    pool = EnginePool([engine])
    stop = threading.Event()
    inp = {"action": {"verb": "get"}, "context": {"id": "x"}, "command": "get"}

    deciding = threading.Event()

    def decide_loop():
        while not stop.is_set():
            pool.decide(inp)
            deciding.set()

    t = threading.Thread(target=decide_loop)
    t.start()
    try:
        # The warms overlap a running decide loop (a busy machine may start the thread late).
        assert deciding.wait(60)
        for _ in range(3):
            pool.warm({"id": "x"})
    finally:
        stop.set()
        t.join()
    assert len(engine.inputs) > 0 and engine.overlaps == 0


def test_one_rule_firing_for_two_actions_of_a_command_is_said_once_to_the_agent():
    """`redis-cli FLUSHALL; redis-cli FLUSHALL` told the agent the same denial twice: each action is decided (and
    journalled) on its own, and what the agent reads about the command says each rule's message once."""
    g, env = make(deny={"flush"}, warn={"flush"})
    r = g.execute("flush; flush")
    assert r.exit_code == DENIED_EXIT_CODE and env.ran == []
    assert r.stderr.count("no flush; do X instead") == 1
    assert [f.code for f in g.before("flush; flush").feedback] == ["SCOPE_DENIED"]
    rec = g.journal.records("command")[0]
    assert [len(d["deny"]) for d in rec["decisions"]] == [1, 1]  # the per-action record keeps both
    g, _ = make(deny={"flush"}, mode=Mode.WARN_ONLY)
    assert g.execute("flush; flush").stderr.count("no flush; do X instead") == 1


def test_an_unjudgeable_declaration_is_never_accepted_silently():
    # An INCONCLUSIVE with a code (the verifier says what stands in the way) rejects, like a FAIL.
    g, _ = make(checks=[FixedCheck(VerdictStatus.INCONCLUSIVE, FeedbackCode.NO_SLI_SOURCE, "configure --prometheus"),
                        FixedCheck(VerdictStatus.PASS)])
    out = g.on_declare()
    assert not out.accepted and [f.code for f in out.feedback] == ["NO_SLI_SOURCE"]
    assert out.brief()["verdict"] == "REJECTED"
    # One with no code blocks nothing, but is listed as unverified in the answer and the journal.
    g, _ = make(checks=[FixedCheck(VerdictStatus.INCONCLUSIVE, None, "nothing it may restart"),
                        FixedCheck(VerdictStatus.PASS)])
    out = g.on_declare()
    brief = out.brief()
    assert out.accepted and brief["verdict"] == "ACCEPTED_UNVERIFIED"
    assert brief["unverified"] == [{"code": "INCONCLUSIVE", "message": "nothing it may restart"}]
    (rec,) = g.journal.records("declaration_outcome")
    assert rec["accepted"] is True and rec["unverified"] == ["INCONCLUSIVE"]


def test_the_declarations_answer_is_short_and_the_evidence_stays_in_the_journal():
    long = "SLIs not converged: " + "error_ratio{slo=x} = 0.3; " * 100

    class Evidenced(FixedCheck):
        def check(self, env, journal, criteria=None):
            return Verdict(VerdictStatus.FAIL, "convergence", FeedbackCode.NOT_CONVERGED, long + "\n second line",
                           {"samples": list(range(1000))})

    g, _ = make(checks=[Evidenced(VerdictStatus.FAIL)])
    brief = g.on_declare().brief()
    assert brief["codes"] == ["NOT_CONVERGED"]
    (fb,) = brief["feedback"]
    assert "\n" not in fb["message"] and len(fb["message"]) <= 600 and fb["message"].endswith("...")
    assert "evidence" not in fb and "evidence" not in brief["checks"][0]
    (verdict,) = g.journal.records("verdict")
    assert verdict["evidence"]["samples"] == list(range(1000))


def test_while_a_declaration_is_held_reads_run_and_changes_wait():
    import threading

    release, holding = threading.Event(), threading.Event()

    class Held(FixedCheck):
        def check(self, env, journal, criteria=None):
            holding.set()
            assert release.wait(30)
            return Verdict(VerdictStatus.PASS, "convergence")

    g, env = make(checks=[Held(VerdictStatus.PASS)])
    t = threading.Thread(target=g.on_declare)
    t.start()
    try:
        assert holding.wait(30)
        pending = g.stats()["declaration_pending"]
        assert (pending["stage"], pending["message"]) == ("Held", "checking Held")
        read = g.execute("get")
        change = g.execute("set")
    finally:
        release.set()
        t.join(30)
    assert read.exit_code == 0 and env.ran == ["get"]
    assert change.exit_code == DENIED_EXIT_CODE and "DECLARATION_PENDING" in change.stderr
    assert g.stats()["declaration_pending"] is None
    assert g.execute("set").exit_code == 0  # after the answer, changes run again


def test_a_command_past_the_normalisers_limits_is_refused_whole_in_every_mode():
    """Never cut short and judged, and never asked of the policy (an exception could waive the opaque rule): the
    guard refuses it itself, under its own rule, even in dry-run and warn-only."""
    from guardrail.actions import normalise
    from guardrail.actions.normalise import MAX_ACTIONS
    from guardrail.policy.decisions import OVER_LIMIT_RULE

    command = "psql -c '" + "SELECT 1; " * (MAX_ACTIONS + 1) + "'"
    for mode in Mode:
        engine = FakeEngine()
        g = Guard(engine, IncidentContext(), mode=mode, normaliser=normalise)
        adm = g.before(command)
        assert not adm.runs and adm.outcome is Outcome.DENY and engine.inputs == []
        assert adm.decisions[0].rule_ids == [OVER_LIMIT_RULE] and "a few at a time" in adm.decisions[0].denies[0].msg
    g = Guard(FakeEngine(), IncidentContext(), normaliser=normalise)  # the control: under the limit, decided
    assert g.before("psql -c '" + "SELECT 1; " * 10 + "'").runs


def test_the_20kb_psql_example_is_decided_by_the_library_not_by_a_deadline():
    """2,000 statements then `SELECT rolpassword FROM pg_authid`: the input grew quadratically, the evaluation ran
    past its deadline, and the read ran. It is decided by the library's own rule, with no engine error."""
    from guardrail.policy.embedded import EmbeddedOPA

    command = "psql -c '" + "SELECT 1; " * 2000 + "SELECT rolpassword FROM pg_authid'"
    assert len(command) > 20_000
    with EmbeddedOPA(timeout_s=120, decision_cache=0) as engine:
        adm = Guard(engine, IncidentContext()).before(command)
    assert not adm.runs and len(adm.decisions) == 2001
    assert all(d.error is None for d in adm.decisions)
    assert adm.decisions[-1].rule_ids == ["SRE-SECRET-003"] and adm.decisions[0].outcome is Outcome.ALLOW
