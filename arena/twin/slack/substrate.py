"""The slack-spine substrate: roles, infrastructure, request paths, and the operator tools that reach them.

Registered as `slack-spine` for `arena.twin.engine.build_twin`. A scenario's `twin.spec` (validated by
`SlackSpec`) overrides the healthy `app.yaml` ConfigMap and the roles' deploy-time env, and maps each load
driver to a request path. Runtime events arrive from the load profile (`admin_event` at t = 40 s...).

Request paths (each hop costs a little network time; DB hops queue on the role's pool):
  send   auth session check (1 Redis op) -> channel authz resolve (channel pool; + ACL_HOLD_MS while
         read_consistency_strict) -> message write (message pool) -> notification fan-out (1 Redis op: the
         unread counters) -> search index -> search readback. So a send pays the store hold twice when both
         auth and notification run store_consistency_strict (task 009).
  login  auth DB lookup (auth pool) + 1 Redis op (+ STORE_HOLD_MS while store_consistency_strict on auth)
  unread notification: 1 Redis op (+ its STORE_HOLD_MS)
  post   send without the search legs (session_post)
A role that is reloading or restarting refuses connections: its hop fails with 503.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field

from arena.twin.load import Phase
from arena.twin.mech import ERROR, ConnectionPool, Mode, chain
from arena.twin.pg.postgres import Backend
from arena.twin.shell import Invocation
from arena.twin.slack.maintenance import MaintenanceController
from arena.twin.slack.infra import PG_DEFAULTS, PgBouncer, SlackPostgres, SlackRedis
from arena.twin.slack.message import MessageRole, SlackDatabase, set_sequencer_mode
from arena.twin.slack.roles import DB_KEYS, HEALTHY_HOLD_MS, ROLE_NAMES, SlackRole
from arena.twin.world import Substrate, register_substrate
from guardrail.errors import ScenarioError

__all__ = ["SlackSpec", "SlackSpine", "ROUTES"]

NET_MS = 1.5
REDIS_MS = 0.8

# route -> [(role, op)]; ops: session (Redis), login (DB + Redis), authz (DB, ACL hold), write/index/read (DB),
# unread (Redis)
ROUTES: dict[str, list[tuple[str, str]]] = {
    "send": [("auth", "session"), ("channel", "authz"), ("message", "write"), ("notification", "fanout"),
             ("search", "index"), ("search", "read")],
    "post": [("auth", "session"), ("channel", "authz"), ("message", "write"), ("notification", "fanout")],
    "login": [("auth", "login")],
    "unread": [("notification", "unread")],
}
_DB_OPS = {"login", "authz", "write", "index", "read"}
_REDIS_OPS = {"session", "login", "unread", "fanout"}
_WRITE_ROUTES = {"send", "post"}


class SlackSpec(BaseModel):
    """A slack-spine scenario's wiring: config overrides, env, routes, data seed."""

    model_config = ConfigDict(extra="forbid")

    # roles.<role>.db.<key> overrides of the healthy app.yaml (e.g. channel: {db: {pool_size: 3}})
    roles: dict[str, dict[str, dict[str, float]]] = Field(default_factory=dict)
    # deploy-time env per role (Helm app.roles.<role>.env): ACL_HOLD_MS, STORE_HOLD_MS, SEQUENCER_MODE...
    env: dict[str, dict[str, str]] = Field(default_factory=dict)
    routes: dict[str, str] = Field(default_factory=lambda: {"write_readback": "send"})
    channels: int = 8
    seed_messages: int = 40
    # The maintenance controller's Helm values: {enabled, period_s, offset_s, duration_s, stall_ms}; None: absent.
    maintenance: dict[str, float] | None = None
    reload_s: float = 12.0  # [INF] a reload rebuilds the engine and re-passes readiness
    pool_timeout_s: float = 2.0  # [INF] healthy app.yaml value
    # The messages and channel_seq tables as real rows (ids, seqs, cursors psql may change) rather than
    # per-channel counts. psql reaches the shared PostgreSQL model (arena/twin/pg) either way.
    postgres_model: bool = False


