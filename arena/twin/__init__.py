"""The digital twin of the Incident-Arena substrates (see arena/twin/README.md).

Public surface: `build_twin(spec, seed)` returns a `TwinEnvironment` (the `verifiers.protocols.Environment` of
the twin); substrates subclass `Substrate` and `Component` and register with `register_substrate`. Called by
the episode runner (arena/episode.py), the gates (arena/gates.py, through `.world`), tests and benches.
"""

from arena.twin.engine import TwinEnvironment, TwinSpec, build_twin, start_at_onset
from arena.twin.world import Component, Substrate, World, register_substrate

__all__ = ["build_twin", "make_environment", "TwinEnvironment", "TwinSpec", "World", "Component", "Substrate",
           "register_substrate"]


def make_environment(spec: str, context=None, *, seed: int | None = None) -> TwinEnvironment:
    """The `guardrail.environments` entry point `twin`: `--env twin:<scenario>[@seed]` builds that scenario's twin.

    Used by `guardrail mcp --env twin:ia-011` so an external agent can be tried against an incident. The agent is
    paged into the running incident: the world starts at the incident's onset (start_at_onset), not at episode
    start, where `guardrail run`'s agents begin. The context argument is accepted for the entry-point protocol;
    the twin takes its wiring from the scenario itself.
    """
    from arena.scenario import load_scenario
    from guardrail.errors import InputError

    name, _, seed_s = (spec or "").partition("@")
    if not name:
        raise InputError("twin needs a scenario: --env twin:<scenario id>[@seed]", path="--env")
    if seed is None:
        try:
            seed = int(seed_s) if seed_s else 0
        except ValueError:
            raise InputError(f"bad seed {seed_s!r} in --env twin:{spec}", path="--env") from None
    return start_at_onset(build_twin(load_scenario(name).twin, seed))
