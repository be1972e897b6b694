"""RQ on the Frappe twin: the worker-long Deployment and one segment of enqueue, dequeue and job completion.

Called by `arena.twin.frappe.substrate.FrappeSubstrate.serve` once per segment. It works in aggregate: enqueue
attempts arrive at a constant rate, the broker (`arena.twin.frappe.redis.RedisServer`) accepts them while
`used_memory <= maxmemory` (the write that crosses the cap still lands, as in Redis, then every later write gets
OOM), and the worker drains the `long` queue in FIFO order at `replicas / service_s` jobs per second.

Why the queue stalls "at all times" under noeviction: the worker must write (its heartbeat, the job status, the
started registry) before it runs a job. Over the cap every such write fails with OOM, the `bench worker` process
exits, and the kubelet restarts the container with CrashLoopBackOff (10 s, doubling to 5 min, reset by a
successful run). Memory freed by expiring results is taken at once by enqueues, which arrive far more often than
the worker retries, so the worker finds the broker over its cap at almost every retry, and the results it
finished earlier expire and are replaced by queued jobs: the backlog grows to fill the cap. Once the cap is
raised the next retry succeeds and the backlog drains at the finite rate.
An `rq_complete` job's latency is its FIFO wait behind the work ahead of it, plus its own run time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from arena.twin.mech import ERROR, TIMEOUT, Mode
from arena.twin.world import Component

__all__ = ["Worker", "QueueStep", "step_queue"]


class Worker(Component):
    """An RQ worker Deployment (worker-long): replicas, a job run time, and a retry loop under supervisord."""

    kind = "Deployment"
    container = "worker"

    def __init__(self, name: str, *, replicas: int, service_s: float, retry_s: float, queue: str = "long",
                 backoff_max_s: float = 300.0, **kw: Any):
        kw.setdefault("boot_s", 15.0)
        super().__init__(name, **kw)
        self.replicas = int(replicas)
        self.service_s = float(service_s)
        self.retry_s = float(retry_s)
        self.backoff_max_s = float(backoff_max_s)
        self.queue = queue
        self.blocked_until = -math.inf
        self.block_reason = ""
        self.failures = 0
        self.in_a_row = 0
        self.pod_env = {"QUEUE": queue, "REDIS_QUEUE": "redis://redis-queue:6379", "DB_HOST": "mariadb"}

    def reset_runtime(self) -> None:
        self.blocked_until = -math.inf
        self.block_reason = ""
        self.in_a_row = 0

    def ready(self, now: float) -> bool:
        # A container in CrashLoopBackOff is not ready.
        return super().ready(now) and now >= self.blocked_until - 1e-9

    @property
    def rate(self) -> float:
        return self.replicas / self.service_s if self.service_s > 0 else 0.0

    def can_try(self, now: float) -> bool:
        return self.ready(now) and now >= self.blocked_until - 1e-9

    def fail(self, now: float, reason: str) -> None:
        """The RQ loop raised on a broker error: the container exits and restarts after CrashLoopBackOff."""
        self.failures += 1
        self.in_a_row += 1
        self.restarts += 1
        if self.in_a_row <= 3 or self.in_a_row % 10 == 0:
            self.say(now, f"redis.exceptions.ResponseError: {reason}")
            self.say(now, f"Worker rq:worker:{self.name}.{self.failures}: exiting (container restart {self.restarts})")
        self.blocked_until = now + min(self.retry_s * 2 ** (self.in_a_row - 1), self.backoff_max_s)
        self.block_reason = reason

    def recover(self, now: float) -> None:
        if self.block_reason or self.in_a_row:
            self.say(now, f"Worker rq:worker:{self.name}.{self.failures + 1} started with PID 1, version 1.15.1")
            self.say(now, f"*** Listening on {self.queue}...")
            self.block_reason = ""
            self.in_a_row = 0

    def next_change(self, now: float) -> float:
        nc = super().next_change(now)
        return min(nc, self.blocked_until) if self.blocked_until > now else nc

    def truth(self) -> dict[str, Any]:
        out = super().truth()
        out["replicas"] = self.replicas
        out["blocked"] = bool(self.block_reason)
        return out

    def config(self) -> dict[str, Any]:
        return {"replicas": self.replicas}


@dataclass
class QueueStep:
    """What one segment did to the queue, and how the jobs offered in it end."""

    accepted: float  # enqueue attempts the broker took
    refused_reason: str  # why the rest failed ("" if none did)
    processed: float
    failed_jobs: float
    complete_modes: list[Mode]  # for attempts that were accepted: how they finish (ok / timeout / error)


def step_queue(broker: Any, worker: Worker, attempts_rps: float, t0: float, t1: float, *,
               job_db_block: float, db_error_reason: str, deadline_s: float) -> QueueStep:
    """Advance the broker's `long` queue over [t0, t1) and say how this segment's enqueued jobs will end."""
    jobs = broker.jobs
    dt = t1 - t0
    jobs.expire(t0)
    demand = attempts_rps * dt
    # The worker's first writes of the segment happen at its start, before this segment's enqueues land.
    worker_err = None
    if worker.can_try(t0):
        worker_err = broker.write_error(t0, cmd="hset") or broker.write_error(t0, cmd="blpop")
    why = broker.write_error(t0, cmd="rpush")
    if why is None and broker.maxmemory > 0 and broker.policy == "noeviction":
        headroom = broker.maxmemory - broker.used_memory()
        # Each accepted enqueue adds a job hash; the one that crosses the cap still lands.
        room = math.floor(headroom / jobs.job_bytes) + 1 if headroom >= 0 else 0
        accepted = min(demand, float(room))
        open_s = dt if demand <= room or demand <= 0 else dt * (accepted / demand)
        refused = "OOM command not allowed when used memory > 'maxmemory'." if accepted < demand else ""
    elif why is None:
        accepted, open_s, refused = demand, dt, ""
    else:
        accepted, open_s, refused = 0.0, 0.0, why
    if refused and demand > accepted:
        key = {"OOM": "rejected_oom", "NOPERM": "rejected_noperm", "NOREPLICAS": "rejected_noreplicas"}.get(
            refused.split(" ", 1)[0])
        if key:
            broker.stats[key] = broker.stats.get(key, 0) + (demand - accepted)
    broker.stats["total_commands_processed"] = broker.stats.get("total_commands_processed", 0) + 2 * accepted
    q_before = jobs.queued + jobs.orphan_ids
    jobs.enqueue(accepted)
    broker.admit_bytes(accepted * jobs.job_bytes)

    # The worker: it can run while its own writes succeed.
    processed = failed = 0.0
    rate = worker.rate
    working_s = 0.0
    if worker.can_try(t0):
        if worker_err is not None:
            worker.fail(t0, worker_err)
        else:
            worker.recover(t0)
            # After the cap is crossed inside this segment the next status write fails.
            working_s = open_s if broker.over_cap() and broker.policy == "noeviction" else dt
            take = jobs.take(rate * working_s)
            failed = take * job_db_block
            processed = take - failed
            jobs.finish(processed, t1)
            jobs.failed += failed
            if working_s < dt - 1e-9:
                # BLPOP is not refused over the cap, the status write after it is: that job is stranded.
                jobs.strand_head()
                worker.fail(t0 + working_s, "OOM command not allowed when used memory > 'maxmemory'.")
    # Jobs offered in this segment wait behind the queue as it stands when they arrive, and, if the worker is
    # sitting out a back-off, until it is back; it comes back only if the broker will take its writes then.
    modes: list[Mode] = []
    if accepted > 0:
        broker_ok = broker.write_error(t1, cmd="hset") is None and broker.write_error(t1, cmd="blpop") is None
        if working_s >= dt - 1e-9:
            resume_at = t0
        elif not broker_ok:
            resume_at = math.inf
        else:
            resume_at = max(worker.blocked_until, worker.ready_at, t0)
        service_ms = worker.service_s * 1000.0
        deadline_ms = deadline_s * 1000.0
        for k in range(4):
            frac = (k + 0.5) / 4
            arrival = t0 + frac * dt
            ahead = max(0.0, q_before + (accepted - processed) * frac)
            if rate <= 0 or resume_at == math.inf:
                modes.append(Mode(0.25, deadline_ms + 1.0, TIMEOUT, "job_not_started"))
                continue
            done = (max(0.0, resume_at - arrival) + ahead / rate) * 1000.0 + service_ms
            if done > deadline_ms:
                modes.append(Mode(0.25, deadline_ms + 1.0, TIMEOUT, "job_deadline"))
            else:
                modes.append(Mode(0.25 * (1 - job_db_block), done))
                if job_db_block > 0:
                    modes.append(Mode(0.25 * job_db_block, done, ERROR, db_error_reason))
    return QueueStep(accepted, refused, processed, failed, modes)
