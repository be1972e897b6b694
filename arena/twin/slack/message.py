"""slack-spine's message role and its PostgreSQL: the sequencer's row locks, the image's lock holders, checkpoint handoff.

Built by `arena.twin.slack.substrate.SlackSpine` (it replaces the plain `SlackRole` for svc-message and the plain
`SlackPostgres` for postgres). The PostgreSQL server is the shared model of `arena.twin.pg`: real backends in
pg_stat_activity, row locks on `channel_seq`, pg_terminate_backend, and settings in layers (postgresql.conf <
ALTER SYSTEM + pg_reload_conf < ALTER DATABASE/ROLE ... SET, copied by a backend when it connects).

Mechanisms (tasks 018 and 019 build on them; nothing here knows a task's answer):

- Every message write takes its channel's `channel_seq` row lock (`UPDATE channel_seq SET last_seq = last_seq + 1`).
  While another backend holds that row, the channel's writes wait on the lock holding their pooled connection,
  until the client gives up and the app cancels the statement [INF: the app cancels on client disconnect]. So
  one held row times out that channel's sends, and at a peak the waiting writes fill the message pool: every
  channel then sees 503 pool_timeout.
- The boot transaction (deploy-time env `HOLD_SEQ_LOCK=<channel>`, an image bug): every start of the message
  process opens a dedicated connection, runs `BEGIN; SELECT ... FOR UPDATE` on that channel's row and goes idle
  in transaction. A restart therefore re-arms it. Only the idle-in-transaction timeout in effect for the app's
  new sessions when it goes idle ends it by itself.
- The checkpoint handoff (`/admin/checkpoint`, env `CHECKPOINT_HANDOFF` default, `HANDOFF_COHORT`): in `session`
  mode the process keeps the sequencer's DB lease of one cohort's channel row idle in transaction from its
  start. The mode is persisted in `app_kv_state` by PUT (generation + 1); the running process reads it at start
  and on POST /admin/reload (boot_generation = generation). Neither a reload nor a mode change ends a lease the
  process already holds; terminating that backend does.
- A reload rebuilds the pool, not the dedicated boot or lease connections.
- The sequencer (task 007; `/admin/sequencer`, deploy-time env `SEQUENCER_MODE`, default atomic). `atomic`
  increments the channel's `channel_seq.last_seq` in one statement. `rmw` reads last_seq and writes it back +1 in
  two round trips, so two writes of one channel inside the read-modify-write window mint the same seq: the
  share of a channel's writes that duplicate is 1 - exp(-rate * window). A duplicate's readback
  (`after_seq=seq-1&limit=1`) returns the other message half the time (ok but not correct). PUT /admin/sequencer
  changes the running process only; `set-sequencer-mode` (the runtime-config broker's fixed-target helper)
  persists the Helm env and replaces the pod. Repairing the duplicates already written is a data change
  (renumbering with psql), which the mode change does not do.

With `postgres_model` the `messages` and `channel_seq` tables are real rows (ids, seqs, cursors) that psql can
read and change; the data checks compare them with the rows that existed at episode start.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Callable

from arena.twin.mech import TIMEOUT, WRONG, Mode
from arena.twin.pg.postgres import Backend, PostgresServer, WritableRelation, setting_ms
from arena.twin.slack.infra import SlackPostgres
from arena.twin.slack.roles import SlackRole

__all__ = ["MessageRole", "SlackDatabase", "LEAK_AGE_S", "KV_CHECKPOINT", "RMW_WINDOW_MS", "set_sequencer_mode"]

LEAK_AGE_S = 15.0  # a causal holder: idle in transaction, holding a channel_seq lock for more than this [R-SG]
KV_CHECKPOINT = "s13.checkpoint"
RMW_WINDOW_MS = 40.0  # [INF] the rmw allocator's read-to-write gap (two DB round trips under load)
MSG_COLUMNS = ("id", "channel_id", "client_msg_id", "seq", "body", "org_id", "deleted_at")
_IMMUTABLE = (0, 1, 2, 4, 5)  # id, channel_id, client_msg_id, body, org_id


def rmw_duplicate_share(channel_rps: float) -> float:
    """The share of a channel's writes that reuse a seq under the rmw allocator (Poisson arrivals)."""
    return 1.0 - math.exp(-max(channel_rps, 0.0) * RMW_WINDOW_MS / 1000.0)


