"""Persona agents (`persona:<name>`): stochastic agents assembled per episode from a scenario's building blocks.

Sits under arena.agents; built by `arena.agents.make_agent` for the episode runner, the bench and the
calibration script. A persona is a set of traits (probabilities, data in arena/agents/personas.yaml). At the
start of an episode it draws, from its seeded RNG, a plan: some diagnostics, perhaps a diagnosis loop, one
repair form (reference, alternative, ephemeral, overbroad, symptom or partial), and whether it waits for the
system to settle before declaring. Guard feedback then changes the plan with probability `responsiveness`.

A persona only chooses commands. The twin decides what they do and the gates decide pass or fail; nothing
here reads an outcome, a band or a verdict other than the feedback code the guard hands every agent.
"""

from __future__ import annotations

import random
from collections import deque
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from arena.agents.blocks import (AgentBlocks, FixForm, Move, Pause, Run, change_keys, derive_blocks,
                                 missing_changes)
from arena.scenario import Scenario
from guardrail.errors import InputError
from guardrail.yamlio import load_model
from verifiers.protocols import FeedbackCode

__all__ = ["acts_on", "Traits", "PersonaCatalogue", "PersonaAgent", "load_personas", "PERSONAS_FILE", "episode_rng"]

PERSONAS_FILE = Path(__file__).with_name("personas.yaml")
DENIED_EXIT_CODE = 126  # the guard's denial (guardrail.guard.DENIED_EXIT_CODE)
_REPAIR_CODES = {FeedbackCode.NOT_DURABLE.value, FeedbackCode.RESTART_REGRESSION.value,
                 FeedbackCode.RESIDUAL_CAUSE.value, FeedbackCode.SCOPE_DENIED.value, FeedbackCode.SCOPE_DRIFT.value}


class Traits(BaseModel):
    """A persona's behaviour, each trait a probability drawn once per episode (responsiveness once per feedback)."""

    model_config = ConfigDict(extra="forbid")

    fix_knowledge: float = Field(1.0, ge=0, le=1)  # knows a valid repair (else a partial one)
    alternative: float = Field(0.0, ge=0, le=1)  # the valid repair it knows is an alternative, not the reference
    durability: float = Field(1.0, ge=0, le=1)  # makes its changes in the declared layer (else an ephemeral form)
    patience: float = Field(1.0, ge=0, le=1)  # waits the reference's settle time before declaring
    # adds out-of-scope changes to the repair it knows; without one, reaches for an overbroad form instead
    scope_creep: float = Field(0.0, ge=0, le=1)
    looping: float = Field(0.0, ge=0, le=1)  # gets stuck re-running diagnostics
    symptom_only: float = Field(0.0, ge=0, le=1)  # repairs a symptom (restarts) instead of the cause
    responsiveness: float = Field(0.8, ge=0, le=1)  # acts correctly on each guard feedback code
    # Acting on a repair code, knows the rest of the reference fix (else makes only the missing changes whose keys
    # the feedback names: the guard's messages name keys, not the changes still to make).
    fix_from_feedback: float = Field(1.0, ge=0, le=1)
    diagnostics: tuple[int, int] = (1, 3)  # how many diagnostics it runs first (inclusive range)
    max_declarations: int = Field(6, ge=1)  # gives up after this many rejected declarations
    # Its context holds this many steps; then it stops, undeclared (the paper's "ran out of steps or context").
    context_steps: int = Field(40, ge=1)


class PersonaCatalogue(BaseModel):
    """The named personas (arena/agents/personas.yaml)."""

    model_config = ConfigDict(extra="forbid")

    personas: dict[str, Traits]


def acts_on(traits: Traits, blocks: AgentBlocks) -> bool:
    """Whether every trait that sets this persona apart has a building block to act on in this incident.

    An ephemeral-prone persona has nothing to do differently where no ephemeral form exists, and an impatient
    one where declaring early cannot fail; the calibrated mixture draws only among personas that act on an
    incident, so each trait shows where it can.
    """
    knows = traits.fix_knowledge >= 1
    needs = [(traits.symptom_only > 0, blocks.symptom), (traits.durability < 1, blocks.ephemeral),
             (traits.scope_creep > 0 and knows, blocks.with_extras),
             (traits.scope_creep > 0 and not knows, blocks.overbroad),
             (traits.scope_creep == 0 and not knows, blocks.partial),
             (traits.alternative > 0, blocks.alternatives), (traits.patience < 1, blocks.premature)]
    return all(bool(have) for wanted, have in needs if wanted)


