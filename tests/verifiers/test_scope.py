"""Scope audit: first-step snapshot of protected state, diffed on the declaration, with a rollback."""

from __future__ import annotations

from tests.verifiers.fakes import FakeEnv, FakeJournal, ManualClock, action
from verifiers.protocols import CommandResult, FeedbackCode, VerdictStatus
from verifiers.scope import ScopeAudit, ScopeSnapshot, diff

CTX = {"id": "t", "protected_settings": ["mariadb.max_connections"],
       "protected_probes": {"grants": "mysql -N -B -e \"SHOW GRANTS FOR 'site'@'%'\"", "clock": "date +%s%N"}}


def env_() -> FakeEnv:
    env = FakeEnv(clock=ManualClock(0.0))
    env.layer("mariadb").declared["max_connections"] = "151"
    env.grants = "GRANT SELECT, INSERT ON site.* TO 'site'@'%'"
    env.handle(r"mysql -N -B -e \"SHOW GRANTS FOR 'site'@'%'\"", lambda m: env.grants + "\n")
    ticks = iter(range(10**6))
    env.handle(r"date \+%s%N", lambda m: f"now {next(ticks)} ns\n")  # output that moves on its own
    env.handle(r"opaque", lambda m: env.layer("mariadb").runtime.update(max_connections="400") or "")
    return env


def test_unchanged_protected_state_passes_and_volatile_probes_are_ignored():
    env = env_()
    audit = ScopeAudit(CTX)
    j = FakeJournal(env.clock)
    assert audit.baseline_step.check(env, j, None).passed
    assert audit.snapshot_at_start.volatile == {"probe:clock"}
    v = audit.check(env, j, None)
    assert v.passed, v.message


def test_drift_past_the_policy_is_caught_with_a_rollback_from_the_journal_snapshot():
    env = env_()
    audit = ScopeAudit(CTX)
    j = FakeJournal(env.clock)
    audit.baseline_step.check(env, j, None)
    j.append("snapshot", key="mariadb.max_connections", scope={}, before="151")
    j.run(env, "opaque", [action("shell", "eval", mutating="unknown")])
    env.grants += ", DELETE"
    v = audit.check(env, j, None)
    assert v.status is VerdictStatus.FAIL and v.code is FeedbackCode.SCOPE_DRIFT
    moved = {m["item"]: m for m in v.evidence["changed"]}
    assert set(moved) == {"mariadb.max_connections", "probe:grants"}
    assert moved["mariadb.max_connections"]["before"] == 151 and moved["mariadb.max_connections"]["after"] == 400
    assert "max_connections = 151" in moved["mariadb.max_connections"]["rollback"]
    assert moved["probe:grants"]["rollback"] is None


def test_baseline_taken_late_uses_the_guards_prior_value():
    env = env_()
    audit = ScopeAudit(CTX)
    j = FakeJournal(env.clock)
    j.append("snapshot", key="mariadb.max_connections", scope={}, before="151")
    j.run(env, "opaque", [action("shell", "eval", mutating="unknown")])
    audit.baseline_step.check(env, j, None)  # the first step check runs after the first command
    v = audit.check(env, j, None)
    assert v.code is FeedbackCode.SCOPE_DRIFT


def test_no_baseline_after_changes_is_inconclusive():
    env = env_()
    j = FakeJournal(env.clock)
    j.run(env, "opaque", [action("shell", "eval", mutating="unknown")])
    assert ScopeAudit(CTX).check(env, j, None).status is VerdictStatus.INCONCLUSIVE


def test_diff_is_pure_and_skips_volatile():
    a = ScopeSnapshot(0, {"x": 1, "y": 2, "z": 3}, volatile={"z"})
    b = ScopeSnapshot(1, {"x": 1, "y": 5, "z": 4})
    assert diff(a, b) == [{"item": "y", "before": 2, "after": 5}]


