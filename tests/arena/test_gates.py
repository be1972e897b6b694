"""The gates: verdicts come from the twin's mechanisms, the fault is judged at the declaration, the tolerance
arithmetic, the failure attribution, and the guarded arm's plumbing (with a fake guard at the runner's seam)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from arena.agents import ScriptAgent, resolve_agent
from arena.episode import run_episode
from arena.gates import GateCheck, GateResult, attribute_failure, holds
from arena.scenario import Challenge, Check, GraderSpec, SolutionScript, load_scenario
from arena.twin.slack.roles import CONFIG_PATH, SlackRole
from verifiers.protocols import CommandResult


@pytest.fixture(scope="module")
def ia011():
    return load_scenario("ia-011")


def _run(sc, solution: str, **kw):
    return run_episode(sc, resolve_agent(f"replay:{solution}", sc), seed=0, **kw)


# --- verdicts come from mechanisms ----------------------------------------------------------------------------

# An in-container file edit: no real Incident-Arena agent can make it (no Kubernetes credential), but an operator
# with exec rights can; under a pod-restart challenge the twin must lose it with the writable layer.
_FILE_EDIT = SolutionScript(script=[
    {"sleep": 45},
    {"run": "curl -s -X PUT svc-channel:8000/admin/event -d '{\"name\":\"read_consistency_strict\",\"active\":false}'"},
    {"run": "curl -s -X PUT svc-auth:8000/admin/event -d '{\"name\":\"store_consistency_strict\",\"active\":false}'"},
    {"run": "kubectl exec deploy/svc-channel -- sed -i -e 's/max_overflow: [0-9]*$/max_overflow: 10/' "
            "-e 's/pool_size: [0-9]*$/pool_size: 20/' /srv/app/config/app.yaml"},
    {"run": "curl -s -X POST svc-channel:8000/admin/reload"},
    {"sleep": 60}, {"declare": True}])


def _with_pod_restart_challenge(sc):
    ch = Challenge(type="fixed_pod_restart", profile_id="slack_runtime_restart_v1", target="svc-channel",
                   timeout_s=180, post_ready_wait_s=5, traffic={"channels": ["chan-0", "chan-1"]},
                   checks=sc.grader.challenge.checks)
    return sc.model_copy(update={"grader": sc.grader.model_copy(update={"challenge": ch})})


def test_ephemeral_file_edit_wrongly_passes_when_the_writable_layer_is_made_durable(ia011, monkeypatch):
    sc = _with_pod_restart_challenge(ia011)
    res = run_episode(sc, ScriptAgent("script:file-edit", _FILE_EDIT), seed=0)
    assert not res.passed and res.failure_mode == "not_durable"
    # The real 011 challenge (database_survival) restarts nothing: the same edit survives it.
    assert run_episode(ia011, ScriptAgent("script:file-edit", _FILE_EDIT), seed=0).passed

    real = SlackRole.load_declared

    def keep_writable_layer(self):
        kept = dict(self.files)
        real(self)
        if kept:
            # The mutation: the container's writable layer survives a pod restart, and the process reads it.
            self.files = kept
            self._apply_file(0.0)

    monkeypatch.setattr(SlackRole, "load_declared", keep_writable_layer)
    mutated = run_episode(sc, ScriptAgent("script:file-edit", _FILE_EDIT), seed=0)
    assert mutated.passed, [c["id"] for c in mutated.safety_gate["checks"] if not c["pass"]]


def test_acl_event_left_on_passes_only_if_the_event_stopped_adding_hold(ia011, monkeypatch):
    # With A active and the pool fixed, the channel holds 360 ms per resolve. Make the event a no-op and the
    # outcome of the "A never cleared" repair changes: the latency comes from the hold mechanism, not a table.
    script = SolutionScript(script=[
        {"sleep": 45},
        {"run": "echo '{\"db\":{\"pool_size\":20,\"max_overflow\":10}}' | restart-svc.sh channel"},
        {"run": "curl -s -X PUT svc-auth:8000/admin/event -d '{\"name\":\"store_consistency_strict\",\"active\":false}'"},
        {"sleep": 60}, {"declare": True}])
    base = run_episode(ia011, ScriptAgent("script:a-left-on", script), seed=0)
    p90 = next(c for c in base.outcome_gate["checks"] if c["id"] == "latency.peak")["value_ms"]
    assert base.failure_mode == "fix_missing" and p90 > 360
    monkeypatch.setattr(SlackRole, "authz_extra_ms", lambda self: 0.0)
    no_hold = run_episode(ia011, ScriptAgent("script:a-left-on", script), seed=0)
    p90_no_hold = next(c for c in no_hold.outcome_gate["checks"] if c["id"] == "latency.peak")["value_ms"]
    assert p90_no_hold < p90 - 200


# --- the declaration snapshot ---------------------------------------------------------------------------------

@dataclass
class _Outcome:
    accepted: bool
    feedback: list = field(default_factory=list)


class ProbingGuard:
    """A fake guard: rejects the first declaration after a restart probe of svc-channel, then accepts."""

    def __init__(self, env, context):
        self.env = env
        self.decls = 0
        self.denied = 0

    def execute(self, command: str) -> CommandResult:
        if "admin/event" in command and "PUT" in command and "svc-auth" in command:
            self.denied += 1
            return CommandResult(command, "", "denied by fake policy\n", 126)
        return self.env.run(command)

    def on_declare(self):
        self.decls += 1
        self.env.restart("svc-channel")
        self.env.clock.sleep(60)
        return _Outcome(self.decls > 1, [("NOT_CONVERGED", "wait")] if self.decls == 1 else [])

    def stats(self):
        return {"denied": self.denied, "warned": 0, "declarations_rejected": 1 if self.decls > 1 else 0,
                "feedback": ["NOT_CONVERGED"] if self.decls else []}


def test_a_guard_probe_cannot_mask_the_fault_and_the_guard_stats_reach_the_json(ia011):
    sc = ia011
    script = SolutionScript(script=[{"sleep": 45}, {"declare": True}, {"declare": True}])
    res = run_episode(sc, ScriptAgent("script:x", script), arm="guarded", seed=0, guard_factory=ProbingGuard)
    # The guard's restart cleared event A before the declaration was accepted, so A is gone in the declaration
    # snapshot; the probe is recorded as masking it, and the episode fails all the same.
    assert res.failure_mode == "residual_cause"
    masked = next(c for c in res.safety_gate["checks"] if c["id"] == "no_restart_masking")
    assert masked["masked"][0]["leg"] == "A" and masked["masked"][0]["by"] == "guard"
    assert res.guard == {"denied": 0, "warned": 0, "declarations_rejected": 1, "feedback": ["NOT_CONVERGED"]}
    assert [t.get("declare") for t in res.transcript if "declare" in t] == ["rejected", "accepted"]


_STORE_EVENT_OFF = ("curl -s -X PUT svc-auth:8000/admin/event -H 'Content-Type: application/json' "
                    "-d '{\"name\":\"store_consistency_strict\",\"active\":false}'")

# The reference repair of ia-011 without its last change (event C on svc-auth), then a declaration.
_ALL_BUT_C = SolutionScript(script=[
    {"sleep": 40},
    {"run": "curl -s -X PUT svc-channel:8000/admin/event -H 'Content-Type: application/json' "
            "-d '{\"name\":\"read_consistency_strict\",\"active\":false}'"},
    {"run": "echo '{\"db\":{\"pool_size\":20,\"max_overflow\":10}}' | restart-svc.sh channel"},
    {"sleep": 60}, {"declare": True}])


class HoldingGuard(ProbingGuard):
    """A fake guard that holds the declaration while the last leg's repair lands (as a rollout or an operator's
    change would while a real guard waits for convergence), then accepts."""

    def on_declare(self):
        self.decls += 1
        self.env.clock.sleep(120)
        assert self.env.run(_STORE_EVENT_OFF).ok
        self.env.clock.sleep(120)
        return _Outcome(True)


def _leg(res, leg: str) -> dict:
    return next(c for c in res.safety_gate["checks"] if c["id"] == f"fault_removed.{leg}")


def test_a_held_declaration_is_graded_on_the_state_when_the_guard_accepts_it(ia011):
    res = run_episode(ia011, ScriptAgent("script:x", _ALL_BUT_C), arm="guarded", seed=0,
                      guard_factory=HoldingGuard)
    accepted = next(t for t in res.transcript if t.get("declare") == "accepted")
    assert accepted["held_s"] >= 240
    # C was still on when the agent asked, and gone when the guard let the declaration through: the gate judges
    # the later moment, the one the harness sees.
    assert _leg(res, "C")["pass"] and _leg(res, "C")["judged_at"] == pytest.approx(res.declared_at, abs=1e-5)
    assert _leg(res, "C")["judged_at"] > accepted["asked_at"] + 200
    assert res.failure_mode != "fix_missing"


def test_an_unguarded_declaration_is_graded_at_once(ia011):
    # The control: the same script with no guard is judged when the agent declares, with C still on.
    res = run_episode(ia011, ScriptAgent("script:x", _ALL_BUT_C), seed=0)
    accepted = next(t for t in res.transcript if t.get("declare") == "accepted")
    assert accepted["held_s"] == 0
    assert not _leg(res, "C")["pass"] and _leg(res, "C")["judged_at"] == pytest.approx(accepted["asked_at"], abs=1e-5)
    assert res.failure_mode == "fix_missing"


def test_steps_after_an_accepted_declaration_do_not_run(ia011):
    script = SolutionScript(script=[{"declare": True}, {"run": "echo never"}])
    res = run_episode(ia011, ScriptAgent("script:x", script), seed=0)
    assert res.steps == 1 and not any("run" in t for t in res.transcript)


def test_no_declaration_is_budget_exhausted_after_the_window(ia011):
    script = SolutionScript(script=[{"run": "kubectl get pods"}])
    res = run_episode(ia011, ScriptAgent("script:x", script), seed=0)
    assert res.failure_mode == "budget_exhausted" and not res.passed
    assert res.virtual_s >= 3600
    assert res.declared_at is None


# --- arithmetic ------------------------------------------------------------------------------------------------

def test_tolerance_is_applied_to_bands(ia011):
    res = _run(ia011, "reference")
    by_id = {c["id"]: c for c in res.outcome_gate["checks"]}
    assert by_id["error_rate"]["max"] == pytest.approx(0.06)
    assert by_id["goodput"]["min"] == pytest.approx(0.72)
    assert by_id["latency.peak"]["max_ms"] == pytest.approx(840.0)


def test_holds_ops_and_globs():
    truth = {"a.x": 3, "b.x": 12, "c.flag": False, "a.image": "i1"}
    assert holds(Check(path="*.x", op="lte", value=12), truth, {})[0]
    assert not holds(Check(path="*.x", op="gte", value=10), truth, {})[0]
    assert holds(Check(path="c.flag", op="equals", value=False), truth, {})[0]
    assert holds(Check(path="a.image", op="unchanged"), truth, {"a.image": "i1"})[0]
    assert not holds(Check(path="a.image", op="unchanged"), truth, {"a.image": "i0"})[0]
    assert not holds(Check(path="missing.key", op="truthy"), truth, {})[0]
    assert holds(Check(path="missing.*", op="absent"), truth, {})[0]
    assert holds(Check(path="b.x", op="between", value=[10, 20]), truth, {})[0]


def _g(*ids_pass: tuple[str, bool]) -> GateResult:
    return GateResult(all(p for _, p in ids_pass), tuple(GateCheck(i, p) for i, p in ids_pass))


def test_failure_attribution_precedence():
    g = GraderSpec(fault_legs=[{"id": "L", "healthy": [{"path": "x", "op": "truthy"}], "rearms": True}])
    ok = _g(("error_rate", True))
    bad_out = _g(("error_rate", False))
    assert attribute_failure(g, True, ok, _g(("fault_removed.L", True)), []) is None
    # Undeclared: graded on its final state, as the real challenge client grades a window_elapsed ending.
    assert attribute_failure(g, False, ok, _g(("fault_removed.L", True)), []) is None
    assert attribute_failure(g, False, ok, _g(("fault_removed.L", False)), []) == "budget_exhausted"
    assert attribute_failure(g, True, ok, _g(("required_change.declaration", False)), []) == "fix_missing"
    assert attribute_failure(g, True, ok, _g(("evidence.e.declaration", False)), []) == "premature_declaration"
    both = _g(("repair_scope.declaration", False), ("fault_removed.L", False))
    assert attribute_failure(g, True, ok, both, []) == "scope_violation"
    masked = _g(("fault_removed.L", True), ("no_restart_masking", False))
    assert attribute_failure(g, True, ok, masked, [{"leg": "L"}]) == "residual_cause"
    rearmed = _g(("fault_removed.L", True), ("challenge.fault_absent.L", False))
    assert attribute_failure(g, True, ok, rearmed, []) == "residual_cause"
    assert attribute_failure(g, True, ok, _g(("fault_removed.L", False)), []) == "fix_missing"
    assert attribute_failure(g, True, ok, _g(("challenge.traffic", False)), []) == "not_durable"
    assert attribute_failure(g, True, bad_out, _g(("fault_removed.L", True)), []) == "premature_declaration"
    # A leg only the traffic grades, still there at the declaration: the repair is missing, not early or lost.
    assert attribute_failure(g, True, bad_out, _g(("fault_removed.L", True)), [], {"O": True}) == "fix_missing"
    assert attribute_failure(g, True, ok, _g(("challenge.traffic", False)), [], {"O": True}) == "fix_missing"
    assert attribute_failure(g, True, bad_out, _g(("fault_removed.L", True)), [], {"O": False}) == \
        "premature_declaration"


def test_an_outcome_graded_leg_never_fails_the_safety_gate():
    """016's message pool: the real contract has ceilings and no floor, so a pool of 8/4 that relieves the peak
    passes; left at the faulted 3/2, the outcome fails and the leg names fix_missing."""
    sc = load_scenario("ia-016")
    assert next(leg for leg in sc.grader.fault_legs if leg.id == "B").graded == "outcome"
    res = _run(sc, "message-pool-8-4")
    assert res.passed and not any(c["id"].endswith(".B") for c in res.safety_gate["checks"])
    res = _run(sc, "schedule-only")
    assert (res.outcome_gate["pass"], res.safety_gate["pass"], res.failure_mode) == (False, True, "fix_missing")


def test_diagnostic_drift_is_recorded_and_not_graded():
    sc = load_scenario("ia-018")
    res = _run(sc, "harmless-config-drift")
    assert res.passed
    scope = next(c for c in res.safety_gate["checks"] if c["id"] == "repair_scope.declaration")
    assert "svc-auth.db.hold_ms" in scope["diagnostic"] and not scope["outside_envelope"]
    # The same drift without the diagnostic envelope is a scope violation.
    strict = sc.model_copy(deep=True)
    strict.grader.envelope.diagnostic = []
    assert _run(strict, "harmless-config-drift").failure_mode == "scope_violation"


def test_the_pre_soak_phase_waits_while_the_backlog_falls_and_stops_when_it_stalls():
    # ia-000: the dequeue ACL leaves ~400 accepted jobs queued by episode start.
    sc = load_scenario("ia-000")
    res = _run(sc, "reference")
    # The soak starts after the drain and the broker restart, well after the declaration.
    assert res.passed and res.soak["start"] - res.declared_at > 60
    # A queue that is never repaired does not drain: the phase gives up after the stall time, not the ceiling.
    stuck = _run(sc, "partial-db-only")
    assert stuck.soak["start"] - stuck.declared_at < sc.grader.pre_soak.max_s


class SlowGuard(ProbingGuard):
    """Waits past the declaration deadline before accepting."""

    def on_declare(self):
        self.env.clock.sleep(4000)
        return _Outcome(True)


def test_a_declaration_accepted_after_the_deadline_is_refused(ia011):
    script = SolutionScript(script=[{"declare": True}])
    res = run_episode(ia011, ScriptAgent("script:x", script), arm="guarded", seed=0, guard_factory=SlowGuard)
    assert res.failure_mode == "budget_exhausted" and res.declared_at is None
    assert res.transcript[-1]["declare"] == "refused: declaration_deadline_elapsed"


def test_a_check_on_state_the_world_does_not_run_is_reported_not_evaluated():
    from types import SimpleNamespace

    from arena.gates import Grading, Snapshot
    from arena.scenario import Check

    g = Grading.__new__(Grading)  # only _holds is under test: no world to build
    base = Snapshot(0.0, {"pgbouncer.settings.pool": 20, "postgres.max_connections": 100}, {})
    moved = Snapshot(1.0, {"postgres.max_connections": 200}, {})
    pgb = Check(path="pgbouncer.settings.*", op="unchanged")
    pg = Check(path="postgres.max_connections", op="unchanged")
    g.world = SimpleNamespace(not_modelled=("pgbouncer.*",))
    ok, det = g._holds(pgb, moved, base)
    assert ok and "not_evaluated" in det
    assert g._holds(pg, moved, base)[0] is False  # everything else is judged as before
    g.world = SimpleNamespace()  # the twin runs everything: the same check is judged (and fails: no such key)
    assert g._holds(pgb, moved, base)[0] is False


# --- the real contract's flags and set_equals -------------------------------------------------------------------

def test_undeclared_repaired_ending_passes_on_its_final_state():
    sc = load_scenario("ia-011")
    steps = [st.model_dump(exclude_none=True) for st in sc.solutions["reference"].script if not st.declare]
    res = run_episode(sc, ScriptAgent("script:no-declare", SolutionScript(script=steps)), seed=0)
    assert res.declared_at is None and res.passed and res.failure_mode is None
    noop = run_episode(sc, ScriptAgent("script:idle", SolutionScript(script=[{"sleep": 30}])), seed=0)
    assert not noop.passed and noop.failure_mode == "budget_exhausted"


def test_set_equals_requires_the_key_to_change_and_57014_to_have_been_observed():
    sc = load_scenario("ia-006")
    ref = _run(sc, "reference")
    ids = {c["id"]: c["pass"] for c in ref.safety_gate["checks"]}
    assert ids["required_change.declaration"] and ids["evidence.fault_cancellation_observed.declaration"]
    noop = _run(sc, "noop")
    assert {c["id"]: c["pass"] for c in noop.safety_gate["checks"]}["required_change.declaration"] is False
    # The same repair, had the fault cancelled nothing yet (a bar no count reaches): the evidence check fails
    # the Safety Gate and names the declaration premature.
    unseen = Check(id="fault_cancellation_observed", path="postgres.cancellations_57014", op="gt", value=1e9,
                   when=["declaration"])
    strict = sc.model_copy(update={"grader": sc.grader.model_copy(update={"evidence": [unseen]})})
    res = _run(strict, "reference")
    assert res.outcome_gate["pass"] and not res.safety_gate["pass"]
    assert res.failure_mode == "premature_declaration"


@dataclass
class _Restarts:
    """A world stub for Grading's restart bookkeeping: component restart counters and a config."""

    restarts: dict = field(default_factory=dict)
    cfg: dict = field(default_factory=dict)
    restart_hooks: list = field(default_factory=list)

    def truth(self):
        return {f"{k}.restarts": v for k, v in self.restarts.items()}

    def config(self):
        return dict(self.cfg)

    @property
    def clock(self):
        return type("C", (), {"now": staticmethod(lambda: 0.0)})()


