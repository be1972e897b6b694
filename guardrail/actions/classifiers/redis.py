"""redis-cli (and valkey-cli): CONFIG SET -> `redis.<param>` (runtime), ACL SETUSER -> `redis.acl.<user>`, ...

Registered for `redis-cli`, `valkey-cli`, `keydb-cli`; called by `Normaliser.dispatch`. Commands come from argv
or, with no command words, one per line on stdin (a heredoc, `echo FLUSHALL | redis-cli`). Command classes
(read, data, destructive, server, opaque) come from catalogue.yaml; an unlisted command is unknown.
CONFIG SET and ACL SETUSER land in the runtime layer; CONFIG REWRITE and ACL SAVE make them declared.
"""

from __future__ import annotations

import re
import shlex
from typing import Any
from urllib.parse import urlsplit

from guardrail.actions.catalogue import catalogue
from guardrail.actions.classifiers.base import OptionSpec, register
from guardrail.actions.invocation import Invocation, Unreadable, stdin_at_decision
from guardrail.actions.model import UNKNOWN, Action, KeyChange, Layer, Target

__all__ = ["RedisCli", "redis_command"]

_SPEC = OptionSpec.of(
    ["-h", "-p", "-a", "-n", "-u", "-s", "-r", "-i", "-d", "-D", "-t", "--user", "--pass", "--cacert", "--cert",
     "--key", "--sni", "--eval", "--pattern", "--count", "--quoted-pattern", "--rdb", "--functions-rdb",
     "--pipe-timeout", "--memkeys-samples", "--intrinsic-latency", "--lru-test", "--cluster", "--cacertdir",
     "--tls-ciphers", "--tls-ciphersuites", "--keystats-samples", "--cursor", "--top"],
    {"--pass": "-a"}, stop_at_positional=True)

# Commands whose first argument is a sub-command (CONFIG SET, ACL SETUSER, CLIENT KILL ...).
_CONTAINERS = frozenset({"CONFIG", "ACL", "CLIENT", "SLOWLOG", "MEMORY", "LATENCY", "CLUSTER", "MODULE", "FUNCTION",
                         "SCRIPT", "XGROUP", "XINFO", "OBJECT", "COMMAND", "PUBSUB", "DEBUG"})
_READ_MODES = ("--scan", "--bigkeys", "--memkeys", "--hotkeys", "--keystats", "--stat", "--latency",
               "--latency-history", "--latency-dist", "--intrinsic-latency", "--lru-test", "--replica", "--slave",
               "--rdb", "--functions-rdb", "--help", "--version", "-v")


# Data commands that replace what a key holds (SET of a list key drops the list; LSET replaces one element).
_OVERWRITES = frozenset({"SET", "SETEX", "PSETEX", "GETSET", "MSET", "LSET"})


# What takes queued work out of a queue for good. A job queue is a list or a stream (RQ, Sidekiq, Resque, Celery's
# Redis transport, Bull's wait lists); a list or stream command names its key's type: a pop, trim, LREM, LSET or
# XDEL/XTRIM there loses or overwrites queued entries. A pop that pushes the member onto another list (RPOPLPUSH,
# LMOVE) or SMOVE keeps it, so a move is not a loss.
_LIST_LOSS = frozenset({"LPOP", "RPOP", "BLPOP", "BRPOP", "LTRIM", "LREM", "LSET", "XDEL", "XTRIM"})
# Commands on a key of any type (its type is not in the command) that delete, expire, rename away or replace it.
_KEY_LOSS = frozenset({"DEL", "UNLINK", "GETDEL", "EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT", "RENAME",
                       "RENAMENX", "MOVE"})
# Job libraries name the keys that hold jobs after them: rq:queue:default, rq:job:<id>, queue:default (Sidekiq),
# resque:queue:x, queues:default (Laravel). Other keys (worker registrations, registries, locks, stats) do not.
_WORK_WORDS = frozenset({"queue", "queues", "job", "jobs"})
_NAME_WORDS = re.compile(r"[^a-z0-9]+")


def _drops_queued_work(cmd: str, words: list[str], overwrites: bool) -> bool:
    """Does this data command lose or overwrite queued work: entries of a list or stream, or a key of unknown type
    that is named as a queue or a job?"""
    if cmd in _LIST_LOSS:
        return True
    if cmd not in _KEY_LOSS and not overwrites:
        return False
    if cmd in ("DEL", "UNLINK"):
        keys = words[1:]
    elif cmd == "MSET":
        keys = words[1::2]
    elif cmd in ("RENAME", "RENAMENX"):
        keys = words[1:3]  # the source leaves where the app reads it; RENAME replaces the destination
    elif cmd == "COPY":
        keys = words[2:3]  # COPY ... REPLACE replaces the destination
    else:
        keys = words[1:2]
    return any(_WORK_WORDS.intersection(_NAME_WORDS.split(k.lower())) for k in keys)


