"""Convergence: the pure judge on synthetic samples, and the waiting check against a fake environment."""

from __future__ import annotations

import random
import re

import pytest

from tests.verifiers.fakes import FakeEnv, FakeJournal, LoadShape, ManualClock, action, comp
from verifiers.bands import Band, baseline_bands, merge_bands
from verifiers.convergence import ConvergenceCheck, assess, backlog_trend, evaluate, load_cycles, since_change
from verifiers.criteria import ConvergenceCriteria, Criteria, RestartCriteria
from verifiers.protocols import FeedbackCode, Sample, VerdictStatus

ERR = Band("error_ratio", "<=", 0.05)
LAT_PEAK = Band("latency_p99_ms", "<=", 500.0, phase="peak")


def series(values: dict[str, list[tuple[float, float]]], *, cycle_s: float = 60.0, peak_s: float = 20.0,
           counts: int = 100, labels: tuple = ()) -> dict:
    """values[sli] = [(peak_value, trough_value) per cycle from t=0]."""
    out = {}
    for sli, per_cycle in values.items():
        ss = []
        for c, (pv, tv) in enumerate(per_cycle):
            base = c * cycle_s
            ss.append(Sample(base, base + peak_s, pv, {"phase": "peak", "cycle": str(c)}, counts))
            ss.append(Sample(base + peak_s, base + cycle_s, tv, {"phase": "trough", "cycle": str(c)}, counts))
        out[(sli, labels)] = ss
    return out


def judge(values, bands=(ERR,), *, window_start=0.0, now=None, crit=None, **kw):
    s = series(values, **kw)
    n = max(len(v) for v in values.values())
    return evaluate(s, list(bands), crit or ConvergenceCriteria(), window_start=window_start,
                    now=now if now is not None else n * 60.0, cycle_s=60.0)


def test_two_full_cycles_in_band_pass():
    v = judge({"error_ratio": [(0.01, 0.0), (0.02, 0.01)]})
    assert v.status is VerdictStatus.PASS
    assert v.evidence["consecutive_ok"] == 2


def test_one_cycle_is_not_enough():
    v = judge({"error_ratio": [(0.01, 0.0)]})
    assert v.status is VerdictStatus.FAIL and v.code is FeedbackCode.NOT_CONVERGED
    assert v.message.endswith("1/2 so far.") and "2/2" not in v.message
    assert "1 full load cycle(s) in band since the last change, too few yet" in v.message  # not "no ... in band"
    assert v.evidence["consecutive_ok"] == 1


def test_peak_only_failure_is_caught_and_named():
    v = judge({"error_ratio": [(0.01, 0.0)] * 3, "latency_p99_ms": [(900.0, 80.0)] * 3}, bands=(ERR, LAT_PEAK))
    assert v.status is VerdictStatus.FAIL
    assert "latency_p99_ms{phase=peak} = 900" in v.message
    assert "<= 500" in v.message


def test_cycle_that_began_before_the_window_does_not_count():
    # The change happened 10 s into cycle 0; cycles 1 and 2 are the only full ones after it.
    values = {"error_ratio": [(0.0, 0.0)] * 2}
    v = judge(values, window_start=10.0)
    assert v.status is VerdictStatus.FAIL and v.evidence["consecutive_ok"] == 1
    v = judge({"error_ratio": [(0.0, 0.0)] * 3}, window_start=10.0)
    assert v.status is VerdictStatus.PASS


def _with_peak(values, peak_value, cycle):
    """The series of `values` plus the finished peak of the next cycle."""
    s = series(values)
    s[("error_ratio", ())].append(Sample(cycle * 60.0, cycle * 60.0 + 20.0, peak_value,
                                         {"phase": "peak", "cycle": str(cycle)}, 100))
    return s


def test_a_change_during_a_peak_counts_the_trough_after_it():
    # Changed 10 s into cycle 0's peak: that peak never counts; trough 0, peak 1, trough 1 and peak 2 are two
    # peaks and two troughs wholly after the change, so the run is complete when peak 2 ends (140 s), not at 180.
    s = _with_peak({"error_ratio": [(0.3, 0.0), (0.0, 0.0)]}, 0.0, 2)
    v = evaluate(s, [ERR], window_start=10.0, now=140.0, cycle_s=60.0)
    assert v.status is VerdictStatus.PASS and v.evidence["consecutive_ok"] == 2
    # The same samples with the peak the change was made in bad and inside the window: it counts, and fails.
    v = evaluate(s, [ERR], window_start=0.0, now=140.0, cycle_s=60.0)
    assert v.status is VerdictStatus.PASS  # a bad peak before the last two peaks and troughs does not break them
    assert [c["cycle"] for c in v.evidence["cycles"]][-2:] == ["w1", "w2"]


def test_a_bad_segment_inside_the_last_two_cycles_blocks_acceptance():
    for bad in range(4):  # trough 0, peak 1, trough 1, peak 2: any one out of band fails the run
        vals = [[0.0, 0.0], [0.0, 0.0]]
        s = _with_peak({"error_ratio": [tuple(v) for v in vals]}, 0.3 if bad == 3 else 0.0, 2)
        if bad < 3:
            idx = 1 + bad  # sample order: peak0, trough0, peak1, trough1, peak2
            old = s[("error_ratio", ())][idx]
            s[("error_ratio", ())][idx] = Sample(old.t_start, old.t_end, 0.3, old.labels, old.count)
        v = evaluate(s, [ERR], window_start=10.0, now=140.0, cycle_s=60.0)
        assert v.status is VerdictStatus.FAIL, bad


