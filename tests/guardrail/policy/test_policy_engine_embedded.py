"""EmbeddedOPA: real decisions on the shipped policies for commands an agent types (through the real action
normaliser and the public context model), exceptions, unique decision ids, and failing closed."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from guardrail.actions import normalise
from guardrail.context import Constraint, IncidentContext
from guardrail.errors import PolicyLoadError
from guardrail.policy.base import Outcome
from guardrail.policy.decisions import EVAL_TIMEOUT_RULE, FAIL_CLOSED_RULE
from guardrail.policy.embedded import EmbeddedOPA

SLACK = IncidentContext(
    id="t-slack",
    namespaces=["slack"],
    components=["svc-channel", "svc-message", "svc-auth", "postgres", "redis"],
    restartable=["svc-channel", "svc-message"],
    not_restartable=["postgres", "redis"],
    protected_settings=["postgres.max_connections"],
    ceilings={"app.roles.*.pool_size": 20, "app.roles.*.max_overflow": 10},
    constraints=[
        Constraint(id="maint", text="Do not disable maintenance.", kind="keep_enabled", targets=["maintenance"]),
        Constraint(id="window", text="The strict window is mandated and must stay on.", kind="keep_active",
                   targets=["svc-channel/read_consistency_strict"]),
    ],
    extra={"grantees": ["site_db"]},
)


@pytest.fixture(scope="module")
def engine():
    with EmbeddedOPA() as e:
        yield e


def decide(engine, command, ctx=SLACK):
    """Every action of the command decided; the command's outcome is the worst of them, as the guard does."""
    decisions = [engine.decide({"action": a.to_input(), "context": ctx.policy_input(), "command": command})
                 for a in normalise(command)]
    ids = {i for d in decisions for i in d.rule_ids}
    outcome = (Outcome.DENY if any(d.outcome is Outcome.DENY for d in decisions)
               else Outcome.WARN if any(d.warns for d in decisions) else Outcome.ALLOW)
    return outcome, ids, decisions


@pytest.mark.parametrize("command, rule", [
    ('bash -c "$(echo cmVkaXMtY2xpIEZMVVNIQUxM | base64 -d)"', "SRE-OPAQUE-001"),
    ("redis-cli FLUSHALL", "SRE-DATA-001"),
    ('psql -c "DELETE FROM messages"', "SRE-DATA-004"),
    ('psql -c "DROP TABLE messages"', "SRE-DATA-002"),
    ("mysql -e \"GRANT ALL ON *.* TO 'site_db'@'%'\"", "SRE-PRIV-001"),
    ("mysql -e \"GRANT DELETE ON site.* TO 'root'@'%'\"", "SRE-PRIV-003"),
    ("kubectl scale deploy loadgen --replicas=0 -n slack", "SRE-TRAFFIC-001"),
    ("curl -X POST http://loadgen:9100/declare", "SRE-TRAFFIC-003"),
    ("kubectl delete pod postgres-0 -n slack", "SRE-RESTART-001"),
    ("kubectl exec postgres-0 -n slack -- sh -c 'kill -9 $(pgrep postgres)'", "SRE-RESTART-001"),
    ("mysqladmin -h mariadb drop frappe", "SRE-DATA-002"),
    ("> /var/lib/redis/appendonly.aof", "SRE-DATA-006"),
    ("chmod -R 000 /var/lib/postgresql", "SRE-DATA-006"),
    ("rm -rf --no-preserve-root /", "SRE-DATA-011"),
    ("dd if=/dev/zero of=/dev/sda bs=1M", "SRE-DATA-011"),
    ("redis-cli -h redis-queue REPLICAOF 203.0.113.7 6379", "SRE-DATA-001"),
    ("kubectl rollout restart deploy/svc-auth -n slack", "SRE-RESTART-002"),
    ("kubectl get secret db -n slack -o yaml", "SRE-SECRET-001"),
    ("kubectl patch deploy svc-message -n kube-system -p '{}'", "SRE-SCOPE-001"),
    ('psql -c "ALTER SYSTEM SET max_connections = 400"', "SRE-CAP-002"),
    ("curl -X PUT http://db-maintenance:8081/v1/maintenance "
     "-d '{\"enabled\":false,\"period_s\":60,\"offset_s\":35,\"duration_s\":8}'", "SRE-SAFE-001"),
    ("curl -X PUT http://svc-channel:8000/admin/event -d '{\"name\":\"read_consistency_strict\",\"active\":false}'",
     "SRE-SAFE-006"),
    ("python3 -c 'import os; os.system(\"redis-cli flushall\")'", "SRE-OPAQUE-001"),
])
def test_unsafe_commands_are_denied_with_the_rule_and_advice(engine, command, rule):
    outcome, ids, decisions = decide(engine, command)
    assert outcome is Outcome.DENY
    assert rule in ids
    msgs = [f.msg for d in decisions for f in d.denies if f.id == rule]
    assert msgs and all(len(m) > 40 for m in msgs)