def _kills_many(args: list[str]) -> bool:
    """CLIENT KILL's filters (`TYPE normal`, `USER u`, `ID 7`, `ADDR ip:port` ...) match more than one client named
    by its id or address; the old form `CLIENT KILL ip:port` names one."""
    if len(args) < 2:
        return False
    filters = {args[i].upper() for i in range(0, len(args) - 1, 2)}
    return not filters & {"ID", "ADDR"}


def redis_command(inv: Invocation, words: list[str], target: Target, base: dict[str, Any]) -> Action:
    """One redis command (its words) as an Action."""
    if not words:
        return inv.action("redis-cli", "noop", target=target, mutating=False, details=base)
    cmd = words[0].upper()
    two = f"{cmd} {words[1].upper()}" if len(words) > 1 else cmd
    cat = catalogue().redis
    container = cmd in _CONTAINERS and len(words) > 1
    verb = two.lower() if container else cmd.lower()
    kind = cat.kind_of(two) if container else cat.kind_of(cmd)
    if kind is None and container:
        kind = cat.kind_of(cmd)
    details = dict(base)
    details["command"] = " ".join(words)  # whole: a rule reading a cut-off command could miss its last words

    def act(mutating: Any, layer: Layer = Layer.NONE, keys: list[KeyChange] | None = None,
            reason: str | None = None) -> Action:
        return inv.action("redis-cli", verb, target=target, keys=keys or [], layer=layer, mutating=mutating,
                          opaque_reason=reason, details=details)

    if two == "CONFIG SET":
        pairs = words[2:]
        keys = [KeyChange(key=f"redis.{pairs[i].lower()}", value=pairs[i + 1] if i + 1 < len(pairs) else None)
                for i in range(0, len(pairs), 2)]
        return act(True, Layer.RUNTIME, keys)
    if two == "CONFIG REWRITE":
        details["persists_runtime"] = True
        return act(True, Layer.DECLARED)
    if two == "ACL SETUSER" and len(words) > 2:
        user = words[2]
        details["user"] = user
        details["rules"] = words[3:]
        return act(True, Layer.RUNTIME, [KeyChange(key=f"redis.acl.{user}", value=" ".join(words[3:]))])
    if two == "ACL DELUSER":
        details["users"] = words[2:]
        return act(True, Layer.RUNTIME, [KeyChange(key=f"redis.acl.{u}", value=None) for u in words[2:]])
    if two == "ACL SAVE":
        details["persists_runtime"] = True
        return act(True, Layer.DECLARED)
    if kind == "read":
        if cmd == "KEYS":
            details["pattern"] = words[1] if len(words) > 1 else ""
        if cmd == "MONITOR":
            details["streams_all_commands"] = True
        return act(False)
    if kind == "destructive":
        details["destructive"] = True
        return act(True, Layer.DECLARED)
    if kind == "server":
        if cmd == "SHUTDOWN":
            details["restart"] = True
        if two == "CLIENT KILL" and _kills_many(words[2:]):
            # CLIENT KILL TYPE normal / USER app / LADDR ... / MAXAGE n: every client the filter matches, not one
            # named by ID or ADDR (or the old single ip:port form).
            details["broad"] = True
        if cmd == "FAILOVER" and "ABORT" not in (w.upper() for w in words[1:]):
            # The primary hands over to a replica and becomes one itself: its clients' writes fail (READONLY).
            details["demotes"] = True
        # REPLICAOF host port: the server drops its whole dataset and copies another's (NO ONE promotes it).
        if cmd in ("REPLICAOF", "SLAVEOF") and [w.upper() for w in words[1:3]] != ["NO", "ONE"]:
            details["destructive"] = True
        return act(True, Layer.NONE)
    if cmd == "MIGRATE" and "COPY" not in (w.upper() for w in words[6:]):
        # MIGRATE moves keys to another server: without COPY they are deleted here.
        details["destructive"] = True
        return act(True, Layer.DECLARED)
    if kind == "data":
        if cmd in _OVERWRITES or cmd in ("RESTORE", "COPY") and "REPLACE" in (w.upper() for w in words[2:]):
            details["overwrites"] = True  # a key's whole value (or a list's element) replaced by another
        if _drops_queued_work(cmd, words, details.get("overwrites") is True):
            details["drops_queued_work"] = True
        if len(words) > 1:
            details["keys"] = words[1:2] if cmd not in ("DEL", "UNLINK", "MSET", "EXISTS") else \
                (words[1:] if cmd != "MSET" else words[1::2])
        return act(True, Layer.DECLARED)
    if kind == "opaque":
        return act(UNKNOWN, reason=f"{verb.upper()} runs server-side code or a batch whose effect is not visible")
    return act(UNKNOWN, reason=f"redis command {cmd!r} is not one the guard knows")