def test_load_cycles_pairs_finished_segments_back_from_the_latest():
    s = _with_peak({"error_ratio": [(0.0, 0.0), (0.0, 0.0)]}, 0.0, 2)[("error_ratio", ())]
    # trough 2 under way (10 s of 40): unfinished, alone; peak 2 pairs with trough 1, peak 1 with trough 0.
    s = s + [Sample(140.0, 150.0, 0.0, {"phase": "trough", "cycle": "2"}, 10)]
    g = load_cycles(s, 10.0, 150.0, 60.0)
    assert g[("1", "trough")] == g[("2", "peak")] != g[("0", "trough")] == g[("1", "peak")]
    assert len({g[("0", "peak")], g[("0", "trough")], g[("2", "peak")], g[("2", "trough")]}) == 4
    # Without phase labels there is nothing to pair: cycles are counted from the window start instead.
    assert load_cycles([Sample(0.0, 20.0, 0.0, {}, 5)], 0.0, 20.0, 60.0) == {}


def test_unfinished_cycle_is_not_judged():
    s = series({"error_ratio": [(0.0, 0.0)] * 2})
    # The second cycle's trough is still running: its sample ends now, short of the cycle.
    s[("error_ratio", ())][-1] = Sample(80.0, 95.0, 0.0, {"phase": "trough", "cycle": "1"}, 100)
    v = evaluate(s, [ERR], window_start=0.0, now=95.0, cycle_s=60.0)
    assert v.status is VerdictStatus.FAIL and v.evidence["consecutive_ok"] == 1


def test_noisy_spike_resets_the_run_then_recovers():
    vals = [(0.01, 0.0), (0.02, 0.01), (0.09, 0.0), (0.01, 0.02)]
    assert judge({"error_ratio": vals}).status is VerdictStatus.FAIL
    assert judge({"error_ratio": vals + [(0.03, 0.01)]}).status is VerdictStatus.PASS


def test_borderline_value_on_the_limit_holds_and_just_above_fails():
    point = ConvergenceCriteria(confidence_z=0.0, noise_z=0.0)
    assert judge({"error_ratio": [(0.05, 0.05)] * 2}, crit=point).status is VerdictStatus.PASS
    assert judge({"error_ratio": [(0.0500001, 0.0)] * 2}, crit=point).status is VerdictStatus.FAIL
    # With the default statistical judgement a value on the limit is in band, but not with confidence.
    v = judge({"error_ratio": [(0.05, 0.05)] * 2})
    assert v.status is VerdictStatus.FAIL and "not yet with confidence" in v.message


def test_few_requests_need_pooled_evidence_before_acceptance():
    # 40 requests a segment, 1 error (2.5%): in band, yet 2 cycles are not enough to be sure of <= 5%.
    few = {"error_ratio": [(0.025, 0.025)] * 2}
    assert judge(few, counts=40).status is VerdictStatus.FAIL
    assert judge({"error_ratio": [(0.025, 0.025)] * 6}, counts=40).status is VerdictStatus.PASS
    # One noisy segment (3 of 40 = 7.5%) is plausibly in band: it does not break the run.
    assert judge({"error_ratio": [(0.0, 0.0), (0.075, 0.0), (0.0, 0.0), (0.0, 0.0)]}, counts=40).status \
        is VerdictStatus.PASS
    # A clear violation from the same few requests does.
    assert judge({"error_ratio": [(0.0, 0.0), (0.3, 0.0), (0.0, 0.0)]}, counts=40).status is VerdictStatus.FAIL


def test_the_first_look_at_a_run_spends_more_confidence_than_the_looks_after_it():
    # 100 requests a segment, 2.5% errors: over two cycles 5 of 200 per phase, upper bound 0.0435 at z 1.28 and
    # 0.0504 at z 1.64. The first look at a run (no earlier cycle closed a run of two) accepts at first_look_z...
    borderline = [(0.025, 0.025)] * 2
    v = judge({"error_ratio": [(0.3, 0.3)] * 3 + borderline}, counts=100)
    assert v.status is VerdictStatus.PASS, v.message
    assert v.evidence["pooled"]["error_ratio[peak]"]["z"] == 1.28
    assert v.evidence["pooled"]["error_ratio[peak]"]["earlier_looks"] == 0
    # ...which turned off, the same cycles are not yet enough.
    v = judge({"error_ratio": [(0.3, 0.3)] * 3 + borderline}, counts=100, crit=ConvergenceCriteria(first_look_z=0))
    pc = v.evidence["pooled"]["error_ratio[peak]"]
    assert v.status is VerdictStatus.FAIL and (pc["upper_bound"], pc["z"], pc["holds"]) == (0.05036, 1.64, False)
    # A run that ended in a failure had its look: the next run's first look is a later look, at confidence_z, so a
    # residual fault that breaks runs now and then does not get a fresh 90% chance with every run.
    v = judge({"error_ratio": [(0.0, 0.0), (0.0, 0.0), (0.3, 0.3)] + borderline}, counts=100)
    pc = v.evidence["pooled"]["error_ratio[peak]"]
    assert v.status is VerdictStatus.FAIL and (pc["z"], pc["earlier_looks"], pc["holds"]) == (1.64, 1, False)
    # The run's own later looks too: a third borderline cycle is judged at z 1.64 (7.5 of 300: bound 0.0466).
    v = judge({"error_ratio": [(0.3, 0.3)] * 3 + borderline * 2}, counts=100)
    assert v.status is VerdictStatus.PASS and v.evidence["pooled"]["error_ratio[peak]"]["z"] == 1.64


