"""LiveLedger and EpisodeClock without servers: the Outcome Gate's reading of a real loadgen ledger.

A synthetic ledger.jsonl in the load generator's format; a fake clock that records the waits (no sleeping).
"""

from __future__ import annotations

import json

import pytest

from arena.world import GradedWorld, TwinWorld


class FakeClock:
    def __init__(self, t: float = 0.0):
        self.t = t
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def _row(t, phase, driver="checkout_readback", *, ok=True, correct=True, timeout=False, dropped=False,
         latency_ms=100.0, detail=""):
    return {"t": t, "sent_s": t - 1000.0, "phase": phase, "driver": driver, "latency_ms": None if timeout or dropped
            else latency_ms, "ok": ok and not timeout and not dropped, "correct": correct and ok and not timeout,
            "timeout": timeout, "dropped": dropped, "detail": detail}


@pytest.fixture
def ledger(tmp_path):
    from arena.live.world import LiveLedger

    origin = 1000.0
    rows = [
        _row(1001.0, "c1.peak", latency_ms=50),
        _row(1002.0, "c1.peak", ok=False, correct=False, latency_ms=20, detail="checkout 500 statement_timeout"),
        _row(1003.0, "c1.peak", timeout=True),
        _row(1004.0, "c1.peak", dropped=True),
        _row(1005.0, "c1.trough", correct=False, latency_ms=300),
        _row(1006.0, "c1.trough", driver="browse", latency_ms=10),
        _row(1020.0, "c2.peak", latency_ms=70),  # outside [0, 10)
    ]
    path = tmp_path / "ledger.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    clock = FakeClock(30.0)
    return LiveLedger(path, origin, clock, {"checkout_readback": 5.0, "browse": 10.0})


def test_select_counts_outcomes_like_the_twin(ledger):
    counts, lat = ledger.select(0.0, 10.0, driver="checkout_readback")
    assert (counts.offered, counts.dropped, counts.ok, counts.correct, counts.error, counts.timeout) == (5, 1, 2, 1, 1, 1)
    assert counts.base == 4
    assert counts.error_rate() == pytest.approx(2 / 4)
    assert counts.goodput() == pytest.approx(1 / 4)
    # A timeout's latency counts at the driver's timeout, as the twin records it; dropped requests have none.
    assert sorted(lat.hist.values) == [20.0, 50.0, 300.0, 5000.0]


def test_select_filters_phase_and_settle(ledger):
    _, peak = ledger.select(0.0, 10.0, phase="peak", latency_from=2.5)
    assert sorted(peak.hist.values) == [5000.0]  # the rows sent before the settle are left out of latency
    c, _ = ledger.select(0.0, 10.0, phase="trough")
    assert c.offered == 2


def test_select_waits_until_every_request_of_the_window_could_finish(tmp_path):
    from arena.live.world import LiveLedger

    path = tmp_path / "ledger.jsonl"
    path.write_text("")
    clock = FakeClock(10.0)
    led = LiveLedger(path, 0.0, clock, {"a": 5.0, "b": 10.0}, grace_s=0.5)
    led.select(0.0, 12.0)
    assert clock.slept == [pytest.approx(12.0 + 10.0 + 0.5 - 10.0)]
    led.select(0.0, 12.0)
    assert len(clock.slept) == 1  # already complete: no second wait


def test_exact_percentile_is_nearest_rank():
    from arena.live.world import ExactLatencies

    h = ExactLatencies([float(i) for i in range(1, 101)])
    assert h.percentile(99) == 99.0
    assert h.percentile(100) == 100.0
    assert h.percentile(50) == 50.0
    assert ExactLatencies().percentile(99) is None


def test_episode_clock_counts_from_episode_start():
    from arena.live.world import EpisodeClock

    base = FakeClock(5000.0)
    c = EpisodeClock(base, 4990.0)
    assert c.now() == 10.0
    c.sleep(2.5)
    assert c.now() == 12.5 and base.slept == [2.5]


def test_the_twin_world_is_a_graded_world():
    from arena.scenario import load_scenario

    w = TwinWorld.build(load_scenario("ia-006").twin, 0)
    assert isinstance(w, GradedWorld)
    assert w.seconds(30.0) == 30.0 and w.clock is w.env.clock


def test_a_live_episode_starts_where_the_twins_does_in_the_load_cycle():
    """ia-018's twin opens with 30 s of warmup before a 60 s cycle's peak: the live episode starts 5 s before a
    live peak (10 s cycles), so its scaled script lands in the same phase."""
    from arena.live.loadgen import LoadShape
    from arena.live.world import _phase_lead_wait
    from arena.scenario import load_scenario

    shape = LoadShape(seed=18, warmup_s=4, warmup_rps=2, cycles=[[4, 8, 6, 2]])  # peaks at 4, 14, 24, ...
    profile = load_scenario("ia-018").twin.profile
    for now in (12.0, 9.0, 13.5, 8.999):
        wait = _phase_lead_wait(now, shape, profile)
        start = now + wait
        assert 0 <= wait < shape.cycle_s
        assert (start + 5.0 - 4.0) % 10.0 == pytest.approx(0.0, abs=1e-6) or (
            (start + 5.0 - 4.0) % 10.0 == pytest.approx(10.0, abs=1e-6)), (now, wait)


def test_a_live_soak_starts_at_the_next_live_cycle_boundary():
    """As the twin's (and Incident-Arena's runner): the soak starts at the first peak start at or after the freeze,
    on the load generator's own grid, whatever the profile's legacy align_soak_to_cycle marker says."""
    from types import SimpleNamespace

    from arena.live.loadgen import LoadShape
    from arena.live.world import LiveWorld

    class Rows:
        def __init__(self, rows):
            self._rows = rows

        def rows(self):
            return self._rows

    w = LiveWorld.__new__(LiveWorld)  # the soak window needs only the generator's grid, not a running stack
    w.lg_config = SimpleNamespace(shape=LoadShape(warmup_s=4, cycles=[[4, 8, 6, 2]]))  # peaks at 4, 14, 24, ...
    w.soak_cycles, w.cycle_s, w.origin = 4, 10.0, 1000.0
    w.ledger = Rows([{"t": 1001.0, "sent_s": 6.0}])  # the generator started 5 s before the episode
    # Episode 15 s is generator 20 s (a trough): the soak waits for the peak at 24, episode 19.
    assert w.soak_window(15.0) == pytest.approx((19.0, 59.0))
    assert w.soak_window(9.0) == pytest.approx((9.0, 49.0))  # a freeze on a peak start soaks from there
    assert w.soak_window(-3.0) == pytest.approx((9.0, 49.0))  # never before the episode's start
