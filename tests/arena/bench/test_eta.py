"""The bench's time estimate (arena.bench.eta) on an injected clock: rows kept by --resume do not make it jump to
zero, episodes that cost more weigh more whatever order they finish in, and it counts down between results."""

from __future__ import annotations

import heapq
import itertools

import pytest

from arena.bench.eta import BenchETA, format_eta
from arena.bench.runner import EpisodeSpec


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _plan(costs: dict[str, float], n: int) -> list[EpisodeSpec]:
    return [EpisodeSpec(sid, "calibrated", arm, seed) for sid in costs for seed in range(n)
            for arm in ("guarded", "unguarded")]


def _row(spec: EpisodeSpec, wall_s: float) -> dict:
    return {"scenario": spec.scenario, "agent": spec.agent, "arm": spec.arm, "seed": spec.seed, "wall_s": wall_s}


def _simulate(plan: list[EpisodeSpec], cost, workers: int):
    """Run the plan on `workers` on a fake clock; yield (eta, true seconds left) after each finished episode."""
    clock = FakeClock()
    eta = BenchETA(plan, clock=clock)
    start = clock.t
    running: list[tuple[float, int, EpisodeSpec]] = []
    order = itertools.count()
    # Work out the whole schedule first, so that the true time left is known at each finish.
    free = [start] * workers
    for spec in plan:
        t = heapq.heappop(free)
        heapq.heappush(free, t + cost(spec))
        heapq.heappush(running, (t + cost(spec), next(order), spec))
    end = max(free)
    while running:
        t, _, spec = heapq.heappop(running)
        clock.t = t
        eta.ran(_row(spec, cost(spec)))
        yield eta.seconds_left(), end - t


@pytest.mark.parametrize("slow_first", [False, True])
def test_the_estimate_is_right_once_each_kind_of_episode_has_run_whatever_the_order(slow_first: bool):
    # ia-slow's episodes take 10 s (guarded) and 8 s, ia-fast's 1 s and 0.5 s: a count of episodes per second is
    # off by a factor of ten either way, depending on which ran first.
    costs = {"ia-slow": 10.0, "ia-fast": 1.0}
    plan = _plan(costs, 20)
    if not slow_first:
        plan.reverse()

    def cost(spec: EpisodeSpec) -> float:
        return costs[spec.scenario] * (1.0 if spec.arm == "guarded" else 0.8 if spec.scenario == "ia-slow" else 0.5)

    # Interleave the two scenarios so both kinds have run after the first few results.
    plan = [s for pair in itertools.zip_longest(plan[:40], plan[40:]) for s in pair if s]
    seen = 0
    for est, truth in _simulate(plan, cost, workers=1):
        seen += 1
        if seen >= 4:  # every (scenario, arm) has one finished episode
            assert est == pytest.approx(truth, abs=1e-6)


def test_two_workers_halve_the_estimate_from_the_runs_own_pace():
    plan = _plan({"ia-a": 4.0, "ia-b": 2.0}, 10)
    results = list(_simulate(plan, lambda s: 4.0 if s.scenario == "ia-a" else 2.0, workers=2))
    mid = results[len(results) // 2]
    assert mid[0] == pytest.approx(mid[1], rel=0.25)


def test_rows_kept_from_an_earlier_run_do_not_make_the_estimate_jump():
    # 560 of 1416 episodes come back from --resume at once: a rate of episodes per second said 0:00:01.
    clock = FakeClock()
    plan = _plan({"ia-011": 2.0}, 708)
    eta = BenchETA(plan, clock=clock)
    for spec in plan[:560]:
        eta.reused(_row(spec, 2.0))
    assert eta.seconds_left() is None  # nothing has run here yet: no pace to go by
    assert format_eta(None) == "ETA -:--:--"
    clock.t += 2.0
    eta.ran(_row(plan[560], 2.0))
    assert eta.seconds_left() == pytest.approx(855 * 2.0)
    assert format_eta(eta.seconds_left()) == "ETA 0:28:30"


def test_the_estimate_counts_down_between_results():
    clock = FakeClock()
    plan = _plan({"ia-011": 30.0}, 5)
    eta = BenchETA(plan, clock=clock)
    clock.t += 30.0
    eta.ran(_row(plan[0], 30.0))
    assert eta.seconds_left() == pytest.approx(9 * 30.0)
    clock.t += 20.0
    assert eta.seconds_left() == pytest.approx(9 * 30.0 - 20.0)
    clock.t += 1000.0
    assert eta.seconds_left() == 0.0  # late, never negative


def test_the_bench_runs_an_episode_of_every_kind_first_so_the_estimate_knows_each_kinds_cost_early():
    from arena.bench.runner import _interleaved

    plan = _plan({"ia-fast": 1.0, "ia-slow": 10.0, "ia-mid": 3.0}, 50)  # the plan lists a scenario at a time
    order = _interleaved(plan)
    assert sorted(order, key=lambda s: s.key()) == sorted(plan, key=lambda s: s.key())  # the same episodes
    kinds = {(s.scenario, s.arm) for s in plan}
    assert {(s.scenario, s.arm) for s in order[:len(kinds)]} == kinds
    for kind in kinds:  # within a kind, the plan's order
        assert [s for s in order if (s.scenario, s.arm) == kind] == [s for s in plan if (s.scenario, s.arm) == kind]