def _segments(values: list[float], count: int = 100) -> dict:
    """One error-ratio sample per segment, peak (20 s) and trough (40 s) in turn from t=0: an odd number of
    values ends on a finished peak."""
    ss = []
    for n, v in enumerate(values):
        c, peak = divmod(n, 2)[0], n % 2 == 0
        t0 = c * 60.0 + (0.0 if peak else 20.0)
        ss.append(Sample(t0, t0 + (20.0 if peak else 40.0), v, {"phase": "peak" if peak else "trough",
                                                               "cycle": str(c)}, count))
    return {("error_ratio", ()): ss}


def test_a_look_made_under_the_other_pairing_a_segment_ago_counts():
    # Cycles are paired back from the latest finished segment, so the pairing shifts each segment. Four in-band
    # segments (a look, at 2 cycles), a bad peak, then four borderline ones ending on a peak: under today's
    # pairing no earlier cycle closed a run, but under the pairing of a segment ago the first four did. This is
    # not a first look: z 1.64, and 5 of 200 is not yet enough.
    s = _segments([0.04] * 4 + [0.3] + [0.025] * 4)
    v = evaluate(s, [ERR], window_start=0.0, now=260.0, cycle_s=60.0)
    pc = v.evidence["pooled"]["error_ratio[peak]"]
    assert v.status is VerdictStatus.FAIL and (pc["z"], pc["holds"]) == (1.64, False), v.evidence["pooled"]
    assert pc["earlier_looks"] >= 1
    # Without the early run, the same last four segments are the first look, under either pairing.
    for bad in ([0.3] * 5, [0.3] * 4):
        s = _segments(bad + [0.025] * 4)
        end = max(x.t_end for x in s[("error_ratio", ())])
        v = evaluate(s, [ERR], window_start=0.0, now=end, cycle_s=60.0)
        pc = v.evidence["pooled"]["error_ratio[peak]"]
        assert v.status is VerdictStatus.PASS and (pc["z"], pc["earlier_looks"]) == (1.28, 0), (bad, v.message)


def _low_traffic_troughs(troughs: list[tuple[float, int]], peak_count: int = 100) -> dict:
    """Cycles of 60 s: a clean peak of `peak_count` requests, then a trough of (error ratio, requests)."""
    ss = []
    for c, (tv, tn) in enumerate(troughs):
        ss.append(Sample(c * 60.0, c * 60.0 + 20.0, 0.0, {"phase": "peak", "cycle": str(c)}, peak_count))
        ss.append(Sample(c * 60.0 + 20.0, c * 60.0 + 60.0, tv, {"phase": "trough", "cycle": str(c)}, tn))
    return {("error_ratio", ()): ss}


def test_pooled_confidence_counts_the_troughs_too_small_to_judge_alone():
    # A low-traffic trough (ia-006 live: ~5 checkout requests a trough) alternates 3 and 6 clean requests. Only
    # the 6-request troughs reach min_count (5) to be judged alone, but every request counts for the pooled
    # confidence: 12 cycles give 54 clean trough requests (upper bound 0.047 <= 0.05). Pooling only the judged
    # ones (36, upper bound 0.070) never reached confidence, however long the run of in-band cycles grew.
    s = _low_traffic_troughs([(0.0, 3), (0.0, 6)] * 6)
    v = evaluate(s, [ERR], window_start=0.0, now=720.0, cycle_s=60.0)
    assert v.status is VerdictStatus.PASS, v.message
    assert v.evidence["pooled"]["error_ratio[trough]"]["requests"] == 54
    # ...and what those small troughs say counts against the pool: every one of their requests failing
    # (18 of 378 trough requests, 4.8%) is no longer hidden behind the clean 60-request troughs.
    s = _low_traffic_troughs([(1.0, 3), (0.0, 60)] * 6)
    v = evaluate(s, [ERR], window_start=0.0, now=720.0, cycle_s=60.0)
    assert v.status is VerdictStatus.FAIL and "error_ratio[trough] is in band but not yet with confidence" in v.message
    assert v.evidence["pooled"]["error_ratio[trough]"]["requests"] == 378


def test_a_bad_finished_peak_blocks_acceptance_before_its_cycle_ends():
    s = series({"error_ratio": [(0.0, 0.0)] * 2 + [(0.4, 0.0)]})
    # Cycle 2's peak (120-140) is finished and bad; its trough is still running at t=150.
    s[("error_ratio", ())][-1] = Sample(140.0, 150.0, 0.0, {"phase": "trough", "cycle": "2"}, 100)
    assert evaluate(s, [ERR], window_start=0.0, now=150.0, cycle_s=60.0).status is VerdictStatus.FAIL


