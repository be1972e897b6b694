"""Guard sessions: one Guard, journal and environment per client session, sharing a pool of policy engines.

Used by the MCP server (one session per MCP client session) and the shell daemon (one session per wrapped
agent). Engines are compiled once and shared through a pool; each engine decides one input at a time, because
nothing promises that an engine is thread-safe. A session's own commands are serialised
too, so its journal's seq order is the order the guard decided in.

A declaration is not serialised with them: it may be held for minutes while convergence is measured, and the
session stays answerable meanwhile, when its environment says it can run commands while it is measured
(`concurrent_commands`: local, Kubernetes, anything over real time; not the twin, whose virtual clock only the
declaration advances). Its status shows the declaration's progress, read-only commands run, and a command that
would change something is refused with DECLARATION_PENDING until the answer (Guard.before). One declaration at a
time: a second one while the first is held is answered at once with DECLARATION_PENDING.
"""

from __future__ import annotations

import hashlib
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from guardrail.actions.model import Action
from guardrail.context import IncidentContext, load_context
from guardrail.errors import GuardrailError, InputError
from guardrail.guard import Admission, DeclareOutcome, Feedback, Guard
from guardrail.journal import Journal
from guardrail.ownfiles import OwnFiles
from guardrail.policy.base import Decision, Mode, PolicyEngine
from verifiers.protocols import CommandResult, Environment, FeedbackCode

__all__ = ["EnginePool", "GuardSession", "GuardSessions", "load_engine", "context_from", "load_criteria",
           "SessionLimitError", "MAX_SESSIONS", "IDLE_CLOSE_S"]

# A server's open sessions, each with its journal's file descriptor, its guard and its environment: the bound
# keeps a flood of session names from exhausting descriptors and memory. A session idle this long gives its
# place to a new one when the server is full (its journal is closed; the same name later reopens it).
MAX_SESSIONS = 256
IDLE_CLOSE_S = 900.0


class SessionLimitError(GuardrailError):
    """A new session was refused: the server already serves its maximum of sessions, none of them idle."""


class EnginePool:
    """PolicyEngines shared by many sessions; each engine decides one input at a time."""

    def __init__(self, engines: PolicyEngine | Sequence[PolicyEngine]):
        engines = list(engines) if isinstance(engines, (list, tuple)) else [engines]
        if not engines:
            raise ValueError("an engine pool needs at least one engine")
        self.engines = engines
        # Idle engines. The embedded engine's native calls release the GIL, so with two or more engines
        # decisions of different sessions evaluate in parallel.
        self._idle: queue.SimpleQueue[PolicyEngine] = queue.SimpleQueue()
        # Held while an engine works, so that warm() can reach a given engine without racing a decision on it.
        self._busy = {id(e): threading.Lock() for e in engines}
        for e in engines:
            self._idle.put(e)

    def decide(self, input: Mapping[str, Any]) -> Decision:
        engine = self._idle.get()
        try:
            with self._busy[id(engine)]:
                return engine.decide(input)
        finally:
            self._idle.put(engine)

    def warm(self, context: Mapping[str, Any]) -> None:
        """Every engine that can loads `context` ahead of a session's first command (EmbeddedOPA.warm), one
        engine at a time, each while no decision runs on it."""
        for e in self.engines:
            warm = getattr(e, "warm", None)
            if callable(warm):
                with self._busy[id(e)]:
                    warm(context)

    def decide_all(self, inputs: Sequence[Mapping[str, Any]]) -> list[Decision]:
        """One command's actions on one engine, in one evaluation when the engine can."""
        engine = self._idle.get()
        try:
            with self._busy[id(engine)]:
                many = getattr(engine, "decide_all", None)
                return many(inputs) if many is not None else [engine.decide(i) for i in inputs]
        finally:
            self._idle.put(engine)


def load_engine(policy: str | Path | None = None) -> PolicyEngine:
    """The embedded OPA engine over a policies/ tree (the shipped one by default)."""
    try:
        from guardrail.policy.embedded import EmbeddedOPA
    except ImportError as e:
        raise InputError(f"the embedded OPA engine is not available: {e}", path=str(policy or "policies/")) from e
    return EmbeddedOPA(policy) if policy is not None else EmbeddedOPA()


def context_from(path: str | Path | None, *, env_spec: str | None = None) -> IncidentContext:
    """The public context: from --context, else a twin scenario's public part, else an empty ad-hoc one."""
    if path is not None:
        return load_context(path)
    if env_spec and env_spec.startswith("twin:"):
        from guardrail.resources import scenario_dir

        sid = env_spec.split(":", 1)[1]
        f = scenario_dir() / "incident-arena" / sid / "scenario.yaml"
        if f.is_file():
            return load_context(f)  # load_context reads `public` only, never `grader`
    return IncidentContext()


