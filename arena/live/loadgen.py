"""The live stack's load generator: open-loop, seeded, with peak/trough cycles, Prometheus metrics and a ledger.

Run by the supervisor as `python -m arena.live.loadgen` (APP_CONFIG names a `LoadgenConfig` YAML). Arrivals
are a seeded Poisson process per driver at the current phase's rate, sent whether or not earlier requests have
answered (open loop); an arrival finding `max_inflight` requests outstanding is dropped and recorded as such.
Each driver is a short HTTP sequence with a readback (write then read), so a request can be ok but not correct.

Every finished arrival is appended to the ledger (JSONL, like Incident-Arena's loadgen.jsonl: phase `c3.peak`,
sent_s, latency_ms, ok, correct, timeout, dropped, driver), which the gates read, and counted in the metrics
Prometheus scrapes, which the guard reads:

  loadgen_requests_total{driver,phase,outcome}   outcome: ok | incorrect | error | timeout | dropped
  loadgen_request_duration_seconds{driver,phase} histogram of completed requests (ok or not)
  loadgen_phase{phase}                           1 for the current phase (warmup | peak | trough), else 0
  loadgen_conn_errors_total{driver}              connection refused / reset and 503 pool_timeout answers
  loadgen_cycle                                  the current cycle number (0 during warmup)
  loadgen_cycles_total                           cycles completed
  loadgen_inflight                               requests outstanding

The HTTP calls go through `arena.clients.http` (only client modules may import httpx).
"""

from __future__ import annotations

import asyncio
import heapq
import json
import random
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from arena.clients.http import AsyncHttp, HttpConnectError, HttpTimeout

__all__ = ["LoadShape", "DriverConfig", "LoadgenConfig", "PhaseSpan", "DRIVER_KINDS", "LoadGenerator"]

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0,
                     8.0, 12.0)