def test_probe_lines_the_journal_explains_are_accounted_for_and_the_rest_is_drift():
    from verifiers.scope import parse_probe

    env = FakeEnv(clock=ManualClock(0.0))
    state = {"vars": {"max_user_connections": "8", "max_connections": "151", "read_only": "OFF"},
             "roles": [" app | db | statement_timeout=150ms", " worker | db | statement_timeout=30s"]}
    env.handle(r"show-vars", lambda m: "".join(f"{k}\t{v}\n" for k, v in state["vars"].items()))
    env.handle(r"show-roles", lambda m: " Role | Database | Settings\n------+---------+---------\n"
               + "\n".join(state["roles"]) + f"\n({len(state['roles'])} rows)\n")
    env.handle(r"queue-depth", lambda m: f"{len(state['roles']) * 7}\n")
    env.handle(r"fix", lambda m: "")
    ctx = {"protected_settings": ["mariadb.max_connections"],
           "protected_probes": {"vars": "show-vars", "roles": "show-roles", "depth": "queue-depth"}}
    assert parse_probe("a\t1\nb\t2\n") == {"a": "1", "b": "2"}
    assert parse_probe("maxmemory\n64\nmaxmemory-policy\nnoeviction\n") == {"maxmemory": "64",
                                                                             "maxmemory-policy": "noeviction"}
    audit = ScopeAudit(ctx)
    j = FakeJournal(env.clock)
    audit.baseline_step.check(env, j, None)
    assert "probe:depth" in audit.snapshot_at_start.gauges  # a single number is a level: reported, not judged
    # The journalled fix changes max_user_connections and the app role's timeout: accounted for.
    j.run(env, "fix", [action("mysql", "set global", [{"key": "mariadb.max_user_connections", "value": 0}]),
                       action("psql", "alter role", [{"key": "postgres.statement_timeout", "value": None,
                                                      "scope": {"role": "app", "database": "db"}}])])
    state["vars"]["max_user_connections"] = "0"
    state["roles"] = state["roles"][1:]
    v = audit.check(env, j, None)
    assert v.passed, v.message
    assert {m["item"] for m in v.evidence["accounted_for"]} == {"probe:vars/max_user_connections", "probe:roles"}
    # Something nobody journalled: the worker role's timeout, and a protected setting.
    state["roles"] = [" worker | db | statement_timeout=0"]
    state["vars"]["max_connections"] = "400"
    v = audit.check(env, j, None)
    assert v.code is FeedbackCode.SCOPE_DRIFT
    assert "worker db statement_timeout=0" in v.message and "max_connections" in v.message


def test_output_that_moves_before_any_change_is_learned_as_volatile():
    env = FakeEnv(clock=ManualClock(0.0))
    n = {"i": 0}
    env.handle(r"jobs", lambda m: f"queued jobs: {n['i']}\n")
    audit = ScopeAudit({"protected_probes": {"jobs": "jobs"}})
    j = FakeJournal(env.clock)
    audit.baseline_step.check(env, j, None)
    n["i"] = 3
    audit.baseline_step.check(env, j, None)  # still no change by the agent: the workload moved it
    n["i"] = 9
    assert audit.check(env, j, None).passed


def test_baseline_of_unreadable_state_does_not_stall_the_agents_commands():
    """A protected setting whose server cannot be reached (a local run, a component down): the baseline taken while
    the agent's command waits reads it once, and the re-reads before the first change skip it. It used to be read
    four times, five seconds apart, twice per baseline and again before every command: 15-46 s per command."""
    env = env_()
    env.handle(r"mysql .*max_connections.*", lambda m: CommandResult(command=m.group(0), exit_code=1,
                                                                     stderr="ERROR 2005: Unknown server host"))
    audit = ScopeAudit(CTX)
    j = FakeJournal(env.clock)
    for _ in range(3):  # three commands before the first change
        assert audit.baseline_step.check(env, j, None).passed
    assert env.clock.sleeps == []
    reads = [c for c in env.commands if "max_connections" in c]
    assert len(reads) == 1, reads
    assert "mariadb.max_connections" in audit.snapshot_at_start.errors
    # Readable items are still read again, so what moves on its own is learnt.
    assert sum("SHOW GRANTS" in c for c in env.commands) == 4


def test_an_item_the_second_baseline_read_misses_is_still_watched():
    """Read once each, a setting whose second read failed was marked as moving on its own, and then never judged:
    a change from 151 to 400 nobody journalled passed."""
    env = env_()
    real = env.run
    reads = []

    def flaky_run(command: str) -> CommandResult:
        if "max_connections" in command:
            reads.append(command)
            if len(reads) == 2:  # the baseline's second read
                return CommandResult(command=command, exit_code=1, stderr="connection refused")
        return real(command)

    env.run = flaky_run
    audit = ScopeAudit(CTX)
    j = FakeJournal(env.clock)
    audit.baseline_step.check(env, j, None)
    assert "mariadb.max_connections" not in audit.snapshot_at_start.volatile
    env.layer("mariadb").runtime["max_connections"] = "400"
    v = audit.check(env, j, None)
    assert v.code is FeedbackCode.SCOPE_DRIFT, v.message
