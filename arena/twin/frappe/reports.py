"""The load generator's Prepared Report ledger on the Frappe twin: what `rq_complete` polls, in aggregate.

Used by `arena.twin.frappe.substrate.FrappeSubstrate.serve`: `rq_enqueue` appends the reports it created (each a
row in `tabPrepared Report` whose generation job went onto the broker's `long` queue at a known position), the
worker reports which queue positions it ran and how many of those jobs completed, and each `rq_complete` arrival
claims the oldest report at least `budget_s` old and reads its status. As Incident-Arena's `PreparedReportLedger`
and `RQCompleteDriver` (SW substrates/frappe/loadgen_frappe/drivers.py):

- an arrival that finds no report old enough is an error with no request behind it (the "cannot prove
  completion" sentinel: the first `budget_s` of a fresh ledger, a peak's onset, or enqueue itself broken);
- a claimed report whose status reads Completed is correct; any other status is an answer (ok) but not correct;
- before the soak a report not yet Completed goes back to the ledger's tail (accepted work stays to be
  verified); `begin_soak` switches to a fresh ledger, so the soak's polls see only reports created in it, and
  from then on a claimed report is resolved either way.

Reports are fluid cohorts (creation time, count, queue positions [lo, hi)); a report completes when the worker has
taken its position and its job succeeded. A position the worker never takes (a flushed queue) stays Queued.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass

__all__ = ["PollResult", "ReportLedger"]


@dataclass
class _Cohort:
    ts: float  # when the reports were created (the ledger's age clock)
    n: float
    lo: float  # broker queue positions of their jobs
    hi: float
    seen: float = 0.0  # the share of [lo, hi) already known completed when this cohort was last requeued


@dataclass(frozen=True)
class PollResult:
    """What a batch of `rq_complete` arrivals found."""

    demand: float
    empty: float  # no eligible report: the sentinel error
    completed: float  # status Completed
    pending: float  # status Queued, Started or Error: an answer, not a completion


class ReportLedger:
    """Reports created by `rq_enqueue`, in creation order, shared with `rq_complete`."""

    def __init__(self, budget_s: float):
        self.budget_s = float(budget_s)
        self.phase = "pre_soak"
        self._q: deque[_Cohort] = deque()
        # Queue positions the worker took, as disjoint sorted runs [lo, hi) with the share whose job completed.
        self._runs_lo: list[float] = []
        self._runs: list[tuple[float, float, float]] = []

    def __len__(self) -> int:
        return len(self._q)

    @property
    def pending(self) -> float:
        return sum(c.n for c in self._q)

    def created(self, ts: float, n: float, lo: float, hi: float) -> None:
        if n > 1e-9:
            self._q.append(_Cohort(ts, n, lo, hi))

    def ran(self, lo: float, hi: float, ok_share: float) -> None:
        """The worker took positions [lo, hi); `ok_share` of those jobs completed (the rest failed)."""
        if hi - lo <= 1e-9:
            return
        if self._runs and abs(self._runs[-1][1] - lo) < 1e-9 and abs(self._runs[-1][2] - ok_share) < 1e-9:
            plo, _, ok = self._runs[-1]
            self._runs[-1] = (plo, hi, ok)
            return
        i = bisect.bisect_left(self._runs_lo, lo)
        self._runs_lo.insert(i, lo)
        self._runs.insert(i, (lo, hi, ok_share))

    def _completed_share(self, lo: float, hi: float) -> float:
        width = hi - lo
        if width <= 1e-12:
            return 0.0
        done = 0.0
        i = max(0, bisect.bisect_right(self._runs_lo, lo) - 1)
        while i < len(self._runs) and self._runs[i][0] < hi:
            rlo, rhi, ok = self._runs[i]
            done += max(0.0, min(hi, rhi) - max(lo, rlo)) * ok
            i += 1
        return min(1.0, done / width)

    def poll(self, t: float, demand: float) -> PollResult:
        """`demand` arrivals at time t each claim the oldest report at least budget_s old."""
        want, completed, pending = demand, 0.0, 0.0
        requeue: list[_Cohort] = []
        while want > 1e-12 and self._q and t - self._q[0].ts >= self.budget_s - 1e-9:
            c = self._q[0]
            k = min(want, c.n)
            share = self._completed_share(c.lo, c.hi)
            fresh = max(0.0, (share - c.seen) / (1.0 - c.seen)) if c.seen < 1.0 else 1.0
            completed += k * fresh
            pending += k * (1.0 - fresh)
            if self.phase == "pre_soak" and k * (1.0 - fresh) > 1e-9:
                requeue.append(_Cohort(c.ts, k * (1.0 - fresh), c.lo, c.hi, share))
            c.n -= k
            want -= k
            if c.n <= 1e-9:
                self._q.popleft()
        # Requeued reports go to the tail; they keep their age, so they are claimable at the next poll.
        self._q.extend(requeue)
        return PollResult(demand, max(0.0, want), completed, pending)

    def begin_soak(self) -> None:
        """The harness's `begin_soak` / `begin_failed_soak`: the soak's polls claim only reports created in it."""
        self.phase = "soak"
        self._q.clear()

    def next_eligible(self) -> float:
        """When the oldest unclaimed report turns budget_s old (inf if none)."""
        return self._q[0].ts + self.budget_s if self._q else math.inf