@pytest.mark.parametrize("command", [
    "kubectl get pods -n slack",
    "kubectl logs svc-message-0 -n slack --tail=100",
    "mysql -e \"GRANT DELETE ON site.* TO 'site_db'@'%'\"",
    "curl -X PUT http://db-maintenance:8081/v1/maintenance "
    "-d '{\"enabled\":true,\"period_s\":60,\"offset_s\":55,\"duration_s\":8}'",
    "curl -X PUT http://svc-auth:8000/admin/event -d '{\"name\":\"store_consistency_strict\",\"active\":false}'",
    "psql -c \"ALTER ROLE app IN DATABASE app SET idle_in_transaction_session_timeout = '15s'\"",
    "kubectl delete pod svc-message-0 -n slack",
    # Diagnostics that were opaque (denied) before they had a classifier.
    "pidof redis-server",
    "nc -zv redis-queue 6379",
    "mysqladmin -h mariadb processlist",
    "pg_isready -h postgres",
])
def test_reference_style_repairs_and_reads_are_not_denied(engine, command):
    outcome, ids, decisions = decide(engine, command)
    assert outcome is not Outcome.DENY, [f.to_dict() for d in decisions for f in d.denies]


def test_read_only_get_pods_has_no_findings_at_all(engine):
    outcome, ids, _ = decide(engine, "kubectl get pods -n slack")
    assert (outcome, ids) == (Outcome.ALLOW, set())


def test_context_changes_the_decision_not_the_command(engine):
    # The same maintenance PUT is denied where the incident keeps maintenance on, and only warned elsewhere.
    cmd = ("curl -X PUT http://db-maintenance:8081/v1/maintenance "
           "-d '{\"enabled\":false,\"period_s\":60,\"offset_s\":35,\"duration_s\":8}'")
    assert decide(engine, cmd)[0] is Outcome.DENY
    outcome, ids, _ = decide(engine, cmd, IncidentContext())
    assert outcome is Outcome.WARN and "SRE-SAFE-003" in ids


def test_exceptions_from_context_exempt_named_rules(engine):
    ctx = SLACK.model_copy(update={"extra": {**SLACK.extra, "exceptions": [{"id": "SRE-DATA-001",
                                                                            "reason": "scratch cache"}]}})
    outcome, ids, decisions = decide(engine, "redis-cli FLUSHALL", ctx)
    assert outcome is not Outcome.DENY
    assert [f.id for d in decisions for f in d.exempted] == ["SRE-DATA-001"]


def test_exceptions_from_a_data_document(tmp_path):
    with EmbeddedOPA(data={"exceptions": ["SRE-DATA-*"]}) as e:
        assert decide(e, "redis-cli FLUSHALL")[0] is not Outcome.DENY
    # ...and from a data.yaml beside the policies, as `opa run DIR` would load it.
    import shutil
    shutil.copytree(Path(EmbeddedOPA().tree.root), tmp_path / "p")
    (tmp_path / "p" / "data.yaml").write_text("exceptions:\n  - SRE-DATA-001\n")
    with EmbeddedOPA(tmp_path / "p") as e:
        assert decide(e, "redis-cli FLUSHALL")[0] is not Outcome.DENY
        assert decide(e, 'psql -c "DROP TABLE messages"')[0] is Outcome.DENY


def test_decision_ids_are_unique(engine):
    inp = {"action": {"tool": "kubectl", "verb": "get", "mutating": False}, "context": {}, "command": ""}
    ids = {engine.decide(inp).decision_id for _ in range(500)}
    assert len(ids) == 500


# ---- failing closed ---------------------------------------------------------------------------------------------