# Commands whose reply is an integer, and how many arguments they take (None: one or more): what redis-cli prints
# for them is a number (`c=$(redis-cli LLEN queue); echo $((c / 60))`). --no-raw would print "(integer) 5".
_COUNTS: dict[str, int | None] = {"LLEN": 1, "SCARD": 1, "ZCARD": 1, "HLEN": 1, "XLEN": 1, "STRLEN": 1, "DBSIZE": 0,
                                  "EXISTS": None}


@register
class RedisCli:
    """redis-cli and its forks."""

    commands = ("redis-cli", "valkey-cli", "keydb-cli")

    def prints_number(self, inv: Invocation) -> bool:
        """A command of `_COUNTS` with its arguments, each one word, and no mode that prints something else."""
        p = _SPEC.parse(inv.args)
        words = list(p.positionals) + list(p.after_dashdash or [])
        if not words or words[0].dynamic or any(w.splits for w in words) or inv.args_pending:
            return False
        if "--no-raw" in p.flags or "--pipe" in p.flags or "-x" in p.flags or p.get("--eval") is not None \
                or p.get("--cluster") is not None or any(m in p.flags or m in p.opts for m in _READ_MODES):
            return False
        arity = _COUNTS.get(str(words[0]).upper(), -1)
        return arity != -1 and (len(words) - 1 == arity if arity is not None else len(words) > 1)

    def classify(self, inv: Invocation) -> list[Action]:
        p = _SPEC.parse(inv.args)
        host = p.get("-h")
        if p.get("-u") is not None:
            try:
                host = urlsplit(str(p.get("-u"))).hostname or host
            except ValueError:
                pass
        target = inv.service_target(str(host) if host is not None else None, "redis")
        base: dict[str, Any] = {}
        for opt, name in (("-p", "port"), ("-n", "db"), ("--user", "user")):
            if p.get(opt) is not None:
                base[name] = str(p.get(opt))
        words = [str(w) for w in p.positionals]
        if p.after_dashdash:
            words += [str(w) for w in p.after_dashdash]
        if p.get("--eval") is not None:
            return [inv.action("redis-cli", "eval", target=target, mutating=UNKNOWN, details=base,
                               opaque_reason=f"--eval runs the Lua script {p.get('--eval')}, whose effect is not "
                                             "visible")]
        if p.get("--cluster") is not None:
            sub = str(p.get("--cluster"))
            return [inv.action("redis-cli", f"cluster {sub}", target=target, details=base,
                               mutating=sub not in ("check", "info", "help"),
                               layer=Layer.NONE)]
        if "--pipe" in p.flags:
            return [inv.action("redis-cli", "pipe", target=target, mutating=UNKNOWN, details=base,
                               opaque_reason="--pipe sends raw protocol from stdin; its commands are not visible")]
        if words:
            if "-x" in p.flags:
                try:  # a heredoc, a pipe from echo, `< file` read now: the same last argument
                    words.append(stdin_at_decision(inv.stdin, inv.where).rstrip("\n"))
                except Unreadable:
                    words.append("<stdin>")
            return [redis_command(inv, words, target, base)]
        if any(m in p.flags or m in p.opts for m in _READ_MODES):
            mode = next(m for m in _READ_MODES if m in p.flags or m in p.opts)
            return [inv.action("redis-cli", mode.lstrip("-"), target=target, mutating=False, details=base)]
        st = inv.stdin
        if st is None:
            reason = ("redis-cli arguments are read from stdin at run time" if inv.args_pending else
                      "an interactive redis-cli session: the commands typed into it are not visible")
            return [inv.action("redis-cli", "session", target=target, mutating=UNKNOWN, opaque_reason=reason,
                               details=base)]
        try:  # a heredoc, a pipe from echo/printf/cat, `< file` (read now, bounded): the same commands
            text = stdin_at_decision(st, inv.where)
        except Unreadable as e:
            return [inv.action("redis-cli", "commands", target=target, mutating=UNKNOWN, details=base,
                               opaque_reason=f"redis commands come from {st.producer or st.source} and are not "
                                             f"visible ({e})")]
        out = []
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                cmd_words = shlex.split(line)
            except ValueError:
                cmd_words = line.split()
            out.append(redis_command(inv, cmd_words, target, base))
        return out or [inv.action("redis-cli", "noop", target=target, mutating=False, details=base)]
