"""What the guard reads before it decides a mutating command (verifiers.observe), and the rules that use it:
SRE-CAP-006 (a capacity lowered below where the session found it), SRE-SCOPE-005 (a setting changed again in a
wider scope than this session already changed it in) and SUB-REDIS-005 (a job pushed onto a queue it is still in).

The unit tests use stub environments; the last ones run the guard on the twin, whose operator shell answers the
reads. Nothing here reads a grader.
"""

from __future__ import annotations

from typing import Any

import pytest

from guardrail.journal import Journal
from verifiers.observe import observe, prior_snapshots
from verifiers.protocols import CommandResult


class Clock:
    def now(self) -> float:
        return 0.0


class LposEnv:
    """Answers `redis-cli ... LPOS <list> <member>` from a dict of lists, and records every command."""

    def __init__(self, lists: dict[str, list[str]], fail: bool = False):
        self.lists = lists
        self.fail = fail
        self.ran: list[str] = []
        self.clock = Clock()

    def run(self, command: str) -> CommandResult:
        self.ran.append(command)
        if self.fail:
            return CommandResult(command, stderr="Could not connect", exit_code=1)
        words = command.split()
        i = words.index("LPOS")
        lst, member = words[i + 1], words[i + 2]
        items = self.lists.get(lst, [])
        return CommandResult(command, stdout=f"{items.index(member)}\n" if member in items else "\n")


def push_action(raw: str, members: list[str], verb: str = "rpush") -> dict[str, Any]:
    return {"tool": "redis-cli", "verb": verb, "mutating": True, "raw": raw, "keys": [],
            "target": {"kind": "component", "name": "redis-queue"},
            "details": {"command": " ".join([verb.upper(), "rq:queue:long", *members]), "keys": ["rq:queue:long"]}}


def test_a_push_reads_each_members_position_with_the_agents_connection_options():
    env = LposEnv({"rq:queue:long": ["a", "b"]})
    raw = "redis-cli -h redis-queue -p 6380 RPUSH rq:queue:long b c"
    (obs,) = observe(env, None, [push_action(raw, ["b", "c"])], reader=None)
    assert obs == {"lists": {"rq:queue:long": {"b": 1, "c": None}}}
    assert env.ran == ["redis-cli -h redis-queue -p 6380 LPOS rq:queue:long b",
                       "redis-cli -h redis-queue -p 6380 LPOS rq:queue:long c"]


def test_an_unreadable_list_says_nothing():
    env = LposEnv({}, fail=True)
    (obs,) = observe(env, None, [push_action("redis-cli -h redis-queue RPUSH rq:queue:long a", ["a"])], reader=None)
    assert obs == {}


def test_read_only_actions_are_not_observed():
    env = LposEnv({})
    (obs,) = observe(env, None, [{"tool": "redis-cli", "verb": "llen", "mutating": False}], reader=None)
    assert obs == {} and env.ran == []


class StubReader:
    """The persistence reader's capture(): each key's value now, from a dict."""

    def __init__(self, values: dict[str, Any]):
        self.values = values

    def capture(self, env, action):
        return [{"key": k["key"], "scope": dict(k.get("scope") or {}), "target": "", "before": self.values[k["key"]]}
                for k in action.get("keys") or ()]


def journal_with(*entries: tuple[str, list[dict[str, Any]], list[dict[str, Any]]]) -> Journal:
    """A journal holding executed commands (command, actions, snapshots taken before it ran)."""
    j = Journal(None, clock=Clock())
    for command, actions, snaps in entries:
        rec = j.append("command", command=command, actions=actions, ran=True)
        for s in snaps:
            j.append("snapshot", **s)
        j.append("result", ref=rec["seq"], exit_code=0)
    return j


def pool_action(value: int) -> dict[str, Any]:
    return {"tool": "restart-svc.sh", "verb": "apply", "mutating": True,
            "keys": [{"key": "app.roles.auth.db.pool_size", "value": value, "scope": {"role": "auth"}}]}