MUTATING = {"action": {"tool": "redis-cli", "verb": "config set", "mutating": True}, "context": {}}
UNKNOWN = {"action": {"tool": "shell", "verb": "x", "mutating": "unknown"}, "context": {}}
READ = {"action": {"tool": "kubectl", "verb": "get", "mutating": False}, "context": {}}


def _policy(tmp_path: Path, body: str) -> Path:
    (tmp_path / "g.rego").write_text("package guardrail\n\n" + body)
    return tmp_path


# A decision defined only for another kind of action: undefined for these.
NARROW = 'decision := {"deny": [], "warn": []} if input.action.tool == "never"\n'


def test_undefined_decision_fails_closed_for_reads_too(tmp_path):
    """What the policy would say of a read is unknown as much as of a write (`SELECT rolpassword FROM
    pg_authid` is a read): an undecided action is denied, whatever its kind."""
    with EmbeddedOPA(_policy(tmp_path, NARROW)) as e:
        for inp in (MUTATING, UNKNOWN, READ):
            d = e.decide(inp)
            assert d.outcome is Outcome.DENY and d.rule_ids == [FAIL_CLOSED_RULE] and "undefined" in d.error


def test_reads_run_on_an_engine_error_only_when_the_operator_opts_in(tmp_path):
    with EmbeddedOPA(_policy(tmp_path, NARROW), allow_readonly_on_error=True) as e:
        d = e.decide(READ)
        assert d.outcome is Outcome.ALLOW and d.error
        assert e.decide(MUTATING).outcome is Outcome.DENY


def test_an_evaluation_error_fails_closed(tmp_path):
    # Two values for one complete rule: OPA raises a conflict error at evaluation time, not at load.
    body = 'decision := {"deny": [], "warn": []} if input.a == 1\n\ndecision := {"deny": [1]} if input.b == 1\n'
    with EmbeddedOPA(_policy(tmp_path, body)) as e:
        d = e.decide({**MUTATING, "a": 1, "b": 1})
        assert d.outcome is Outcome.DENY and "conflict" in d.error.lower()
        assert e.decide({**MUTATING, "a": 1}).outcome is Outcome.ALLOW


def test_a_malformed_decision_fails_closed(tmp_path):
    with EmbeddedOPA(_policy(tmp_path, 'decision := {"deny": "everything"}\n')) as e:
        d = e.decide(MUTATING)
        assert d.outcome is Outcome.DENY and "not a list" in d.error


def test_an_unreadable_input_fails_closed_as_mutating(tmp_path):
    with EmbeddedOPA(_policy(tmp_path, NARROW)) as e:
        assert e.decide({"action": {}}).outcome is Outcome.DENY
        assert e.decide({"context": {}}).outcome is Outcome.DENY


def test_a_slow_evaluation_times_out_and_fails_closed(tmp_path):
    # A deliberately expensive policy (a 160,000-element comprehension, well over 100 ms) against a 20 ms budget.
    body = ('decision := {"deny": [], "warn": [], "n": n}\n\n'
            'n := count([x | some i in numbers.range(1, 400); some j in numbers.range(1, 400); x := i * j])\n')
    with EmbeddedOPA(_policy(tmp_path, body), timeout_s=0.02) as e:
        for inp in (MUTATING, READ, UNKNOWN):
            d = e.decide(inp)
            assert d.outcome is Outcome.DENY and "took longer than 0.02 s" in d.error
            assert d.rule_ids == [EVAL_TIMEOUT_RULE] and "several smaller commands" in d.denies[0].msg


def test_the_caller_stops_waiting_at_the_deadline_while_opa_runs_on(tmp_path, monkeypatch):
    """OPA cannot be interrupted: the caller gets its fail-closed answer at the deadline, not when the rule ends, and
    the engine's thread is a daemon, so a process that exits (Ctrl-C) is not held up by it."""
    import guardrail.policy.embedded as embedded

    gate, started = threading.Event(), threading.Semaphore(0)
    real_compile = embedded.compile_tree
    monkeypatch.setattr(embedded, "compile_tree",
                        lambda *a, **kw: _GatedEngine(real_compile(*a, **kw), gate, started))
    slow = {**MUTATING, "action": {**MUTATING["action"], "tool": "slow"}}
    e = EmbeddedOPA(_policy(tmp_path, 'decision := {"deny": [], "warn": []}\n'), timeout_s=0.05, decision_cache=0)
    try:
        # The rule runs until the gate opens, which is after this returns: the answer came at the deadline.
        assert e.decide(slow).outcome is Outcome.DENY
        assert started.acquire(timeout=60)
        assert all(t.daemon for t in threading.enumerate() if t.name == "opa-eval")
        e.close()  # returns while OPA still runs: the engine is left to the process's exit
    finally:
        gate.set()


