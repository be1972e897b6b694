"""The digital twin of the Incident-Arena substrates (see arena/twin/README.md).

Public surface: `build_twin(spec, seed)` returns a `TwinEnvironment` (the `verifiers.protocols.Environment` of
the twin); substrates subclass `Substrate` and `Component` and register with `register_substrate`. Called by
the episode runner (arena/episode.py), the gates (arena/gates.py, through `.world`), tests and benches.
"""

from arena.twin.engine import TwinEnvironment, TwinSpec, build_twin
from arena.twin.world import Component, Substrate, World, register_substrate

__all__ = ["build_twin", "TwinEnvironment", "TwinSpec", "World", "Component", "Substrate", "register_substrate"]