class LoadShape(BaseModel):
    """Warmup then repeating cycles of [peak_s, peak_rps, trough_s, trough_rps], peak first."""

    model_config = ConfigDict(extra="forbid")

    seed: int = 42
    warmup_s: float = 4.0
    warmup_rps: float = 3.0
    cycles: list[list[float]] = Field(default_factory=lambda: [[4.0, 12.0, 6.0, 3.0]])

    @field_validator("cycles")
    @classmethod
    def _four(cls, v: list[list[float]]) -> list[list[float]]:
        if not v or any(len(c) != 4 or c[0] <= 0 or c[2] <= 0 or c[1] < 0 or c[3] < 0 for c in v):
            raise ValueError("each cycle is [peak_s, peak_rps, trough_s, trough_rps], durations > 0")
        return v

    @property
    def cycle_s(self) -> float:
        """Mean cycle length (all cycles are this long when the list has one entry)."""
        return sum(c[0] + c[2] for c in self.cycles) / len(self.cycles)

    def span_at(self, t: float) -> "PhaseSpan":
        """The phase segment containing `t` seconds after the generator's start."""
        if t < self.warmup_s:
            return PhaseSpan("warmup", 0, 0.0, self.warmup_s, self.warmup_rps)
        t -= self.warmup_s
        start, n = self.warmup_s, 0
        period = sum(c[0] + c[2] for c in self.cycles)
        full = int(t // period)
        start += full * period
        t -= full * period
        n = full * len(self.cycles)
        for peak_s, peak_rps, trough_s, trough_rps in self.cycles:
            n += 1
            if t < peak_s:
                return PhaseSpan("peak", n, start, start + peak_s, peak_rps)
            if t < peak_s + trough_s:
                return PhaseSpan("trough", n, start + peak_s, start + peak_s + trough_s, trough_rps)
            t -= peak_s + trough_s
            start += peak_s + trough_s
        raise AssertionError("unreachable: t fell outside its period")

    def next_peak_start(self, t: float) -> float:
        """The next cycle boundary (a peak's start) at or after `t` seconds after the generator's start."""
        span = self.span_at(t)
        while not (span.phase == "peak" and span.start >= t - 1e-9):
            span = self.span_at(span.end + 1e-6)
        return span.start


@dataclass(frozen=True)
class PhaseSpan:
    """One segment of the load shape: phase, cycle number, [start, end) in generator seconds, and its rate."""

    phase: str
    cycle: int
    start: float
    end: float
    rps: float

    @property
    def label(self) -> str:
        return "warmup" if self.phase == "warmup" else f"c{self.cycle}.{self.phase}"


class DriverConfig(BaseModel):
    """One load driver: its kind (the HTTP sequence), target base URL, share of the rate and timeout."""

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: str
    url: str
    rate_scale: float = 1.0
    timeout_s: float = 5.0
    channels: list[str] = Field(default_factory=lambda: [f"chan-{i}" for i in range(8)])


class LoadgenConfig(BaseModel):
    """The load generator's whole config file."""

    model_config = ConfigDict(extra="forbid")

    shape: LoadShape = Field(default_factory=LoadShape)
    drivers: list[DriverConfig]
    ledger_path: str
    max_inflight: int = 200


# ------------------------------------------------------------------------------------------------ driver kinds
# Each returns (ok, correct, detail): ok = every call answered with the expected status; correct = the readback
# shows what was written.
DriverFn = Callable[[AsyncHttp, DriverConfig, random.Random], Awaitable[tuple[bool, bool, str]]]


async def _browse(http: AsyncHttp, d: DriverConfig, rng: random.Random) -> tuple[bool, bool, str]:
    r = await http.get(f"{d.url}/products?limit=20")
    return r.status == 200, r.status == 200 and isinstance(r.body, list) and len(r.body) > 0, str(r.status)


async def _checkout_readback(http: AsyncHttp, d: DriverConfig, rng: random.Random) -> tuple[bool, bool, str]:
    ref = f"lg-{uuid.UUID(int=rng.getrandbits(128)).hex[:16]}"
    r = await http.post(f"{d.url}/checkout", {"client_ref": ref, "variant_id": rng.randint(1, 100), "qty": 1})
    if r.status != 201:
        return False, False, f"checkout {r.status} {(r.body or {}).get('error', '')}"
    back = await http.get(f"{d.url}/orders/{r.body['order_id']}")
    return back.status == 200, back.status == 200 and back.body.get("client_ref") == ref, f"readback {back.status}"


async def _desk_api(http: AsyncHttp, d: DriverConfig, rng: random.Random) -> tuple[bool, bool, str]:
    if rng.random() < 0.6:
        r = await http.get(f"{d.url}/api/resource/ToDo?limit=20")
        return r.status == 200, r.status == 200 and bool((r.body or {}).get("data")), f"list {r.status}"
    ref = f"lg-{uuid.UUID(int=rng.getrandbits(128)).hex[:16]}"
    r = await http.post(f"{d.url}/api/resource/ToDo", {"client_ref": ref, "description": "load"})
    if r.status != 200:
        return False, False, f"create {r.status} {(r.body or {}).get('code', '')}"
    back = await http.get(f"{d.url}/api/resource/ToDo/{ref}")
    return back.status == 200, back.status == 200, f"readback {back.status}"


async def _rq_enqueue(http: AsyncHttp, d: DriverConfig, rng: random.Random) -> tuple[bool, bool, str]:
    r = await http.post(f"{d.url}/api/method/enqueue", {})
    if r.status == 200:
        # The accepted job's id, so the grader can tell an accepted job lost from an enqueue refused half-way.
        return True, True, f"enqueue 200 job={r.body['message']['job_id']}"
    return False, False, f"enqueue {r.status} {(r.body or {}).get('reason', '')}".strip()


async def _rq_complete(http: AsyncHttp, d: DriverConfig, rng: random.Random) -> tuple[bool, bool, str]:
    r = await http.post(f"{d.url}/api/method/enqueue", {})
    if r.status != 200:
        return False, False, f"enqueue {r.status}"
    job = r.body["message"]["job_id"]
    # Poll the job until a worker finishes it, backing off from 0.1 s to 1 s between polls (a queue that is
    # draining a backlog holds many jobs in flight); the driver's timeout bounds the wait.
    pause = 0.1
    while True:
        s = await http.get(f"{d.url}/api/job/{job}")
        if s.status == 200 and s.body.get("status") == "finished":
            return True, True, f"finished job={job}"
        if s.status not in (200, 503):
            return False, False, f"job {s.status}"
        await asyncio.sleep(pause)
        pause = min(2 * pause, 1.0)


async def _write_readback(http: AsyncHttp, d: DriverConfig, rng: random.Random) -> tuple[bool, bool, str]:
    channel = rng.choice(d.channels)
    cid = f"lg-{uuid.UUID(int=rng.getrandbits(128)).hex[:16]}"
    body = f"load {cid}"
    r = await http.post(f"{d.url}/messages", {"channel_id": channel, "client_msg_id": cid, "body": body})
    if r.status != 201:
        return False, False, f"send {r.status} {(r.body or {}).get('error', '')}"
    seq = r.body["seq"]
    back = await http.get(f"{d.url}/channels/{channel}/messages?after_seq={seq - 1}&limit=1")
    msgs = (back.body or {}).get("messages", []) if back.status == 200 else []
    correct = len(msgs) == 1 and msgs[0]["client_msg_id"] == cid and msgs[0]["body"] == body
    return back.status == 200, correct, f"readback {back.status}"


DRIVER_KINDS: dict[str, DriverFn] = {
    "browse": _browse,
    "checkout_readback": _checkout_readback,
    "desk_api": _desk_api,
    "rq_enqueue": _rq_enqueue,
    "rq_complete": _rq_complete,
    "write_readback": _write_readback,
}


# ------------------------------------------------------------------------------------------------- the generator
class LoadGenerator:
    """Schedules arrivals, runs drivers, counts outcomes and writes the ledger."""

    def __init__(self, config: LoadgenConfig, registry, *, t0: float | None = None):
        # Imported here so that the config models above load without the `live` extra installed.
        from prometheus_client import Counter, Gauge, Histogram

        for d in config.drivers:
            if d.kind not in DRIVER_KINDS:
                raise ValueError(f"unknown driver kind {d.kind!r}; known: {sorted(DRIVER_KINDS)}")
        self.config = config
        self.shape = config.shape
        self.t0 = t0 if t0 is not None else time.time()
        self.rng = random.Random(self.shape.seed)
        self.requests = Counter("loadgen_requests_total", "arrivals by outcome", ["driver", "phase", "outcome"],
                                registry=registry)
        self.latency = Histogram("loadgen_request_duration_seconds", "latency of completed requests",
                                 ["driver", "phase"], buckets=LATENCY_BUCKETS_S, registry=registry)
        self.phase_gauge = Gauge("loadgen_phase", "1 for the current load phase", ["phase"], registry=registry)
        self.cycle_gauge = Gauge("loadgen_cycle", "current load cycle (0 in warmup)", registry=registry)
        self.cycles_done = Counter("loadgen_cycles_total", "load cycles completed", registry=registry)
        self.conn_errors = Counter("loadgen_conn_errors_total", "connection errors and pool timeouts", ["driver"],
                                   registry=registry)
        self.inflight_gauge = Gauge("loadgen_inflight", "requests outstanding", registry=registry)
        # Series exist from the first scrape, so that increase() sees every count from zero.
        for d in config.drivers:
            self.conn_errors.labels(d.name)
            for phase in ("warmup", "peak", "trough"):
                self.latency.labels(d.name, phase)
                for outcome in ("ok", "incorrect", "error", "timeout", "dropped"):
                    self.requests.labels(d.name, phase, outcome)
        for phase in ("warmup", "peak", "trough"):
            self.phase_gauge.labels(phase).set(0)
        self.inflight = 0
        self.stop = asyncio.Event()
        self._ledger = open(config.ledger_path, "a", buffering=1)
        self._cycles_done_n = 0

    def now(self) -> float:
        return time.time() - self.t0

    def _mark_phase(self, span: PhaseSpan) -> None:
        for phase in ("warmup", "peak", "trough"):
            self.phase_gauge.labels(phase).set(1 if phase == span.phase else 0)
        self.cycle_gauge.set(span.cycle)
        done = max(span.cycle - 1, 0)  # in cycle n, cycles 1..n-1 are complete
        if done > self._cycles_done_n:
            self.cycles_done.inc(done - self._cycles_done_n)
            self._cycles_done_n = done

    async def _one(self, http: AsyncHttp, d: DriverConfig, sent: float, span: PhaseSpan, seed: int) -> None:
        rng = random.Random(seed)
        rec = {"t": self.t0 + sent, "sent_s": round(sent, 4), "phase": span.label, "driver": d.name,
               "latency_ms": None, "ok": False, "correct": False, "timeout": False, "dropped": False, "detail": ""}
        if self.inflight >= self.config.max_inflight:
            rec["dropped"] = True
            outcome = "dropped"
        else:
            self.inflight += 1
            self.inflight_gauge.set(self.inflight)
            try:
                ok, correct, detail = await asyncio.wait_for(DRIVER_KINDS[d.kind](http, d, rng), d.timeout_s)
                rec.update(ok=ok, correct=ok and correct, detail=detail)
                outcome = "ok" if ok and correct else "incorrect" if ok else "error"
            except (asyncio.TimeoutError, HttpTimeout):
                rec.update(timeout=True, detail="timeout")
                outcome = "timeout"
            except HttpConnectError as e:
                rec.update(detail=f"connect: {e}"[:200])
                outcome = "error"
            except (KeyError, TypeError, ValueError) as e:  # a malformed reply is a wrong answer, not a crash
                rec.update(detail=f"bad reply: {type(e).__name__}: {e}"[:200])
                outcome = "error"
            finally:
                self.inflight -= 1
                self.inflight_gauge.set(self.inflight)
            if not rec["timeout"]:
                rec["latency_ms"] = round((self.now() - sent) * 1000, 2)
                self.latency.labels(d.name, span.phase).observe(rec["latency_ms"] / 1000)
        self.requests.labels(d.name, span.phase, outcome).inc()
        if rec["detail"].startswith("connect:") or "pool_timeout" in rec["detail"]:
            self.conn_errors.labels(d.name).inc()
        self._ledger.write(json.dumps(rec) + "\n")

    async def run(self) -> None:
        http = AsyncHttp(max_connections=self.config.max_inflight + 16)
        tasks: set[asyncio.Task] = set()
        # One arrival heap across drivers: (time, driver index). Each driver's arrivals are Poisson at its rate.
        heap = [(self._next_arrival(self.now(), d), i) for i, d in enumerate(self.config.drivers)]
        heapq.heapify(heap)
        try:
            while not self.stop.is_set():
                span = self.shape.span_at(self.now())
                self._mark_phase(span)
                t, i = heap[0]
                wake = min(t, span.end)
                delay = wake - self.now()
                if delay > 0:
                    try:
                        await asyncio.wait_for(self.stop.wait(), timeout=min(delay, 0.25))
                    except asyncio.TimeoutError:
                        pass
                    continue
                if t > span.end:
                    continue
                heapq.heapreplace(heap, (self._next_arrival(t, self.config.drivers[i]), i))
                d = self.config.drivers[i]
                task = asyncio.create_task(self._one(http, d, t, self.shape.span_at(t), self.rng.getrandbits(64)))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await http.aclose()
            self._ledger.close()

    def _next_arrival(self, t: float, d: DriverConfig) -> float:
        """The next arrival after `t`; a zero-rate phase skips to the next segment."""
        while True:
            span = self.shape.span_at(t)
            rate = span.rps * d.rate_scale
            if rate > 0:
                nxt = t + self.rng.expovariate(rate)
                if nxt < span.end:
                    return nxt
            # Memoryless: redraw from the boundary at the next segment's rate.
            t = span.end


def main() -> None:
    from arena.live.apps.base import AppService, load_config

    app = AppService()
    config = LoadgenConfig.model_validate(load_config())
    gen = LoadGenerator(config, app.registry)
    app.route("GET", r"/status", lambda _r: (200, {
        "t": gen.now(), "phase": gen.shape.span_at(gen.now()).label, "inflight": gen.inflight,
        "cycle_s": gen.shape.cycle_s, "t0": gen.t0}))
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_until_complete, args=(gen.run(),), daemon=True).start()
    try:
        app.serve()
    finally:
        loop.call_soon_threadsafe(gen.stop.set)


if __name__ == "__main__":
    main()
