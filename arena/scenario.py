"""Scenario data: load and validate `scenarios/incident-arena/<id>/scenario.yaml` and its `solutions/*.yaml`.

Called by the CLI (`guardrail scenarios ...`, `guardrail run`), the episode runner and the tests. A scenario has
three parts: `public` (a `guardrail.context.IncidentContext`: all the agent, guard and policies may see), `twin`
(`arena.twin.engine.TwinSpec`: substrate wiring and fault injection) and `grader` (`GraderSpec` here: the gates'
answer key). Validation errors are `ScenarioError`s naming the file, the line and the field (CLI exit 2).
"""

from __future__ import annotations

import os

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from arena.twin.engine import TwinSpec
from guardrail.context import IncidentContext, check_names
from guardrail.errors import ScenarioError
from guardrail.resources import scenario_dir
from guardrail.yamlio import line_of, read_data, validate

__all__ = ["Check", "FaultLeg", "DriverBand", "Bands", "Envelope", "Challenge", "PreSoak", "RealVerdict", "MatrixEntry", "GraderSpec",
           "Step", "SolutionScript", "AgentBlocksSpec", "Scenario", "load_scenario", "list_scenarios", "load_script",
           "FAILURE_MODES", "CATEGORIES"]

FAILURE_MODES = ("fix_missing", "premature_declaration", "not_durable", "scope_violation", "budget_exhausted",
                 "residual_cause")
CATEGORIES = ("configuration drift", "resource starvation", "runtime state corruption", "image bug")
Phase = Literal["declaration", "soak_end", "challenge"]
ALL_PHASES: list[Phase] = ["declaration", "soak_end", "challenge"]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Check(_M):
    """A ground-truth assertion on `world.truth()`: {path, op, value}. A glob path must hold for every match."""

    id: str = ""
    path: str
    # in_ranges: value is a list of [lo, hi] (inclusive); the state must fall in one of them (e.g. either trough)
    op: Literal["equals", "not_equals", "gte", "lte", "gt", "lt", "between", "in_ranges", "in", "truthy", "falsy",
                "unchanged", "absent"]
    value: Any = None
    when: list[Phase] = Field(default_factory=lambda: list(ALL_PHASES))
    why: str = ""


class FaultLeg(_M):
    """One injected cause. `healthy` lists what must hold for the leg to be gone (all of them)."""

    id: str
    what: str = ""
    healthy: list[Check]
    # The component whose restart clears it (a runtime fault). A restart of it while the leg was present masks
    # the fault rather than fixing it.
    holder: str | None = None
    clears_on_restart: bool = False
    # The cause re-arms by itself after a restart (a boot transaction, an image bug): fixed only by a guard.
    rearms: bool = False
    # When the leg is judged: at the declaration, or (where the grader has a pre_soak phase) once the harness has
    # verified accepted work to completion, before the soak (005's pre_soak_backlog_recovery).
    judged: Literal["declaration", "pre_soak"] = "declaration"
    # What grades the leg in the real contract: `safety` (a safe-repair pack observes it) or `outcome` (no pack
    # does: the leg shows only through the traffic, e.g. 016's message pool, which has ceilings and no floor).
    # An outcome-graded leg never fails the Safety Gate; it still names the failure mode when the outcome fails.
    graded: Literal["safety", "outcome"] = "safety"


class DriverBand(_M):
    error_rate_max: float | None = None
    goodput_min: float | None = None
    peak_ms: float | None = None
    trough_ms: float | None = None


class Bands(_M):
    """The task's outcome bands, before the x1.20 / x0.80 tolerance that the gate applies."""

    peak_ms: float | None = None
    trough_ms: float | None = None
    error_rate_max: float | None = None
    goodput_min: float | None = None
    by_driver: dict[str, DriverBand] = Field(default_factory=dict)


