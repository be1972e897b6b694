"""What the guard reads before it decides a mutating command: the state the action is about to change, as an
operator would read it, and what this session already changed. The policies see it as `input.observed`.

A policy decides one action at a time and knows nothing of the system. Some changes are only out of scope
given the state they land on, and each fact here is one an operator reads before changing anything:

- `keys`: each changed key's value now (`before`, the persistence catalogue's effective read, the same read the
  guard journals as a `snapshot` before a change runs) and its value when this session first touched it
  (`initial`: the earliest snapshot of that key and scope in the journal, else `before`). Rules compare the new
  value with them (a capacity lowered below where the session found it).
- `earlier`: the changes this session already made to the same keys on the same target, with their scopes
  (role, database), from the journal. A rule tells a change that widens the scope of an earlier one (ALTER
  SYSTEM after ALTER ROLE ... IN DATABASE of the same setting).
- `lists`: for a push onto a Redis list, the position of each pushed member already in the list (LPOS), null
  when it is not there. A rule tells a re-delivery of a job that is still queued.

Nothing here reads a grader or recognises a command: the reads are the catalogue's operator commands and LPOS.

The journal facts come from a `JournalLog` that reads the journal incrementally (`since()`, as the watchdog's
StepLog does), so a decision costs the same however long the session has run; a caller that passes none gets a
fresh one, which reads the whole journal.
"""

from __future__ import annotations

import shlex
from typing import Any, Mapping, Sequence

from verifiers.base import is_mutating_action
from verifiers.persistence import ChangedKey, PersistenceReader, changes_of, redis_connection_args
from verifiers.protocols import Environment

__all__ = ["observe", "JournalLog", "PUSH_VERBS"]

PUSH_VERBS = frozenset({"lpush", "rpush", "lpushx", "rpushx"})
# At most this many members of one push are looked up (one LPOS each).
MAX_MEMBERS = 32


def observe(env: Environment, journal: Any, actions: Sequence[Mapping[str, Any]],
            reader: PersistenceReader | None, log: "JournalLog | None" = None) -> list[dict[str, Any]]:
    """One `observed` document per action ({} for a read-only one or when there is nothing to say). `log`
    carries what earlier calls read of the same journal."""
    log = log if log is not None else JournalLog()
    if journal is not None:
        log.update(journal)
    names_all = {str(k.get("key")) for a in actions if is_mutating_action(a) for k in a.get("keys") or ()}
    changes, snaps = log.changes(names_all), log.first_snapshots
    out = []
    for a in actions:
        if not is_mutating_action(a):
            out.append({})
            continue
        obs: dict[str, Any] = {}
        prior = reader.capture(env, a) if reader is not None else []
        if prior:
            for p in prior:
                first = snaps.get(_ident(p.get("key"), p.get("scope")))
                p["initial"] = first["before"] if first is not None else p.get("before")
            obs["keys"] = prior
        names = {str(k.get("key")) for k in a.get("keys") or ()}
        # Only the same target's: a setting on another server is not a wider or narrower scope of this one, and
        # a session that touches many servers would otherwise carry all of them into every decision.
        where = str((a.get("target") or {}).get("name") or "")
        earlier = [{"key": c.key, "scope": dict(c.scope), "value": c.value, "seq": c.seq}
                   for c in changes if c.key in names
                   and (not where or not c.target.get("name") or str(c.target.get("name")) == where)]
        if earlier:
            obs["earlier"] = earlier
        lists = _list_positions(env, a)
        if lists:
            obs["lists"] = lists
        out.append(obs)
    return out


def prior_snapshots(observed: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The `snapshot` records the guard journals before a command runs, from what observe() already read."""
    return [{k: v for k, v in p.items() if k != "initial"} for o in observed for p in o.get("keys") or ()]


def _ident(key: Any, scope: Any) -> tuple:
    return (str(key), tuple(sorted((str(k), str(v)) for k, v in dict(scope or {}).items())))


class JournalLog:
    """What observe() needs of one journal, read incrementally: the same answers as `changed_keys(journal)` and the
    earliest `snapshot` record of each key and scope, at a cost per call that does not grow with the session."""

    def __init__(self) -> None:
        self.journal_id: int | None = None
        self.last_seq = 0
        self._awaiting: dict[int, Mapping[str, Any]] = {}  # commands that ran, until their result
        # By key name, the last change of each key (ChangedKey.ident), with its order (command seq, place in the
        # command): a result that arrives out of command order does not override a later command's change.
        self._changes: dict[str, dict[tuple, tuple[tuple[int, int], ChangedKey]]] = {}
        self.first_snapshots: dict[tuple, Mapping[str, Any]] = {}

    def update(self, journal: Any) -> None:
        if self.journal_id != id(journal):
            self.__init__()
            self.journal_id = id(journal)
        since = getattr(journal, "since", None)
        new = since(self.last_seq) if since is not None else [
            r for r in journal.records() if int(r.get("seq") or 0) > self.last_seq]
        for r in new:
            seq = int(r.get("seq") or 0)
            if seq <= self.last_seq:
                continue
            self.last_seq = seq
            kind = r.get("kind")
            if kind == "command" and r.get("ran"):
                self._awaiting[seq] = r
            elif kind == "result":
                cmd = self._awaiting.pop(r.get("ref"), None)  # the first result of a command counts, as executed()
                if cmd is None:
                    continue
                for i, ck in enumerate(changes_of(cmd, r.get("exit_code"))):
                    order = (ck.seq, i)
                    of_key = self._changes.setdefault(ck.key, {})
                    have = of_key.get(ck.ident)
                    if have is None or have[0] < order:
                        of_key[ck.ident] = (order, ck)
            elif kind == "snapshot":
                self.first_snapshots.setdefault(_ident(r.get("key"), r.get("scope")), r)

    def changes(self, names: Any = None) -> list[ChangedKey]:
        """As changed_keys(journal), of the keys named in `names` (all when None): last change wins, in the order
        of the last changes."""
        groups = self._changes.values() if names is None else [self._changes.get(n) or {} for n in names]
        return [ck for _, ck in sorted((oc for g in groups for oc in g.values()), key=lambda oc: oc[0])]


def _list_positions(env: Environment, action: Mapping[str, Any]) -> dict[str, dict[str, int | None]]:
    """{list: {member: position or None}} for a redis-cli push, read with LPOS before it runs."""
    if str(action.get("tool") or "").lower() != "redis-cli" or str(action.get("verb") or "").lower() not in PUSH_VERBS:
        return {}
    details = action.get("details") or {}
    try:
        words = shlex.split(str(details.get("command") or ""))
    except ValueError:
        return {}
    if len(words) < 3:
        return {}
    key, members = words[1], list(dict.fromkeys(words[2:]))[:MAX_MEMBERS]
    prefix = _connection_args(str(action.get("raw") or ""), action)
    if prefix is None:
        return {}
    found: dict[str, int | None] = {}
    for m in members:
        res = env.run(" ".join(["redis-cli", *prefix, "LPOS", shlex.quote(key), shlex.quote(m)]))
        if not res.ok:
            return {}  # unreadable: say nothing rather than guess
        text = res.stdout.strip()
        found[m] = int(text) if text.lstrip("-").isdigit() else None
    return {key: found}


def _connection_args(raw: str, action: Mapping[str, Any]) -> list[str] | None:
    """The redis-cli connection options of the agent's own command, else `-h <target>`, for the read."""
    keep = redis_connection_args(raw)
    if keep == []:
        host = ((action.get("target") or {}).get("name"))
        if host:
            keep = ["-h", shlex.quote(str(host))]
    return keep