def test_too_few_requests_is_no_data_not_a_failure():
    s = series({"error_ratio": [(0.0, 0.0)] * 3})
    # One of two requests failed in cycle 1's trough: 0.5, but from 2 requests.
    s[("error_ratio", ())][3] = Sample(80.0, 120.0, 0.5, {"phase": "trough", "cycle": "1"}, 2)
    v = evaluate(s, [ERR], window_start=0.0, now=180.0, cycle_s=60.0)
    assert v.status is VerdictStatus.PASS
    crit = ConvergenceCriteria(min_count=1)
    v = evaluate(s, [ERR], crit, window_start=0.0, now=180.0, cycle_s=60.0)
    assert v.status is VerdictStatus.FAIL  # counted as data, the same sample fails


def test_noisy_healthy_telemetry_converges_and_noisy_faulty_does_not():
    rng = random.Random(7)
    ok = [(max(0.0, rng.gauss(0.01, 0.008)), max(0.0, rng.gauss(0.005, 0.004))) for _ in range(4)]
    bad = [(max(0.0, rng.gauss(0.15, 0.05)), max(0.0, rng.gauss(0.01, 0.01))) for _ in range(4)]
    assert judge({"error_ratio": ok}).status is VerdictStatus.PASS
    assert judge({"error_ratio": bad}).status is VerdictStatus.FAIL


def test_driver_labels_are_judged_separately():
    band = Band("goodput", ">=", 0.9, (("driver", "write_readback"),))
    s = series({"goodput": [(0.95, 0.97)] * 2}, labels=(("driver", "write_readback"),))
    assert evaluate(s, [band], window_start=0, now=120, cycle_s=60).status is VerdictStatus.PASS
    s = series({"goodput": [(0.7, 0.97)] * 2}, labels=(("driver", "write_readback"),))
    v = evaluate(s, [band], window_start=0, now=120, cycle_s=60)
    assert v.status is VerdictStatus.FAIL and "goodput{driver=write_readback,phase" not in v.message
    assert "goodput{driver=write_readback} = 0.7" in v.message


def test_restart_counter_increase_fails_a_cycle():
    band = Band("restarts", "<=", 0.0, (("component", "svc-a"),), source="default", required=False)
    s = series({"error_ratio": [(0.0, 0.0)] * 3})
    s[("restarts", (("component", "svc-a"),))] = [
        Sample(c * 60 + o, c * 60 + o + 20, v, {"phase": ph, "cycle": str(c)}, 0)
        for c, (o, ph, v) in [(0, (0, "peak", 3)), (0, (20, "trough", 3)), (1, (0, "peak", 3)),
                              (1, (20, "trough", 4)), (2, (0, "peak", 4)), (2, (20, "trough", 4))]]
    v = evaluate(s, [ERR, band], window_start=0, now=180, cycle_s=60)
    assert v.status is VerdictStatus.FAIL  # cycle 1 restarted (CrashLoopBackOff-like); only cycle 2 is clean
    assert "restarts{component=svc-a}" in v.message


def test_backlog_trend_gives_drain_rate_and_eta():
    ss = [Sample(t, t + 10, 1000 - 5 * t, {}, 0) for t in range(0, 100, 10)]
    tr = backlog_trend(ss, limit=10)
    assert tr["drain_per_s"] == pytest.approx(5.0)
    assert tr["eta_s"] == pytest.approx((tr["value"] - 10) / 5.0)
    assert backlog_trend([Sample(0, 10, 5.0, {}, 0)])["eta_s"] is None


def test_draining_backlog_failure_names_eta_and_is_not_counted():
    band = Band("backlog", "<=", 10.0, phase="trough", source="default", required=False)
    s = series({"error_ratio": [(0.0, 0.0)] * 4, "backlog": [(400 - 100 * c, 350 - 100 * c) for c in range(4)]})
    off = ConvergenceCriteria(accept_draining_eta_cycles=0)
    a = assess(s, [ERR, band], off, window_start=0, now=240, cycle_s=60)
    assert a.state == "failing" and a.failed_cycles == 0
    v = evaluate(s, [ERR, band], off, window_start=0, now=240, cycle_s=60)
    assert v.status is VerdictStatus.FAIL and "draining" in v.message and "ETA" in v.message
    # By default the same evidence is a system finishing its backlog: accepted as converging, with the ETA.
    v = evaluate(s, [ERR, band], window_start=0, now=240, cycle_s=60)
    assert v.status is VerdictStatus.PASS and "converging" in v.message and "ETA" in v.message
    assert v.evidence["converging"]["explained"] == ["backlog{phase=trough}"]


RQ_GOOD = Band("goodput", ">=", 0.90, (("driver", "rq_complete"),))
STABLE = Band("backlog", "stable", 10.0, phase="trough", source="default", required=False)


def _drain(goodput, backlog, err=0.0):
    """Four cycles: rq_complete goodput per cycle, the backlog (peak, trough) per cycle, the error ratio."""
    s = series({"error_ratio": [(err, err)] * 4, "backlog": backlog})
    s.update(series({"goodput": [(g, g) for g in goodput]}, labels=(("driver", "rq_complete"),)))
    return evaluate(s, [ERR, RQ_GOOD, STABLE], window_start=0, now=240, cycle_s=60)