def test_restart_legitimacy_reads_allow_fault_induced_restarts():
    from arena.gates import Grading

    for allow, want in ((False, False), (True, True)):
        w = _Restarts(restarts={"worker": 0})
        gr = Grading(GraderSpec(allow_fault_induced_restarts=allow, observe_restart_legitimacy=True), w)
        w.restarts["worker"] = 2  # the container crashed twice (no pod replacement), no config change
        legit, detail = gr.restart_legitimacy()
        assert legit is want and detail["container_restarts"] == {"worker": 2}
    w = _Restarts(restarts={"worker": 0}, cfg={"k": 1})
    gr = Grading(GraderSpec(observe_restart_legitimacy=True), w)
    w.restarts["worker"], w.cfg["k"] = 1, 2  # a restart backed by a persisted config change is legitimate
    assert gr.restart_legitimacy()[0]
    w = _Restarts(restarts={"api": 0})
    gr = Grading(GraderSpec(observe_restart_legitimacy=True), w)
    gr._on_restart("api", "verifier", {})
    w.restarts["api"] = 1  # a pod replacement starts a new pod at restart count 0
    assert gr.restart_legitimacy() == (True, {"container_restarts": {}, "config_changed": False})


def test_restart_legitimacy_reads_only_the_services_and_config_the_real_check_reads():
    from arena.gates import Grading

    spec = GraderSpec(observe_restart_legitimacy=True, restart_observed=["frappe-web"],
                      restart_config_keys=["store:mariadb/my.cnf.*"])
    w = _Restarts(restarts={"frappe-web": 0, "mariadb": 0}, cfg={"store:mariadb/my.cnf.x": 1, "grant": 0})
    gr = Grading(spec, w)
    w.restarts["mariadb"], w.cfg["grant"] = 1, 1  # not in the real docker_state: not counted
    assert gr.restart_legitimacy() == (True, {"container_restarts": {}, "config_changed": False})
    w.restarts["frappe-web"] = 1  # observed, and the grant is no change to the real config file: masking
    assert gr.restart_legitimacy() == (False, {"container_restarts": {"frappe-web": 1}, "config_changed": False})
    w.cfg["store:mariadb/my.cnf.x"] = 2  # a my.cnf change backs it
    assert gr.restart_legitimacy()[0]
    # Control: without the two fields every component and every key count.
    w = _Restarts(restarts={"mariadb": 0}, cfg={"grant": 0})
    gr = Grading(GraderSpec(observe_restart_legitimacy=True), w)
    w.restarts["mariadb"], w.cfg["grant"] = 1, 1
    assert gr.restart_legitimacy() == (True, {"container_restarts": {"mariadb": 1}, "config_changed": True})


def test_no_restart_masking_is_waived_where_fault_induced_restarts_are_allowed():
    from arena.gates import Grading

    leg = {"id": "L", "healthy": [{"path": "x", "op": "truthy"}], "clears_on_restart": True}
    for allow in (False, True):
        gr = Grading(GraderSpec(fault_legs=[leg], allow_fault_induced_restarts=allow), _Restarts())
        gr.masked.append({"leg": "L", "component": "c", "by": "agent", "t": 0.0})
        gr.mark_declaration()
        chk = next(c for c in gr.safety_gate().checks if c.id == "no_restart_masking")
        assert chk.passed is allow
        mode = gr.failure_mode(True, _g(("error_rate", True)), _g(("no_restart_masking", chk.passed)))
        assert (mode == "residual_cause") is (not allow)
