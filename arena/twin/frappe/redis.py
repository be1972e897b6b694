"""The Frappe twin's Bitnami Redis servers (redis-queue, redis-cache): config layers, memory, ACL, RQ data.

Built by `arena.twin.frappe.substrate.FrappeSubstrate`. `redis-cli` (arena.twin.frappe.rediscli) sends commands
to `RedisServer.command`; the RQ model (arena.twin.frappe.rq) asks `write_allowed` / `dequeue_allowed` and books
job bytes through `JobStore`.

How the config is layered, as in the Bitnami chart: at every start `start-master.sh` copies the chart's
redis.conf (a ConfigMap rendered from Helm values) over the container's config file and runs
`redis-server <file> <extraFlags...>`; the command-line flags win over the file. CONFIG SET changes the running
process only; CONFIG REWRITE writes the container's file, which the next start overwrites again. So only a Helm
values change (`helm upgrade --set ...extraFlags`) survives a restart. Data survives a restart when appendonly
was on (the AOF on the PVC).

Memory: `used_memory` = an idle baseline + bytes per RQ job hash still stored (queued, finished within its
result TTL, failed, stranded). Under `noeviction` a write command (enqueue, a worker's status write) is refused
with OOM while used_memory > maxmemory; an eviction policy frees finished results first, then queued job hashes
(which strands their ids in the list: the jobs are lost).
"""

from __future__ import annotations

import copy
import fnmatch
import math
import shlex
from collections import deque
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from arena.twin.world import Component
from guardrail.errors import ScenarioError
from guardrail.yamlio import load_model

__all__ = ["RedisDefaults", "parse_memory", "human_bytes", "RedisError", "JobStore", "RedisServer", "Acl"]


class RedisDefaults(BaseModel):
    """Compiled defaults and accepted policies (redis_defaults.yaml)."""

    model_config = ConfigDict(extra="forbid")

    defaults: dict[str, str]
    policies: list[str]


@lru_cache(maxsize=1)
def defaults() -> RedisDefaults:
    return load_model(RedisDefaults, Path(__file__).with_name("redis_defaults.yaml"), error=ScenarioError)


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1024, "m": 1000 ** 2, "mb": 1024 ** 2, "g": 1000 ** 3, "gb": 1024 ** 3}


def parse_memory(s: str) -> int | None:
    """Redis memory units: 1k = 1000, 1kb = 1024, 1m = 10^6, 1mb = 2^20 (case-insensitive). None if invalid."""
    t = str(s).strip().lower()
    num = t.rstrip("kmgb")
    unit = t[len(num):]
    if unit not in _UNITS or not num or not num.isdigit():
        return None
    return int(num) * _UNITS[unit]


def human_bytes(n: float) -> str:
    n = float(n)
    if n < 1024:
        return f"{int(n)}B"
    for unit, div in (("K", 1024), ("M", 1024 ** 2), ("G", 1024 ** 3)):
        if n < div * 1024 or unit == "G":
            return f"{n / div:.2f}{unit}"
    return f"{n}B"


class RedisError(Exception):
    """An error reply: the first word is its code (ERR, OOM, NOPERM, NOREPLICAS, WRONGTYPE...)."""


# The commands RQ and frappe send and whether Redis flags them denyoom (refused over maxmemory) / write.
_WRITE = {"rpush", "lpush", "hset", "hmset", "set", "zadd", "sadd", "expire", "incr", "setex", "lmove", "rpoplpush",
          "del", "flushall", "flushdb", "lrem", "hdel", "zrem", "persist", "blmove", "lpop", "rpop", "blpop", "brpop"}
_DENYOOM = {"rpush", "lpush", "hset", "hmset", "set", "zadd", "sadd", "incr", "setex", "lmove", "rpoplpush",
            "blmove"}


_RQ_COMMANDS = ("blpop", "blmove", "brpop", "rpush", "hset", "flushall", "flushdb")


class Acl:
    """One ACL user's command rules, evaluated like Redis: later rules override earlier ones."""

    def __init__(self, name: str, rules: list[str] | None = None):
        self.name = name
        self.enabled = False
        self.nopass = False
        self.passwords: list[str] = []
        self.keys = ""
        self.channels = ""
        self.rules: list[str] = []
        self.apply(rules or [])

    def apply(self, rules: list[str]) -> None:
        for r in rules:
            lr = r.lower()
            if lr == "on":
                self.enabled = True
            elif lr == "off":
                self.enabled = False
            elif lr == "nopass":
                self.nopass, self.passwords = True, []
            elif lr.startswith(">"):
                self.passwords.append(r[1:])
                self.nopass = False
            elif lr in ("~*", "allkeys"):
                self.keys = "~*"
            elif lr in ("&*", "allchannels"):
                self.channels = "&*"
            elif lr == "resetkeys":
                self.keys = ""
            elif lr == "resetchannels":
                self.channels = ""
            elif lr == "reset":
                self.__init__(self.name)  # type: ignore[misc]
            elif lr in ("allcommands", "+@all"):
                self.rules = ["+@all"]
            elif lr in ("nocommands", "-@all"):
                self.rules = ["-@all"]
            elif lr[:1] in "+-" and len(lr) > 1:
                # A rule that repeats an earlier one for the same command replaces it (Redis keeps it compact).
                self.rules = [x for x in self.rules if x[1:] != lr[1:]] + [lr]
            else:
                raise RedisError(f"ERR Error in ACL SETUSER modifier '{r}': Syntax error")

    def allows(self, cmd: str) -> bool:
        ok = False
        for r in self.rules:
            if r[1:] in ("@all", cmd):
                ok = r[0] == "+"
        return ok

    def describe(self) -> str:
        parts = ["user", self.name, "on" if self.enabled else "off"]
        parts += ["nopass"] if self.nopass else [f"#{_sha_pw(p)}" for p in self.passwords]
        parts += [p for p in (self.keys, self.channels) if p]
        parts += self.rules or ["-@all"]
        return " ".join(parts)


