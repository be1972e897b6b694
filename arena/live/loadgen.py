"""The live stack's load generator: open-loop, seeded, with peak/trough cycles, Prometheus metrics and a ledger.

Run by the supervisor as `python -m arena.live.loadgen` (APP_CONFIG names a `LoadgenConfig` YAML). Arrivals
are a seeded Poisson process per driver at the current phase's rate, sent whether or not earlier requests have
answered (open loop); an arrival finding `max_inflight` requests outstanding is dropped and recorded as such.
Each driver is a short HTTP sequence with a readback (write then read), so a request can be ok but not correct.
A `rotation` is one arrival stream instead, at the phase's rate, whose arrival `seq` goes to driver
rotation[seq % len] (Incident-Arena's runner; frappe_jobs: desk_work, desk_work, rq_enqueue, rq_complete). The
Frappe report drivers share the generator's `ReportLedger`: `prepared_report` records each report it created,
`report_status` claims the oldest one at least `budget_s` old (none: an error with no request) and reads whether
it is Completed; before the soak an unfinished report goes back to the ledger, `POST /begin_soak` gives the soak a
fresh one, and `POST /hold` stops arrivals until then (the harness's pre-soak phase).

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
import collections
import functools
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
            # A time within a nanosecond of a boundary belongs to the next segment, so that the span returned always
            # ends after `t` (a segment's computed end fed back in must not return the same segment: the arrival
            # loops advance by span ends, and durations like 3.333 + 6.667 leave float residue).
            if t < peak_s - 1e-9:
                return PhaseSpan("peak", n, start, start + peak_s, peak_rps)
            if t < peak_s + trough_s - 1e-9:
                return PhaseSpan("trough", n, start + peak_s, start + peak_s + trough_s, trough_rps)
            t -= peak_s + trough_s
            start += peak_s + trough_s
        # Float residue at the period's end: the next period's first peak.
        peak_s, peak_rps = self.cycles[0][0], self.cycles[0][1]
        return PhaseSpan("peak", n + 1, start, start + peak_s, peak_rps)

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
    budget_s: float = 15.0  # report_status: claim only reports at least this old (RQ_COMPLETE_BUDGET_S)


class LoadgenConfig(BaseModel):
    """The load generator's whole config file."""

    model_config = ConfigDict(extra="forbid")

    shape: LoadShape = Field(default_factory=LoadShape)
    drivers: list[DriverConfig]
    # Each an arrival stream at the phase's rate whose seq % len picks the driver by name; a driver in a rotation
    # has no stream of its own (its rate_scale is unused).
    rotations: list[list[str]] = Field(default_factory=list)
    ledger_path: str
    max_inflight: int = 200

    @field_validator("rotations")
    @classmethod
    def _rotations(cls, v: list[list[str]], info) -> list[list[str]]:
        names = {d.name for d in info.data.get("drivers", [])}
        for r in v:
            if not r or set(r) - names:
                raise ValueError(f"rotation {r} names drivers the config does not define: {sorted(set(r) - names)}")
        return v


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


_DESK_READS = ("/api/method/frappe.auth.get_logged_user", "/api/resource/DocType?limit_page_length=50",
               "/api/resource/ToDo?limit=20")
_MAKE_REPORT = "/api/method/frappe.core.doctype.prepared_report.prepared_report.make_prepared_report"


async def _desk_work(http: AsyncHttp, d: DriverConfig, rng: random.Random) -> tuple[bool, bool, str]:
    """desk_work: one of three Desk reads; correct = HTTP 200 (SW loadgen_frappe/drivers.py DeskWorkDriver)."""
    r = await http.get(f"{d.url}{_DESK_READS[rng.randrange(3)]}")
    return r.status == 200, r.status == 200, f"read {r.status}"


class ReportLedger:
    """The Prepared Reports `prepared_report` created, oldest first, that `report_status` claims (the real
    `PreparedReportLedger`): pre-soak claims of an unfinished report go back to the tail; the soak's is fresh."""

    def __init__(self) -> None:
        self.q: collections.deque[tuple[str, float]] = collections.deque()
        self.phase = "pre_soak"

    def claim(self, now: float, budget_s: float) -> tuple[str, float] | None:
        if self.q and now - self.q[0][1] >= budget_s:
            return self.q.popleft()
        return None

    def resolve(self, entry: tuple[str, float], completed: bool) -> None:
        if not completed and self.phase == "pre_soak":
            self.q.append(entry)

    def begin_soak(self) -> None:
        self.phase = "soak"
        self.q.clear()


