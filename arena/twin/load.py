"""The load generator's profile and schedule: seeded open-loop drivers with peak/trough cycles and timed events.

Read from a scenario's `twin.profile` (validated here) and used by `arena.twin.world.World`, which asks the
`LoadSchedule` for the phase at any time and the next boundary, so that it can simulate whole steady segments at
once. Field names follow Incident-Arena's `loadgen/profiles.yaml`: warmup_s, warmup_rps, cycles as
[peak_s, peak_rps, trough_s, trough_rps], loop, soak_cycles, declare_deadline_s, drivers, events,
align_soak_to_cycle, and the session layer's and the noise's knobs the twin models: action_weights (each
arrival's request kind drawn by weight, so a driver's share of the rate is its weight over the sum),
behavior_seed (the action draws), rate_jitter with noise_seed (one seeded rate factor per phase) and
baseline_rps (a floor under every phase's rate), and `rotation`: the real runner's driver list, which picks one driver
per arrival by `seq % len(rotation)` (a name listed twice gets twice the share). Episode time 0 is `POST /grader/episode-start`; the
pre-incident history runs before it.

The soak always starts on the profile's cycle grid, at the first cycle boundary (a peak start, counted from the
end of the warmup) at or after the agent's freeze, whatever `align_soak_to_cycle` says: Incident-Arena's runner
rounds every soak up to that grid (SW yuekai/sre-world loadgen-common/loadgen/runner.py `_resolve_soak_start`,
"this used to be the opt-in align_soak_to_cycle behaviour"; its tests assert soak_start_s ==
next_cycle_boundary_s(profile, freeze_ts_s) for declared and window-elapsed endings alike). The field stays in
the schema, as it does in the real profiles.yaml, and has no effect here.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["DriverSpec", "EventSpec", "LoadProfile", "Phase", "LoadSchedule"]


class DriverSpec(BaseModel):
    """One load driver: its share of the profile's rate and its client timeout."""

    model_config = ConfigDict(extra="forbid")

    name: str
    rate_scale: float = 1.0  # this driver's rps = profile rps x rate_scale (derived from action_weights when given)
    timeout_s: float = 5.0
    jitter: float = 0.05  # relative seeded noise on each segment's arrival count


class EventSpec(BaseModel):
    """A timed event the load generator fires (an `admin_event`, a maintenance epoch...).

    `at_s` is episode time. `refire_after_declare_s` fires it again that long after the declaration.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: str = "admin_event"
    at_s: float | None = None
    targets: list[str] = Field(default_factory=list)
    active: bool = True
    refire_after_declare_s: float | None = None
    params: dict[str, Any] = Field(default_factory=dict)


class LoadProfile(BaseModel):
    """A load-generator profile, as in Incident-Arena's profiles.yaml."""

    model_config = ConfigDict(extra="forbid")

    name: str = "dev"
    seed: int = 42
    warmup_s: float = 30.0
    warmup_rps: float = 10.0
    cycles: list[list[float]] = Field(default_factory=lambda: [[20.0, 50.0, 40.0, 10.0]])
    loop: bool = True
    soak_cycles: int = 2
    declare_deadline_s: float = 3690.0
    agent_window_s: float = 3600.0
    align_soak_to_cycle: bool = False  # the real schema's legacy marker: every soak is aligned (module docstring)
    # Healthy traffic simulated before episode start, so that a pre-incident baseline can be queried.
    prehistory_cycles: int = 3
    drivers: list[DriverSpec] = Field(default_factory=lambda: [DriverSpec(name="write_readback")])
    # The real profile's `drivers:` list (e.g. frappe_jobs: [desk_work, desk_work, rq_enqueue, rq_complete]): one
    # arrival stream at the profile's rate, arrival `seq` served by rotation[seq % len]. Over any segment each
    # driver gets its count / len of the arrivals, so it sets every driver's rate_scale (which then must not be
    # given as well).
    rotation: list[str] | None = None
    events: list[EventSpec] = Field(default_factory=list)
    # The session layer's action mix: each arrival is one request kind, drawn by these weights (the real
    # planner's marginal); a listed driver only adds its timeout or jitter. None: `drivers` with their rate_scale.
    action_weights: dict[str, float] | None = None
    behavior_seed: int | None = None  # seeds the action draws (None: `seed`)
    rate_jitter: float = Field(0.0, ge=0.0, lt=1.0)  # each phase's rate x (1 + U(-j, +j)), one draw per phase
    noise_seed: int | None = None  # seeds those draws (None: `seed`)
    baseline_rps: float = Field(0.0, ge=0.0)  # no phase runs below this rate

    @model_validator(mode="after")
    def _mix_to_shares(self) -> "LoadProfile":
        if self.action_weights is None:
            return self
        if not self.action_weights or any(w <= 0 for w in self.action_weights.values()):
            raise ValueError("action_weights: at least one action, every weight > 0")
        given = {d.name: d for d in self.drivers} if "drivers" in self.model_fields_set else {}
        for name, d in given.items():
            if name not in self.action_weights:
                raise ValueError(f"drivers: {name!r} is not an action of action_weights")
            if "rate_scale" in d.model_fields_set:
                raise ValueError(f"drivers: {name!r} sets rate_scale; with action_weights its share is its weight")
        total = sum(self.action_weights.values())
        self.drivers = [DriverSpec(**{**(given[a].model_dump(exclude={"rate_scale"}) if a in given else {"name": a}),
                                      "rate_scale": w / total})
                        for a, w in self.action_weights.items()]
        return self

    @property
    def action_seed(self) -> int:
        return self.seed if self.behavior_seed is None else self.behavior_seed

    @model_validator(mode="after")
    def _rotation_shares(self) -> "LoadProfile":
        if self.rotation is None:
            return self
        names = [d.name for d in self.drivers]
        if not self.rotation:
            raise ValueError("rotation: at least one driver")
        unknown = sorted(set(self.rotation) - set(names))
        if unknown:
            raise ValueError(f"rotation names drivers the profile does not define: {unknown}")
        for d in self.drivers:
            if d.name not in self.rotation:
                raise ValueError(f"driver {d.name!r} is not in the rotation: it would get no arrivals")
            share = self.rotation.count(d.name) / len(self.rotation)
            # A dumped and re-read profile carries the derived share; any other value contradicts the rotation.
            if "rate_scale" in d.model_fields_set and abs(d.rate_scale - share) > 1e-9:
                raise ValueError(f"driver {d.name!r}: rate_scale {d.rate_scale} contradicts the rotation's share "
                                 f"{share:g}; give one or the other")
            d.rate_scale = share
        return self

    @field_validator("cycles")
    @classmethod
    def _four_numbers(cls, v: list[list[float]]) -> list[list[float]]:
        for c in v:
            if len(c) != 4 or c[0] <= 0 or c[2] <= 0:
                raise ValueError("each cycle is [peak_s, peak_rps, trough_s, trough_rps] with positive durations")
        if not v:
            raise ValueError("at least one cycle")
        return v

    @property
    def onset_s(self) -> float:
        """When the incident has fully begun: the last scheduled event's episode time (0 when every fault ships at
        episode start). An episode's agent starts at 0 and meets the onset on the way, as in Incident-Arena; an
        agent paged into a running incident (an MCP or shell session on the twin) starts here."""
        return max([0.0] + [e.at_s for e in self.events if e.at_s is not None])

    @property
    def cycle_s(self) -> float:
        """Mean cycle length (exact when every cycle has the same length)."""
        return sum(c[0] + c[2] for c in self.cycles) / len(self.cycles)