class Envelope(_M):
    """Config keys (globs over `world.config()`) the repair may change, and bounds on the changed values."""

    allowed: list[str] = Field(default_factory=list)
    bounds: list[Check] = Field(default_factory=list)
    # Keys whose changes the contract records but does not grade ("configuration differences are diagnostic",
    # "other harmless application-configuration drift is permitted"): listed in the evidence, never a violation.
    # Bounds and protected checks still apply to them.
    diagnostic: list[str] = Field(default_factory=list)
    # Keys (globs) the repair must change: with `allowed`, the real contract's `set_equals` on changed_keys
    # (006's repair_scope: exactly {postgres.statement_timeout}). Each must match a changed key at every phase.
    required: list[str] = Field(default_factory=list)


class Challenge(_M):
    """The verifier-owned challenge: after the soak, or before it where the grader has a `pre_soak` phase."""

    type: Literal["fixed_pod_restart", "database_checkpoint", "database_survival", "concurrent_sequence",
                  "service_event_recurrence", "none"] = "none"
    profile_id: str = ""
    target: str | None = None
    timeout_s: float = 180.0
    post_ready_wait_s: float = 5.0
    traffic: dict[str, Any] = Field(default_factory=dict)
    # Extra checks after the challenge (fault legs, envelope bounds and protected checks run again anyway).
    checks: list[Check] = Field(default_factory=list)


class PreSoak(_M):
    """The harness's phase between the declaration and the soak (Incident-Arena's Frappe sidecar,
    `make_pre_soak_boundary_hook`): verify accepted work to completion while it progresses, then run the challenge
    restart, so the soak measures the repaired system from a drained queue (SW substrates/frappe/
    loadgen_sidecar.py, loadgen_frappe/drivers.py RQ_RECOVERY_STALL_S / RQ_RECOVERY_MAX_S)."""

    backlog_path: str  # a truth path: the accepted work still queued
    stall_s: float = Field(default=90.0, gt=0)  # give up when the backlog has not fallen for this long
    max_s: float = Field(default=900.0, gt=0)  # and in any case after this long
    poll_s: float = Field(default=5.0, gt=0)
    challenge_before_soak: bool = True  # the challenge restart (and its post_restart capture) precedes the soak


class RealVerdict(_M):
    """The (outcome, safe_repair) pair the real task's own qualification matrix gives the same script."""

    outcome: Literal["pass", "fail"]
    safety: Literal["pass", "fail"]


class MatrixEntry(_M):
    """A solution script's expected verdicts: the qualification matrix row. `real`, where the real task publishes
    a verdict for the same script, is that verdict; docs/fidelity.md lists every row where the twin's differs."""

    outcome: Literal["pass", "fail"]
    safety: Literal["pass", "fail"]
    real: RealVerdict | None = None
    failure_mode: Literal["fix_missing", "premature_declaration", "not_durable", "scope_violation",
                          "budget_exhausted", "residual_cause"] | None = None
    note: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> "MatrixEntry":
        passes = self.outcome == "pass" and self.safety == "pass"
        if passes and self.failure_mode is not None:
            raise ValueError("a passing script has failure_mode null")
        if not passes and self.failure_mode is None:
            raise ValueError("a failing script names its failure_mode")
        return self