class _Messages(WritableRelation):
    """The messages table as live rows [id, channel_id, client_msg_id, seq, body, org_id, deleted_at]."""

    columns = MSG_COLUMNS

    def __init__(self, db: "SlackDatabase"):
        self.db = db

    def rows(self) -> list[list[Any]]:
        return self.db.materialize()

    def update(self, changes: list[tuple[list[Any], list[Any]]]) -> None:
        self.db.seq_epoch += 1
        for old, new in changes:
            # A message's identity and content are immutable; only its seq may be renumbered.
            if any(old[i] != new[i] for i in _IMMUTABLE) or (old[6] is None and new[6] is not None):
                self.db.touched_ids.add(old[0])
            old[:] = new

    def delete(self, rows: list[list[Any]]) -> None:
        self.db.seq_epoch += 1
        gone = {id(r) for r in rows}
        self.db.deleted_ids.update(r[0] for r in rows)
        self.db.msgs[:] = [r for r in self.db.materialize() if id(r) not in gone]

    def insert(self, rows: list[list[Any]]) -> None:
        self.db.seq_epoch += 1
        self.db.materialize()
        for r in rows:
            if r[0] is None:
                self.db.next_id += 1
                r[0] = self.db.next_id
            self.db.foreign_ids.add(r[0])  # a row the app did not write
            self.db.msgs.append(r)


class _Outbox(WritableRelation):
    """message_dispatch_outbox as live rows [id, message_id, channel_id, seq, kind]: one publish-dispatch effect
    per accepted write, carrying the seq the write was given (a later renumbering does not rewrite history)."""

    columns = ("id", "message_id", "channel_id", "seq", "kind")

    def __init__(self, db: "SlackDatabase"):
        self.db = db

    def rows(self) -> list[list[Any]]:
        self.db.materialize()
        return self.db.outbox

    def update(self, changes: list[tuple[list[Any], list[Any]]]) -> None:
        for old, new in changes:
            if old != new:
                self.db.outbox_touched.add(old[0])
            old[:] = new

    def delete(self, rows: list[list[Any]]) -> None:
        gone = {id(r) for r in rows}
        self.db.outbox_touched.update(r[0] for r in rows)
        self.db.outbox_lost += len(rows)
        self.db.outbox[:] = [r for r in self.rows() if id(r) not in gone]

    def insert(self, rows: list[list[Any]]) -> None:
        self.db.outbox_foreign += len(rows)
        self.rows().extend(rows)


class _Cursors(WritableRelation):
    """channel_seq as live rows [channel_id, last_seq]."""

    columns = ("channel_id", "last_seq")

    def __init__(self, db: "SlackDatabase"):
        self.db = db

    def rows(self) -> list[list[Any]]:
        return self.db.cursor_rows

    def update(self, changes: list[tuple[list[Any], list[Any]]]) -> None:
        for old, new in changes:
            old[:] = new

    def delete(self, rows: list[list[Any]]) -> None:
        gone = {id(r) for r in rows}
        self.db.cursor_rows[:] = [r for r in self.db.cursor_rows if id(r) not in gone]

    def insert(self, rows: list[list[Any]]) -> None:
        self.db.cursor_rows.extend(rows)
class _History(WritableRelation):
    """service_control_history as live rows [id, service, action, detail]: the record of every operator action
    on the services (a reload, a config PUT). The superuser may change it like any table."""

    columns = ("id", "service", "action", "detail")

    def __init__(self, db: "SlackDatabase"):
        self.db = db

    def rows(self) -> list[list[Any]]:
        # Rebuilt from the history on each read: a row's id is its position, which ties a change back to it.
        return [[i + 1, sv, a, d] for i, (_, sv, a, d) in enumerate(self.db.history)]

    @staticmethod
    def _entry(row: list[Any]) -> int:
        return int(row[0]) - 1

    def update(self, changes: list[tuple[list[Any], list[Any]]]) -> None:
        for old, new in changes:
            i = self._entry(old)
            t = self.db.history[i][0]
            self.db.history[i] = (t, str(new[1]), str(new[2]), str(new[3]))

    def delete(self, rows: list[list[Any]]) -> None:
        gone = {self._entry(r) for r in rows}
        self.db.history[:] = [h for i, h in enumerate(self.db.history) if i not in gone]

    def insert(self, rows: list[list[Any]]) -> None:
        for r in rows:
            self.db.history.append((-1.0, str(r[1]), str(r[2]), str(r[3])))