def healthy_app_yaml(pool_timeout_s: float) -> dict[str, Any]:
    return {"roles": {r: {"db": {"pool_size": 20, "max_overflow": 10, "pool_timeout_s": pool_timeout_s,
                                 "hold_ms": HEALTHY_HOLD_MS[r], "seq_lock_hold_ms": 0}} for r in ROLE_NAMES}}


@register_substrate
class SlackSpine(Substrate):
    """The Slack-like microservice (Incident-Arena tasks 007-019)."""

    name = "slack-spine"

    def build(self) -> None:
        try:
            self.s = SlackSpec.model_validate(self.spec)
        except Exception as e:  # pydantic ValidationError: report as scenario data
            raise ScenarioError(f"twin.spec: {e}") from e
        for d, r in self.s.routes.items():
            if r not in ROUTES:
                raise ScenarioError(f"twin.spec.routes.{d}: unknown route {r!r} (one of {', '.join(ROUTES)})")
        w = self.world
        app = healthy_app_yaml(self.s.pool_timeout_s)
        for role, sect in self.s.roles.items():
            if role not in ROLE_NAMES:
                raise ScenarioError(f"twin.spec.roles: unknown role {role!r}")
            for k, v in (sect.get("db") or {}).items():
                if k not in DB_KEYS:
                    raise ScenarioError(f"twin.spec.roles.{role}.db: unknown key {k!r}")
                app["roles"][role]["db"][k] = DB_KEYS[k](v)
        w.store("configmap/app-config", app, file_key="app.yaml")
        w.store("helm/slack", {"app": {"roles": {r: {"env": dict(self.s.env.get(r, {}))} for r in ROLE_NAMES}}})
        w.store("postgresql.conf", dict(PG_DEFAULTS))
        self.roles: dict[str, SlackRole] = {}
        db = SlackDatabase(self.s.channels, self.s.seed_messages, sequenced=self.s.postgres_model)
        for r in ROLE_NAMES:
            role = (MessageRole(reload_s=self.s.reload_s, db=db, channels=db.channels) if r == "message"
                    else SlackRole(r, reload_s=self.s.reload_s))
            self.roles[r] = w.add(role)  # type: ignore[assignment]
        self.pg: SlackDatabase = w.add(db)  # type: ignore[assignment]
        db.server.pool_activity = self.pool_backends
        self.redis: SlackRedis = w.add(SlackRedis())  # type: ignore[assignment]
        w.add(PgBouncer())
        self.maint: MaintenanceController | None = None
        self._write_rps = 0.0
        self.maint_write_capacity = 50.0
        if self.s.maintenance is not None:
            m = dict(self.s.maintenance)
            stall = float(m.pop("stall_ms", 400.0))  # [INF] dirty-write + CHECKPOINT stall per message write
            # [INF] the write rate at which the checkpoint's I/O stalls each commit fully (the dev peak)
            self.maint_write_capacity = float(m.pop("write_capacity_rps", 50.0))
            sched = {"enabled": bool(m.get("enabled", True)), "period_s": float(m.get("period_s", 60)),
                     "offset_s": float(m.get("offset_s", 55)), "duration_s": float(m.get("duration_s", 8))}
            w.store("helm/slack").set("maintenanceController", {"offsetS": sched["offset_s"]})
            w.store("postgres-row/maintenance_schedule", sched)
            self.maint = w.add(MaintenanceController(stall))  # type: ignore[assignment]

    # --- load ---------------------------------------------------------------------------------------------
    def _route(self, driver: str) -> list[tuple[str, str]]:
        return ROUTES[self.s.routes.get(driver, "send")]

    def _op_hold(self, role: SlackRole, op: str, now: float | None = None) -> float:
        hold = float(role.db("hold_ms") or 0)
        if op == "authz":
            hold += role.authz_extra_ms()
        if op == "write" and self.maint is not None and now is not None:
            # A commit's fsync queues behind the checkpoint's I/O; the more writes compete, the longer it waits.
            hold += self.maint.stall_ms(now) * min(1.0, self._write_rps / self.maint_write_capacity)
        return hold

    def _write_hold(self, role: SlackRole, op: str, now: float | None):
        """(mean connection hold, the row-lock wait's modes) of a hop: a write waits on a held channel_seq row."""
        hold = self._op_hold(role, op, now)
        if op != "write" or not isinstance(role, MessageRole):
            return hold, lambda: [Mode(1.0, 0.0)]
        # [INF] a blocked write holds its connection until the client gives up and the app cancels it
        block_ms = 1000.0 * max((d.timeout_s for d in self.world.profile.drivers), default=5.0)
        return role.write_modes(hold, block_ms, self._write_rps)

    def hops(self, rates: Mapping[str, float], now: float,
             extra: tuple[tuple[str, str], ...] = ()) -> dict[tuple[str, str], list[Mode]]:
        """How each (role, op) hop ends now, given every driver's rate (shared pools see the total load).
        `extra` adds hops no driver uses (a probe's path)."""
        self._write_rps = sum(rps for d, rps in rates.items() if ("message", "write") in self._route(d))
        load: dict[str, float] = {}
        hold_w: dict[str, float] = {}
        for d, rps in rates.items():
            for role, op in self._route(d):
                if op in _DB_OPS:
                    r = self.roles[role]
                    load[role] = load.get(role, 0.0) + rps
                    hold_w[role] = hold_w.get(role, 0.0) + rps * self._write_hold(r, op, now)[0]
        out: dict[tuple[str, str], list[Mode]] = {}
        wanted = [h for d in rates for h in self._route(d)] + list(extra)
        for role, op in wanted:
            if (role, op) in out:
                continue
            r = self.roles[role]
            if not r.ready(now):
                out[(role, op)] = [Mode(1.0, NET_MS, ERROR, f"svc-{role} unavailable", conn=True)]
                continue
            modes: list[list[Mode]] = [[Mode(1.0, NET_MS)]]
            if op in _DB_OPS:
                pool = ConnectionPool(int(r.db("pool_size")), int(r.db("max_overflow")),
                                      float(r.db("pool_timeout_s")))
                lam = load.get(role, 0.0)
                mean_hold = hold_w[role] / lam if lam > 0 else self._op_hold(r, op, now)
                offer = pool.offer(lam, mean_hold)
                reason = "authz_unavailable" if op == "authz" else "pool_timeout"
                modes.append(offer.modes(self._op_hold(r, op, now), reason))
                if op == "write":
                    modes.append(self._write_hold(r, op, now)[1]())
            if op in _REDIS_OPS:
                modes.append([Mode(1.0, REDIS_MS + r.store_extra_ms())])
            out[(role, op)] = chain(*modes)
        return out

    def serve(self, rates: Mapping[str, float], phase: Phase, t0: float, t1: float) -> dict[str, list[Mode]]:
        hops = self.hops(rates, t0)
        self._seg_hops = hops
        return {d: chain(*(hops[h] for h in self._route(d))) for d in rates}

    def on_record(self, rec) -> None:
        if self.s.routes.get(rec.driver, "send") in _WRITE_ROUTES:
            # A write that read back another message (a duplicated seq) was still stored.
            self.pg.write(rec.ok, rec.t1 - rec.t0, rec.t0)
        self._log_segment(rec)

    def _log_segment(self, rec) -> None:
        """What the roles' own logs would show for this segment: pool timeouts, slow store ops, refused calls."""
        hops = getattr(self, "_seg_hops", {})
        upstream: str | None = None
        for role, op in self._route(rec.driver):
            r = self.roles[role]
            modes = hops.get((role, op), [])
            fail = sum(m.weight for m in modes if m.status == ERROR)
            n = int(round(fail * rec.offered))
            if n > 0:
                reason = next(m.reason for m in modes if m.status == ERROR)
                if reason.endswith("unavailable") and reason.startswith("svc-"):
                    if upstream:
                        self.roles[upstream].say(rec.t0, f"ERROR 503 calling {reason.split()[0]}:8000: connection "
                                                         f"refused (x{n})")
                else:
                    r.say(rec.t0, f"ERROR 503 {reason}: QueuePool limit of size {int(r.db('pool_size'))} overflow "
                                  f"{int(r.db('max_overflow'))} reached, connection timed out, timeout "
                                  f"{float(r.db('pool_timeout_s')):.2f} (x{n}, driver={rec.driver})")
                break
            slow = r.store_extra_ms() if op in _REDIS_OPS else 0.0
            if slow > 0 and rec.offered:
                r.say(rec.t0, f"WARN store op slow: {slow + REDIS_MS:.0f}ms (store_consistency_strict) "
                              f"x{rec.offered}")
            if op == "authz" and r.authz_extra_ms() > 0 and rec.offered:
                r.say(rec.t0, f"WARN authz resolve held db connection {self._op_hold(r, 'authz'):.0f}ms "
                              f"(read_consistency_strict) x{rec.offered}")
            upstream = role

    def fixed_traffic(self, spec: Mapping[str, Any], now: float) -> dict[str, Any]:
        """One write and readback per channel at the current load (the fixed-pod-restart traffic)."""
        channels = list(spec.get("channels") or self.pg.channels)
        ph = self.world.schedule.phase_at(now)
        rates = {d.name: ph.rps * d.rate_scale for d in self.world.profile.drivers}
        hops = self.hops(rates, now, extra=tuple(ROUTES["send"]))
        modes = chain(*(hops[h] for h in ROUTES["send"]))
        # A probe write to a channel whose channel_seq row another backend holds waits on the lock and fails;
        # the other channels' writes do not wait on it.
        msg = self.roles["message"]
        held = {c for c in channels if isinstance(msg, MessageRole) and self.pg.foreign_holder(c, msg.own_pids)}
        p_ok = sum(m.weight for m in modes if m.status == "ok" and m.latency_ms < 5000)
        p_lock = sum(m.weight for m in modes if m.reason == "lock_wait")
        n = len(channels)
        p_free = min(1.0, p_ok / (1.0 - p_lock)) if p_lock < 1.0 else 0.0
        correct = int(round((n - len(held)) * p_free))
        conc = spec.get("concurrent") or {}
        if conc:
            # The concurrent sequence: N barrier-synchronised writes to one channel must all get unique seqs.
            done, uniq = self.pg.concurrent_writes(str(conc.get("channel", "chan-0")), int(conc.get("writes", 16)))
            n += int(conc.get("writes", 16))
            correct += uniq
        self.pg.write(correct)
        return {"scheduled": n, "attempted": n, "completed": correct, "correct": correct, "p_ok": round(p_ok, 6),
                "lock_held_channels": sorted(held)}

    # --- operator tools -------------------------------------------------------------------------------------
    def commands(self) -> dict[str, Any]:
        return {"psql": self._psql, "redis-cli": self._redis_cli, "restart-svc.sh": self._restart_svc,
                "set-sequencer-mode": lambda inv: set_sequencer_mode(self, inv.argv),
                "reconfigure-infra.sh": self._reconfigure_infra}

    def _restart_svc(self, inv: Invocation) -> tuple[str, str, int, float]:
        if len(inv.argv) != 2:
            return "", "usage: restart-svc.sh <role>   (reads {\"db\":{...}} JSON on stdin)\n", 2, 0.0
        role = inv.argv[1].removeprefix("svc-")
        if role not in self.roles:
            return "", f"restart-svc.sh: unknown role '{inv.argv[1]}' (one of: {', '.join(ROLE_NAMES)})\n", 2, 0.0
        raw = inv.stdin.strip() or "{}"
        try:
            doc = json.loads(raw)
        except ValueError:
            return "", "restart-svc.sh: stdin is not valid JSON\n", 2, 0.1
        if not isinstance(doc, dict):
            return "", "restart-svc.sh: stdin must be a JSON object like {\"db\":{...}}\n", 2, 0.1
        r = self.roles[role]
        now = self.world.clock.now()
        if not r.ready(now):
            return "", f"restart-svc.sh: svc-{role}:8000 is not ready (connection refused)\n", 7, 1.0
        out = []
        if doc.get("db"):
            st, body = r.http("PUT", "/admin/config", json.dumps({"db": doc["db"]}), now)
            out.append(f"PUT http://svc-{role}:8000/admin/config -> {st}\n{body}\n")
            if st >= 300:
                return "".join(out), f"restart-svc.sh: config rejected ({st})\n", 1, 0.5
        st, body = r.http("POST", "/admin/reload", "", now)
        out.append(f"POST http://svc-{role}:8000/admin/reload -> {st}\n{body}\n")
        return "".join(out), "", 0 if st < 300 else 1, 1.5

    def _reconfigure_infra(self, inv: Invocation) -> tuple[str, str, int, float]:
        return "", "reconfigure-infra.sh: no infrastructure knobs are exposed on this stack\n", 2, 0.2

    def _redis_cli(self, inv: Invocation) -> tuple[str, str, int, float]:
        # The stand-in for python3 raw RESP to the KV store (arena/twin/tools.yaml): the shared Redis client.
        from arena.twin.frappe.rediscli import redis_cli

        def resolve(host: str):
            return self.redis if host.split(".")[0] == "redis" else None

        return redis_cli(inv.argv, inv.stdin, resolve, self.world.clock.now(), default_host="redis")

    def _psql(self, inv: Invocation) -> tuple[str, str, int, float]:
        # psql reaches the shared PostgreSQL model (arena/twin/pg) on every Slack task, as the real foothold's
        # psql reaches the one server: SET/SHOW/RESET, ALTER SYSTEM + pg_reload_conf, ALTER ROLE/DATABASE ... SET
        # and their effects (postgresql.auto.conf, pending_restart, pg_db_role_setting at connect).
        from arena.twin.pg.psql import run_psql

        o = run_psql(inv.argv[1:], self.pg.server, now=self.world.clock.now, stdin=inv.stdin, env=inv.env,
                     client_addr="10.42.0.9")
        return o.stdout, o.stderr, o.exit_code, 0.05 + o.duration_s

    def pool_backends(self) -> list[Backend]:
        """The app roles' pooled PostgreSQL connections, as pg_stat_activity lists them: each role's pool holds
        as many busy connections as its load keeps open (rate x hold, capped by pool_size + max_overflow) and
        at least one idle one. svc-message's own connections are modelled sessions (arena/twin/slack/message.py)."""
        now = self.world.clock.now()
        ph = self.world.schedule.phase_at(now)
        rates = {d.name: ph.rps * d.rate_scale for d in self.world.profile.drivers}
        out: list[Backend] = []
        pid = 6100
        for role in ROLE_NAMES:
            r = self.roles[role]
            if isinstance(r, MessageRole) or not r.ready(now):
                continue
            lam = sum(rps for d, rps in rates.items() for rr, op in self._route(d) if rr == role and op in _DB_OPS)
            hold = self._op_hold(r, "authz" if role == "channel" else "write")
            cap = int(r.db("pool_size")) + int(r.db("max_overflow"))
            busy = min(cap, int(round(lam * hold / 1000.0)))
            for k in range(min(cap, max(busy, 1))):
                pid += 1 + (pid * 31) % 7
                active = k < busy
                out.append(Backend(pid=pid, role="app", database="app", application_name=f"svc-{role}",
                                   client_addr="10.42.1.30", backend_start=max(r.started_at, -86400.0), state="active" if active else "idle",
                                   query="SELECT ... FROM channel_acl" if active else "SELECT 1",
                                   query_start=now if active else None, state_change=now))
        return out