def load_personas(path: Path = PERSONAS_FILE) -> dict[str, Traits]:
    return load_model(PersonaCatalogue, path).personas


def episode_rng(*parts: Any) -> random.Random:
    """A seeded RNG per (agent, scenario, seed): string seeds are hashed with SHA-512, stable across processes."""
    return random.Random("|".join(str(p) for p in parts))


class PersonaAgent:
    """One persona in one episode: draws its plan at construction, then follows it and reacts to feedback."""

    def __init__(self, name: str, traits: Traits, scenario: Scenario, seed: int,
                 blocks: AgentBlocks | None = None, rng: random.Random | None = None):
        self.name = name
        self.traits = traits
        self.blocks = blocks or derive_blocks(scenario)
        self.rng = rng or episode_rng(name, scenario.id, seed)
        self.plan: dict[str, Any] = {}
        self.queue: deque[Move | str] = deque()
        self.looping = False
        self.done: list[str] = []  # keys of commands that ran with exit 0
        self.declarations = 0
        self.reactions: list[dict[str, Any]] = []
        self._last_run: Run | None = None
        self._diag_i = 0
        self._draw_plan()

    # -- the plan ----------------------------------------------------------------------------------------------

    def _draw_plan(self) -> None:
        t, b, r = self.traits, self.blocks, self.rng
        # Every draw happens every time, in a fixed order, so one trait's value never shifts another's dice.
        u = {k: r.random() for k in ("symptom", "knows", "alternative", "durable", "scope", "patient", "loop")}
        lo, hi = t.diagnostics
        n_diag = r.randint(lo, max(lo, hi))
        pick = r.random()
        form: FixForm | None
        kind: str
        if u["symptom"] < t.symptom_only and b.symptom:
            kind, form = "symptom", b.symptom
        elif u["knows"] < t.fix_knowledge:
            kind, form = "reference", (b.reference,)
            if u["alternative"] < t.alternative and b.alternatives:
                kind, form = "alternative", b.alternatives
            if u["durable"] >= t.durability and b.ephemeral:
                kind, form = "ephemeral", b.ephemeral
            elif u["scope"] < t.scope_creep and b.with_extras:
                kind, form = "overbroad", b.with_extras
        elif u["scope"] < t.scope_creep and b.overbroad:
            # not knowing the proper repair, it reaches for a broader one
            kind, form = "overbroad", b.overbroad
        elif b.partial:
            kind, form = "partial", b.partial
        else:
            kind, form = "none", ()
        chosen = form[int(pick * len(form))] if form else None
        patient = u["patient"] < t.patience
        self.looping = u["loop"] < t.looping
        self.plan = {"kind": kind, "form": chosen.name if chosen else None, "patient": patient,
                     "looping": self.looping, "diagnostics": n_diag}
        diags = list(b.diagnostics)
        for _ in range(n_diag if diags else 0):
            self.queue.append(r.choice(diags))
        self._fix_steps = list(chosen.steps) if chosen else []
        if not self.looping:
            self._queue_fix()

    def _queue_fix(self) -> None:
        self.queue.extend(self._fix_steps)
        if self.plan["patient"]:
            self.queue.extend(self.blocks.tail)
        self.queue.append("declare")

    # -- acting ------------------------------------------------------------------------------------------------

    def act(self, obs: Any) -> Any:
        from arena.agents import Command, Declare, Wait

        self._note(obs)
        if obs.step >= self.traits.context_steps:
            return None
        if obs.declaration_rejected:
            if self.declarations >= self.traits.max_declarations:
                return None
            self._react(obs.feedback)
        while True:
            if self.looping and not self.queue:
                return Command(self._next_diagnostic().text)
            if not self.queue:
                return None
            m = self.queue.popleft()
            if m == "declare":
                self.declarations += 1
                self._last_run = None
                return Declare()
            if isinstance(m, Pause):
                self._last_run = None
                return Wait(m.seconds)
            assert isinstance(m, Run)
            self._last_run = m
            return Command(m.text, m.stdin)

    def _next_diagnostic(self) -> Run:
        diags = self.blocks.diagnostics or (Run("kubectl get pods"),)
        d = diags[self._diag_i % len(diags)]
        self._diag_i += 1
        self._last_run = d
        return d

    def _note(self, obs: Any) -> None:
        """Remember what ran, and react to feedback that comes with a command (a denial, the loop watchdog)."""
        last = obs.last
        if last is None or self._last_run is None:
            return
        ran = self._last_run
        if last.exit_code == 0:
            self.done.append(ran.key)
        text = last.stderr or ""
        if last.exit_code == DENIED_EXIT_CODE and FeedbackCode.SCOPE_DENIED.value in text:
            self._on_command_feedback(FeedbackCode.SCOPE_DENIED.value, text)
        elif FeedbackCode.LOOP_DETECTED.value in text:
            self._on_command_feedback(FeedbackCode.LOOP_DETECTED.value, text)

    def _responds(self, code: str) -> bool:
        ok = self.rng.random() < self.traits.responsiveness
        self.reactions.append({"code": code, "correct": ok})
        return ok

    def _on_command_feedback(self, code: str, text: str = "") -> None:
        if not self._responds(code):
            return  # carries on with its plan as if nothing was said
        if code == FeedbackCode.LOOP_DETECTED.value:
            if self.looping:
                self.looping = False
                self._queue_fix()
            else:
                # stop diagnosing: drop queued diagnostics, keep the repair
                self.queue = deque(m for m in self.queue if not (isinstance(m, Run) and m in self.blocks.diagnostics))
            return
        # SCOPE_DENIED: drop the rest of the overbroad form, make the plain (reference) changes instead
        denied = self._last_run.key if self._last_run is not None else None
        self._replan_with_reference(text, skip=denied)

    def _replan_with_reference(self, feedback_text: str, skip: str | None = None) -> None:
        # A command the guard just denied is not retried: the agent has no other form of it.
        steps: list[Move | str] = [r for r in missing_changes(self.blocks, self.done) if r.key != skip]
        # Drawn only when the trait is below 1, so that the default model's random stream is unchanged.
        if self.traits.fix_from_feedback < 1.0 and self.rng.random() >= self.traits.fix_from_feedback:
            # Only what the feedback says: the missing changes of a key it names (NOT_DURABLE names the key made
            # only at runtime, a denial the key it would have changed); a residual cause it cannot name stays.
            steps = [r for r in steps if isinstance(r, Run) and any(k in feedback_text for k in change_keys(r))]
        # Having been told off once, it waits the reference's settle time before the next declaration.
        steps.extend(self.blocks.tail)
        steps.append("declare")
        self.queue = deque(steps)

    def _react(self, feedback: list[tuple[str, str]]) -> None:
        code = feedback[0][0] if feedback else FeedbackCode.NOT_CONVERGED.value
        self.queue.clear()
        if not self._responds(code):
            # re-declares without doing what was asked, after one more look
            if self.blocks.diagnostics:
                self.queue.append(self.rng.choice(self.blocks.diagnostics))
            self.queue.append("declare")
            return
        if code in _REPAIR_CODES and missing_changes(self.blocks, self.done):
            self._replan_with_reference("\n".join(msg for _, msg in feedback))
            return
        # NOT_CONVERGED, LOOP_DETECTED, INCONCLUSIVE, or nothing left to change: wait for it to settle, re-declare
        self.queue.append(Pause(max(60.0, self.blocks.settle_s)))
        self.queue.append("declare")

    def describe(self) -> dict[str, Any]:
        """The drawn plan and the reactions so far (for episode reports)."""
        return {"persona": self.name, **self.plan, "reactions": list(self.reactions)}


def unknown_persona(name: str, known: dict[str, Traits]) -> InputError:
    return InputError(f"unknown persona {name!r} (known: {', '.join(sorted(known))})", path=str(PERSONAS_FILE))
