"""The slack-spine maintenance controller sidecar (`db-maintenance:8081`): scheduled dirty-write + CHECKPOINT runs.

Built by `arena.twin.slack.substrate.SlackSpine` when a scenario's `twin.spec.maintenance` is set (tasks 008,
016, 017). The schedule {enabled, period_s, offset_s, duration_s} is seeded from Helm
(`maintenanceController.offsetS`...) and kept durably in a PostgreSQL row, which the controller re-reads at
start; `PUT /v1/maintenance` writes that row, so a schedule change is durable. While a run is active, PostgreSQL
is busy flushing dirty pages: every message write pays `stall_ms` more while holding its pooled connection.
Runs start at epoch + offset + k * period (the epoch is episode time 0, the load generator's bring-up).
Its truth carries what the database_checkpoint challenge reads: checkpoints_req, the seconds since a run last
completed (a disabled schedule lets it grow), whether a run is active, and the schedule itself.
"""

from __future__ import annotations

import json
import math
from typing import Any

from arena.twin.world import Component

__all__ = ["MaintenanceController", "SCHEDULE_KEYS"]

SCHEDULE_KEYS = ("enabled", "period_s", "offset_s", "duration_s")


class MaintenanceController(Component):
    """db-maintenance:8081, the checkpoint scheduler."""

    def __init__(self, stall_ms: float):
        super().__init__("db-maintenance", image="ghcr.io/abundant-ai/sre-world/slack-py@sha256:"
                         "0d9c8b7a6f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4",
                         boot_s=15.0, hosts=("db-maintenance", "db-maintenance:8081"))
        self.stall = float(stall_ms)
        self.epoch = 0.0
        self.runs_completed = 0
        self.checkpoints_req = 0
        self.last_completed_at = -math.inf
        self._counted_until = -math.inf

    @property
    def row(self):
        assert self.world is not None
        return self.world.stores["postgres-row/maintenance_schedule"]

    def schedule(self) -> dict[str, Any]:
        return {k: self.row.get(k) for k in SCHEDULE_KEYS}

    def load_declared(self) -> None:
        for k, v in self.schedule().items():
            self.settings.declare(f"schedule.{k}", v)

    def _window(self, now: float) -> tuple[float, float] | None:
        """The run window [start, end) that contains `now` or comes next."""
        s = self.schedule()
        if not s["enabled"] or s["period_s"] <= 0:
            return None
        period, off, dur = float(s["period_s"]), float(s["offset_s"]), float(s["duration_s"])
        k = math.floor((now - self.epoch - off) / period)
        start = self.epoch + off + k * period
        if now >= start + dur - 1e-9:
            start += period
        return start, start + dur

    def active(self, now: float) -> bool:
        w = self._window(now)
        return w is not None and w[0] - 1e-9 <= now < w[1] - 1e-9 and self.ready(now)

    def stall_ms(self, now: float) -> float:
        return self.stall if self.active(now) else 0.0

    def next_change(self, now: float) -> float:
        t = super().next_change(now)
        w = self._window(now)
        if w is None:
            return t
        nxt = w[0] if w[0] > now + 1e-9 else w[1]
        return min(t, nxt)

    def advance(self, t0: float, t1: float) -> None:
        # Count each run once, when it completes inside the simulated span.
        w = self._window(t0)
        while w is not None and w[1] <= t1 + 1e-9:
            if w[1] > self._counted_until + 1e-9 and w[1] > t0 - 1e-9:
                self.runs_completed += 1
                self.checkpoints_req += 1
                self.last_completed_at = w[1]
                self._counted_until = w[1]
            w = self._window(w[1] + 1e-6)

    def on_event(self, event, active: bool, now: float) -> None:
        # The load generator's `maintenance_epoch` event anchors the schedule at bring-up (episode time 0 in the
        # maintenance_collision profiles): runs fall at epoch + offset + k * period from then on.
        if event.kind == "maintenance_epoch" and active:
            self.epoch = float(event.params.get("epoch_s", now))
            self.say(now, f"INFO maintenance epoch anchored at {self.epoch:g}s")

    def truth(self) -> dict[str, Any]:
        out = super().truth()
        for k, v in self.schedule().items():
            out[f"schedule.{k}"] = v
        out["counters.runs_completed"] = self.runs_completed
        out["counters.checkpoints_req"] = self.checkpoints_req
        # The database_checkpoint challenge polls until checkpoints_req moves: how long since a run last completed
        # (a disabled or stalled schedule makes this grow without bound), and whether a run is in progress.
        assert self.world is not None
        now = self.world.clock.now()
        out["counters.s_since_checkpoint"] = round(now - self.last_completed_at, 6) \
            if self.last_completed_at > -math.inf else math.inf
        out["active"] = self.active(now)
        return out

    def config(self) -> dict[str, Any]:
        return {f"schedule.{k}": v for k, v in self.schedule().items()}

    def http(self, method: str, path: str, body: str, now: float) -> tuple[int, str]:
        path = path.split("?", 1)[0].rstrip("/")
        if path == "/healthz" and method == "GET":
            return 200, json.dumps({"status": "ok"})
        if path != "/v1/maintenance":
            return 404, json.dumps({"detail": "Not Found"})
        if method == "GET":
            return 200, json.dumps({"schedule": self.schedule(), "epoch": self.epoch,
                                    "runs": {"completed": self.runs_completed, "failed": 0},
                                    "counters": {"checkpoints_req": self.checkpoints_req},
                                    "active": self.active(now), "now_s": round(now - self.epoch, 3)},
                                   sort_keys=True)
        if method != "PUT":
            return 405, json.dumps({"detail": "Method Not Allowed"})
        try:
            doc = json.loads(body or "")
        except ValueError:
            return 400, json.dumps({"detail": "invalid JSON body"})
        sched = doc.get("schedule", doc) if isinstance(doc, dict) else None
        if not isinstance(sched, dict) or set(sched) != set(SCHEDULE_KEYS):
            return 422, json.dumps({"detail": f"a complete schedule is required: {', '.join(SCHEDULE_KEYS)}"})
        try:
            enabled = bool(sched["enabled"])
            period, off, dur = float(sched["period_s"]), float(sched["offset_s"]), float(sched["duration_s"])
        except (TypeError, ValueError):
            return 422, json.dumps({"detail": "period_s, offset_s and duration_s must be numbers"})
        if not (0 < dur < period and 0 <= off < period):
            return 422, json.dumps({"detail": "need 0 < duration_s < period_s and 0 <= offset_s < period_s"})
        for k, v in (("enabled", enabled), ("period_s", period), ("offset_s", off), ("duration_s", dur)):
            self.row.set(k, v)
            self.settings.declare(f"schedule.{k}", v)
        self.say(now, f"INFO schedule updated {json.dumps(self.schedule(), sort_keys=True)}")
        return 200, json.dumps({"schedule": self.schedule(), "epoch": self.epoch}, sort_keys=True)