DRAINING = [(1200 - 20 * c, 1190 - 20 * c) for c in range(4)]


def test_goodput_held_down_by_a_draining_backlog_is_accepted_as_converging():
    """The Frappe ia-005 shape: the queue is fixed, the worker drains ~1200 accepted jobs at a net 0.3/s, and the
    completion polls claim old reports still behind it; errors hold and goodput climbs as the drain goes on."""
    v = _drain([0.2, 0.4, 0.55, 0.7], DRAINING)
    assert v.status is VerdictStatus.PASS, v.message
    assert "converging" in v.message and "ETA" in v.message and "goodput{driver=rq_complete}" in v.message
    cv = v.evidence["converging"]
    assert cv["explained"] == ["backlog{phase=trough}", "goodput{driver=rq_complete}"]
    assert cv["draining"]["backlog"]["eta_s"] > 0


@pytest.mark.parametrize("case, goodput, backlog, err", [
    # Negative controls: each breaks one condition of the converging acceptance and must still hold.
    ("backlog not draining", [0.2, 0.4, 0.55, 0.7], [(1200, 1200)] * 4, 0.0),
    ("backlog growing", [0.2, 0.4, 0.55, 0.7], [(1000 + 20 * c, 1010 + 20 * c) for c in range(4)], 0.0),
    ("work drained by failing it: goodput flat", [0.0, 0.0, 0.0, 0.0], DRAINING, 0.0),
    ("an error SLI out of band too", [0.2, 0.4, 0.55, 0.7], DRAINING, 0.3),
    ("drain ETA beyond the cap", [0.2, 0.4, 0.55, 0.7], [(100000 - 20 * c, 99990 - 20 * c) for c in range(4)], 0.0),
])
def test_a_failure_the_drain_does_not_explain_still_holds(case, goodput, backlog, err):
    v = _drain(goodput, backlog, err)
    assert v.status is VerdictStatus.FAIL and v.code is FeedbackCode.NOT_CONVERGED, case
    assert "converging" not in v.evidence


def test_a_backlog_that_emptied_counts_as_settled_in_the_cycle_it_emptied():
    """"Stopped moving" compares a trough's backlog with the trough before; an empty queue cannot drain further,
    so the cycle whose trough ends empty counts, and a queue still far from empty and falling does not."""
    stable = Band("backlog", "stable", 10.0, phase="trough", source="default", required=False)
    # Draining 900 -> 400 -> 0 by the trough of cycle 2, then empty: cycles 2 and 3 are the two settled ones.
    s = series({"error_ratio": [(0.0, 0.0)] * 4, "backlog": [(1000, 900), (600, 400), (100, 0), (0, 0)]})
    a = assess(s, [ERR, stable], ConvergenceCriteria(), window_start=0, now=240, cycle_s=60)
    assert [c.state for c in a.cycles] == ["ok", "fail", "ok", "ok"] and a.state == "converged"
    # Still 300 when the trough ends: the same two cycles are not enough.
    s = series({"error_ratio": [(0.0, 0.0)] * 4, "backlog": [(1000, 900), (600, 700), (400, 500), (300, 300)]})
    a = assess(s, [ERR, stable], ConvergenceCriteria(), window_start=0, now=240, cycle_s=60)
    assert a.state != "converged" and [c.state for c in a.cycles][1:3] == ["fail", "fail"]


def test_baseline_bands_follow_the_spec_envelope():
    pre = {("latency_p99_ms", ()): [Sample(i, i + 1, 100.0 + (i % 3), {"phase": "peak"}, 50) for i in range(6)]
           + [Sample(i, i + 1, 40.0, {"phase": "trough"}, 50) for i in range(6)],
           ("goodput", ()): [Sample(i, i + 1, 0.99, {"phase": "peak"}, 50) for i in range(6)]}
    bands = {(b.sli, b.phase): b for b in baseline_bands(pre, ConvergenceCriteria())}
    assert bands[("latency_p99_ms", "peak")].limit == pytest.approx(2 * 101.0, abs=1.5)  # mean + 1.0*mean
    assert bands[("latency_p99_ms", "trough")].limit == pytest.approx(140.0)  # mean + 100 ms floor
    assert bands[("goodput", "peak")].op == ">=" and bands[("goodput", "peak")].limit == pytest.approx(0.89)
    # Too few pre-incident samples: no band.
    assert baseline_bands({("goodput", ()): pre[("goodput", ())][:2]}, ConvergenceCriteria()) == []


def test_slo_wins_over_baseline_for_the_same_series():
    slo = [Band("error_ratio", "<=", 0.1)]
    base = [Band("error_ratio", "<=", 0.02, phase="peak", source="baseline", required=False),
            Band("latency_p99_ms", "<=", 300, phase="trough", source="baseline", required=False)]
    merged = merge_bands(slo, base)
    assert [b.sli for b in merged] == ["error_ratio", "latency_p99_ms"]


# -- the waiting check against a fake environment -------------------------------------------------------------

