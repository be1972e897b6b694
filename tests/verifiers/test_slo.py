"""SLOSource (windows by query_range) and convergence judged on an SLO file's objectives, in virtual time.

A fake query_range evaluates each SLO's PromQL as a function of time (what a Prometheus would answer), so these
tests run with the injected ManualClock; tests/guardrail/adapters/test_slo_prometheus.py does the same against a
real Prometheus.
"""

from __future__ import annotations

import pytest

from tests.verifiers.fakes import FakeJournal, ManualClock
from verifiers.convergence import ConvergenceCheck
from verifiers.progress import reporting_to
from verifiers.protocols import EnvironmentDescription, FeedbackCode, VerdictStatus
from verifiers.slo import DESCRIBE_KEY, SLObjective, SLOSource, render

ERRORS = SLObjective("api-availability", "error_ratio", "<=", 0.01,
                     "sum(rate(err[{{.window}}])) / sum(rate(all[{{ .window }}]))", "sum(rate(all[{{.window}}]))",
                     True, origin="slo.yaml:7")
BACKLOG = SLObjective("jobs-backlog", "backlog", "<=", 10.0, "sum(queue_depth)", origin="slo.yaml:12")


class FakeProm:
    """query_range over functions of time: {promql: f(t) -> value}; records every query it was asked."""

    def __init__(self, answers):
        self.answers = answers
        self.asked: list[tuple[str, float, float, float]] = []
        self.down = False

    def range(self, promql, start, end, step):
        self.asked.append((promql, start, end, step))
        if self.down:
            raise ConnectionError("connection refused")
        f = self.answers[promql]
        n = int(round((end - start) / step))
        return [{"metric": {}, "values": [(start + i * step, str(f(start + i * step))) for i in range(n + 1)]}]


class SLOEnv:
    """An environment whose only SLIs are an SLOSource's, with no load cycles (like local + --slo)."""

    def __init__(self, clock, source, objectives, start):
        self.clock, self.source, self.objectives, self.start = clock, source, objectives, start

    def sli(self, query, window, *, labels=None, step=None):
        if self.source.answers(query, labels):
            return self.source.sli(query, window, labels=labels, step=step)
        return []

    def describe(self):
        return EnvironmentDescription("slo-test", (), cycle_s=None, extra={
            DESCRIBE_KEY: [o.to_dict() for o in self.objectives], "incident_start_s": self.start})

    def run(self, command):
        raise NotImplementedError

    def restart(self, target):
        raise NotImplementedError


def test_render_replaces_sloths_window_template_only():
    assert render(ERRORS.query, 60) == "sum(rate(err[60s])) / sum(rate(all[60s]))"
    assert render("x[{{.window}}]", 0.5) == "x[500ms]"


def test_samples_are_whole_aligned_windows_with_their_event_counts():
    clock = ManualClock(1000.7)
    prom = FakeProm({"sum(rate(err[10s])) / sum(rate(all[10s]))": lambda t: 0.02,
                     "sum(rate(all[10s]))": lambda t: 5.0})
    src = SLOSource([ERRORS], prom, clock, window_s=10)
    got = src.sli("error_ratio", 35, labels={"slo": "api-availability"})
    # Windows (960, 970], ..., (990, 1000]: only whole windows inside the last 35 s, ending at multiples of 10 s.
    assert [(s.t_start, s.t_end) for s in got] == [(970.0, 980.0), (980.0, 990.0), (990.0, 1000.0)]
    assert {s.value for s in got} == {0.02}
    assert {s.count for s in got} == {50}  # a rate() total times the window: events, for min_count and pooling
    assert {s.labels["slo"] for s in got} == {"api-availability"}
    assert not src.answers("error_ratio", {"slo": "other"})
    with pytest.raises(KeyError):
        src.sli("error_ratio", 35, labels={"slo": "other"})


def test_an_slo_whose_query_returns_several_series_is_an_error_naming_it():
    clock = ManualClock(100)
    prom = FakeProm({"sum(queue_depth)": lambda t: 1})
    prom.range = lambda *a: [{"metric": {"q": "a"}, "values": []}, {"metric": {"q": "b"}, "values": []}]
    with pytest.raises(ValueError, match=r"jobs-backlog \(slo.yaml:12\).*2 series"):
        SLOSource([BACKLOG], prom, clock, window_s=10).sli("backlog", 50, labels={"slo": "jobs-backlog"})


def _world(fixed_at: float, bad: float = 0.3):
    """Errors at `bad` until `fixed_at`, then 0.1%; a backlog that drains 5 items/s from 100 after the fix."""
    return {
        "sum(rate(err[10s])) / sum(rate(all[10s]))": lambda t: bad if t <= fixed_at else 0.001,
        "sum(rate(all[10s]))": lambda t: 20.0,
        "sum(queue_depth)": lambda t: 100.0 if t <= fixed_at else max(0.0, 100.0 - 5.0 * (t - fixed_at)),
    }