def load_criteria(path: str | Path | None) -> dict[str, Any] | None:
    """Verifier criteria overrides from YAML/JSON, e.g. `{"convergence": {"max_wait_cycles": 2}}`.

    Each section is checked against its verifiers.criteria dataclass (known keys only, the field's type, and a
    sane range: no negative wait or zero-length cycle), so a bad file fails at start naming its line."""
    if path is None:
        return None
    import dataclasses
    import typing

    from pydantic import ConfigDict, Field, create_model

    from guardrail.yamlio import line_of, read_data, validate
    from verifiers.criteria import RANGES, Criteria

    data, node, _ = read_data(path)
    if data is None:
        return None
    if not isinstance(data, dict):
        raise InputError("criteria must be a mapping of verifier name to settings", path=str(path), line=1)
    # Ranges come from verifiers.criteria.RANGES, beside the fields they bound.
    special: dict[tuple[str, str], Any] = {
        ("convergence", "baseline_abs"): dict[str, typing.Annotated[float, Field(ge=0)]],
    }
    parts = [f.name for f in dataclasses.fields(Criteria)]
    hints = typing.get_type_hints(Criteria)
    out: dict[str, Any] = {}
    for name, value in data.items():
        if name not in parts:
            raise InputError(f"unknown criteria section {name!r} (one of {', '.join(parts)})", path=str(path),
                             line=line_of(node, (name,)))
        if value is None:
            continue
        part = hints[name]
        fields: dict[str, Any] = {}
        for fname, ftype in typing.get_type_hints(part).items():
            ann = special.get((name, fname), ftype)
            bound = RANGES.get(name, {}).get(fname)
            if bound is not None:
                bound = Field(**bound)
                args = typing.get_args(ann)
                optional = type(None) in args
                inner = next(a for a in args if a is not type(None)) if optional else ann
                ann = typing.Annotated[inner, bound]
                if optional:
                    ann = typing.Optional[ann]
            fields[fname] = (ann, None)
        model = create_model(f"{part.__name__}File", __config__=ConfigDict(extra="forbid"), **fields)
        checked = validate(model, value, path=path, node=node, loc_prefix=(name,))
        out[name] = checked.model_dump(exclude_unset=True)
    try:
        Criteria.coerce(out)
    except (TypeError, ValueError) as e:  # what the checks above do not cover
        raise InputError(f"bad criteria: {e}", path=str(path)) from e
    return out


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def journal_name(key: str) -> str:
    """The journal file of a session key: the key itself when it is a safe file name, else a safe form of it with
    a digest of the whole key, so that two keys (`ops/x`, `ops:x`, `ops_x`) never share a journal."""
    safe = _UNSAFE.sub("_", key).strip("._") or "session"
    if safe != key or len(safe) > 120:
        safe = f"{safe[:100]}-{hashlib.sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"
    return safe + ".jsonl"


@dataclass
class GuardSession:
    """One client's guard, its journal and its environment."""

    key: str
    guard: Guard
    journal: Journal
    env: Environment | None
    lock: threading.Lock = field(default_factory=threading.Lock)
    declaring: threading.Lock = field(default_factory=threading.Lock)

    def execute(self, command: str) -> tuple[CommandResult, Mapping[str, Any]]:
        """Run one command through the guard; returns the result and the journal record of its decision."""
        with self.lock:
            result = self.guard.execute(command)
            # Under the session lock the newest command record is this command's decision.
            return result, self.journal.records("command")[-1]

    def before(self, command: str, stdin: str | None = None) -> Admission:
        """Decide a command that runs outside the guard (a shell shim execs it): journal the decision and, when
        admitted, the prior values of what it touches."""
        with self.lock:
            # The decision and the prior values share one fsync, and both are durable before the shim hears
            # the answer and execs the command.
            with self.journal.batch():
                adm = self.guard.before(command, stdin=stdin)
                self.guard.prepare(adm)
            return adm

    def after(self, admission: Admission, result: CommandResult) -> list:
        with self.lock:
            return self.guard.after(admission, result)

    def declare(self, summary: str = "", progress: Callable[[Any], None] | None = None) -> DeclareOutcome:
        """Verify a declaration (Guard.on_declare), reporting to `progress` while it is held. Not under the
        command lock: the session's other calls are answered meanwhile (module docstring)."""
        if not self.declaring.acquire(blocking=False):
            pending = self.guard.pending or {}
            fb = Feedback(FeedbackCode.DECLARATION_PENDING.value,
                          f"a declaration is already being verified ({pending.get('message') or 'starting'}); "
                          "wait for its answer instead of declaring again", {"pending": dict(pending)})
            self.journal.append("declare_request", summary=summary, refused=fb.code)
            return DeclareOutcome(accepted=False, feedback=[fb])
        try:
            if not getattr(self.env, "concurrent_commands", False):
                # An environment that cannot take commands while it is measured (a simulation, whose virtual
                # clock only the declaration advances, and which takes no wall time): serialised as before.
                with self.lock:
                    self.journal.append("declare_request", summary=summary)
                    return self.guard.on_declare(progress=progress)
            with self.lock:
                # Any command already deciding finishes first, so the declaration sees everything it ran.
                self.journal.append("declare_request", summary=summary)
                self.guard.pending = {"since": self.env.clock.now() if self.env is not None else 0.0,
                                      "held_s": 0.0, "stage": "declare", "message": "starting"}
            return self.guard.on_declare(progress=progress)
        finally:
            self.declaring.release()

    def status(self) -> dict[str, Any]:
        return {"session": self.key, "journal": str(self.journal.path) if self.journal.path else None,
                "records": len(self.journal), "mode": self.guard.mode.value,
                "context": self.guard.context.id, **self.guard.stats()}


