"""slack-spine infrastructure: PostgreSQL (messages, channel_seq, settings), pgbouncer and the Redis KV store.

Built by `arena.twin.slack.substrate.SlackSpine`. Kept deliberately small for the incidents on this substrate:
the message store counts rows per channel (pre-agent rows are protected; offered writes must survive exactly
once), the settings table answers SHOW / pg_settings, and the Redis store answers the redis-cli basics. The
lock-leak and sequencer incidents (next issue) extend PostgreSQL with backends and row locks.
"""

from __future__ import annotations

from typing import Any

from arena.twin.frappe.redis import RedisServer, ValuesView
from arena.twin.world import Component

__all__ = ["SlackPostgres", "SlackRedis", "PgBouncer", "PG_DEFAULTS"]

PG_DEFAULTS: dict[str, str] = {
    "max_connections": "200",
    "shared_buffers": "128MB",
    "work_mem": "4MB",
    "idle_in_transaction_session_timeout": "0",
    "statement_timeout": "0",
    "lock_timeout": "0",
    "autovacuum": "on",
    "checkpoint_timeout": "5min",
    "max_wal_size": "1GB",
    "server_version": "16.4",
}


class SlackPostgres(Component):
    """The app's PostgreSQL: the message tables and the server settings."""

    kind = "StatefulSet"
    container = "postgresql"

    def __init__(self, channels: int, seed_messages: int):
        super().__init__("postgres", image="docker.io/bitnami/postgresql@sha256:"
                         "9a1f0c2b3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8",
                         restartable=False, stateful=True, boot_s=20.0, hosts=("postgres", "postgres:5432"))
        self.channels = [f"chan-{i}" for i in range(channels)]
        self.pre_agent = {c: seed_messages for c in self.channels}
        self.rows = dict(self.pre_agent)
        self.offered_ok = 0
        self.deleted_pre_agent = 0

    def load_declared(self) -> None:
        assert self.world is not None
        conf = self.world.store("postgresql.conf", dict(PG_DEFAULTS))
        for k, v in conf.data.items():
            self.settings.declare(k, v)

    def truth(self) -> dict[str, Any]:
        out = super().truth()
        out["data.messages.total"] = sum(self.rows.values())
        out["data.messages.pre_agent_intact"] = self.deleted_pre_agent == 0
        out["data.messages.offered_ok_persisted"] = sum(self.rows.values()) - sum(self.pre_agent.values()) \
            + self.deleted_pre_agent == self.offered_ok
        out["data.channel_seq.count"] = len(self.channels)
        return out

    def config(self) -> dict[str, Any]:
        return {f"setting.{k}": v for k, v in self.settings.effective().items()}

    def write(self, n: int) -> None:
        if n <= 0:
            return
        # Writes spread over the channels deterministically.
        k = len(self.channels)
        for i, c in enumerate(self.channels):
            self.rows[c] += n // k + (1 if i < n % k else 0)
        self.offered_ok += n


class _ChartValues(ValuesView):
    """The Slack chart's Redis values: fixed (the agent has no Helm here), read as the Bitnami chart reads them."""

    def __init__(self, values: dict[str, Any]):
        self.values = values

    def get(self, path: str, default: Any = None) -> Any:
        return self.values.get(path, default)


class SlackRedis(RedisServer):
    """The shared KV store (sessions, settings, unread counters): the twin's Redis 7 server model
    (arena.twin.frappe.redis), so CONFIG GET/SET/REWRITE, ACL and INFO answer as the real server does.
    CONFIG SET changes the running process only; a restart re-reads the chart's config."""

    def __init__(self) -> None:
        super().__init__("redis", values=_ChartValues({"redis.commonConfiguration":
                                                       "maxmemory 0\nmaxmemory-policy noeviction"}),
                         values_path="redis", base_bytes=3_145_728,
                         image="docker.io/bitnami/redis@sha256:"
                         "3c2d1e0f9a8b7c6d5e4f30211a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d",
                         restartable=False, stateful=True, boot_s=10.0, hosts=("redis", "redis:6379"))
        self.keys = 0

    @property
    def pod(self) -> str:
        return "redis-0"


class PgBouncer(Component):
    """pgbouncer in front of PostgreSQL (transaction pooling, default_pool_size 20)."""

    def __init__(self) -> None:
        super().__init__("pgbouncer", image="ghcr.io/abundant-ai/sre-world/slack-pgbouncer@sha256:"
                         "71b0c9d8e7f6a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c",
                         restartable=False, hosts=("pgbouncer", "pgbouncer:6432"))

    def load_declared(self) -> None:
        self.settings.declare("default_pool_size", 20)
        self.settings.declare("pool_mode", "transaction")
