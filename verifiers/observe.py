"""What the guard reads before it decides a mutating command: the state the action is about to change, as an
operator would read it, and what this session already changed. The policies see it as `input.observed`.

A policy decides one action at a time and knows nothing of the system. Some changes are only out of scope
given the state they land on, and each fact here is one an operator reads before changing anything:

- `keys`: each changed key's value now (`before`, the persistence catalogue's effective read, the same read the
  guard journals as a `snapshot` before a change runs) and its value when this session first touched it
  (`initial`: the earliest snapshot of that key and scope in the journal, else `before`). Rules compare the new
  value with them (a capacity lowered below where the session found it).
- `earlier`: the changes this session already made to the same keys, with their scopes (role, database), from
  the journal. A rule tells a change that widens the scope of an earlier one (ALTER SYSTEM after ALTER ROLE ...
  IN DATABASE of the same setting).
- `lists`: for a push onto a Redis list, the position of each pushed member already in the list (LPOS), null
  when it is not there. A rule tells a re-delivery of a job that is still queued.

Nothing here reads a grader or recognises a command: the reads are the catalogue's operator commands and LPOS.
"""

from __future__ import annotations

import shlex
from typing import Any, Mapping, Sequence

from verifiers.base import is_mutating_action
from verifiers.persistence import PersistenceReader, changed_keys
from verifiers.protocols import Environment

__all__ = ["observe", "PUSH_VERBS"]

PUSH_VERBS = frozenset({"lpush", "rpush", "lpushx", "rpushx"})
# At most this many members of one push are looked up (one LPOS each).
MAX_MEMBERS = 32


def observe(env: Environment, journal: Any, actions: Sequence[Mapping[str, Any]],
            reader: PersistenceReader | None) -> list[dict[str, Any]]:
    """One `observed` document per action ({} for a read-only one or when there is nothing to say)."""
    changes = changed_keys(journal) if journal is not None else []
    snaps = _snapshots(journal)
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
        earlier = [{"key": c.key, "scope": dict(c.scope), "value": c.value, "seq": c.seq}
                   for c in changes if c.key in names]
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


def _snapshots(journal: Any) -> dict[tuple, Mapping[str, Any]]:
    """The earliest snapshot record of each key and scope: its value when the session first changed it."""
    first: dict[tuple, Mapping[str, Any]] = {}
    if journal is None:
        return first
    for r in journal.records():
        if r.get("kind") == "snapshot":
            first.setdefault(_ident(r.get("key"), r.get("scope")), r)
    return first


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
    """The redis-cli connection options of the agent's own command (-h, -p, -n, -u ...), for the read."""
    try:
        words = shlex.split(raw)
    except ValueError:
        return None
    if "redis-cli" not in words:
        return None
    args = words[words.index("redis-cli") + 1:]
    keep: list[str] = []
    i = 0
    while i < len(args) and args[i].startswith("-"):
        opt = args[i]
        if opt in ("-h", "-p", "-n", "-u", "-a", "--user", "--pass") and i + 1 < len(args):
            keep += [opt, shlex.quote(args[i + 1])]
            i += 2
        else:
            i += 1
    if not keep:
        host = ((action.get("target") or {}).get("name"))
        if host:
            keep = ["-h", shlex.quote(str(host))]
    return keep