@dataclass(frozen=True)
class Phase:
    """The load phase at one moment: its name, cycle number, rate and the segment it belongs to."""

    name: str
    cycle: int
    rps: float
    start: float
    end: float


class LoadSchedule:
    """Where any virtual time falls in the profile: prehistory cycles, warmup, then cycles (looping)."""

    def __init__(self, profile: LoadProfile):
        self.p = profile
        self._period = sum(c[0] + c[2] for c in profile.cycles)
        self.history_s = profile.prehistory_cycles * self._period

    @property
    def start(self) -> float:
        return -self.history_s

    def _cycles_from(self, origin: float, t: float, first_cycle: int) -> Phase:
        k = len(self.p.cycles)
        rel = t - origin
        reps = math.floor(rel / self._period + 1e-12)
        base = origin + reps * self._period
        cyc = first_cycle + reps * k
        for i, (ps, pr, ts, tr) in enumerate(self.p.cycles):
            if t < base + ps - 1e-12:
                return Phase("peak", cyc + i, pr, base, base + ps)
            if t < base + ps + ts - 1e-12:
                return Phase("trough", cyc + i, tr, base + ps, base + ps + ts)
            base += ps + ts
        return self._cycles_from(origin, base + 1e-9, first_cycle)

    def phase_at(self, t: float) -> Phase:
        if t < 0:
            ph = self._cycles_from(self.start, t, -self.p.prehistory_cycles * len(self.p.cycles))
            ph = Phase(ph.name, ph.cycle, ph.rps, ph.start, min(ph.end, 0.0))
        elif t < self.p.warmup_s - 1e-12:
            ph = Phase("warmup", 0, self.p.warmup_rps, 0.0, self.p.warmup_s)
        else:
            ph = self._cycles_from(self.p.warmup_s, t, 1)
        return self._noisy(ph)

    def _noisy(self, ph: Phase) -> Phase:
        """The phase's effective rate: its seeded jitter factor, then the baseline floor. The draw is keyed by the
        phase itself, so a phase has one rate however often (and in whatever order) it is asked for."""
        rps = ph.rps
        if self.p.rate_jitter > 0:
            seed = self.p.seed if self.p.noise_seed is None else self.p.noise_seed
            rng = random.Random(f"{seed}:noise:{ph.name}:{ph.cycle}:{ph.start:.6f}")
            rps *= 1.0 + rng.uniform(-self.p.rate_jitter, self.p.rate_jitter)
        rps = max(rps, self.p.baseline_rps)
        return ph if rps == ph.rps else Phase(ph.name, ph.cycle, rps, ph.start, ph.end)

    def cycle_start_at_or_after(self, t: float) -> float:
        """The next cycle boundary (a peak start) at or after t, for a soak aligned to cycles."""
        if t <= self.p.warmup_s:
            return self.p.warmup_s
        rel = t - self.p.warmup_s
        n = math.ceil(rel / self._period - 1e-9)
        cands = [self.p.warmup_s + n * self._period]
        # With several cycle shapes, every shape's start is a boundary.
        base = self.p.warmup_s + (n - 1) * self._period
        for c in self.p.cycles:
            if base >= t - 1e-9:
                cands.append(base)
            base += c[0] + c[2]
        return min(x for x in cands if x >= t - 1e-9)

    def soak_window(self, declared_at: float) -> tuple[float, float]:
        """The graded soak: from the first cycle boundary at or after the freeze, for `soak_cycles` cycles."""
        start = self.cycle_start_at_or_after(max(declared_at, self.p.warmup_s))
        return start, start + self.p.soak_cycles * self._period / len(self.p.cycles)
