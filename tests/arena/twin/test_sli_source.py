"""The twin's SLI source answers the same after its speed-ups: binary-searched ledger windows, the ledger's runs
of load-phase records, kept tallies of finished spans and binary-searched gauges, against the plain definitions."""

from __future__ import annotations

import math

import pytest

from arena.scenario import load_scenario
from arena.twin.engine import build_twin
from arena.twin.ledger import Ledger, LedgerRecord
from arena.twin.sli import TwinSLISource
from verifiers.protocols import SLI_NAMES


def _plain_overlapping(records, t0, t1):
    return [r for r in records if r.t1 > t0 and r.t0 < t1]


def _plain_spans(records, t0, t1, phase):
    """The per-segment spans as first written: every record, grouped by (cycle, phase), clipped to the window."""
    segs, order = {}, []
    for r in _plain_overlapping(records, t0, t1):
        if phase is not None and r.phase != phase:
            continue
        k = (r.cycle, r.phase)
        if k not in segs:
            segs[k] = [max(r.t0, t0), min(r.t1, t1)]
            order.append(k)
        else:
            segs[k] = [min(segs[k][0], max(r.t0, t0)), max(segs[k][1], min(r.t1, t1))]
    return [(segs[k][0], segs[k][1], {"phase": k[1], "cycle": str(k[0])}) for k in order]


def _plain_gauge(gauges, a, b):
    pts = [g for g in gauges if a < g.t <= b + 1e-9] or [g for g in gauges if g.t <= a][-1:]
    return (pts[-1], len(pts)) if pts else (None, 0)


@pytest.fixture(scope="module")
def twin():
    env = build_twin(load_scenario("ia-009").twin, 5)
    env.clock.sleep(900)
    return env


def _windows(now):
    return [(now - w, now) for w in (0.0, 7.3, 60.0, 301.7, 899.0)] + [(now - 500.0, now - 120.4), (33.0, 33.0)]


def test_ledger_windows_and_runs_match_a_scan_of_every_record(twin):
    led = twin.world.ledger
    now = twin.clock.now()
    assert led.end == pytest.approx(now)
    for t0, t1 in _windows(now) + [(r.t0, r.t1) for r in led.records[::37]] + [(r.t1, r.t1) for r in led.records[::41]]:
        assert led.overlapping(t0, t1) == _plain_overlapping(led.records, t0, t1)
    assert len(led.runs) < len(led.records) / 2  # runs are load phases, far fewer than segments x drivers
    assert [(c, p) for c, p, _, _ in led.runs] == [
        k for i, k in enumerate((r.cycle, r.phase) for r in led.records)
        if i == 0 or k != (led.records[i - 1].cycle, led.records[i - 1].phase)]


def test_spans_match_the_record_scan(twin):
    src = TwinSLISource(twin.world)
    now = twin.clock.now()
    for t0, t1 in _windows(now):
        for phase in (None, "peak", "trough"):
            assert src._spans(t0, t1, None, phase) == _plain_spans(twin.world.ledger.records, t0, t1, phase)


def test_gauge_lookup_matches_a_scan(twin):
    src = TwinSLISource(twin.world)
    gauges = twin.world.gauges
    probes = [(g.t, g.t) for g in gauges[::29]] + [(g.t - 0.01, g.t + 0.01) for g in gauges[::31]]
    probes += [(-10.0, -5.0), (0.0, twin.clock.now()), (gauges[-1].t + 1, gauges[-1].t + 2)]
    for a, b in probes:
        want, n = _plain_gauge(gauges, a, b)
        got = src._gauge("backlog", a, b, {}, {})
        assert got.count == n
        assert got.value == (None if want is None else want.backlog)


def test_kept_tallies_give_the_same_answers_as_a_fresh_source_as_time_moves_on():
    env = build_twin(load_scenario("ia-011").twin, 9)
    kept = TwinSLISource(env.world)
    for step in range(6):
        env.clock.sleep(97.5)
        fresh = TwinSLISource(env.world)
        for q in SLI_NAMES:
            for d in [None] + env.world.ledger.drivers()[:2]:
                labels = {"driver": d} if d else None
                for w in (45.0, 400.0):
                    a = kept.sli(q, w, labels=labels)
                    b = fresh.sli(q, w, labels=labels)
                    assert a == b, (step, q, d, w)
                    assert kept.sli(q, w, labels=labels, step=30.0) == fresh.sli(q, w, labels=labels, step=30.0)
    assert kept._tallies, "finished spans were kept"
    assert all(b <= env.world.ledger.end for a, b, _, _ in kept._tallies)


def test_a_record_out_of_time_order_is_refused():
    led = Ledger()
    led.append(LedgerRecord(0.0, 10.0, "d", "peak", 0))
    led.append(LedgerRecord(0.0, 10.0, "e", "peak", 0))  # another driver of the same segment
    led.append(LedgerRecord(10.0, 12.0, "d", "trough", 0))
    with pytest.raises(ValueError, match="time order"):
        led.append(LedgerRecord(5.0, 8.0, "d", "peak", 0))
    assert led.end == 12.0
    assert [r[:2] for r in led.runs] == [[0, "peak"], [0, "trough"]]
    assert Ledger().end == -math.inf
