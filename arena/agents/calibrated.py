"""The `calibrated` agent: a mixture of personas whose unguarded arm reproduces the Incident-Arena figures.

Sits under arena.agents; built by `arena.agents.make_agent("calibrated", ...)`. Each episode draws one persona
(among those whose traits have something to act on in the incident, `persona.acts_on`) from the mixture weights
in arena/agents/calibrated.yaml (fitted by `python -m arena.agents.calibrate`), with an RNG seeded by
(scenario, seed), so both arms of a paired A/B run get the same persona and the same plan.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from arena.agents.blocks import derive_blocks
from arena.agents.persona import PersonaAgent, Traits, acts_on, episode_rng, load_personas
from arena.scenario import Scenario
from guardrail.yamlio import load_model

__all__ = ["Mixture", "CALIBRATED_FILE", "load_mixture", "make_calibrated"]

CALIBRATED_FILE = Path(__file__).with_name("calibrated.yaml")
_GOLDEN = 0.6180339887498949


class Mixture(BaseModel):
    """Persona weights plus the record of the fit that produced them."""

    model_config = ConfigDict(extra="forbid")

    weights: dict[str, float]
    responsiveness: float = Field(0.8, ge=0, le=1)  # the default; the bench varies it
    fit: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _normalised(self) -> "Mixture":
        if any(w < 0 for w in self.weights.values()) or sum(self.weights.values()) <= 0:
            raise ValueError("weights are non-negative and not all zero")
        return self


def load_mixture(path: Path = CALIBRATED_FILE) -> Mixture:
    return load_model(Mixture, path)


def make_calibrated(scenario: Scenario, seed: int, mixture: Mixture | None = None,
                    personas: dict[str, Traits] | None = None, **params: Any) -> PersonaAgent:
    """One episode's agent: a persona drawn from the mixture, its traits overridden by `params`."""
    mix = mixture or load_mixture()
    cat = personas or load_personas()
    rng = episode_rng("calibrated", scenario.id, seed)
    unknown = [n for n in mix.weights if n not in cat]
    if unknown:
        raise ValueError(f"calibrated.yaml names unknown personas: {', '.join(unknown)}")
    blocks = derive_blocks(scenario)
    names = sorted(n for n, w in mix.weights.items() if w > 0 and acts_on(cat[n], blocks))
    if not names:
        names = ["expert"] if "expert" in cat else sorted(cat)[:1]
        mix = Mixture(weights={names[0]: 1.0})
    # The persona is picked by a golden-ratio sequence over seeds (offset per scenario), not an iid draw: any
    # run of consecutive seeds then holds the personas in close to their weights, which takes most of the
    # sampling noise out of a 10-seed bench. Still one fixed persona per (scenario, seed).
    u = (episode_rng("calibrated-offset", scenario.id).random() + seed * _GOLDEN) % 1.0
    total = sum(mix.weights[n] for n in names)
    acc, name = 0.0, names[-1]
    for n in names:
        acc += mix.weights[n] / total
        if u < acc:
            name = n
            break
    traits = cat[name].model_copy(update={"responsiveness": mix.responsiveness, **params})
    agent = PersonaAgent("calibrated", Traits.model_validate(traits.model_dump()), scenario, seed, blocks=blocks,
                         rng=rng)
    agent.plan["persona"] = name
    return agent