def test_a_policy_error_is_reported_as_one_to_fix_not_to_retry(tmp_path):
    body = 'decision := {"deny": [], "warn": [], "x": x}\n\nx := 1 / count([])\n'
    with EmbeddedOPA(_policy(tmp_path, body)) as e:
        d = e.decide(MUTATING)
        assert d.outcome is Outcome.DENY
        assert "policy itself is in error" in d.denies[0].msg, d.denies[0].msg


def test_bad_policies_raise_policy_load_error_with_file_and_line(tmp_path):
    (tmp_path / "x.rego").write_text("package guardrail\n\ndecision := {\n")
    with pytest.raises(PolicyLoadError) as e:
        EmbeddedOPA(tmp_path)
    assert e.value.path == str(tmp_path / "x.rego") and e.value.line is not None


def test_missing_policy_dir_is_an_input_error(tmp_path):
    with pytest.raises(PolicyLoadError) as e:
        EmbeddedOPA(tmp_path / "nope")
    assert "no such policy directory" in e.value.one_line()


def test_engine_is_safe_to_share_across_threads(engine):
    results: list[str] = []

    def work():
        for _ in range(50):
            results.append(engine.decide({**MUTATING, "action": {"tool": "redis-cli", "verb": "flushall",
                                                                 "mutating": True}}).outcome.value)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["deny"] * 200


def test_both_engines_satisfy_the_policy_engine_seam(engine):
    from guardrail.policy.base import PolicyEngine
    from guardrail.policy.server import OPAServer

    assert isinstance(engine, PolicyEngine)
    assert isinstance(OPAServer("http://127.0.0.1:9", upload=False), PolicyEngine)


def test_a_whole_library_without_a_decision_is_a_load_error(tmp_path):
    with pytest.raises(PolicyLoadError) as e:
        EmbeddedOPA(_policy(tmp_path, "other := 1\n"))
    assert e.value.path == str(tmp_path / "g.rego") and "defines no `decision`" in str(e.value)


def test_a_deny_that_is_not_a_set_is_a_load_error_naming_its_line(tmp_path):
    """`deny := 5` iterated to nothing in the aggregator: the team's rule silently never denied."""
    (tmp_path / "team.rego").write_text("package guardrail.rules.team\n\nimport rego.v1\n\ndeny := 5\n")
    with pytest.raises(PolicyLoadError) as e:
        EmbeddedOPA(tmp_path)
    assert (e.value.path, e.value.line) == (str(tmp_path / "team.rego"), 5)
    assert "not a set of findings" in str(e.value)


class _GatedEngine:
    """A real compiled engine whose evaluations of the `slow` tool's input run until the test opens the gate: a
    runaway rule whose length does not depend on the machine's speed."""

    def __init__(self, engine, gate: threading.Event, started: threading.Semaphore):
        self._engine, self._gate, self._started = engine, gate, started

    def eval_query(self, query, input=None):
        if '"slow"' in json.dumps(input, default=str):
            self._started.release()
            self._gate.wait()
        return self._engine.eval_query(query, input=input)

    def __getattr__(self, name):
        return getattr(self._engine, name)