async def _prepared_report(http: AsyncHttp, d: DriverConfig, rng: random.Random, *, ledger: ReportLedger,
                           now: Callable[[], float]) -> tuple[bool, bool, str]:
    """rq_enqueue: make_prepared_report (the report's INSERT, then its job on the queue); correct = a name."""
    r = await http.post(f"{d.url}{_MAKE_REPORT}", {"report_name": "Database Storage Usage By Tables"})
    if r.status != 200:
        return False, False, f"report {r.status} {(r.body or {}).get('code', '') or (r.body or {}).get('reason', '')}"
    name = (r.body or {}).get("message", {}).get("name")
    if name:
        ledger.q.append((str(name), now()))
    return True, bool(name), f"report {name}"


async def _report_status(http: AsyncHttp, d: DriverConfig, rng: random.Random, *, ledger: ReportLedger,
                         now: Callable[[], float]) -> tuple[bool, bool, str]:
    """rq_complete: the oldest report at least budget_s old; none is an error with no request behind it."""
    entry = ledger.claim(now(), d.budget_s)
    if entry is None:
        return False, False, "no report old enough"
    completed = False
    try:
        r = await http.get(f"{d.url}/api/method/frappe.client.get_value?doctype=Prepared%20Report&name={entry[0]}")
        status = (r.body or {}).get("message", {}).get("status") if r.status == 200 else None
        completed = status == "Completed"
        return r.status == 200, completed, f"status {r.status} {status}"
    finally:
        ledger.resolve(entry, completed)


# The kinds that need the generator's report ledger (bound per generator).
LEDGER_KINDS = {"prepared_report": _prepared_report, "report_status": _report_status}

DRIVER_KINDS: dict[str, DriverFn] = {
    "desk_work": _desk_work,
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
            if d.kind not in DRIVER_KINDS and d.kind not in LEDGER_KINDS:
                raise ValueError(f"unknown driver kind {d.kind!r}; known: {sorted({**DRIVER_KINDS, **LEDGER_KINDS})}")
        self.reports = ReportLedger()
        self.kinds: dict[str, DriverFn] = {**DRIVER_KINDS, **{
            k: functools.partial(fn, ledger=self.reports, now=self.now) for k, fn in LEDGER_KINDS.items()}}
        self.held = False
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
                ok, correct, detail = await asyncio.wait_for(self.kinds[d.kind](http, d, rng), d.timeout_s)
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
        # One arrival heap across streams: (time, stream index). Each driver outside a rotation is a stream of its
        # own, Poisson at its rate; each rotation is one stream at the phase's rate, its seq picking the driver.
        by_name = {d.name: d for d in self.config.drivers}
        rotated = {n for r in self.config.rotations for n in r}
        streams: list[list[DriverConfig]] = [[d] for d in self.config.drivers if d.name not in rotated]
        streams += [[by_name[n] for n in r] for r in self.config.rotations]
        seqs = [0] * len(streams)
        heap = [(self._next_arrival(self.now(), s), i) for i, s in enumerate(streams)]
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
                heapq.heapreplace(heap, (self._next_arrival(t, streams[i]), i))
                if self.held:
                    continue  # the harness's pre-soak phase: the runner sends nothing
                d = streams[i][seqs[i] % len(streams[i])]
                seqs[i] += 1
                task = asyncio.create_task(self._one(http, d, t, self.shape.span_at(t), self.rng.getrandbits(64)))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await http.aclose()
            self._ledger.close()

    def _next_arrival(self, t: float, stream: list[DriverConfig]) -> float:
        """The next arrival after `t`; a zero-rate phase skips to the next segment."""
        scale = stream[0].rate_scale if len(stream) == 1 else 1.0
        while True:
            span = self.shape.span_at(t)
            rate = span.rps * scale
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
        "cycle_s": gen.shape.cycle_s, "t0": gen.t0, "held": gen.held, "ledger": gen.reports.phase}))

    def hold(_r):
        gen.held = True
        return 200, {"held": True}

    def begin_soak(_r):
        gen.held = False
        gen.reports.begin_soak()
        return 200, {"held": False, "ledger": gen.reports.phase}

    app.route("POST", r"/hold", hold)
    app.route("POST", r"/begin_soak", begin_soak)
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_until_complete, args=(gen.run(),), daemon=True).start()
    try:
        app.serve()
    finally:
        loop.call_soon_threadsafe(gen.stop.set)


if __name__ == "__main__":
    main()