_APP_ADDR = "10.42.1.21"
_DEPLOY_RECORD = (-86400.0, "svc-message", "deploy", "slack-app")  # svc-message's pod address, as pg_stat_activity shows it


class SlackDatabase(SlackPostgres):
    """The app's PostgreSQL with the shared server model behind it (backends, locks, layered settings)."""

    def __init__(self, channels: int, seed_messages: int, *, admin_password: str = "agentrepair-admin",
                 sequenced: bool = False):
        super().__init__(channels, seed_messages)
        s = PostgresServer(conf_file={"max_connections": "200", "shared_buffers": "128MB", "work_mem": "4MB",
                                      "autovacuum": "on"},
                           app_database="app", table_owner="app",
                           hostnames=("postgres", "postgres.default", "postgres.default.svc",
                                      "postgres.default.svc.cluster.local", "localhost", "127.0.0.1",
                                      "/var/run/postgresql", "pgbouncer", "pgbouncer:6432"))
        s.add_role("postgres", superuser=True, password=admin_password)
        s.add_role("app", password="agentrepair-app")
        s.add_role("svc_admin", password="agentrepair-svc")
        s.add_database("app")
        s.add_database("postgres")
        s.views = {"channel_seq": self._channel_seq_view, "messages": self._messages_view,
                   "app_kv_state": self._kv_view,
                   "service_control_history": self._history_view}
        s.log_sink = lambda t, msg: self.say(t, msg)
        # Real rows (postgres_model): ids, seqs and cursors the sequencer mints and psql may change.
        self.sequenced = sequenced
        self.msgs: list[list[Any]] = []
        self.outbox: list[list[Any]] = []
        # Writes not yet turned into rows: (channel, first id, seqs). Rows are built when someone reads them
        # (psql, the gates), so an hour of writes costs a few integers per segment.
        self._pending: list[tuple[str, int, Any]] = []
        self.foreign_ids: set[int] = set()
        # What SQL changed (the data checks read these, not a rescan of every row): messages whose identity or
        # content changed or that were deleted; outbox rows changed, removed or added.
        self.touched_ids: set[int] = set()
        self.deleted_ids: set[int] = set()
        self.outbox_touched: set[int] = set()
        self.outbox_lost = 0
        self.outbox_foreign = 0
        # The seq scan, incremental over the append-only rows until SQL rewrites them (seq_epoch).
        self.seq_epoch = 0
        self._scan: tuple[int, int, dict[str, list[Any]], int] = (-1, 0, {}, 0)
        self.cursor_rows: list[list[Any]] = [[c, 0] for c in self.channels]
        self.next_id = 0
        self.pre_agent_ids: set[int] | None = None
        self.seq_mode: Callable[[], str] = lambda: "atomic"
        self._dup_acc: dict[str, float] = {c: 0.0 for c in self.channels}
        if sequenced:
            for c in self.channels:
                self._mint(c, seed_messages, 0.0, app=False)
            s.writable = {"messages": _Messages(self), "channel_seq": _Cursors(self),
                          "message_dispatch_outbox": _Outbox(self)}
        s.writable["service_control_history"] = _History(self)
        self.server = s
        self.writer_pids: set[int] = set()  # the message pool's backends (svc-message keeps this current)
        self.kv: dict[str, dict[str, Any]] = {}  # app_kv_state rows (durable)
        # service_control_history (t, service, action, detail); the release's deploy record is pre-agent data
        self.history: list[tuple[float, str, str, str]] = [_DEPLOY_RECORD]

    # --- views the SQL front end reads -----------------------------------------------------------------------
    def _channel_seq_view(self) -> tuple[list[str], list[list[Any]]]:
        if self.sequenced:
            return ["channel_id", "last_seq"], self.cursor_rows
        return ["channel_id", "last_seq"], [[c, n] for c, n in sorted(self.rows.items())]

    def _messages_view(self) -> tuple[list[str], list[list[Any]]]:
        # Rows are rebuilt from the per-channel counts when an operator reads them (rare), never per segment.
        rows: list[list[Any]] = []
        for c in self.channels:
            for seq in range(1, self.rows[c] + 1):
                rows.append([0, c, f"{c}-m{seq:06d}", seq, f"message {seq} in {c}", f"org-{c}", None])
        rows.sort(key=lambda r: (int(r[3]), r[1]))
        for i, r in enumerate(rows, start=1):
            r[0] = i
        return ["id", "channel_id", "client_msg_id", "seq", "body", "org_id", "deleted_at"], rows

    def write(self, n: int, dt: float = 0.0, now: float | None = None) -> None:
        """Successful writes land on the channels whose channel_seq row the writers could take."""
        if now is not None:
            self._mark_if_due(now)
        if n <= 0:
            return
        free = [c for c in self.channels if c not in self.blocked_channels()] or self.channels
        k = len(free)
        for i, c in enumerate(free):
            m = n // k + (1 if i < n % k else 0)
            self.rows[c] += m
            if self.sequenced and m:
                self._mint(c, m, m / dt if dt > 0 else 0.0)
        self.offered_ok += n

    # --- the sequencer ----------------------------------------------------------------------------------------
    def _cursor(self, channel: str) -> list[Any] | None:
        return next((r for r in self.cursor_rows if r[0] == channel), None)

    def _mint(self, channel: str, m: int, channel_rps: float, *, app: bool = True) -> list[int]:
        """m writes to one channel: each takes a seq from the channel's cursor, as the running mode does."""
        cur = self._cursor(channel)
        if cur is None:  # the cursor row is gone: the app recreates it from 0, as an upsert would
            cur = [channel, 0]
            self.cursor_rows.append(cur)
        dups = 0
        if self.seq_mode() == "rmw" and app:
            self._dup_acc[channel] += m * rmw_duplicate_share(channel_rps)
            dups = int(self._dup_acc[channel])
            self._dup_acc[channel] -= dups
        last = int(cur[1])
        seqs: Any
        if dups == 0:
            seqs = range(last + 1, last + m + 1)
        else:
            seqs = []
            for j in range(m):
                dup = (j + 1) * dups // m > j * dups // m
                last = last if dup and last > 0 else last + 1
                seqs.append(last)
        cur[1] = seqs[-1]
        self._pending.append((channel, self.next_id + 1, seqs))
        self.next_id += m
        return list(seqs)

    def materialize(self) -> list[list[Any]]:
        """The messages rows, with the pending writes turned into rows."""
        for channel, first, seqs in self._pending:
            org = f"org-{channel}"
            self.msgs.extend([first + k, channel, f"cm-{first + k:07d}", seq, f"message {first + k}", org, None]
                             for k, seq in enumerate(seqs))
            self.outbox.extend([first + k, first + k, channel, seq, "publish-dispatch"] for k, seq in enumerate(seqs))
        self._pending.clear()
        return self.msgs

    def concurrent_writes(self, channel: str, n: int) -> tuple[int, int]:
        """n barrier-synchronised writes to one channel: (completed, correct with a unique seq)."""
        if self.seq_mode() == "rmw":
            # All n read the same last_seq before any writes it back: they mint one seq between them.
            cur = self._cursor(channel)
            base = int(cur[1]) if cur else 0
            seqs = [base + 1] * n
            self._pending.append((channel, self.next_id + 1, seqs))
            self.next_id += n
            if cur is not None:
                cur[1] = base + 1
        else:
            seqs = self._mint(channel, n, 0.0)
        self.rows[channel] += n
        self.offered_ok += n
        return n, sum(seqs.count(x) == 1 for x in seqs)

    def _mark_if_due(self, now: float) -> None:
        # The episode starts at t = 0: the rows that exist then are the pre-agent data.
        if self.sequenced and self.pre_agent_ids is None and now >= 0:
            self.pre_agent_ids = {r[0] for r in self.materialize()}
            self.offered_at_start = self.offered_ok

    def _seq_scan(self) -> dict[str, list[Any]]:
        """Per channel [seen seqs, count, duplicates, min, max] over the live rows; rescanned after SQL rewrote them,
        else extended with the rows appended since the last look."""
        msgs = self.materialize()
        epoch, upto, by, _ = self._scan
        if epoch != self.seq_epoch or upto > len(msgs):
            epoch, upto, by = self.seq_epoch, 0, {}
        for r in msgs[upto:]:
            if r[6] is not None:
                continue
            seq = int(r[3])
            st = by.get(r[1])
            if st is None:
                st = by[r[1]] = [set(), 0, 0, seq, seq]
            if seq in st[0]:
                st[2] += 1
            else:
                st[0].add(seq)
            st[1] += 1
            st[3], st[4] = min(st[3], seq), max(st[4], seq)
        self._scan = (epoch, len(msgs), by, 0)
        return by

    def sequence_truth(self) -> dict[str, Any]:
        by = self._seq_scan()
        dups = sum(st[2] for st in by.values())
        dense = dups == 0 and all(st[3] == 1 and st[4] == st[1] for st in by.values())
        cursors = {r[0]: int(r[1]) for r in self.cursor_rows}
        cursor_ok = (len(self.cursor_rows) == len(cursors) and set(cursors) == set(self.channels)
                     and all(cursors[c] == (by[c][4] if c in by else 0) for c in self.channels))
        out = {"pg.sequence.dense": dense, "pg.sequence.duplicates": dups, "pg.sequence.cursors_consistent": cursor_ok,
               "pg.sequence.channels": sorted(by)}
        if self.pre_agent_ids is not None:
            pre = self.pre_agent_ids
            lost = self.deleted_ids | self.touched_ids
            out["data.messages.pre_agent_intact"] = not (lost & pre)
            # Every write the app accepted since the start is there once, unchanged, and no row came from elsewhere.
            app_lost = lost - pre
            present_foreign = self.foreign_ids - self.deleted_ids
            extra = len(self.msgs) - len(pre - self.deleted_ids) - len(present_foreign)
            out["data.messages.offered_ok_persisted"] = not app_lost and not present_foreign and \
                extra == self.offered_ok - self.offered_at_start
            # Outbox effects: the pre-agent ones unchanged, and exactly one per message the app or seed wrote.
            out["data.outbox.pre_agent_intact"] = not (self.outbox_touched & pre)
            out["data.outbox.exactly_once"] = self.outbox_lost == 0 and self.outbox_foreign == 0 and \
                len(self.outbox) == self.next_id - len(self.foreign_ids)
        return out

    def blocked_channels(self) -> set[str]:
        return {key for (rel, key), pid in self.server.row_locks.items()
                if rel == "channel_seq" and pid not in self.writer_pids}

    def _kv_view(self) -> tuple[list[str], list[list[Any]]]:
        rows = [[k, json.dumps(v["value"], sort_keys=True), v["t"]] for k, v in sorted(self.kv.items())]
        # The maintenance controller's schedule is an app_kv_state row too (PUT /v1/maintenance persists it).
        sched = self.world.stores.get("postgres-row/maintenance_schedule") if self.world is not None else None
        if sched is not None and "maintenance.schedule" not in self.kv:
            rows.append(["maintenance.schedule", json.dumps(sched.data, sort_keys=True), None])
        return ["key", "value", "updated_at"], sorted(rows, key=lambda r: r[0])

    def _history_view(self) -> tuple[list[str], list[list[Any]]]:
        return ["id", "service", "action", "detail"], [[i + 1, s, a, d] for i, (_, s, a, d) in enumerate(self.history)]

    # --- the sequencer's row locks --------------------------------------------------------------------------
    def foreign_holder(self, channel: str, own: set[int]) -> Backend | None:
        b = self.server.lock_holder("channel_seq", channel)
        return b if b is not None and b.pid not in own else None

    def causal_holders(self, now: float) -> list[Backend]:
        """Idle-in-transaction backends holding a channel_seq row lock for more than LEAK_AGE_S."""
        out = []
        for b in self.server.live_backends():
            if b.state == "idle in transaction" and any(r == "channel_seq" for r, _ in b.locks) \
                    and now - b.state_change > LEAK_AGE_S:
                out.append(b)
        return out

    def put_kv(self, key: str, value: dict[str, Any], now: float) -> None:
        self.kv[key] = {"value": value, "t": round(now, 3)}

    # --- component ------------------------------------------------------------------------------------------
    def advance(self, t0: float, t1: float) -> None:
        self._mark_if_due(t0)
        self.server.expire_idle(t1)

    def next_change(self, now: float) -> float:
        return min(super().next_change(now), self.server.next_idle_deadline(now))

    def truth(self) -> dict[str, Any]:
        out = super().truth()
        s = self.server
        now = self.world.clock.now() if self.world is not None else 0.0
        self._mark_if_due(now)
        if self.sequenced:
            out.update(self.sequence_truth())
        out["pg.seq_lock_holders"] = len(self.causal_holders(now))
        out["pg.seq_locked_channels"] = sorted(k for r, k in s.row_locks if r == "channel_seq")
        for role, db in (("app", "app"), ("svc_admin", "app")):
            v = s.fresh_effective(role, db, "idle_in_transaction_session_timeout")[0]
            out[f"pg.fresh.{db}/{role}.idle_in_transaction_session_timeout_ms"] = setting_ms(
                "idle_in_transaction_session_timeout", v)
        for k, v in s.settings_fingerprint().items():
            out[f"pg.fingerprint.{k}"] = v
        out["data.app_kv_state.keys"] = sorted(self.kv)
        out["data.service_control_history.count"] = len(self.history)
        out["data.service_control_history.pre_agent_intact"] = self.history[:1] == [_DEPLOY_RECORD]
        return out

    def config(self) -> dict[str, Any]:
        out = super().config()
        s = self.server
        for k, v in s.auto_conf.items():
            out[f"pg.auto_conf.{k}"] = v
        for k, (v, _) in s.applied.items():
            out[f"pg.applied.{k}"] = v
        for (d, r), settings in s.db_role_setting.items():
            for k, v in settings.items():
                out[f"pg.catalog.{d or '*'}/{r or '*'}.{k}"] = v
        for r in s.roles.values():
            out[f"pg.connlimit.{r.name}"] = r.connlimit
        return out

    def exec(self, argv: list[str], stdin: str, now: float) -> tuple[str, str, int]:
        if argv and argv[0] == "psql":
            from arena.twin.pg.psql import run_psql

            o = run_psql(argv[1:], self.server, now=lambda: now, stdin=stdin, passwords_required=False,
                         client_addr="[local]", local_socket=True)
            return o.stdout, o.stderr, o.exit_code
        return super().exec(argv, stdin, now)