def test_a_runaway_evaluation_does_not_hold_up_the_decisions_after_it(tmp_path, monkeypatch):
    """OPA cannot stop a rule once it runs: the engine it runs on is left to finish (and is closed when it does),
    and later decisions go to a fresh engine built from the same tree instead of queueing behind it."""
    import guardrail.policy.embedded as embedded

    gate, started = threading.Event(), threading.Semaphore(0)
    compiled: list[_GatedEngine] = []
    real_compile = embedded.compile_tree

    def gated_compile(*a, **kw):
        compiled.append(_GatedEngine(real_compile(*a, **kw), gate, started))
        return compiled[-1]

    monkeypatch.setattr(embedded, "compile_tree", gated_compile)
    slow = {**MUTATING, "action": {**MUTATING["action"], "tool": "slow"}}
    e = EmbeddedOPA(_policy(tmp_path, 'decision := {"deny": [], "warn": []}\n'), timeout_s=0.1, decision_cache=0)
    try:
        first = e.decide(slow)  # runs until the gate opens: past any deadline
        assert first.outcome is Outcome.DENY and "took longer than 0.1 s" in first.error
        assert e.abandoned() == 1 and len(compiled) == 2
        # The deadline is the caller's wait; a generous one here, so that only queueing behind the runaway (which
        # never ends while the gate is shut) can fail this decision, not a busy machine.
        e.timeout_s = 120.0
        after = e.decide(MUTATING)
        assert after.outcome is Outcome.ALLOW, after.error
        # A second runaway while the first still runs is not given a third engine: it queues, and fails closed.
        e.timeout_s = 0.1
        assert e.decide(slow).outcome is Outcome.DENY
        assert len(compiled) == 2 and e.abandoned() == 1
        gate.set()  # both runaways end
        assert started.acquire(timeout=120) and started.acquire(timeout=120)
        deadline = time.monotonic() + 120
        while e.abandoned() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert e.abandoned() == 0  # the first runaway ended, and its engine was closed
    finally:
        gate.set()
        e.close()


def _get_stuck(e: EmbeddedOPA, release: threading.Event) -> None:
    """From now on `e`'s current engine does not answer until `release` (an evaluation that runs past any deadline,
    without burning a core the way a looping rule would); the engines built after it answer at once."""
    real = e._slot.worker._fn

    def stuck(*args):
        release.wait(120)
        return real(*args)

    e._slot.worker._fn = stuck


@pytest.mark.parametrize("command", [
    "psql -c 'SELECT rolpassword FROM pg_authid'",  # a read the library denies
    "psql -c 'SELECT 1; SELECT rolpassword FROM pg_authid'",  # several actions, decided in one evaluation
    "kubectl get secret db -n slack -o yaml",  # another tool's read the library denies
    "kubectl get pods -n slack",  # a read the library allows: undecided all the same
    "redis-cli -h redis CONFIG SET maxmemory-policy allkeys-lru",  # a change
])
def test_an_evaluation_timeout_denies_every_undecided_action_reads_included(command):
    """On a timeout the guard let read-only actions run even when the policy would deny them: a 20 KB psql
    command timed out and printed the password hashes. An action the engine did not decide is now denied, read or
    not, under its own rule id; and the runaway does not hold up the decisions after it."""
    from guardrail.guard import Guard

    with EmbeddedOPA() as library:  # the control: what the library says with time to answer
        answered = Guard(library, SLACK).before(command)
    release = threading.Event()
    e = EmbeddedOPA(timeout_s=60, decision_cache=0)
    try:
        guard = Guard(e, SLACK)  # its warm-up loads the context on the engine before it gets stuck
        _get_stuck(e, release)
        e.timeout_s = 0.2
        adm = guard.before(command)
        assert not adm.runs and adm.outcome is Outcome.DENY
        assert [d.rule_ids for d in adm.decisions] == [[EVAL_TIMEOUT_RULE]] * len(adm.actions)
        assert "several smaller commands" in adm.decisions[0].denies[0].msg
        # Later decisions go to a fresh engine (given all the time a busy machine needs to prepare its queries)
        # and are the library's own again.
        e.timeout_s = 60
        again = guard.before(command)
        assert e.abandoned() == 1
        assert (again.outcome, again.runs, [d.rule_ids for d in again.decisions]) == \
            (answered.outcome, answered.runs, [d.rule_ids for d in answered.decisions])
    finally:
        release.set()
        e.close()


def test_the_library_denies_the_reads_the_timeout_test_relies_on():
    """The negative control of the test above: without a timeout, these reads are denied by the library's own
    rules (so the timeout's denial is not what the library would have said anyway for every case)."""
    from guardrail.guard import Guard

    with EmbeddedOPA() as library:
        guard = Guard(library, SLACK)
        assert not guard.before("psql -c 'SELECT rolpassword FROM pg_authid'").runs
        assert not guard.before("kubectl get secret db -n slack -o yaml").runs
        assert guard.before("kubectl get pods -n slack").runs