class GraderSpec(_M):
    """The gates' answer key. Only arena reads it."""

    latency_percentile: float = 99.0
    latency_settle_s: float = 30.0
    soak_cycles: int | None = None  # None: the profile's soak_cycles
    ceiling_tolerance: float = 1.20
    floor_tolerance: float = 0.80
    gate_latency: bool = True
    bands: Bands = Field(default_factory=Bands)
    fault_legs: list[FaultLeg] = Field(default_factory=list)
    envelope: Envelope = Field(default_factory=Envelope)
    protected: list[Check] = Field(default_factory=list)
    # The real `thresholds.allow_fault_induced_restarts`: restarts are an expected fault symptom, so the
    # restart-masking guard is waived (the outcome's restart_legitimate, the Safety Gate's no_restart_masking).
    allow_fault_induced_restarts: bool = False
    # The outcome contract observes `/checks/services_up/value/restart_legitimate` (003, 009): a container
    # restart with no persisted config change fails the Outcome Gate unless the flag above waives it.
    observe_restart_legitimacy: bool = False
    # What that check reads in the real verifier: the restart counts of the services its `docker_state.services`
    # lists (003: svc-frappe-web only), and a config change as a diff of its config file (003:
    # sut/config/mariadb.yaml, the rendered my.cnf; a GRANT or a Helm value is no config change there). Globs over
    # component names and `world.config()` keys; None reads every component / every key.
    restart_observed: list[str] | None = None
    restart_config_keys: list[str] | None = None
    # White-box evidence a real pack requires that is neither a fault leg nor scope (006's runtime_persistence:
    # a 57014 cancellation observed before the repair). A failure is attributed premature_declaration.
    evidence: list[Check] = Field(default_factory=list)
    challenge: Challenge = Field(default_factory=Challenge)
    pre_soak: PreSoak | None = None
    step_limit: int = 200
    think_s: float = 5.0  # the scripted agents' think time per step [INF: the paper reports wall time only]
    matrix: dict[str, MatrixEntry] = Field(default_factory=dict)


class Step(_M):
    """One script step: `run: CMD` (optional `stdin:`), `sleep: N`, or `declare: true`."""

    run: str | None = Field(default=None, min_length=1)
    stdin: str | None = None
    sleep: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    declare: StrictBool | None = None  # `declare: "yes"` is a typo to report, not a true

    @model_validator(mode="after")
    def _one(self) -> "Step":
        n = sum(x is not None for x in (self.run, self.sleep, self.declare))
        if n != 1:
            raise ValueError("a step is exactly one of run:, sleep: or declare:")
        if self.stdin is not None and self.run is None:
            raise ValueError("stdin: goes with run:")
        if self.declare is False:
            raise ValueError("declare: must be true")
        return self


class SolutionScript(_M):
    """A solution script (DESIGN.md's `script:` format)."""

    description: str = ""
    script: list[Step] = Field(min_length=1)  # an empty script would run nothing and end as budget_exhausted


class AgentBlocksSpec(_M):
    """The persona agents' building blocks (read by arena.agents only; the guard never sees them): which solution
    scripts model which kind of fix (the scenario author's labels; the grader's matrix judges them separately).
    `diagnostics` are added to the read-only commands found in the scripts.
    """

    reference: str = "reference"
    diagnostics: list[str] = Field(default_factory=list)
    alternatives: list[str] = Field(default_factory=list)
    ephemeral: list[str] = Field(default_factory=list)
    overbroad: list[str] = Field(default_factory=list)
    symptom: list[str] = Field(default_factory=list)
    partial: list[str] = Field(default_factory=list)
    premature: list[str] = Field(default_factory=list)

    def script_names(self) -> list[str]:
        return [self.reference, *self.alternatives, *self.ephemeral, *self.overbroad, *self.symptom, *self.partial,
                *self.premature]


class _ScenarioFile(_M):
    id: str
    title: str
    substrate: Literal["slack-spine", "frappe", "saleor"]
    category: Literal["configuration drift", "resource starvation", "runtime state corruption", "image bug"]
    public: IncidentContext
    twin: TwinSpec
    grader: GraderSpec
    agent_blocks: AgentBlocksSpec | None = None


class Scenario(BaseModel):
    """A loaded scenario with its solution scripts."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str
    title: str
    substrate: str
    category: str
    public: IncidentContext
    twin: TwinSpec
    grader: GraderSpec
    path: Path
    solutions: dict[str, SolutionScript] = Field(default_factory=dict)
    agent_blocks: AgentBlocksSpec | None = None  # persona agents only

    def summary(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "substrate": self.substrate, "category": self.category,
                "solutions": len(self.solutions)}

    def show(self) -> dict[str, Any]:
        """The public part plus each solution script's expected verdicts (what `scenarios show --json` prints)."""
        sols = []
        for name in sorted(self.solutions):
            m = self.grader.matrix.get(name)
            sols.append({"name": name, "description": self.solutions[name].description,
                         "outcome": m.outcome if m else None, "safety": m.safety if m else None,
                         "failure_mode": m.failure_mode if m else None})
        return {**self.summary(), "public": self.public.model_dump(mode="json"), "solutions": sols}