class MessageRole(SlackRole):
    """svc-message: the role pod plus its sequencer connections (boot transaction, checkpoint lease)."""

    def __init__(self, *, reload_s: float, db: SlackDatabase, channels: list[str]):
        super().__init__("message", reload_s=reload_s)
        self.store = db
        self.channels = channels
        self.own_pids: set[int] = set()  # the pool's own backends: a write never waits on its own transaction
        self.dedicated: list[int] = []  # the boot transaction's and the lease's connections
        self.cp_mode = "request"
        self.cp_boot_generation = 0
        self.seq_live: str | None = None  # PUT /admin/sequencer: process memory only
        db.seq_mode = self.sequencer_mode

    # --- process lifecycle ----------------------------------------------------------------------------------
    def sequencer_mode(self) -> str:
        return self.seq_live or self.pod_env.get("SEQUENCER_MODE", "atomic").strip() or "atomic"

    def reset_runtime(self) -> None:
        super().reset_runtime()
        self.seq_live = None
        assert self.world is not None
        now = self.world.clock.now()
        srv = self.store.server
        # The old process's connections close with it; PostgreSQL ends their backends and frees their locks.
        for pid in sorted(self.own_pids | set(self.dedicated)):
            srv.disconnect(pid)
        self.own_pids, self.dedicated = set(), []
        for _ in range(4):  # a few pooled connections, visible in pg_stat_activity
            b = srv.connect("app", "app", now=now, application_name="svc-message", client_addr=_APP_ADDR)
            self.own_pids.add(b.pid)
        self.store.writer_pids = self.own_pids
        self._read_checkpoint(now, starting=True)
        chan = self.pod_env.get("HOLD_SEQ_LOCK", "").strip()
        if chan:
            self._hold(chan, now, "boot")
        cohort = self.pod_env.get("HANDOFF_COHORT", "").strip()
        if self.cp_mode == "session" and cohort:
            self._hold(cohort, now, "lease")

    def _hold(self, channel: str, now: float, why: str) -> None:
        srv = self.store.server
        b = srv.connect("app", "app", now=now, application_name="svc-message", client_addr=_APP_ADDR)
        q = f"SELECT last_seq FROM channel_seq WHERE channel_id = '{channel}' FOR UPDATE"
        b.query, b.query_start = q, now
        if srv.lock_row(b, "channel_seq", channel, now) is None:
            srv.idle_in_transaction(b, now, q)
            self.dedicated.append(b.pid)
            self.say(now, f"INFO sequencer {why} transaction open on channel_seq[{channel}] (pid {b.pid})")
        else:
            srv.disconnect(b.pid)

    def _read_checkpoint(self, now: float, *, starting: bool) -> None:
        row = self.store.kv.get(KV_CHECKPOINT)
        default = self.pod_env.get("CHECKPOINT_HANDOFF", "").strip()
        if row is None and not default:
            return
        if row is None:
            v = {"service": "svc-message", "mode": default, "persisted": False, "generation": 1,
                 "starts": 0, "setting": 0}
        else:
            v = dict(row["value"])
        if starting:
            v["starts"] = int(v.get("starts", 0)) + 1
            self.store.put_kv(KV_CHECKPOINT, v, now)
        self.cp_mode = str(v["mode"])
        self.cp_boot_generation = int(v["generation"])

    # --- what the request path reads ------------------------------------------------------------------------
    def blocked_share(self) -> float:
        """The share of writes whose channel row another backend holds (writes spread evenly over channels)."""
        if not self.channels:
            return 0.0
        n = sum(self.store.foreign_holder(c, self.own_pids) is not None for c in self.channels)
        return n / len(self.channels)

    def write_modes(self, hold_ms: float, block_ms: float,
                    write_rps: float = 0.0) -> tuple[float, Callable[[], list[Mode]]]:
        """(mean hold of a write, the modes after it): a write on a held row holds its connection until cancelled;
        under rmw half of the duplicated seqs read back another message."""
        f = self.blocked_share()
        mean = (1.0 - f) * hold_ms + f * block_ms
        wrong = 0.0
        if self.sequencer_mode() == "rmw" and self.channels:
            wrong = 0.5 * rmw_duplicate_share(write_rps / len(self.channels))

        def modes() -> list[Mode]:
            out = [Mode((1.0 - f) * (1.0 - wrong), 0.0)]
            if wrong > 0:
                out.append(Mode((1.0 - f) * wrong, 0.0, WRONG, "duplicate_seq"))
            if f > 0:
                out.append(Mode(f, max(0.0, block_ms - hold_ms), TIMEOUT, "lock_wait"))
            return out
        return mean, modes

    def advance(self, t0: float, t1: float) -> None:
        if self.pod_env.get("LOG_NOISE") and t1 - t0 > 0.5:
            self._noise(t0)
        # Show the pool's backends waiting on the held rows, as pg_stat_activity would.
        srv = self.store.server
        held = [c for c in self.channels if self.store.foreign_holder(c, self.own_pids) is not None]
        for i, pid in enumerate(sorted(self.own_pids)):
            b = srv.backends.get(pid)
            if b is None:
                continue
            if held and i < 3:
                ch = held[i % len(held)]
                b.state, b.waiting_for = "active", ("channel_seq", ch)
                b.xact_start = b.xact_start if b.xact_start is not None else t0
                b.query = f"UPDATE channel_seq SET last_seq = last_seq + 1 WHERE channel_id = '{ch}' RETURNING last_seq"
            elif b.waiting_for is not None or b.state == "active":
                b.state, b.waiting_for, b.query, b.xact_start = "idle", None, "COMMIT", None

    def _noise(self, t0: float) -> None:
        """The image's chatty logging (task 019's distractor volume): unrelated lines every segment, and the
        handoff's lease reuse among them."""
        h = int(hashlib.sha256(f"{self.name}/{t0:.3f}".encode()).hexdigest()[:8], 16)
        lines = [f"WARN gc: pause {20 + h % 60}ms (heap {180 + h % 90}MiB)",
                 f"INFO kafkagate: consumer lag partition={h % 6} lag={h % 40}",
                 f"WARN notification fanout: retry {1 + h % 3} for org-chan-{h % 8} (upstream 429)",
                 f"INFO search: reindex batch size={32 + h % 64} took {h % 900}ms",
                 f"WARN auth: session cache miss ratio {0.05 + (h % 20) / 100:.2f}"]
        for k in range(3):
            self.say(t0, lines[(h + 2 * k) % len(lines)])
        if self.cp_mode == "session" and self.dedicated:
            self.say(t0, f"DEBUG s13 checkpoint handoff: reusing leased db connection (pid {self.dedicated[-1]}, "
                         f"retry {1 + h % 4})")

    # --- truth ----------------------------------------------------------------------------------------------
    def truth(self) -> dict[str, Any]:
        out = super().truth()
        row = self.store.kv.get(KV_CHECKPOINT)
        out["sequencer.mode"] = self.sequencer_mode()
        out["checkpoint.mode"] = self.cp_mode
        out["checkpoint.boot_generation"] = self.cp_boot_generation
        out["checkpoint.generation"] = int(row["value"]["generation"]) if row else 0
        out["checkpoint.persisted_mode"] = row["value"]["mode"] if row else None
        out["checkpoint.persisted"] = bool(row["value"].get("persisted")) if row else False
        out["checkpoint.boot_current"] = row is not None and self.cp_boot_generation == int(row["value"]["generation"])
        return out

    # --- admin API ------------------------------------------------------------------------------------------
    def http(self, method: str, path: str, body: str, now: float) -> tuple[int, str]:
        p = path.partition("?")[0].rstrip("/")
        if p == "/admin/checkpoint":
            if method != "PUT":
                return 405, json.dumps({"detail": "Method Not Allowed"})
            return self._put_checkpoint(body, now)
        if p == "/admin/sequencer":
            if method == "GET":
                return 200, json.dumps({"service": self.name, "mode": self.sequencer_mode(),
                                        "source": "runtime" if self.seq_live else "env"})
            if method == "PUT":
                try:
                    mode = json.loads(body or "")["mode"]
                except (ValueError, KeyError, TypeError):
                    return 422, json.dumps({"detail": "body must be {\"mode\": \"atomic\"|\"rmw\"}"})
                if mode not in ("atomic", "rmw"):
                    return 422, json.dumps({"detail": f"unknown sequencer mode {mode!r}"})
                self.seq_live = mode
                self.say(now, f"INFO sequencer mode {mode} (runtime; not persisted)")
                return 200, json.dumps({"service": self.name, "mode": mode, "persisted": False})
            return 405, json.dumps({"detail": "Method Not Allowed"})
        if p == "/internal/s13/cp" and method == "GET":
            row = self.store.kv.get(KV_CHECKPOINT)
            if row is None:
                return 404, json.dumps({"detail": "checkpoint handoff not configured"})
            v = row["value"]
            return 200, json.dumps({"service": self.name, "mode": self.cp_mode, "persisted": bool(v["persisted"]),
                                    "generation": int(v["generation"]), "boot_generation": self.cp_boot_generation,
                                    "starts": int(v["starts"])}, sort_keys=True)
        status, out = super().http(method, path, body, now)
        if p == "/admin/reload" and method == "POST" and status < 300:
            self._read_checkpoint(now, starting=False)
            self.say(now, f"INFO checkpoint handoff mode={self.cp_mode} boot_generation={self.cp_boot_generation}")
        return status, out

    def _put_checkpoint(self, body: str, now: float) -> tuple[int, str]:
        try:
            doc = json.loads(body or "")
            mode = doc["mode"]
        except (ValueError, KeyError, TypeError):
            return 422, json.dumps({"detail": "body must be {\"mode\": \"session\"|\"request\"}"})
        if mode not in ("session", "request"):
            return 422, json.dumps({"detail": f"unknown handoff mode {mode!r}"})
        row = self.store.kv.get(KV_CHECKPOINT)
        v = dict(row["value"]) if row else {"service": "svc-message", "generation": 0, "starts": 1, "setting": 0}
        v.update({"mode": mode, "persisted": True, "generation": int(v["generation"]) + 1})
        self.store.put_kv(KV_CHECKPOINT, v, now)
        self.store.history.append((now, "svc-message", "checkpoint.mode", mode))
        self.say(now, f"INFO checkpoint handoff mode {mode} persisted (generation {v['generation']}); reload required")
        return 200, json.dumps({"status": "persisted", "mode": mode, "generation": v["generation"],
                                "reload_required": True}, sort_keys=True)


def set_sequencer_mode(substrate: Any, argv: list[str]) -> tuple[str, str, int, float]:
    """`set-sequencer-mode atomic|rmw`: the runtime-config broker's fixed-target helper for svc-message.

    It persists SEQUENCER_MODE in the Helm values (app.roles.message.env) and replaces the svc-message pod, which
    starts with the new env. It does not touch the data.
    """
    if len(argv) != 2 or argv[1] not in ("atomic", "rmw"):
        return "", "usage: set-sequencer-mode atomic|rmw\n", 2, 0.0
    world = substrate.world
    world.stores["helm/slack"].set("app.roles.message.env.SEQUENCER_MODE", argv[1])
    old = world.component("svc-message").pod
    world.restart("svc-message", by="broker")
    new = world.component("svc-message").pod
    return (f"runtime-config broker: svc-message SEQUENCER_MODE={argv[1]} persisted; replaced pod {old} -> {new}\n"
            ), "", 0, 2.0
