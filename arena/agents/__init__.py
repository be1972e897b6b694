"""Agents that operate an episode: `act(observation) -> Command | Declare`.

The episode runner (`arena.episode.run_episode`) calls `act` once per step. `make_agent(spec, scenario, seed,
**params)` is the single factory (the CLI, the bench and the calibration script call it):

  replay:<solution>   one of the scenario's solution scripts (deterministic)
  script:PATH         a user's YAML script (deterministic)
  persona:<name>      a stochastic persona (arena/agents/persona.py, traits in personas.yaml); params override traits
  calibrated          the persona mixture fitted to the paper (arena/agents/calibrated.py, calibrated.yaml)
  llm:<model>         a tool-calling loop over an OpenAI-compatible chat API (arena/agents/llm.py)

Scripts use DESIGN.md's format: steps `run:` (optional `stdin:`), `sleep:` and `declare:`; steps after a
declaration run only if the guard rejected it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Iterator, Protocol, Sequence, Union

from arena.scenario import Scenario, SolutionScript, Step, load_script
from guardrail.errors import InputError
from verifiers.protocols import CommandResult

__all__ = ["Observation", "Command", "Declare", "Wait", "Action", "Agent", "ScriptAgent", "resolve_agent",
           "make_agent", "blamed_on", "AGENT_KINDS"]

AGENT_KINDS = ("replay:<solution>", "script:PATH", "persona:<name>", "calibrated", "llm:<model>")


@dataclass(frozen=True)
class Command:
    """Run one shell command (stdin optional)."""

    text: str
    stdin: str | None = None


@dataclass(frozen=True)
class Wait:
    """Let virtual time pass without running anything (a script's `sleep:` step)."""

    seconds: float


@dataclass(frozen=True)
class Declare:
    """declare_repair_complete."""


Action = Union[Command, Wait, Declare]


@dataclass
class Observation:
    """What the agent sees before each step."""

    instruction: str
    step: int
    time_used_s: float
    last: CommandResult | None = None
    feedback: list[tuple[str, str]] = field(default_factory=list)  # guard feedback (code, message)
    declaration_rejected: bool = False


class Agent(Protocol):
    name: str

    def act(self, obs: Observation) -> Action | None: ...


class ScriptAgent:
    """Replays a script. After a declaration it goes on only if the declaration was rejected."""

    def __init__(self, name: str, script: SolutionScript):
        self.name = name
        self.steps: Sequence[Step] = script.script
        self.i = 0
        self.awaiting_verdict = False

    def act(self, obs: Observation) -> Action | None:
        if self.awaiting_verdict and not obs.declaration_rejected:
            return None
        self.awaiting_verdict = False
        if self.i >= len(self.steps):
            return None
        st = self.steps[self.i]
        self.i += 1
        if st.declare:
            self.awaiting_verdict = True
            return Declare()
        if st.sleep is not None:
            return Wait(float(st.sleep))
        assert st.run is not None
        if st.run.strip() == "declare_repair_complete":
            self.awaiting_verdict = True
            return Declare()
        return Command(st.run, st.stdin)


def resolve_agent(spec: str, scenario: Scenario) -> Agent:
    """The agent for `spec` at seed 0 (kept for the deterministic callers; see make_agent)."""
    return make_agent(spec, scenario, 0)


@contextlib.contextmanager
def blamed_on(option: str) -> Iterator[None]:
    """An agent spec's bad input that names no file is the option's (`--agent`, `--agents`): re-raised naming it."""
    try:
        yield
    except InputError as e:
        if e.path is not None:
            raise
        raise type(e)(e.message, path=option, line=e.line) from e


def make_agent(spec: str, scenario: Scenario, seed: int = 0, **params: object) -> Agent:
    """Build the agent an episode runs. `params` tune stochastic agents (e.g. responsiveness=0.5, any trait) and
    the LLM loop's budgets (max_calls, max_tokens, max_wall_s, timeout_s); deterministic agents ignore them."""
    kind, _, arg = spec.partition(":")
    if kind == "persona" and arg:
        from arena.agents.persona import PersonaAgent, Traits, load_personas, unknown_persona

        cat = load_personas()
        if arg not in cat:
            raise unknown_persona(arg, cat)
        try:
            traits = Traits.model_validate({**cat[arg].model_dump(), **params})
        except ValueError as e:
            raise InputError(f"bad trait for persona {arg!r}: {e}".splitlines()[0]) from e
        return PersonaAgent(spec, traits, scenario, seed)
    if kind == "calibrated" and not arg:
        from arena.agents.calibrated import make_calibrated

        return make_calibrated(scenario, seed, **params)
    if kind == "llm" and arg:
        from arena.agents.llm import LLMAgent

        # A real model's responsiveness is its own, not a knob: the bench may pass one to every agent.
        params.pop("responsiveness", None)
        return LLMAgent.from_env(arg, **params)  # type: ignore[arg-type]
    if kind == "replay":
        if arg not in scenario.solutions:
            known = ", ".join(sorted(scenario.solutions)) or "none"
            raise InputError(f"{scenario.id} has no solution {arg!r} (known: {known})", path=str(scenario.path))
        return ScriptAgent(spec, scenario.solutions[arg])
    if kind == "script" and arg:
        return ScriptAgent(spec, load_script(arg))
    raise InputError(f"unknown agent {spec!r}: use one of {', '.join(AGENT_KINDS)}")