class GuardSessions:
    """Creates a GuardSession on first sight of a session key; one journal file per session."""

    def __init__(
        self,
        engine: PolicyEngine | Sequence[PolicyEngine],
        context: IncidentContext,
        *,
        journal_dir: str | Path | None = None,
        env_factory: Callable[[IncidentContext], Environment] | None = None,
        mode: Mode = Mode.ENFORCE,
        normaliser: Callable[[str], list[Action]] | None = None,
        declaration_checks: Sequence[Any] | None = None,
        criteria: Any = None,
        fsync: bool = True,
        max_sessions: int | None = MAX_SESSIONS,
        idle_close_s: float | None = IDLE_CLOSE_S,
        clock: Callable[[], float] = time.monotonic,
        own_files: OwnFiles | None = None,
    ):
        self.engine = EnginePool(engine)
        self.max_sessions = max_sessions
        self.idle_close_s = idle_close_s
        self._clock = clock
        self._last_used: dict[str, float] = {}
        self.context = context
        self.journal_dir = Path(journal_dir) if journal_dir is not None else None
        self._env_factory = env_factory
        self.mode = Mode(mode)
        self._normaliser = normaliser
        self._checks = declaration_checks
        self._criteria = criteria
        self._fsync = fsync
        # The guard's own files no command may write: the caller's (context, criteria, tokens) and the journals.
        self.own_files = (own_files or OwnFiles()).add_dir(self.journal_dir)
        self._sessions: dict[str, GuardSession] = {}
        self._lock = threading.Lock()
        # Every session shares this context: the engines load it now, before any client waits on them.
        self.engine.warm(self.context.policy_input())

    def get(self, key: str) -> GuardSession:
        with self._lock:
            now = self._clock()
            s = self._sessions.get(key)
            if s is None:
                if self.max_sessions is not None and len(self._sessions) >= self.max_sessions:
                    self._close_idle(now)
                    if len(self._sessions) >= self.max_sessions:
                        raise SessionLimitError(
                            f"new session refused: this guard already serves {self.max_sessions} sessions, none "
                            f"idle for {self.idle_close_s:g} s; reuse a session name or retry later")
                s = self._sessions[key] = self._open(key)
            self._last_used[key] = now
            return s

    def _close_idle(self, now: float) -> None:
        """Close the sessions idle for idle_close_s or longer (caller holds self._lock); one in use is kept."""
        if self.idle_close_s is None:
            return
        for key, used in sorted(self._last_used.items(), key=lambda kv: kv[1]):
            if now - used < self.idle_close_s:
                break
            s = self._sessions[key]
            if not s.lock.acquire(blocking=False):
                continue
            try:
                s.journal.append("session_closed", reason="idle", idle_s=round(now - used, 3),
                                 note="closed to make room for a new session; the same name reopens this journal")
                s.journal.close()
            finally:
                s.lock.release()
            del self._sessions[key], self._last_used[key]

    def _open(self, key: str) -> GuardSession:
        env = self._env_factory(self.context.model_copy(deep=True)) if self._env_factory else None
        path = self.journal_dir / journal_name(key) if self.journal_dir is not None else None
        journal = Journal(path, session=key, fsync=self._fsync, clock=env.clock if env is not None else None)
        # Each session gets its own copy of the context: nothing one agent does can leak into another's.
        context = self.context.model_copy(deep=True)
        guard = Guard(self.engine, context, env=env, journal=journal, mode=self.mode, normaliser=self._normaliser,
                      declaration_checks=self._checks, criteria=self._criteria, suite=self._suite(context),
                      own_files=self.own_files)
        journal.append("session_start", context=self.context.id, mode=self.mode.value,
                       env=env.describe().name if env is not None else None)
        return GuardSession(key=key, guard=guard, journal=journal, env=env)

    def _suite(self, context: IncidentContext) -> Any:
        """The session's verifier suite (declaration checks, step checks, before-run snapshots), or None when the
        caller configured its own declaration checks. One suite per session: the scope audit's first-step
        snapshot and its declaration check must be one instance."""
        if self._checks is not None:
            return None
        from verifiers.suite import build_suite

        return build_suite(context.model_dump(mode="json"))

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._sessions)

    def close(self) -> None:
        with self._lock:
            for s in self._sessions.values():
                s.journal.close()
            self._sessions.clear()
            self._last_used.clear()