# What an SLO file with `convergence: {window_s: 10, consecutive: 3, max_wait_windows: 12}` sets (SLOSet.criteria).
CRIT = {"convergence": {"window_s": 10, "consecutive_cycles": 3, "max_wait_cycles": 12, "baseline_window_s": 3600,
                        "baseline_min_segments": 1}}


def _declare(world, t0=10_000.0, criteria=CRIT):
    clock = ManualClock(t0)
    prom = FakeProm(world)
    env = SLOEnv(clock, SLOSource([ERRORS, BACKLOG], prom, clock, window_s=10), [ERRORS, BACKLOG], start=t0 - 5)
    journal = FakeJournal(clock)
    journal.append("command", command="kubectl rollout restart deploy/api", ran=True,
                   actions=[{"tool": "kubectl", "verb": "rollout", "mutating": True, "keys": []}])
    journal.append("result", ref=1, exit_code=0)
    heard = []
    with reporting_to(heard.append):
        v = ConvergenceCheck({}).check(env, journal, criteria)
    return v, clock, heard, prom


def test_a_premature_declaration_is_held_until_the_slos_hold_for_the_windows():
    fixed_at = 10_000.0 + 25
    v, clock, heard, prom = _declare(_world(fixed_at))
    assert v.status is VerdictStatus.PASS, v.message
    # Accepted only once three whole windows after the recovery were in band: the backlog is under its ceiling
    # from fixed_at + 18 s, so the third good window ends at or after the window ending at fixed_at + 45 s.
    assert clock.now() >= fixed_at + 45
    assert "windows of 10 s" in v.message
    assert v.evidence["consecutive_ok"] == 3
    assert [s["name"] for s in v.evidence["slos"]] == ["api-availability", "jobs-backlog"]
    assert v.evidence["slos"][0]["promql"] == "sum(rate(err[10s])) / sum(rate(all[10s]))"
    # The baseline: where each SLO stood over the hour before the session (query_range from start - 3600 s).
    assert v.evidence["baseline"]["slos"]["api-availability"] == pytest.approx(0.3)
    assert min(a[1] for a in prom.asked) == 10_000.0 - 5 - 3600 + 5 + 10  # the first whole window of the hour
    # Progress while it was held: windows in band so far, of how many, and how long it has waited.
    conv = [p for p in heard if p.stage == "convergence" and p.total == 3]
    assert len(conv) >= 3 and conv[0].done == 0 and conv[-1].done == 3
    assert [p.waited_s for p in conv] == sorted(p.waited_s for p in conv)


def test_a_breached_slo_stays_not_converged_with_the_query_samples_and_window():
    v, clock, heard, _ = _declare(_world(fixed_at=float("inf")))
    assert v.status is VerdictStatus.FAIL and v.code is FeedbackCode.NOT_CONVERGED
    assert "error_ratio{slo=api-availability}" in v.message and "windows of 10 s" in v.message
    failing = {f["sli"] for f in v.evidence["failing"]}
    assert "error_ratio{slo=api-availability}" in failing
    samples = v.evidence["samples"]["error_ratio{slo=api-availability}"]
    assert samples and all(s[1] - s[0] == 10 and s[2] == 0.3 for s in samples)
    assert v.evidence["cycle_s"] == 10


def test_prometheus_down_is_an_error_verdict_with_the_reason():
    clock = ManualClock(5000.0)
    prom = FakeProm(_world(0))
    prom.down = True
    env = SLOEnv(clock, SLOSource([ERRORS], prom, clock, window_s=10), [ERRORS], start=4990.0)
    v = ConvergenceCheck({}).check(env, FakeJournal(clock), CRIT)
    assert v.status is VerdictStatus.ERROR
    assert "connection refused" in v.message and "failed 3 times in a row" in v.message


def test_an_environment_without_an_sli_source_is_answered_at_once_with_what_to_configure():
    clock = ManualClock(0.0)

    class Bare(SLOEnv):
        def describe(self):
            return EnvironmentDescription("local", (), observes_slis=False)

    v = ConvergenceCheck({}).check(Bare(clock, None, [], 0.0), FakeJournal(clock), None)
    assert v.status is VerdictStatus.INCONCLUSIVE and v.code is FeedbackCode.NO_SLI_SOURCE
    assert "--prometheus URL --slo FILE" in v.message
    assert clock.sleeps == []  # no wait at all


def test_an_slo_with_no_data_is_not_accepted_as_converged():
    # Nobody reaches the service: 0/0 is no error ratio at all, and a gauge at zero proves nothing about it.
    world = {**_world(fixed_at=0.0), "sum(rate(err[10s])) / sum(rate(all[10s]))": lambda t: float("nan"),
             "sum(rate(all[10s]))": lambda t: 0.0}
    v, _, _, _ = _declare(world)
    assert v.status is VerdictStatus.INCONCLUSIVE and v.code is FeedbackCode.NOT_CONVERGED
    assert v.evidence["no_data"] == ["error_ratio{slo=api-availability}"]
    assert "error_ratio{slo=api-availability}" in v.message and "returns data" in v.message