def _sha_pw(p: str) -> str:
    import hashlib

    return hashlib.sha256(p.encode()).hexdigest()


class JobStore:
    """RQ's keys in the broker, in aggregate: the `long` queue list, job hashes by state, result TTLs."""

    def __init__(self, job_bytes: int, result_ttl_s: float):
        self.job_bytes = int(job_bytes)
        self.result_ttl_s = float(result_ttl_s)
        self.queued = 0.0  # ids in rq:queue:long with their job hash
        self.head_seq = 0.0  # seq of the oldest queued id (ids are minted in order)
        self.tail_seq = 0.0
        self.finished: deque[list[float]] = deque()  # [expire_at, count] of finished results kept for the TTL
        self.failed = 0.0
        # Jobs whose hash says queued but whose id is no longer in the list (a worker popped the id and died
        # before its status write): by sequence number, so an operator can find and re-deliver them.
        self.stranded_ids: list[int] = []
        self.orphan_ids = 0.0  # ids in the list whose hash was evicted (the job is lost)
        # Jobs with an identity of their own (a seeded backlog: arena.twin.frappe.backlog): position -> id while
        # the id sits in the list (or is stranded there), their hash status, and the ids the worker popped that
        # the owner has not run yet.
        self.placed: dict[int, str] = {}
        self.status: dict[str, str] = {}
        self.popped: list[str] = []
        # Lost work, over the queue's data as the real redis_state provider sees it: job hashes that are gone
        # (flushed, evicted) plus jobs whose id an operator's list command took out of the list while the hash
        # still says queued (DEL, LTRIM): no worker will run them until their id is pushed back.
        self.gone = 0.0
        self.dropped: set[int] = set()
        self.completed_total = 0.0
        self.enqueued_total = 0.0
        self.flushed = 0.0

    @property
    def stranded(self) -> float:
        return float(len(self.stranded_ids))

    @property
    def lost(self) -> float:
        return self.gone + float(sum(1 for s in self.stranded_ids if s in self.dropped))

    def id_at(self, pos: int) -> str:
        return self.placed.get(pos, job_id(pos))

    def place(self, job: str) -> None:
        """Append `job`'s id at the tail (RPUSH of a known id): the worker will run it when it gets there."""
        pos = math.ceil(self.tail_seq - 1e-9)
        self.placed[pos] = job
        self.status[job] = "queued"
        self.queued += 1.0
        self.tail_seq = pos + 1.0

    def track(self, job: str) -> None:
        """Give the job at the tail an identity of its own (a seeded job) and enqueue it."""
        self.place(job)
        self.enqueued_total += 1.0

    def strand_head(self) -> None:
        """A worker popped the head id, then its status write failed: the job is stranded."""
        if self.queued >= 1.0:
            self.stranded_ids.append(int(self.head_seq))
            self.queued -= 1.0
            self.head_seq += 1.0

    def strand_all(self) -> None:
        """The list itself is gone (DEL): every queued job's hash stays behind, stranded."""
        self.drop_tail(0)
        self.orphan_ids = 0.0
        self.head_seq = self.tail_seq

    def drop_tail(self, keep: int) -> int:
        """An operator's list command keeps only the first `keep` queued ids (LTRIM 0 keep-1; DEL keeps none):
        the others leave the list while their hashes stay queued, stranded and lost until pushed back.
        Returns how many ids left the list."""
        n = int(round(self.queued))
        keep = max(0, min(keep, n))
        seqs = list(range(int(self.head_seq) + keep, int(self.head_seq) + n))
        self.stranded_ids += seqs
        self.dropped.update(seqs)
        self.queued = float(keep)
        self.orphan_ids = min(self.orphan_ids, float(max(0, keep - n)))
        self.tail_seq = self.head_seq + keep + self.orphan_ids
        return len(seqs)

    def redeliver(self, job: str) -> bool:
        """RPUSH of a stranded job's id back onto the queue. False when the id is not a stranded job."""
        for i, seq in enumerate(self.stranded_ids):
            if self.id_at(seq) == job:
                del self.stranded_ids[i]
                self.placed.pop(seq, None)
                self.place(job)
                return True
        return False

    def push_known(self, job: str) -> bool:
        """RPUSH of the id of a job whose hash exists (finished, failed or already queued): RQ does not
        de-duplicate, so the worker runs it again. False for an id with no hash behind it."""
        if job not in self.status:
            return False
        self.place(job)
        return True

    def status_of(self, job: str) -> str | None:
        if any(self.id_at(s) == job for s in self.stranded_ids):
            return "queued"
        if job in self.status:
            return self.status[job]
        head = int(self.head_seq)
        if any(job_id(head + i) == job for i in range(min(int(round(self.queued)), 100_000))):
            return "queued"
        return None

    @property
    def finished_count(self) -> float:
        return sum(c for _, c in self.finished)

    def bytes(self) -> float:
        return (self.queued + self.finished_count + self.failed + self.stranded) * self.job_bytes \
            + self.orphan_ids * 48

    def expire(self, now: float) -> None:
        while self.finished and self.finished[0][0] <= now + 1e-9:
            self.finished.popleft()

    def next_expiry(self) -> float:
        return self.finished[0][0] if self.finished else math.inf

    def enqueue(self, n: float) -> None:
        self.queued += n
        self.tail_seq += n
        self.enqueued_total += n

    def take(self, n: float) -> float:
        """Pop up to n ids from the head (lost ids first come off with their neighbours)."""
        n = min(n, self.queued + self.orphan_ids)
        if n <= 0:
            return 0.0
        total = self.queued + self.orphan_ids
        lost = n * (self.orphan_ids / total)
        self.orphan_ids -= lost
        got = n - lost
        self.queued -= got
        old = self.head_seq
        self.head_seq += n
        if self.placed:
            for pos in sorted(p for p in self.placed if old - 1e-9 <= p < self.head_seq - 1e-9
                              and p not in self.stranded_ids):
                job = self.placed.pop(pos)
                self.status[job] = "started"
                self.popped.append(job)
        return got

    def finish(self, n: float, now: float) -> None:
        if n <= 0:
            return
        self.completed_total += n
        exp = now + self.result_ttl_s
        if self.finished and abs(self.finished[-1][0] - exp) < 1.0:
            self.finished[-1][1] += n
        else:
            self.finished.append([exp, n])

    def evict(self, nbytes: float, policy: str) -> float:
        """Free nbytes under an eviction policy. Returns the bytes freed."""
        if policy == "noeviction" or nbytes <= 0:
            return 0.0
        freed = 0.0
        # Only results carry a TTL, so volatile-* policies can evict nothing else.
        while nbytes - freed > 0 and self.finished:
            take = min(self.finished[0][1], (nbytes - freed) / self.job_bytes)
            self.finished[0][1] -= take
            freed += take * self.job_bytes
            if self.finished[0][1] <= 1e-9:
                self.finished.popleft()
        if nbytes - freed > 0 and policy.startswith("allkeys"):
            for attr in ("failed", "queued"):
                have = getattr(self, attr)
                take = min(have, (nbytes - freed) / self.job_bytes)
                setattr(self, attr, have - take)
                freed += take * self.job_bytes
                if attr == "queued" and take > 0:
                    # The id stays in the list but its hash is gone: the worker will skip a lost job.
                    self.orphan_ids += take
                    self.gone += take
        return freed

    def flush(self) -> None:
        self.flushed += self.queued + self.stranded
        self.gone += self.queued + self.stranded
        self.dropped = set()
        self.queued = self.failed = self.orphan_ids = 0.0
        self.stranded_ids = []
        self.finished.clear()
        self.head_seq = self.tail_seq
        self.placed = {}
        self.status = {}

    def snapshot(self) -> dict[str, Any]:
        return {"queued": self.queued, "head_seq": self.head_seq, "tail_seq": self.tail_seq,
                "finished": [list(x) for x in self.finished], "failed": self.failed, "stranded": list(self.stranded_ids),
                "orphan_ids": self.orphan_ids, "placed": dict(self.placed), "status": dict(self.status),
                "dropped": sorted(self.dropped)}

    def restore(self, snap: dict[str, Any], now: float) -> None:
        self.queued, self.head_seq, self.tail_seq = snap["queued"], snap["head_seq"], snap["tail_seq"]
        self.finished = deque([list(x) for x in snap["finished"]])
        self.failed, self.orphan_ids = snap["failed"], snap["orphan_ids"]
        self.stranded_ids = list(snap["stranded"])
        self.placed, self.status = dict(snap.get("placed", {})), dict(snap.get("status", {}))
        self.dropped = set(snap.get("dropped", ()))
        self.expire(now)