def _env(fix_at: float | None, *, extra=None, health=None, components=None) -> FakeEnv:
    def default_health(sli, labels, phase, t, c):
        healthy = fix_at is not None and t >= fix_at
        if sli == "error_ratio":
            return (0.01 if healthy else (0.4 if phase == "peak" else 0.02), 200)
        if sli == "goodput":
            return (0.98 if healthy else 0.6, 200)
        return (50.0, 200)

    return FakeEnv(clock=ManualClock(600.0), load=LoadShape(60.0, 20.0), health=health or default_health,
                   components=components or [comp("svc-a")], extra=extra)


CTX = {"id": "t", "components": ["svc-a"], "restartable": ["svc-a"],
       "slos": [{"sli": "error_ratio", "op": "<=", "value": 0.05}, {"sli": "goodput", "op": ">=", "value": 0.9}]}


def test_declared_at_once_is_held_then_accepted_after_two_cycles():
    env = _env(fix_at=605.0)
    j = FakeJournal(env.clock)
    env.clock.t = 605.0
    j.run(env, "fix", [action("x", "set", [{"key": "app.roles.a.db.pool_size", "value": 20}])])
    env.handle(r"fix", lambda m: "")
    v = ConvergenceCheck(CTX).check(env, j, None)
    assert v.status is VerdictStatus.PASS, v.message
    waited = v.evidence["waited_s"]
    # The peak the fix landed in (600-620) never counts; the trough after it does. Two peaks and two troughs
    # wholly after the fix end at 740 (620-660 trough, 660-680 peak, 680-720 trough, 720-740 peak), not at 780.
    assert 740 - 605 <= waited + 1e-6 and env.clock.now() <= 740 + 15 + 1e-6
    # Waits are in the env clock: a quarter cycle, or less to wake just after a segment ends (0.6 s past it).
    assert env.clock.sleeps and all(0 < s <= 15.0 for s in env.clock.sleeps)
    assert env.clock.now() == pytest.approx(740.6)


def test_failures_right_after_the_change_are_evidence_not_a_reason_to_wait_longer():
    """A reload at a peak (605-620) fails the rest of that peak: shown as the since-change segment, while the
    acceptance comes exactly when it does for a quiet change (the segment is cut short and never counts)."""
    def health(sli, labels, phase, t, c):
        reloading = 605.0 <= t < 620.0
        if sli == "error_ratio":
            return (0.5 if reloading else 0.01, 200)
        return (0.5 if reloading else 0.98, 200) if sli == "goodput" else (50.0, 200)

    env = _env(fix_at=605.0, health=health)
    j = FakeJournal(env.clock)
    env.clock.t = 605.0
    j.run(env, "fix", [action("x", "set", [{"key": "app.roles.a.db.pool_size", "value": 20}])])
    v = ConvergenceCheck(CTX).check(env, j, None)
    assert v.status is VerdictStatus.PASS, v.message
    assert env.clock.now() == pytest.approx(740.6)
    first = v.evidence["settling"][0]
    assert first["cycle"] == "since-change" and first["state"] == "fail"
    assert first["t_start"] == pytest.approx(605.0) and first["t_end"] == pytest.approx(620.0)
    assert {f["sli"] for f in first["failed"]} == {"error_ratio", "goodput"}


def test_since_change_judges_only_what_follows_the_change():
    bands = [ERR]
    clipped = {("error_ratio", ()): [Sample(605.0, 620.0, 0.3, {"phase": "peak", "cycle": "10"}, 200),
                                     Sample(620.0, 660.0, 0.01, {"phase": "trough", "cycle": "10"}, 200)]}
    j = since_change(clipped, bands, ConvergenceCriteria(), window_start=605.0, until=620.0)
    assert j is not None and j.state == "fail" and [r.value for r in j.failures] == [0.3]
    # A sample from before the change (an unclipped source) is never judged as if it followed it.
    before = {("error_ratio", ()): [Sample(600.0, 620.0, 0.3, {"phase": "peak", "cycle": "10"}, 200)]}
    assert since_change(before, bands, ConvergenceCriteria(), window_start=605.0, until=620.0) is None
    quiet = {("error_ratio", ()): [Sample(605.0, 620.0, 0.01, {"phase": "peak", "cycle": "10"}, 200)]}
    assert since_change(quiet, bands, ConvergenceCriteria(), window_start=605.0, until=620.0).state == "ok"


def test_never_recovers_gives_up_bounded_with_not_converged():
    env = _env(fix_at=None)
    j = FakeJournal(env.clock)
    v = ConvergenceCheck(CTX).check(env, j, {"convergence": {"max_wait_cycles": 5}})
    assert v.status is VerdictStatus.FAIL and v.code is FeedbackCode.NOT_CONVERGED
    assert "error_ratio{phase=peak} = 0.4" in v.message or "goodput" in v.message
    assert env.clock.now() - 600.0 <= 5 * 60 + 1e-6


def test_failure_limit_stops_early():
    env = _env(fix_at=None)
    j = FakeJournal(env.clock)
    v = ConvergenceCheck(CTX).check(env, j, {"convergence": {"failure_limit": 1, "max_wait_cycles": 20}})
    assert v.status is VerdictStatus.FAIL
    assert env.clock.now() - 600.0 < 6 * 60