def test_keys_carry_their_value_now_and_when_the_session_first_changed_them():
    j = journal_with(("raise", [pool_action(30)],
                      [{"key": "app.roles.auth.db.pool_size", "scope": {"role": "auth"}, "before": 20}]))
    (obs,) = observe(LposEnv({}), j, [pool_action(20)], reader=StubReader({"app.roles.auth.db.pool_size": 30}))
    assert obs["keys"] == [{"key": "app.roles.auth.db.pool_size", "scope": {"role": "auth"}, "target": "",
                            "before": 30, "initial": 20}]
    assert obs["earlier"] == [{"key": "app.roles.auth.db.pool_size", "scope": {"role": "auth"}, "value": 30,
                               "seq": 1}]
    # What the guard journals before the command runs comes from the same read, without `initial`.
    assert prior_snapshots([obs]) == [{"key": "app.roles.auth.db.pool_size", "scope": {"role": "auth"}, "target": "",
                                       "before": 30}]


def test_earlier_changes_are_those_of_the_same_keys_only():
    other = {"tool": "psql", "verb": "alter role", "mutating": True,
             "keys": [{"key": "postgres.lock_timeout", "value": "1s", "scope": {"role": "app"}}]}
    j = journal_with(("other", [other], []))
    (obs,) = observe(LposEnv({}), j, [pool_action(20)], reader=StubReader({"app.roles.auth.db.pool_size": 20}))
    assert "earlier" not in obs and obs["keys"][0]["initial"] == 20


def test_earlier_changes_are_those_of_the_same_target_only():
    def maxmemory(host: str, value: str) -> dict:
        return {"tool": "redis-cli", "verb": "config set", "mutating": True, "target": {"name": host},
                "keys": [{"key": "redis.maxmemory", "value": value, "scope": {}}]}

    j = journal_with(*((f"set {h}", [maxmemory(h, "64mb")], []) for h in ("cache-1", "cache-2", "queue")))
    (obs,) = observe(LposEnv({}), j, [maxmemory("queue", "128mb")], reader=None)
    assert [e["seq"] for e in obs["earlier"]] == [5]  # the queue's own earlier change, not the caches'


# -- the guard on the twin ------------------------------------------------------------------------------------------

def twin_guard(sid: str):
    from arena import scenario
    from arena.bench.guarding import bench_guard_factory
    from arena.world import TwinWorld

    sc = scenario.load_scenario(sid)
    env = TwinWorld.build(sc.twin, 0).env
    return bench_guard_factory(env, sc.public)


def denied(guard, command: str) -> list[str]:
    with guard.journal.batch():
        adm = guard.before(command)
        if adm.runs:
            guard.prepare(adm)
    if adm.runs:
        guard.after(adm, guard.env.run(command))
    return [f.id for f in adm.denies]


@pytest.mark.slow
def test_twin_lowering_a_healthy_pool_is_denied_and_raising_one_is_not():
    g = twin_guard("ia-009")
    assert "SRE-CAP-006" in denied(g, """echo '{"db":{"pool_size":16,"max_overflow":8}}' | restart-svc.sh auth""")
    g = twin_guard("ia-012")  # the channel pool starts at 12/2: 10/5 is one connection more
    assert denied(g, """echo '{"db":{"pool_size":10,"max_overflow":5}}' | restart-svc.sh channel""") == []


@pytest.mark.slow
def test_twin_widening_a_setting_already_reset_for_its_role_is_denied():
    g = twin_guard("ia-006")
    dsn = 'psql "$DB_ADMIN_DSN" -c'
    assert denied(g, f'{dsn} "ALTER ROLE saleor_app IN DATABASE saleor RESET statement_timeout"') == []
    assert "SRE-SCOPE-005" in denied(g, f"""{dsn} "ALTER SYSTEM SET statement_timeout = '5s'" """)
    assert "SRE-SCOPE-005" in denied(g, f'{dsn} "ALTER DATABASE saleor SET statement_timeout = 0"')
    assert denied(g, f"{dsn} \"ALTER ROLE saleor_app IN DATABASE saleor SET statement_timeout = '2s'\"") == []