def _root() -> Path:
    return scenario_dir() / "incident-arena"


def load_script(path: str | Path) -> SolutionScript:
    data, node, _ = read_data(path, error=ScenarioError)
    if not isinstance(data, dict):
        raise ScenarioError("expected a mapping with a `script:` list", path=str(path), line=1)
    return validate(SolutionScript, data, path=path, node=node, error=ScenarioError)


def load_scenario(ref: str | Path) -> Scenario:
    """Load a scenario by id (ia-011) or by the path of its folder or scenario.yaml. A bare word that names a
    shipped scenario is that scenario, even when the working directory holds a file or folder of that name
    (write ./ia-011 for the local one)."""
    p = Path(ref)
    by_id = _root() / str(ref)
    bare = isinstance(ref, str) and "/" not in ref and not ref.endswith((".yaml", ".yml"))
    if (bare and (by_id / "scenario.yaml").is_file()) or not p.exists():
        p = by_id
    if p.is_dir():
        p = p / "scenario.yaml"
    if not p.exists():
        known = ", ".join(s for s in _ids()) or "none"
        raise ScenarioError(f"no scenario {ref!s} (known: {known})", path=str(ref))
    data, node, _ = read_data(p, error=ScenarioError)
    if not isinstance(data, dict):
        raise ScenarioError("expected a mapping at the top level", path=str(p), line=1)
    f = validate(_ScenarioFile, data, path=p, node=node, error=ScenarioError)
    check_names(f.public, path=p, node=node, loc_prefix=("public",), error=ScenarioError)
    sols: dict[str, SolutionScript] = {}
    sol_dir = p.parent / "solutions"
    if sol_dir.is_dir():
        for sp in sorted(sol_dir.glob("*.yaml")):
            sols[sp.stem] = load_script(sp)
    missing = sorted(set(f.grader.matrix) - set(sols))
    if missing:
        raise ScenarioError(f"grader.matrix names scripts with no file in solutions/: {', '.join(missing)}",
                            path=str(p))
    unlisted = sorted(set(sols) - set(f.grader.matrix))
    if unlisted:
        raise ScenarioError(f"solutions without a grader.matrix row: {', '.join(unlisted)}", path=str(p))
    if f.agent_blocks is not None:
        unknown = sorted(set(f.agent_blocks.script_names()) - set(sols))
        if unknown:
            raise ScenarioError(f"agent_blocks names scripts with no file in solutions/: {', '.join(unknown)}",
                                path=str(p), line=line_of(node, ("agent_blocks",)))
    return Scenario(id=f.id, title=f.title, substrate=f.substrate, category=f.category, public=f.public,
                    twin=f.twin, grader=f.grader, path=p, solutions=sols, agent_blocks=f.agent_blocks)


def _ids() -> list[str]:
    root = _root()
    given = os.environ.get("GUARDRAIL_SCENARIO_DIR")
    if not root.is_dir():
        if given:  # a tree the operator named and that is not there: bad input, not an empty suite
            raise ScenarioError(f"{root}: no such directory (a scenario tree holds incident-arena/<id>/scenario.yaml)",
                                path="GUARDRAIL_SCENARIO_DIR")
        return []
    ids = sorted(d.name for d in root.iterdir() if (d / "scenario.yaml").exists())
    if not ids and given:
        raise ScenarioError(f"{root} holds no scenarios (incident-arena/<id>/scenario.yaml)",
                            path="GUARDRAIL_SCENARIO_DIR")
    return ids


def list_scenarios() -> list[Scenario]:
    return [load_scenario(i) for i in _ids()]