def test_change_during_the_wait_restarts_the_window():
    env = _env(fix_at=605.0)
    j = FakeJournal(env.clock)
    env.handle(r"tweak", lambda m: "")

    def agent_acts(t: float) -> None:
        if 700 <= t < 731 and not any(e["command"] == "tweak" for e in j.executed()):
            j.run(env, "tweak", [action("x", "set", [{"key": "k", "value": 1}])])

    env.clock.on_advance.append(agent_acts)
    v = ConvergenceCheck(CTX).check(env, j, None)
    assert v.status is VerdictStatus.PASS
    assert v.evidence["window_restarts"] >= 1
    # Two full cycles after the change at t=720: 720..840.
    assert env.clock.now() >= 840


def test_source_failure_is_an_error_verdict_not_an_exception():
    env = _env(fix_at=0.0)
    env.sli_error = ConnectionError("prometheus down")
    v = ConvergenceCheck(CTX).check(env, FakeJournal(env.clock), None)
    assert v.status is VerdictStatus.ERROR and "prometheus down" in v.message


def test_baseline_from_pre_incident_telemetry_catches_what_slos_miss():
    # Healthy trough latency was 40 ms before the incident (t < 300); after the "fix" errors are fine but trough
    # latency sits at 400 ms. Only the baseline band sees it.
    def health(sli, labels, phase, t, c):
        if sli == "latency_p99_ms":
            return (40.0 if t < 300 else 400.0, 200)
        if sli in ("error_ratio",):
            return (0.0, 200)
        if sli == "goodput":
            return (1.0, 200)
        return (0.0, 200)

    env = _env(fix_at=0, health=health, extra={"incident_start_s": 300.0})
    v = ConvergenceCheck(CTX).check(env, FakeJournal(env.clock), {"convergence": {"max_wait_cycles": 4}})
    assert v.status is VerdictStatus.FAIL and "latency_p99_ms" in v.message and "baseline" in v.message
    env2 = _env(fix_at=0, health=health)  # no incident start known: public SLOs alone
    v2 = ConvergenceCheck(CTX).check(env2, FakeJournal(env2.clock), None)
    assert v2.status is VerdictStatus.PASS
    assert "public SLOs alone" in str(v2.evidence["baseline"])


def test_pods_not_ready_block_acceptance():
    env = _env(fix_at=0.0)
    env.ready_at["svc-a"] = 10_000.0
    v = ConvergenceCheck(CTX).check(env, FakeJournal(env.clock), {"convergence": {"max_wait_cycles": 3}})
    assert v.status is VerdictStatus.FAIL and "not ready: svc-a" in v.message


def test_draining_backlog_is_waited_for_and_accepted():
    def health(sli, labels, phase, t, c):
        if sli == "backlog":
            return (max(0.0, 300 - 1.0 * (t - 600)), 0)
        return {"error_ratio": (0.0, 100), "goodput": (1.0, 100)}.get(sli, (0.0, 100))

    # With the converging acceptance off, the wait runs on until the backlog has settled.
    off = {"max_wait_cycles": 12, "accept_draining_eta_cycles": 0}
    env = _env(fix_at=0, health=health)
    v = ConvergenceCheck(CTX).check(env, FakeJournal(env.clock), {"convergence": off})
    assert v.status is VerdictStatus.PASS and "converging" not in v.message
    assert env.clock.now() >= 600 + 290  # it waited for the drain (300 items at 1/s)
    # By default two cycles of a visible drain with every other SLI in band are accepted at once, with the ETA.
    env = _env(fix_at=0, health=health)
    v = ConvergenceCheck(CTX).check(env, FakeJournal(env.clock), {"convergence": {"max_wait_cycles": 12}})
    assert v.status is VerdictStatus.PASS and "converging" in v.message and "ETA" in v.message
    assert env.clock.now() < 600 + 290
    slow = lambda s, lab, ph, t, c: ((max(0.0, 300 - 0.2 * (t - 600)), 0) if s == "backlog"  # noqa: E731
                                     else ({"goodput": 1.0}.get(s, 0.0), 100))
    env = _env(fix_at=0, health=slow)
    v = ConvergenceCheck(CTX).check(env, FakeJournal(env.clock), {"convergence": {**off, "max_wait_cycles": 4}})
    assert v.status is VerdictStatus.FAIL and "ETA" in v.message and "draining" in v.message


def test_criteria_mapping_rejects_unknown_fields():
    with pytest.raises(ValueError):
        Criteria.coerce({"convergence": {"consecutive": 3}})
    assert Criteria.coerce({"convergence": {"consecutive_cycles": 3}}).convergence.consecutive_cycles == 3


