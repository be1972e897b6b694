"""The Frappe twin's load-generator report ledger (arena.twin.frappe.reports) and the profile's driver rotation
(arena.twin.load), as Incident-Arena's frappe_jobs drivers define them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from arena.twin.frappe.reports import ReportLedger
from arena.twin.load import LoadProfile

ROTATION = ["desk", "desk", "rq_enqueue", "rq_complete"]


def test_the_rotation_gives_each_driver_its_count_over_the_length():
    p = LoadProfile(drivers=[{"name": n} for n in ("desk", "rq_enqueue", "rq_complete")], rotation=ROTATION)
    assert {d.name: d.rate_scale for d in p.drivers} == {"desk": 0.5, "rq_enqueue": 0.25, "rq_complete": 0.25}
    # A dumped profile (with its derived shares) reads back the same.
    assert LoadProfile.model_validate(p.model_dump()).drivers == p.drivers
    # Without a rotation each driver keeps its own rate_scale.
    assert LoadProfile(drivers=[{"name": "desk", "rate_scale": 0.3}]).drivers[0].rate_scale == 0.3


@pytest.mark.parametrize("drivers,rotation,why", [
    ([{"name": "desk", "rate_scale": 0.3}], ["desk", "desk"], "contradicts the rotation"),
    ([{"name": "desk"}], ["desk", "rq_enqueue"], "does not define"),
    ([{"name": "desk"}, {"name": "rq_complete"}], ["desk"], "not in the rotation"),
    ([{"name": "desk"}], [], "at least one driver"),
])
def test_a_rotation_that_does_not_fit_the_drivers_is_refused(drivers, rotation, why):
    with pytest.raises(ValidationError, match=why):
        LoadProfile(drivers=drivers, rotation=rotation)


def test_a_poll_claims_only_reports_at_least_the_budget_old():
    led = ReportLedger(budget_s=15)
    led.created(100.0, 2.0, 0.0, 2.0)
    led.ran(0.0, 2.0, 1.0)
    early = led.poll(110.0, 2.0)
    assert (early.empty, early.completed) == (2.0, 0.0)  # nothing old enough: the sentinel error
    late = led.poll(116.0, 3.0)
    assert (late.completed, late.pending, late.empty) == (2.0, 0.0, 1.0)


def test_before_the_soak_an_unfinished_report_goes_back_and_is_verified_later():
    led = ReportLedger(budget_s=15)
    led.created(0.0, 4.0, 10.0, 14.0)
    first = led.poll(20.0, 4.0)
    assert (first.completed, first.pending) == (0.0, 4.0)
    assert led.pending == pytest.approx(4.0)  # requeued, not dropped
    led.ran(10.0, 12.0, 1.0)  # the worker got through half of them
    second = led.poll(21.0, 4.0)
    assert second.completed == pytest.approx(2.0) and second.pending == pytest.approx(2.0)
    led.ran(12.0, 14.0, 0.5)  # the rest ran; half of those jobs failed (the report never reads Completed)
    third = led.poll(22.0, 2.0)
    assert third.completed == pytest.approx(1.0) and third.pending == pytest.approx(1.0)


def test_the_soak_starts_a_fresh_ledger_and_resolves_every_claim():
    led = ReportLedger(budget_s=15)
    led.created(0.0, 5.0, 0.0, 5.0)  # never run: a flushed queue's positions stay Queued
    led.begin_soak()
    assert led.poll(100.0, 1.0).empty == 1.0  # the pre-soak backlog is not the soak's
    led.created(100.0, 2.0, 5.0, 7.0)
    got = led.poll(120.0, 2.0)
    assert (got.completed, got.pending) == (0.0, 2.0)
    assert led.pending == 0.0  # in the soak a claimed report is resolved either way