@pytest.mark.slow
def test_twin_pushing_back_a_job_still_queued_is_denied_and_a_stranded_one_is_not():
    g = twin_guard("ia-005")
    queued = g.env.run("redis-cli -h redis-queue LRANGE rq:queue:long 0 0").stdout.split()[0]
    stranded = "72ff317c-1685-18c2-401a-c05c7119bc89"  # its job hash is queued; LPOS does not find it
    assert g.env.run(f"redis-cli -h redis-queue LPOS rq:queue:long {stranded}").stdout.strip() == ""
    assert "SUB-REDIS-005" in denied(g, f"redis-cli -h redis-queue RPUSH rq:queue:long {stranded} {queued}")
    assert denied(g, f"redis-cli -h redis-queue RPUSH rq:queue:long {stranded}") == []


# -- the incremental journal read (JournalLog) answers as the whole-journal read does ------------------------------


def _random_session(journal: Journal, rng: Any, n: int) -> None:
    """Commands (some mutating, some failing, some never answered), results in and out of command order,
    duplicate results, and snapshots of the keys."""
    keys = ["maxmemory", "pool_size", "work_mem", "timeout"]
    pending: list[int] = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.45:
            acts = []
            for _ in range(rng.randint(1, 2)):
                k = rng.choice(keys)
                acts.append({"tool": "psql", "verb": "alter", "mutating": rng.choice([True, True, False, "unknown"]),
                             "layer": "declared", "target": {"name": rng.choice(["db", "db2", None])},
                             "keys": [{"key": k, "scope": rng.choice([{}, {"role": "app"}]),
                                       "value": rng.randint(1, 99)}]})
            rec = journal.append("command", command=f"cmd {len(journal)}", actions=acts, ran=rng.random() < 0.85)
            if rec["ran"]:
                pending.append(rec["seq"])
        elif roll < 0.8 and pending:
            ref = pending.pop(rng.randrange(len(pending)) if rng.random() < 0.3 else 0)
            journal.append("result", ref=ref, exit_code=rng.choice([0, 0, 0, 1, None]))
            if rng.random() < 0.05:
                journal.append("result", ref=ref, exit_code=1)  # a second result of the same command
        elif roll < 0.9:
            journal.append("snapshot", key=rng.choice(keys), scope=rng.choice([{}, {"role": "app"}]),
                           before=rng.randint(1, 99))
        else:
            journal.append("declare")


@pytest.mark.parametrize("seed", range(6))
def test_the_incremental_journal_log_matches_the_whole_journal_read(tmp_path, seed):
    import random

    from verifiers.observe import JournalLog, _ident
    from verifiers.persistence import changed_keys

    def _snapshots(journal) -> dict:
        """The whole-journal read: the earliest snapshot record of each key and scope."""
        first: dict = {}
        for r in journal.records():
            if r.get("kind") == "snapshot":
                first.setdefault(_ident(r.get("key"), r.get("scope")), r)
        return first

    rng = random.Random(seed)
    # File-backed: more records than the journal keeps in memory between two reads exercise since()'s file path.
    journal = Journal(tmp_path / "j.jsonl", clock=Clock())
    log = JournalLog()
    for _ in range(12):
        _random_session(journal, rng, rng.choice([5, 40, 400]))
        log.update(journal)
        assert log.changes() == changed_keys(journal)
        for names in ({"maxmemory"}, {"pool_size", "timeout"}, set()):
            assert log.changes(names) == [c for c in changed_keys(journal) if c.key in names]
        assert log.first_snapshots == _snapshots(journal)
    journal.close()


def test_observe_gives_the_same_documents_with_and_without_the_incremental_log(tmp_path):
    import random

    from verifiers.observe import JournalLog

    class Reader:
        def capture(self, env: Any, action: Any) -> list:
            return [{"key": k["key"], "scope": dict(k.get("scope") or {}), "before": 7} for k in action["keys"]]

    rng = random.Random(3)
    journal = Journal(tmp_path / "j.jsonl", clock=Clock())
    log = JournalLog()
    for _ in range(30):
        _random_session(journal, rng, 20)
        act = {"tool": "psql", "verb": "alter", "mutating": True, "layer": "declared", "target": {"name": "db"},
               "keys": [{"key": rng.choice(["maxmemory", "work_mem"]), "scope": {}, "value": 1}]}
        assert observe(None, journal, [act], Reader(), log) == observe(None, journal, [act], Reader())
    journal.close()