@pytest.mark.parametrize("override,words", [
    ({"convergence": {"consecutive_cycles": 0}}, "convergence.consecutive_cycles must be at least 1, not 0"),
    ({"convergence": {"max_wait_cycles": -1.0}}, "convergence.max_wait_cycles must be greater than 0"),
    ({"convergence": {"noise_z": float("nan")}}, "convergence.noise_z must be a finite number"),
    ({"restart": {"poll_s": 0}}, "restart.poll_s must be greater than 0"),
    ({"watchdog": {"max_distinct_ratio": 1.5}}, "watchdog.max_distinct_ratio must be at most 1"),
    ({"watchdog": {"repeat_limit": True}}, "watchdog.repeat_limit must be a whole number"),
    ({"convergence": {"consecutive_cycles": 1.5}}, "convergence.consecutive_cycles must be a whole number"),
    ({"restart": {"poll_s": float("inf")}}, "restart.poll_s must be a finite number"),
    ({"restart": {"targets": "bogus"}}, "restart.targets must be one of touched_or_all, touched, all"),
    ({"convergence": {"baseline_abs": {"error_ratio": -0.1}}}, "convergence.baseline_abs must map names"),
    ({"watchdog": {"check_slis": "yes"}}, "watchdog.check_slis must be true or false"),
    (ConvergenceCriteria(consecutive_cycles=0), "convergence.consecutive_cycles must be at least 1"),
    (Criteria(restart=RestartCriteria(ready_timeout_s=-5.0)), "restart.ready_timeout_s must be greater than 0"),
])
def test_criteria_mapping_rejects_values_outside_their_range(override, words):
    """The ranges beside the fields (verifiers.criteria.RANGES) hold for every caller, not only a criteria file."""
    with pytest.raises(ValueError, match=re.escape(words)):
        Criteria.coerce(override)
    # The edges are allowed: a 1-cycle run, a zero noise allowance, a share of exactly 1.
    c = Criteria.coerce({"convergence": {"consecutive_cycles": 1, "noise_z": 0, "interval_s": None},
                         "watchdog": {"max_distinct_ratio": 1.0}})
    assert (c.convergence.consecutive_cycles, c.convergence.noise_z, c.watchdog.max_distinct_ratio) == (1, 0, 1.0)


def test_wait_runs_past_the_bound_while_a_run_of_good_cycles_is_under_way():
    # Healthy from t=840. The 5-cycle bound ends at 900, when one good cycle (840-900) is in: it waits for 960.
    crit = {"max_wait_cycles": 5, "failure_limit": 10}
    env = _env(fix_at=840.0)
    v = ConvergenceCheck(CTX).check(env, FakeJournal(env.clock), {"convergence": {**crit, "drain_wait_cycles": 10}})
    assert v.status is VerdictStatus.PASS, v.message
    assert 960 <= env.clock.now() <= 990
    env = _env(fix_at=840.0)
    v = ConvergenceCheck(CTX).check(env, FakeJournal(env.clock), {"convergence": {**crit, "drain_wait_cycles": 5}})
    assert v.status is VerdictStatus.FAIL and env.clock.now() <= 900  # no extension allowed: the bound holds


def test_under_a_mandated_slowdown_a_latency_slo_covers_every_percentile_of_its_driver():
    slo = [Band("latency_p90_ms", "<=", 1000, (("driver", "write"),))]
    base = [Band("latency_p95_ms", "<=", 440, (("driver", "write"),), "peak", "baseline", False),
            Band("latency_p95_ms", "<=", 440, (), "peak", "baseline", False),
            Band("latency_p99_ms", "<=", 300, (("driver", "read"),), "peak", "baseline", False),
            Band("error_ratio", "<=", 0.02, (("driver", "write"),), "peak", "baseline", False)]
    # Without a mandated slowdown the baseline's latency bands all stay: they hold partial repairs back.
    assert len([b for b in merge_bands(slo, base) if b.source == "baseline"]) == 4
    merged = merge_bands(slo, base, latency_slo_is_contract=True)
    kept = [(b.sli, b.labels) for b in merged if b.source == "baseline"]
    # The read driver has no latency SLO: its baseline latency band stays, and so does the all-driver band.
    assert ("latency_p99_ms", (("driver", "read"),)) in kept
    assert ("latency_p95_ms", ()) in kept
    assert ("latency_p95_ms", (("driver", "write"),)) not in kept
    assert ("error_ratio", (("driver", "write"),)) in kept
    # With a latency SLO for every measured driver, the all-driver latency band is covered too.
    merged = merge_bands(slo + [Band("latency_p90_ms", "<=", 800, (("driver", "read"),))], base,
                         latency_slo_is_contract=True)
    assert ("latency_p95_ms", ()) not in [(b.sli, b.labels) for b in merged if b.source == "baseline"]


def test_segments_before_the_first_full_cycle_are_settling_evidence_only():
    # Peak 0 is alone before the first full cycle (trough 0 + peak 1): it is judged for failures as evidence of how
    # the system settled, and never counts for or against the run.
    s = _with_peak({"error_ratio": [(0.3, 0.0), (0.0, 0.0)]}, 0.0, 2)
    v = evaluate(s, [ERR], window_start=0.0, now=140.0, cycle_s=60.0)
    assert v.status is VerdictStatus.PASS and v.evidence["consecutive_ok"] == 2
    settling = v.evidence["settling"]
    assert [(c["t_start"], c["t_end"], c["state"]) for c in settling] == [(0.0, 20.0, "fail")]
    assert settling[0]["failed"][0]["sli"] == "error_ratio"
    s = _with_peak({"error_ratio": [(0.0, 0.0), (0.0, 0.0)]}, 0.0, 2)
    v = evaluate(s, [ERR], window_start=0.0, now=140.0, cycle_s=60.0)
    assert [c["state"] for c in v.evidence["settling"]] == ["ok"]
