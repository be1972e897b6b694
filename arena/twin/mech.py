"""Mechanisms shared by every substrate: connection pools, backlogs, memory caps, and request outcome modes.

Substrate models (arena/twin/slack, frappe, saleor) build their request paths from these. They work per segment
in aggregate (a fluid approximation of an M/M/c pool with a pool timeout), not per request, so an hour of load
simulates in milliseconds. A fix works when it changes an input of these formulas: a pool's size, a hold time,
a cap, a drain rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

__all__ = ["Mode", "OK", "ERROR", "TIMEOUT", "WRONG", "DROPPED", "chain", "PoolOffer", "ConnectionPool",
           "Backlog", "MemoryCap", "finish"]

OK, WRONG, ERROR, TIMEOUT, DROPPED = "ok", "wrong", "error", "timeout", "dropped"


@dataclass(frozen=True)
class Mode:
    """A share of a driver's requests that end the same way after the same latency.

    status: ok (and correct), wrong (ok but not correct), error (a non-ok response), timeout, dropped.
    `conn` marks errors that are connection failures (refused, pool timeout) for the conn_errors SLI.
    """

    weight: float
    latency_ms: float
    status: str = OK
    reason: str = ""
    conn: bool = False


def chain(*hops: Sequence[Mode]) -> list[Mode]:
    """A request passes hops in order; it stops at the first hop that does not end ok. Latencies add up."""
    out: list[Mode] = [Mode(1.0, 0.0)]
    for hop in hops:
        nxt: list[Mode] = []
        for m in out:
            if m.status not in (OK, WRONG):
                nxt.append(m)
                continue
            for h in hop:
                if h.weight <= 0:
                    continue
                status = h.status if h.status != OK else m.status
                nxt.append(Mode(m.weight * h.weight, m.latency_ms + h.latency_ms, status,
                                h.reason or m.reason, h.conn))
        out = nxt
    return _merge(out)


def _merge(modes: Iterable[Mode]) -> list[Mode]:
    acc: dict[tuple, list] = {}
    for m in modes:
        k = (round(m.latency_ms, 3), m.status, m.reason, m.conn)
        e = acc.get(k)
        if e is None:
            acc[k] = [m, m.weight, False]
        else:
            e[1] += m.weight
            e[2] = True
    return [Mode(w, m.latency_ms, m.status, m.reason, m.conn) if merged else m for m, w, merged in acc.values()]


def finish(modes: Sequence[Mode], timeout_s: float) -> list[Mode]:
    """Apply the client's timeout: anything slower than it is a timeout at the timeout."""
    lim = timeout_s * 1000.0
    return _merge(Mode(m.weight, lim, TIMEOUT, "client_timeout") if m.latency_ms > lim else m for m in modes)


@dataclass(frozen=True)
class PoolOffer:
    """What a pool does to the requests offered to it over one segment."""

    served: float  # fraction that gets a connection
    wait_ms: float  # mean queueing wait of the served ones
    utilisation: float
    timeout_ms: float  # how long the unserved ones waited before the pool timeout
    # The share of requests that queue at all (Erlang C). 0: every served request waits `wait_ms` (saturated).
    p_wait: float = 0.0

    def modes(self, hold_ms: float, reason: str = "pool_timeout") -> list[Mode]:
        if self.p_wait >= _TAIL_MIN and self.wait_ms > 0:
            # Below saturation the wait of those that queue is exponential (M/M/c), so a pool near full
            # utilisation has a tail (its p90) far above the mean wait.
            cond = self.wait_ms / self.p_wait
            out = [Mode(self.served * (1.0 - self.p_wait), hold_ms)]
            out += [Mode(self.served * self.p_wait * share, hold_ms + min(cond * k, self.timeout_ms))
                    for share, k in _EXP_BANDS]
        else:
            out = [Mode(self.served, self.wait_ms + hold_ms)]
        if self.served < 1.0:
            out.append(Mode(1.0 - self.served, self.timeout_ms, ERROR, reason, conn=True))
        return out


# An exponential wait in three quantile bands (0-50 %, 50-80 %, 80-100 %): each band's share and its conditional
# mean in units of the mean. Only pools where at least _TAIL_MIN of requests queue get the split (few modes).
_EXP_BANDS = ((0.5, 0.3069), (0.3, 1.0826), (0.2, 2.6094))
_TAIL_MIN = 0.01


class ConnectionPool:
    """A client-side DB pool: pool_size + max_overflow connections, a pool timeout, requests queue for a slot.

    Below saturation the wait follows Sakasegawa's M/M/c approximation; above it the pool serves at most
    capacity/hold per second and the rest time out after `pool_timeout_s` (the fluid limit of a full queue).
    """

    def __init__(self, pool_size: int, max_overflow: int, pool_timeout_s: float):
        self.pool_size = int(pool_size)
        self.max_overflow = int(max_overflow)
        self.pool_timeout_s = float(pool_timeout_s)

    @property
    def capacity(self) -> int:
        return max(0, self.pool_size + self.max_overflow)

    def offer(self, rps: float, hold_ms: float) -> PoolOffer:
        c = self.capacity
        tmo = self.pool_timeout_s * 1000.0
        if rps <= 0:
            return PoolOffer(1.0, 0.0, 0.0, tmo)
        if c <= 0:
            return PoolOffer(0.0, 0.0, math.inf, tmo)
        hold_s = max(hold_ms, 0.0) / 1000.0
        rho = rps * hold_s / c
        if rho < 0.97:
            wq = hold_ms * rho ** math.sqrt(2 * (c + 1)) / (c * (1 - rho)) if rho > 0 else 0.0
            if wq < tmo:
                # The tail of the queueing wait beyond the timeout is lost to the pool timeout.
                late = math.exp(-tmo / wq) if wq > 0 else 0.0
                p_wait = rho ** math.sqrt(2 * (c + 1))
                return PoolOffer(1.0 - late * p_wait, wq, rho, tmo, p_wait=p_wait)
        served = min(1.0, c / (rps * hold_s)) if hold_s > 0 else 1.0
        # A saturated queue: the ones that get through waited most of the timeout.
        return PoolOffer(served * 0.98, tmo * 0.85, rho, tmo)


class Backlog:
    """Accepted work not yet done (queued jobs, an outbox): grows with arrivals, drains at a finite rate."""

    def __init__(self, depth: float = 0.0):
        self.depth = float(depth)

    def step(self, arrivals_rps: float, drain_rps: float, dt: float) -> float:
        """Advance dt seconds; returns how many items were completed."""
        before = self.depth + arrivals_rps * dt
        done = min(before, max(drain_rps, 0.0) * dt)
        self.depth = before - done
        return done

    def seconds_to_empty(self, arrivals_rps: float, drain_rps: float) -> float:
        net = drain_rps - arrivals_rps
        if self.depth <= 0:
            return math.inf
        return self.depth / net if net > 0 else math.inf


class MemoryCap:
    """A memory limit with a policy: under noeviction a write that would exceed it fails with OOM."""

    def __init__(self, cap_bytes: int, policy: str = "noeviction", used: int = 0):
        self.cap_bytes = int(cap_bytes)
        self.policy = policy
        self.used = int(used)

    def admit(self, nbytes: int) -> bool:
        """True when a write of nbytes fits (or the policy evicts to make room)."""
        if self.cap_bytes <= 0 or self.used + nbytes <= self.cap_bytes:
            self.used += nbytes
            return True
        if self.policy != "noeviction":
            self.used = min(self.cap_bytes, self.used + nbytes)
            return True
        return False

    def free(self, nbytes: int) -> None:
        self.used = max(0, self.used - int(nbytes))
