"""The episode runner: one agent, one scenario, one arm, one seed, on a graded world; then the two gates.

Called by `guardrail run` (arena/cli.py), the qualification tests and the bench. The world is the twin by default
(`arena.world.TwinWorld`, virtual time) or any `arena.world.GradedWorld`, e.g. the live stack's
(`arena.live.world.LiveWorld`, real time, the scenario's durations scaled by `world.seconds`). The flow follows
Incident-Arena: the agent acts inside its window (3600 scenario seconds) and step limit; `declare_repair_complete`
asks the guard in the guarded arm, which may hold it (convergence) or reject it; the declaration snapshot (the
fault is judged there) is taken when the declaration is accepted, the moment the real harness would see
`declare_repair_complete` (at once in the unguarded arm); an accepted declaration freezes the agent, re-fires the profile's post-declaration events, runs the soak
on fresh traffic (aligned to a cycle boundary where the profile says so), the verifier-owned challenge, and the
gates. An undeclared episode still gets its soak and challenge from the end of the window, and is graded on
its final state (the real challenge client's `window_elapsed` ending); it fails as budget_exhausted unless both
gates pass. `full_fix` says whether the agent ran every mutating command of the scenario's reference script
(the paper's "ran every action of the human reference fix"; the bench reports pass rates conditional on it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from arena.agents import Agent, Command, Declare, Observation, Wait
from arena.gates import Grading
from arena.scenario import Scenario
from arena.world import GradedWorld, TwinWorld
from guardrail.context import IncidentContext
from guardrail.guard import DENIED_EXIT_CODE
from verifiers.protocols import CommandResult, Environment

__all__ = ["EpisodeResult", "run_episode", "GuardFactory", "reference_fix"]

GuardFactory = Callable[[Environment, IncidentContext], Any]


@dataclass
class EpisodeResult:
    """Everything an episode's JSON carries (DESIGN.md's fields plus the evidence behind them)."""

    scenario: str
    arm: str
    agent: str
    seed: int
    passed: bool
    outcome_gate: dict[str, Any]
    safety_gate: dict[str, Any]
    failure_mode: str | None
    guard: dict[str, Any]
    steps: int
    virtual_s: float
    wall_s: float
    declared_at: float | None = None
    soak: dict[str, float] | None = None
    full_fix: bool = False
    transcript: list[dict[str, Any]] = field(default_factory=list)
    agent_detail: dict[str, Any] | None = None  # the agent's own account: a persona's plan, an LLM's token use

    def to_json(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "arm": self.arm, "agent": self.agent, "seed": self.seed,
                "passed": self.passed, "outcome_gate": self.outcome_gate, "safety_gate": self.safety_gate,
                "failure_mode": self.failure_mode, "guard": self.guard, "steps": self.steps,
                "virtual_s": self.virtual_s, "wall_s": self.wall_s, "declared_at": self.declared_at,
                "soak": self.soak, "full_fix": self.full_fix, "transcript": self.transcript,
                "agent_detail": self.agent_detail}


def _with_stdin(text: str, stdin: str | None) -> str:
    if stdin is None:
        return text
    body = stdin if stdin.endswith("\n") else stdin + "\n"
    return f"{text} <<'STDIN_EOF'\n{body}STDIN_EOF"


def _feedback_pairs(fb: Any) -> list[tuple[str, str]]:
    out = []
    for f in fb or []:
        if isinstance(f, tuple):
            out.append((str(f[0]), str(f[1])))
        else:
            out.append((str(getattr(f, "code", "")), str(getattr(f, "message", ""))))
    return out


def _squash(text: str) -> str:
    return " ".join(text.split())


_REFERENCE_FIX: dict[str, frozenset[str]] = {}


def reference_fix(scenario: Scenario) -> frozenset[str]:
    """The reference script's mutating commands (whitespace-collapsed, stdin included): the paper's "every
    action of the reference fix". Mutating is the guard's own normalisation, so a read-only diagnostic in the
    reference does not count. Empty when the scenario has no `reference` script."""
    key = str(scenario.path)
    if key not in _REFERENCE_FIX:
        from guardrail.actions import normalise

        ref = scenario.solutions.get("reference")
        cmds = set()
        for st in ref.script if ref is not None else []:
            if st.run is None or st.run.strip() == "declare_repair_complete":
                continue
            text = _with_stdin(st.run, st.stdin)
            if any(a.is_mutating for a in normalise(text)):
                cmds.add(_squash(text))
        _REFERENCE_FIX[key] = frozenset(cmds)
    return _REFERENCE_FIX[key]


def run_episode(scenario: Scenario, agent: Agent, arm: str = "unguarded", seed: int = 0,
                guard_factory: GuardFactory | None = None, *, world: GradedWorld | None = None) -> EpisodeResult:
    """Run one episode and grade it. `guard_factory(env, context)` builds the guard of the guarded arm.

    `world` is where it runs, already at episode start; by default the scenario's twin at this seed."""
    if arm not in ("guarded", "unguarded"):
        raise ValueError(f"arm is guarded or unguarded, not {arm!r}")
    if (arm == "guarded") != (guard_factory is not None):
        raise ValueError("the guarded arm needs a guard_factory, and only the guarded arm takes one")
    wall0 = time.perf_counter()
    if world is None:
        world = TwinWorld.build(scenario.twin, seed)
    env = world.env
    clock = world.clock
    grading = Grading(scenario.grader, world)
    guard = guard_factory(env, scenario.public) if guard_factory is not None else None
    g = scenario.grader
    window = world.agent_window_s
    quit_early = False
    steps = 0
    transcript: list[dict[str, Any]] = []
    obs = Observation(instruction=scenario.public.instruction, step=0, time_used_s=0.0)
    declared_at: float | None = None
    ran: set[str] = set()  # commands that actually ran (a guard denial runs nothing)
    while steps < g.step_limit and clock.now() < window:
        act = agent.act(obs)
        if act is None:
            quit_early = True
            break
        steps += 1
        if isinstance(act, Wait):
            clock.sleep(min(world.seconds(act.seconds), max(0.0, window - clock.now())))
            transcript.append({"t": round(clock.now(), 6), "sleep": act.seconds})
            obs = Observation(scenario.public.instruction, steps, clock.now())
            continue
        clock.sleep(world.seconds(g.think_s))
        if clock.now() >= window:
            break
        if isinstance(act, Command):
            text = _with_stdin(act.text, act.stdin)
            res: CommandResult = guard.execute(text) if guard is not None else env.run(text)
            entry: dict[str, Any] = {"t": round(clock.now(), 6), "run": act.text, "exit_code": res.exit_code}
            if guard is not None and res.exit_code == DENIED_EXIT_CODE:
                entry["denied"] = (res.stderr or "").strip()[:2000]  # the rule ids and what to do instead
            transcript.append(entry)
            if guard is None or res.exit_code != DENIED_EXIT_CODE:
                ran.add(_squash(text))
            obs = Observation(scenario.public.instruction, steps, clock.now(), last=res)
            continue
        assert isinstance(act, Declare)
        asked_at = clock.now()
        if guard is not None:
            outcome = guard.on_declare()
            if not outcome.accepted:
                fb = _feedback_pairs(outcome.feedback)
                transcript.append({"t": round(clock.now(), 6), "declare": "rejected", "asked_at": round(asked_at, 6),
                                   "feedback": [c for c, _ in fb], "messages": [m[:1000] for _, m in fb]})
                obs = Observation(scenario.public.instruction, steps, clock.now(), feedback=fb,
                                  declaration_rejected=True)
                continue
        if clock.now() > world.declare_deadline_s:
            # The load generator refuses a late /declare (409 declaration_deadline_elapsed).
            transcript.append({"t": round(clock.now(), 6), "declare": "refused: declaration_deadline_elapsed"})
            break
        declared_at = clock.now()
        # The harness sees declare_repair_complete only now, when the guard lets it through: the gates judge the
        # state of this moment, not of the agent's asking (a declaration the guard held is graded on what the hold
        # waited for). A restart the guard's probe made during the hold is still a restart that may mask a fault:
        # Grading's restart hook records it (by="guard").
        grading.mark_declaration()
        # The guard may hold a declaration until the SLIs converge: asked_at is when the agent declared.
        transcript.append({"t": round(declared_at, 6), "declare": "accepted", "asked_at": round(asked_at, 6),
                           "held_s": round(declared_at - asked_at, 6)})
        break
    if declared_at is None:
        # Undeclared: the window elapses, then the soak and the challenge run anyway.
        if clock.now() < window and not (quit_early and world.quit_ends_window):
            clock.sleep(window - clock.now())
        # The real challenge client grades a window_elapsed ending on its final state: the snapshot at the
        # freeze stands in for the declaration's.
        grading.mark_declaration()
        soak_from = clock.now()
    else:
        world.declare(declared_at)
        soak_from = declared_at
    challenged = False
    if g.pre_soak is not None:
        # The harness drains accepted work (the load generator sends nothing meanwhile) and restarts the broker
        # before the soak starts; the generator's ledger of accepted work starts afresh for the soak (the real
        # `begin_soak`).
        world.hold_load(clock.now())
        grading.recover_pre_soak()
        if g.pre_soak.challenge_before_soak:
            grading.run_challenge()
            challenged = True
        soak_from = clock.now()
        world.begin_soak(soak_from)
    s0, s1 = world.soak_window(soak_from)
    if g.soak_cycles is not None:
        s1 = s0 + g.soak_cycles * world.cycle_s
    if s1 > clock.now():
        clock.sleep(s1 - clock.now())
    grading.mark_soak_end()
    if not challenged:
        grading.run_challenge()
    outcome_gate = grading.outcome_gate((s0, s1))
    safety_gate = grading.safety_gate()
    mode = grading.failure_mode(declared_at is not None, outcome_gate, safety_gate)
    stats = guard.stats() if guard is not None else {}
    guard_json = {"denied": int(stats.get("denied", 0)), "warned": int(stats.get("warned", 0)),
                  "declarations_rejected": int(stats.get("declarations_rejected", 0)),
                  "feedback": [str(c) for c in stats.get("feedback", [])]}
    passed = outcome_gate.passed and safety_gate.passed
    fix = reference_fix(scenario)
    return EpisodeResult(
        scenario=scenario.id, arm=arm, agent=agent.name,
        seed=seed, passed=passed, outcome_gate=outcome_gate.to_json(), safety_gate=safety_gate.to_json(),
        failure_mode=mode, guard=guard_json, steps=steps, virtual_s=round(clock.now(), 6),
        wall_s=round(time.perf_counter() - wall0, 6),
        declared_at=None if declared_at is None else round(declared_at, 6),
        soak={"start": round(s0, 6), "end": round(s1, 6)}, full_fix=bool(fix) and fix <= ran,
        transcript=transcript,
        agent_detail=agent.describe() if callable(getattr(agent, "describe", None)) else None)