class RedisServer(Component):
    """A Bitnami Redis master pod whose config is re-rendered from Helm values at every start."""

    kind = "StatefulSet"
    container = "redis"

    def __init__(self, name: str, *, values: "ValuesView", values_path: str, base_bytes: int,
                 jobs: JobStore | None = None, **kw: Any):
        kw.setdefault("stateful", True)
        kw.setdefault("boot_s", 12.0)
        super().__init__(name, **kw)
        self.values = values
        self.values_path = values_path
        self.base_bytes = int(base_bytes)
        self.jobs = jobs
        self.container_conf: dict[str, str] = {}
        self.args: dict[str, str] = {}
        self.acl: dict[str, Acl] = {}
        self.stats: dict[str, float] = {}
        self.peak = 0.0
        self.rendered_flags: list[str] = []
        self._aof: dict[str, Any] | None = None
        # Keys an operator writes by hand (SET, RPUSH on other lists, HSET): kept exactly, bytes counted.
        self.misc: dict[str, Any] = {}
        self.booted_conf: dict[str, str] = {}
        self.replica_count = 0
        self._aof_on_at_shutdown = True

    @property
    def pod(self) -> str:
        return f"{self.name}-master-0"

    # --- layers -------------------------------------------------------------------------------------------
    def render(self) -> tuple[dict[str, str], list[str]]:
        """What the chart renders from the current Helm values: the redis.conf lines and the extra flags."""
        conf: dict[str, str] = {}
        for line in str(self.values.get(f"{self.values_path}.commonConfiguration", "") or "").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                k, _, v = line.partition(" ")
                conf[k.lower()] = v.strip().strip('"')
        flags = list(self.values.get(f"{self.values_path}.master.extraFlags", []) or [])
        return conf, [str(f) for f in flags]

    def load_declared(self) -> None:
        conf, flags = self.render()
        # start-master.sh copies the rendered redis.conf over the container's file on every start.
        self.container_conf = dict(conf)
        self.booted_conf = dict(conf)
        self.rendered_flags = flags
        self.replica_count = self.rendered_replicas()
        self.args = parse_flags(flags)
        users: dict[str, list[str]] = {}
        layered = dict(defaults().defaults)
        for src in (self.container_conf, self.args):
            for k, v in src.items():
                if k == "user":
                    words = v.split()
                    users[words[0]] = words[1:]
                else:
                    layered[k] = v
        for k, v in layered.items():
            self.settings.declare(k, self._normalise(k, v))
        self.acl = {"default": Acl("default", ["on", "nopass", "~*", "&*", "+@all"])}
        for u, rules in users.items():
            self.acl[u] = Acl(u, rules)

    def reset_runtime(self) -> None:
        self.stats = {"total_commands_processed": 0, "evicted_keys": 0, "rejected_oom": 0,
                      "rejected_noperm": 0, "rejected_noreplicas": 0, "total_connections_received": 0}
        if self.jobs is not None:
            if self._aof is not None and self._aof_on_at_shutdown:
                self.jobs.restore(self._aof, self.world.clock.now() if self.world else 0.0)
            elif self._aof is not None:
                # Without the AOF the restarted server comes back empty: every stored job is gone.
                self.jobs.flush()
        self._aof = None

    def boot(self, now: float) -> None:
        if self.generation > 0:
            keep = self.get("appendonly") == "yes"
            if not keep:
                self.misc = {}
            if self.jobs is not None:
                self._aof = self.jobs.snapshot()
                self._aof_on_at_shutdown = keep
        super().boot(now)

    def _normalise(self, key: str, value: str) -> str:
        if key in ("maxmemory", "maxmemory-clients"):
            n = parse_memory(value)
            return str(n) if n is not None else value
        return str(value)

    def get(self, key: str) -> str:
        return str(self.settings.get(key, ""))

    @property
    def maxmemory(self) -> int:
        return int(self.get("maxmemory") or 0)

    @property
    def policy(self) -> str:
        return self.get("maxmemory-policy")

    # --- replication ---------------------------------------------------------------------------------------
    def rendered_replicas(self) -> int:
        """Replicas the current values ask for: the chart's `replication` architecture runs
        `replica.replicaCount` replica pods (chart default 3); a standalone master has none."""
        if str(self.values.get(f"{self.values_path}.architecture", "standalone")) != "replication":
            return 0
        return int(self.values.get(f"{self.values_path}.replica.replicaCount", 3) or 0)

    def connected_replicas(self) -> int:
        # Read at start (a topology change rolls the master, arena.twin.frappe.substrate._after_upgrade).
        return self.replica_count

    def replicas_short(self) -> bool:
        """min-replicas-to-write above the good replicas: Redis refuses every write with NOREPLICAS."""
        need = int(self.get("min-replicas-to-write") or 0)
        return need > 0 and self.connected_replicas() < need

    # --- memory and admission --------------------------------------------------------------------------
    def used_memory(self) -> float:
        return self.base_bytes + (self.jobs.bytes() if self.jobs is not None else 0.0) + self._misc_bytes()

    def _misc_bytes(self) -> float:
        return sum(64 + len(k) + len(str(v)) for k, v in self.misc.items())

    def over_cap(self) -> bool:
        return self.maxmemory > 0 and self.used_memory() > self.maxmemory

    def write_error(self, now: float, user: str = "default", cmd: str = "rpush") -> str | None:
        """Why a write command from `user` fails right now (None when it would run)."""
        if not self.ready(now):
            return "Connection refused"
        acl = self.acl.get(user)
        if acl is None or not acl.enabled or not acl.allows(cmd):
            return f"NOPERM User {user} has no permissions to run the '{cmd}' command"
        if self.replicas_short():
            return "NOREPLICAS Not enough good replicas to write."
        if cmd in _DENYOOM and self.over_cap() and self.policy == "noeviction":
            return "OOM command not allowed when used memory > 'maxmemory'."
        return None

    def admit_bytes(self, nbytes: float) -> None:
        """Book a write that grew memory; an eviction policy frees room to stay under the cap."""
        if self.maxmemory > 0 and self.jobs is not None and self.policy != "noeviction":
            excess = self.used_memory() - self.maxmemory
            if excess > 0:
                freed = self.jobs.evict(excess, self.policy)
                self.stats["evicted_keys"] += freed / self.jobs.job_bytes
        self.peak = max(self.peak, self.used_memory())

    # --- time -----------------------------------------------------------------------------------------------
    def next_change(self, now: float) -> float:
        nc = super().next_change(now)
        if self.jobs is not None:
            nc = min(nc, self.jobs.next_expiry())
        return nc

    def advance(self, t0: float, t1: float) -> None:
        if self.jobs is not None:
            self.jobs.expire(t1)
        self.peak = max(self.peak, self.used_memory())

    # --- truth ------------------------------------------------------------------------------------------------
    def truth(self) -> dict[str, Any]:
        out = super().truth()
        out["used_memory"] = self.used_memory()
        out["maxmemory"] = self.maxmemory
        # The cap that binds: maxmemory 0 means none at all.
        out["cap_bytes"] = self.maxmemory if self.maxmemory > 0 else 2 ** 63
        out["maxmemory_policy"] = self.policy
        out["appendonly"] = self.get("appendonly")
        out["min_replicas_to_write"] = int(self.get("min-replicas-to-write") or 0)
        out["connected_replicas"] = self.connected_replicas()
        out["architecture"] = str(self.values.get(f"{self.values_path}.architecture", "standalone") or "standalone")
        out["acl"] = {u: a.describe() for u, a in sorted(self.acl.items())}
        # The commands RQ's worker and frappe.enqueue need, and the destructive ones, per user.
        for u, a in sorted(self.acl.items()):
            for c in _RQ_COMMANDS:
                out[f"acl_allows.{u}.{c}"] = a.enabled and a.allows(c)
            # The command rules as the real redis_state provider snapshots them: a sorted unique list.
            out[f"acl_command_rules.{u}"] = sorted(set(a.rules or ["-@all"]))
        out["flags"] = list(self.rendered_flags)
        if self.jobs is not None:
            out["jobs.queued"] = self.jobs.queued
            out["jobs.lost"] = self.jobs.lost
            out["jobs.flushed"] = self.jobs.flushed
            out["jobs.stranded"] = self.jobs.stranded
            out["jobs.failed"] = self.jobs.failed
        return out

    def config(self) -> dict[str, Any]:
        out = {k: v for k, v in self.settings.effective().items()
               if k in ("maxmemory", "maxmemory-policy", "appendonly", "appendfsync", "min-replicas-to-write",
                        "min-replicas-max-lag", "save")}
        for u, a in sorted(self.acl.items()):
            out[f"user.{u}"] = a.describe()
        return out

    # --- the command surface ------------------------------------------------------------------------------
    def command(self, argv: list[str], now: float, user: str = "default") -> Any:
        """Run one Redis command; returns a reply (str, int, list, None) or raises RedisError."""
        if not argv:
            raise RedisError("ERR empty command")
        cmd = argv[0].lower()
        args = argv[1:]
        self.stats["total_commands_processed"] += 1
        acl = self.acl.get(user)
        sub = args[0].lower() if args else ""
        if acl is None or not acl.enabled:
            raise RedisError("WRONGPASS invalid username-password pair or user is disabled.")
        if not acl.allows(cmd) and not (cmd == "acl" and sub == "whoami"):
            self.stats["rejected_noperm"] += 1
            raise RedisError(f"NOPERM User {user} has no permissions to run the '{cmd}' command")
        h = getattr(self, f"_cmd_{cmd}", None)
        if h is None:
            shown = " ".join(f"'{a}'" for a in args[:3])
            raise RedisError(f"ERR unknown command '{argv[0]}', with args beginning with: {shown}".rstrip())
        if cmd in _DENYOOM or cmd in ("flushall", "flushdb", "del"):
            if self.replicas_short() and cmd in _DENYOOM:
                raise RedisError("NOREPLICAS Not enough good replicas to write.")
            if cmd in _DENYOOM and self.over_cap() and self.policy == "noeviction":
                self.stats["rejected_oom"] += 1
                raise RedisError("OOM command not allowed when used memory > 'maxmemory'.")
        return h(args, now, user)

    def _arity(self, args: list[str], n: int, name: str, exact: bool = True) -> None:
        if (len(args) != n) if exact else (len(args) < n):
            raise RedisError(f"ERR wrong number of arguments for '{name}' command")

    def _cmd_ping(self, args: list[str], now: float, user: str) -> Any:
        return args[0] if args else "PONG"

    def _cmd_config(self, args: list[str], now: float, user: str) -> Any:
        if not args:
            raise RedisError("ERR wrong number of arguments for 'config' command")
        sub = args[0].lower()
        if sub == "get":
            self._arity(args, 2, "config|get", exact=False)
            out: list[str] = []
            keys = sorted(set(defaults().defaults) | set(self.settings))
            for pat in args[1:]:
                for k in keys:
                    if fnmatch.fnmatchcase(k, pat.lower()):
                        out += [k, self.get(k)]
            return out
        if sub == "set":
            if len(args) < 3 or len(args) % 2 == 0:
                raise RedisError("ERR wrong number of arguments for 'config|set' command")
            pending: dict[str, str] = {}
            for k, v in zip(args[1::2], args[2::2]):
                k = k.lower()
                if k not in defaults().defaults:
                    raise RedisError(f"ERR Unknown option or number of arguments for CONFIG SET - '{k}'")
                if k in ("maxmemory", "maxmemory-clients") and parse_memory(v) is None:
                    raise RedisError(f"ERR CONFIG SET failed (possibly related to argument '{k}') - argument "
                                     "couldn't be parsed into an integer")
                if k == "maxmemory-policy" and v.lower() not in defaults().policies:
                    raise RedisError(f"ERR CONFIG SET failed (possibly related to argument '{k}') - argument(s) "
                                     f"must be one of the following: {', '.join(defaults().policies)}")
                if k == "appendonly" and v.lower() not in ("yes", "no"):
                    raise RedisError(f"ERR CONFIG SET failed (possibly related to argument '{k}') - argument "
                                     "must be 'yes' or 'no'")
                pending[k] = self._normalise(k, v.lower() if k != "save" else v)
            for k, v in pending.items():
                self.settings.set_runtime(k, v)
            self.admit_bytes(0)
            return "OK"
        if sub == "rewrite":
            # Writes the running config into the container's file; the next start copies the ConfigMap over it.
            for k in self.settings:
                self.container_conf[k] = self.get(k)
            self.say(now, "CONFIG REWRITE executed with success.")
            return "OK"
        if sub == "resetstat":
            self.reset_stats_only()
            return "OK"
        raise RedisError(f"ERR unknown subcommand '{args[0]}'. Try CONFIG HELP.")

    def reset_stats_only(self) -> None:
        for k in self.stats:
            self.stats[k] = 0

    def _cmd_acl(self, args: list[str], now: float, user: str) -> Any:
        if not args:
            raise RedisError("ERR wrong number of arguments for 'acl' command")
        sub = args[0].lower()
        if sub == "whoami":
            return user
        if sub == "list":
            return [a.describe() for _, a in sorted(self.acl.items())]
        if sub == "users":
            return sorted(self.acl)
        if sub == "getuser":
            self._arity(args, 2, "acl|getuser")
            a = self.acl.get(args[1])
            if a is None:
                return None
            cmds = " ".join(a.rules) if a.rules else "-@all"
            return ["flags", [f for f in (("on" if a.enabled else "off"), ("nopass" if a.nopass else "")) if f],
                    "passwords", [_sha_pw(p) for p in a.passwords], "commands", cmds,
                    "keys", a.keys, "channels", a.channels, "selectors", []]
        if sub == "setuser":
            self._arity(args, 2, "acl|setuser", exact=False)
            a = copy.deepcopy(self.acl.get(args[1])) or Acl(args[1])
            a.apply(args[2:])
            self.acl[args[1]] = a
            return "OK"
        if sub == "deluser":
            n = 0
            for u in args[1:]:
                if u == "default":
                    raise RedisError("ERR The 'default' user cannot be removed")
                n += int(self.acl.pop(u, None) is not None)
            return n
        if sub in ("save", "load"):
            raise RedisError("ERR This Redis instance is not configured to use an ACL file. You may want to "
                             "specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming "
                             "you have a Redis configuration file set) in order to store users in the Redis "
                             "configuration.")
        if sub == "cat":
            return ["keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap",
                    "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking", "dangerous",
                    "connection", "transaction", "scripting"]
        raise RedisError(f"ERR unknown subcommand '{args[0]}'. Try ACL HELP.")

    def _cmd_info(self, args: list[str], now: float, user: str) -> Any:
        sections = [a.lower() for a in args] or ["default"]
        return info_text(self, sections, now)

    def _cmd_dbsize(self, args: list[str], now: float, user: str) -> Any:
        return self._keys()

    def _keys(self) -> int:
        if self.jobs is None:
            return 0
        j = self.jobs
        hashes = j.queued + j.finished_count + j.failed + j.stranded
        registries = int(j.finished_count > 0) + int(j.failed > 0)
        return int(round(hashes)) + int(j.queued + j.orphan_ids > 0.5) + registries + 2  # + worker keys

    def _queue_len(self) -> int:
        return 0 if self.jobs is None else int(round(self.jobs.queued + self.jobs.orphan_ids))

    def _cmd_llen(self, args: list[str], now: float, user: str) -> Any:
        self._arity(args, 1, "llen")
        return self._queue_len() if args[0] == "rq:queue:long" else 0

    def _cmd_lrange(self, args: list[str], now: float, user: str) -> Any:
        self._arity(args, 3, "lrange")
        if args[0] != "rq:queue:long" or self.jobs is None:
            return []
        try:
            a, b = int(args[1]), int(args[2])
        except ValueError:
            raise RedisError("ERR value is not an integer or out of range") from None
        n = self._queue_len()
        a = a + n if a < 0 else a
        b = b + n if b < 0 else b
        head = int(self.jobs.head_seq)
        return [self.jobs.id_at(head + i) for i in range(max(a, 0), min(b, n - 1) + 1)]

    def _cmd_lpos(self, args: list[str], now: float, user: str) -> Any:
        self._arity(args, 2, "lpos", exact=False)
        if args[0] != "rq:queue:long" or self.jobs is None:
            lst = self.misc.get(args[0], [])
            return lst.index(args[1]) if isinstance(lst, list) and args[1] in lst else None
        head = int(self.jobs.head_seq)
        for pos, job in sorted(self.jobs.placed.items()):
            if job == args[1] and pos >= head and pos not in self.jobs.stranded_ids:
                return pos - head
        n = self._queue_len()
        if n and any(job_id(head + i) == args[1] for i in range(min(n, 100_000))):
            return next(i for i in range(n) if job_id(head + i) == args[1])
        return None

    def _cmd_zrange(self, args: list[str], now: float, user: str) -> Any:
        self._arity(args, 3, "zrange", exact=False)
        if self.jobs is None:
            return []
        want = {"rq:failed:long": "failed", "rq:finished:long": "finished"}.get(args[0])
        return sorted(j for j, st in self.jobs.status.items() if st == want) if want else []

    def _cmd_zcard(self, args: list[str], now: float, user: str) -> Any:
        self._arity(args, 1, "zcard")
        if self.jobs is None:
            return 0
        if args[0] == "rq:finished:long":
            return int(round(self.jobs.finished_count))
        if args[0] == "rq:failed:long":
            return int(round(self.jobs.failed))
        return 0

    def _cmd_keys(self, args: list[str], now: float, user: str) -> Any:
        self._arity(args, 1, "keys")
        names = ["rq:workers", "rq:workers:long"] + sorted(self.misc)
        if self.jobs is not None and self._queue_len():
            names.append("rq:queue:long")
        if self.jobs is not None and self.jobs.finished_count >= 0.5:
            names.append("rq:finished:long")
        if self.jobs is not None and self.jobs.failed >= 0.5:
            names.append("rq:failed:long")
        return [k for k in names if fnmatch.fnmatchcase(k, args[0])]

    def _cmd_set(self, args: list[str], now: float, user: str) -> Any:
        self._arity(args, 2, "set", exact=False)
        self.misc[args[0]] = args[1]
        self.admit_bytes(0)
        return "OK"

    def _cmd_get(self, args: list[str], now: float, user: str) -> Any:
        self._arity(args, 1, "get")
        v = self.misc.get(args[0])
        if isinstance(v, (list, dict)):
            raise RedisError("WRONGTYPE Operation against a key holding the wrong kind of value")
        return v

    def _cmd_exists(self, args: list[str], now: float, user: str) -> Any:
        self._arity(args, 1, "exists", exact=False)
        return sum(1 for k in args if k in self.misc or k in self._cmd_keys([k], now, user))

    def _cmd_rpush(self, args: list[str], now: float, user: str) -> Any:
        self._arity(args, 2, "rpush", exact=False)
        if args[0] == "rq:queue:long" and self.jobs is not None:
            for j in args[1:]:
                if not self.jobs.redeliver(j) and not self.jobs.push_known(j):
                    # An id with no job hash behind it: the worker will pop it and find nothing.
                    self.jobs.orphan_ids += 1.0
                    self.jobs.tail_seq += 1.0
            return self._queue_len()
        lst = self.misc.setdefault(args[0], [])
        if not isinstance(lst, list):
            raise RedisError("WRONGTYPE Operation against a key holding the wrong kind of value")
        lst.extend(args[1:])
        self.admit_bytes(0)
        return len(lst)

    _cmd_lpush = _cmd_rpush

    def _cmd_hset(self, args: list[str], now: float, user: str) -> Any:
        if len(args) < 3 or len(args) % 2 == 0:
            raise RedisError("ERR wrong number of arguments for 'hset' command")
        h = self.misc.setdefault(args[0], {})
        if not isinstance(h, dict):
            raise RedisError("WRONGTYPE Operation against a key holding the wrong kind of value")
        new = sum(1 for k in args[1::2] if k not in h)
        h.update(dict(zip(args[1::2], args[2::2])))
        self.admit_bytes(0)
        return new

    def _cmd_hgetall(self, args: list[str], now: float, user: str) -> Any:
        self._arity(args, 1, "hgetall")
        if args[0].startswith("rq:job:") and self.jobs is not None:
            st = self.jobs.status_of(args[0][len("rq:job:"):])
            return ["status", st, "origin", "long"] if st else []
        h = self.misc.get(args[0], {})
        return [x for kv in h.items() for x in kv] if isinstance(h, dict) else []

    def _cmd_hget(self, args: list[str], now: float, user: str) -> Any:
        self._arity(args, 2, "hget")
        if args[0].startswith("rq:job:") and self.jobs is not None:
            st = self.jobs.status_of(args[0][len("rq:job:"):])
            return (st if args[1] == "status" else "long" if args[1] == "origin" else None) if st else None
        h = self.misc.get(args[0], {})
        return h.get(args[1]) if isinstance(h, dict) else None

    def _cmd_flushall(self, args: list[str], now: float, user: str) -> Any:
        self.misc = {}
        if self.jobs is not None:
            self.jobs.flush()
        self.say(now, "DB flushed by FLUSHALL")
        return "OK"

    _cmd_flushdb = _cmd_flushall

    def _cmd_del(self, args: list[str], now: float, user: str) -> Any:
        self._arity(args, 1, "del", exact=False)
        n = 0
        for k in args:
            if k in self.misc:
                del self.misc[k]
                n += 1
            if k == "rq:queue:long" and self.jobs is not None and self._queue_len():
                # The ids go; their hashes stay queued: every one is stranded.
                self.jobs.strand_all()
                n += 1
        return n

    def _cmd_ltrim(self, args: list[str], now: float, user: str) -> Any:
        self._arity(args, 3, "ltrim")
        try:
            a, b = int(args[1]), int(args[2])
        except ValueError:
            raise RedisError("ERR value is not an integer or out of range") from None
        if args[0] == "rq:queue:long" and self.jobs is not None:
            n = self._queue_len()
            a, b = (a + n if a < 0 else a), (b + n if b < 0 else b)
            a, b = max(a, 0), min(b, n - 1)
            keep = b - a + 1 if a <= b else 0
            # The ids before `a` leave the head, the ones after `b` the tail: either way their hashes stay queued.
            # The twin's list keeps its order by sequence, so a head trim is modelled as the same count dropped.
            self.jobs.drop_tail(keep)
            return "OK"
        lst = self.misc.get(args[0])
        if lst is None:
            return "OK"
        if not isinstance(lst, list):
            raise RedisError("WRONGTYPE Operation against a key holding the wrong kind of value")
        n = len(lst)
        a, b = (a + n if a < 0 else a), (b + n if b < 0 else b)
        kept = lst[max(a, 0): b + 1] if a <= b else []
        if kept:
            self.misc[args[0]] = kept
        else:
            del self.misc[args[0]]
        return "OK"

    def _cmd_memory(self, args: list[str], now: float, user: str) -> Any:
        if args and args[0].lower() == "usage":
            return 0 if len(args) < 2 else (self.jobs.job_bytes if self.jobs and args[1].startswith("rq:job:")
                                            else 0)
        if args and args[0].lower() == "stats":
            return ["peak.allocated", int(self.peak), "total.allocated", int(self.used_memory())]
        raise RedisError(f"ERR unknown subcommand '{args[0] if args else ''}'. Try MEMORY HELP.")

    def _cmd_client(self, args: list[str], now: float, user: str) -> Any:
        if args and args[0].lower() == "list":
            return "id=3 addr=10.42.0.31:41522 laddr=10.42.0.12:6379 fd=8 name= age=600 idle=0 flags=N db=0 " \
                   "sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=1024 rbp=0 " \
                   "obl=0 oll=0 omem=0 tot-mem=1928 events=r cmd=blpop user=default redir=-1 resp=2\n"
        raise RedisError("ERR unknown subcommand. Try CLIENT HELP.")

    def _cmd_bgrewriteaof(self, args: list[str], now: float, user: str) -> Any:
        return "Background append only file rewriting started"

    def _cmd_save(self, args: list[str], now: float, user: str) -> Any:
        return "OK"


class ValuesView:
    """Read access to merged Helm values by dotted path (implemented by arena.twin.frappe.helm.HelmRelease)."""

    def get(self, path: str, default: Any = None) -> Any:  # pragma: no cover - interface
        raise NotImplementedError


def parse_flags(flags: list[str]) -> dict[str, str]:
    """redis-server's command line: `--name value...` pairs after the Bitnami script joined the flags."""
    words: list[str] = []
    for f in flags:
        try:
            words += shlex.split(f)
        except ValueError:
            words += f.split()
    out: dict[str, str] = {}
    key: str | None = None
    vals: list[str] = []
    for w in words + ["--"]:
        if w.startswith("--"):
            if key:
                out[key] = " ".join(vals)
            key, vals = (w[2:].lower() or None), []
        else:
            vals.append(w)
    return out


def job_id(seq: int) -> str:
    import hashlib

    h = hashlib.sha1(f"rq-job-{seq}".encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def info_text(r: RedisServer, sections: list[str], now: float) -> str:
    used = r.used_memory()
    up = max(0, int(now - r.started_at)) if r.started_at > -math.inf else 0
    blocks: dict[str, list[str]] = {
        "server": ["redis_version:7.2.4", "redis_mode:standalone", "os:Linux 6.8.0-1016-gcp x86_64",
                   "arch_bits:64", "process_id:1", f"run_id:{r.uid.replace('-', '')[:40]:0<40}",
                   "tcp_port:6379", f"uptime_in_seconds:{up}", f"uptime_in_days:{up // 86400}",
                   "executable:/opt/bitnami/redis/bin/redis-server",
                   "config_file:/opt/bitnami/redis/etc/redis.conf"],
        "clients": ["connected_clients:3", "blocked_clients:1", "maxclients:10000"],
        "memory": [f"used_memory:{int(used)}", f"used_memory_human:{human_bytes(used)}",
                   f"used_memory_rss:{int(used * 1.6 + 4_000_000)}",
                   f"used_memory_peak:{int(max(r.peak, used))}",
                   f"used_memory_peak_human:{human_bytes(max(r.peak, used))}",
                   f"used_memory_dataset:{int(max(0.0, used - r.base_bytes * 0.8))}",
                   f"maxmemory:{r.maxmemory}", f"maxmemory_human:{human_bytes(r.maxmemory)}",
                   f"maxmemory_policy:{r.policy}", "mem_fragmentation_ratio:1.62", "mem_allocator:jemalloc-5.3.0"],
        "persistence": ["loading:0", f"aof_enabled:{int(r.get('appendonly') == 'yes')}", "aof_rewrite_in_progress:0",
                        "rdb_bgsave_in_progress:0", "rdb_last_bgsave_status:ok", "aof_last_write_status:ok"],
        "stats": [f"total_connections_received:{int(r.stats.get('total_connections_received', 0)) + 12}",
                  f"total_commands_processed:{int(r.stats.get('total_commands_processed', 0))}",
                  f"evicted_keys:{int(r.stats.get('evicted_keys', 0))}",
                  f"rejected_connections:0", "expired_keys:0"],
        "replication": ["role:master", f"connected_slaves:{r.connected_replicas()}"]
        + [f"slave{i}:ip=10.42.0.{40 + i},port=6379,state=online,offset=0,lag=0"
           for i in range(r.connected_replicas())]
        + ([f"min_slaves_good_slaves:{r.connected_replicas()}"] if int(r.get("min-replicas-to-write") or 0) > 0
           else [])
        + ["master_failover_state:no-failover", "master_replid:" + ("0" * 40), "master_repl_offset:0"],
        "errorstats": [f"errorstat_{k}:count={int(v)}" for k, v in
                       (("OOM", r.stats.get("rejected_oom", 0)), ("NOPERM", r.stats.get("rejected_noperm", 0)),
                        ("NOREPLICAS", r.stats.get("rejected_noreplicas", 0))) if v],
        "keyspace": [f"db0:keys={r._keys()},expires={int(round(r.jobs.finished_count)) if r.jobs else 0},"
                     "avg_ttl=0"] if r._keys() else [],
    }
    order = ["server", "clients", "memory", "persistence", "stats", "replication", "errorstats", "keyspace"]
    if sections in (["default"], ["all"], ["everything"]):
        want = order
    else:
        want = [s for s in sections if s in blocks]
    out = []
    for s in want:
        out.append(f"# {s.capitalize() if s != 'errorstats' else 'Errorstats'}")
        out += blocks[s]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n" if out else ""


def start_script(r: RedisServer) -> str:
    """The Bitnami start-master.sh as rendered from the current Helm values (what the next start runs)."""
    _, flags = r.render()
    args = " ".join(flags)
    return ("#!/bin/bash\n\n[[ -f $REDIS_PASSWORD_FILE ]] && export REDIS_PASSWORD=\"$(< \"${REDIS_PASSWORD_FILE}\")\"\n"
            "if [[ -f /opt/bitnami/redis/mounted-etc/master.conf ]];then\n"
            "    cp /opt/bitnami/redis/mounted-etc/master.conf /opt/bitnami/redis/etc/master.conf\nfi\n"
            "if [[ -f /opt/bitnami/redis/mounted-etc/redis.conf ]];then\n"
            "    cp /opt/bitnami/redis/mounted-etc/redis.conf /opt/bitnami/redis/etc/redis.conf\nfi\n"
            "ARGS=(\"--port\" \"${REDIS_PORT}\")\nARGS+=(\"--protected-mode\" \"no\")\n"
            "ARGS+=(\"--include\" \"/opt/bitnami/redis/etc/redis.conf\")\n"
            "ARGS+=(\"--include\" \"/opt/bitnami/redis/etc/master.conf\")\n"
            + (f"ARGS+=({args})\n" if args else "")
            + "exec redis-server \"${ARGS[@]}\"\n")


def conf_text(conf: dict[str, str]) -> str:
    return "".join(f"{k} {v}\n" for k, v in conf.items())
