"""Offline audit of a recorded agent session: what the guard would have decided, step by step.

Called by `guardrail audit` (guardrail/cli/audit.py); teams run it on their agents' logs before they deploy the
guard. It replays each recorded command through the same normaliser and policy engine the live guard uses, and
through the persistence classifier: every setting changed only in the runtime or session layer (CONFIG SET,
SET GLOBAL, an admin toggle, an edit inside a container) that no later declared-layer change of the same key made
durable is flagged, because a restart drops it. Nothing is executed.

Inputs (read by `load_trajectory`):
    journal   our JSONL journal; a torn last line (a crash mid-write) is skipped, and the report says so
    commands  one shell command per line; `#` comments and blank lines are ignored; a trailing `\\` continues
    openai    a chat transcript: `messages[].tool_calls[].function.arguments`, a JSON string (or object)
              whose `command` argument (configurable) holds the command; malformed arguments become findings.
              The messages as a list, as `{"messages": [...]}`, or one message object per line (JSONL)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

from guardrail.actions.model import Action, Layer
from guardrail.context import IncidentContext
from guardrail.errors import InputError
from guardrail.journal import read_journal
from guardrail.policy.base import Decision, Outcome, PolicyEngine
from verifiers.datafile import decode_text, read_input_bytes
from verifiers.protocols import FeedbackCode, Verdict, VerdictStatus

# The largest recorded session `guardrail audit` reads (a journal of a long session is ~1 KB per command).
MAX_TRAJECTORY_BYTES = 256 * 1024 * 1024

__all__ = ["Step", "Trajectory", "PendingChange", "DurabilityLedger", "StepAudit", "AuditReport",
           "load_trajectory", "audit", "UnpersistedChangesCheck", "FORMATS"]

FORMATS = ("auto", "journal", "commands", "openai")
Format = Literal["auto", "journal", "commands", "openai"]
# Wrappers that put a change inside one container: lost when that container is replaced, whatever its layer.
_IN_CONTAINER = ("kubectl exec", "docker exec", "podman exec", "crictl exec")


@dataclass(frozen=True)
class Step:
    """One recorded command, with where it came from (line in the file) and whether it really ran."""

    index: int
    command: str
    line: int | None = None
    ran: bool | None = None  # known for journals (a denied command did not run); unknown otherwise
    recorded_outcome: str | None = None
    exit_code: int | None = None  # from a journal's result record; unknown otherwise


@dataclass
class Trajectory:
    """The commands of one recorded session, plus what could not be read from it."""

    path: str
    format: str
    steps: list[Step] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    torn: bool = False


# -- reading the three input formats ------------------------------------------------------------------------


# How a JSON transcript begins: `{"...`, `{}`, `[{`, `[]`, `["` (or the bracket alone on its line). A command list
# may begin with `[` or `{` too (`[ -n "$NS" ] && ...`, `[[ -f x ]]`, `{ kubectl ...; }`): a space and a word
# follow the bracket there, or a second `[`.
_JSON_START = re.compile(r'\A\s*(\{\s*(["}]|\Z)|\[\s*[{"\]]|\[\s*\Z)')


def _sniff(path: Path, text: str) -> str:
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    try:
        rec = json.loads(first)
        if isinstance(rec, dict) and "kind" in rec and "seq" in rec:
            return "journal"
    except json.JSONDecodeError:
        pass
    return "openai" if _JSON_START.match(text) else "commands"


def load_trajectory(path: str | Path, *, fmt: Format = "auto", command_arg: str = "command") -> Trajectory:
    p = Path(path)
    # A regular file of at most MAX_TRAJECTORY_BYTES (not a device, FIFO or directory), read by the shared reader.
    raw = read_input_bytes(p, error=InputError, limit=MAX_TRAJECTORY_BYTES)
    if fmt == "auto":
        # Sniff on the text up to the first line with content, decoded strictly: undecodable bytes there are bad
        # input, not a command list. A journal's lines are read by read_journal (a non-UTF-8 last record is torn).
        end = 0
        while end < len(raw):
            nl = raw.find(b"\n", end)
            start, end = end, (len(raw) if nl < 0 else nl + 1)
            if raw[start:end].strip():
                break
        fmt = _sniff(p, decode_text(raw[:end], path=p, error=InputError))  # type: ignore[assignment]
    if fmt == "journal":
        return _from_journal(p)
    if fmt not in ("commands", "openai"):
        raise InputError(f"unknown trajectory format {fmt!r} (one of {', '.join(FORMATS)})", path=str(p))
    text = decode_text(raw, path=p, error=InputError)
    if fmt == "commands":
        return _from_commands(p, text)
    return _from_openai(p, text, command_arg)


def _from_journal(p: Path) -> Trajectory:
    records = read_journal(p)  # a torn last line is skipped; a corrupt line before it is an InputError
    t = Trajectory(path=str(p), format="journal", torn=records.torn)
    # Lines are the file's own (blank lines count), as read_journal's errors give them.
    exit_codes = {rec.get("ref"): rec.get("exit_code") for rec in records if rec.get("kind") == "result"}
    for line, rec in zip(records.lines, records):
        if rec.get("kind") != "command":
            continue
        cmd = rec.get("command")
        if not isinstance(cmd, str):
            t.findings.append({"kind": "malformed_record", "line": line, "message": "command record has no command"})
            continue
        code = exit_codes.get(rec.get("seq"))
        t.steps.append(Step(index=len(t.steps) + 1, command=cmd, line=line, ran=rec.get("ran"),
                            recorded_outcome=rec.get("outcome"), exit_code=code if isinstance(code, int) else None))
    if records.torn:
        t.findings.append({"kind": "torn_tail", "line": records.torn_line,
                           "message": f"the last record is incomplete ({records.torn_bytes} bytes, a crash "
                                      "mid-write); audited up to the last complete record"})
    return t


def _from_commands(p: Path, text: str) -> Trajectory:
    t = Trajectory(path=str(p), format="commands")
    buf: list[str] = []
    start = 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not buf:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            start = n
        buf.append(line)  # a trailing backslash stays: with the newline after it, the shell's line continuation
        if line.endswith("\\"):
            continue
        t.steps.append(Step(index=len(t.steps) + 1, command="\n".join(buf).strip(), line=start))
        buf = []
    if buf:
        t.steps.append(Step(index=len(t.steps) + 1, command="\n".join(buf).strip(), line=start))
    return t


def _line_index(text: str) -> Callable[[str], int | None]:
    """Best-effort line of a tool call id in the transcript text, for findings that point into the file."""

    def find(needle: str) -> int | None:
        i = text.find(needle) if needle else -1
        return text.count("\n", 0, i) + 1 if i >= 0 else None

    return find


def _jsonl_messages(text: str) -> list[Any] | None:
    """A transcript written one message (a JSON object with a `role`) per line, or None when it is not one."""
    out = []
    for ln in text.splitlines():
        if not ln.strip():
            continue
        try:
            msg = json.loads(ln)
        except json.JSONDecodeError:
            return None
        if not isinstance(msg, dict) or "role" not in msg:
            return None
        out.append(msg)
    return out or None


def _from_openai(p: Path, text: str, command_arg: str) -> Trajectory:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        doc = _jsonl_messages(text)  # one message per line, as transcripts are often logged
        if doc is None:
            raise InputError(f"not a JSON chat transcript: {e.msg}", path=str(p), line=e.lineno) from e
    messages = doc.get("messages") if isinstance(doc, dict) else doc
    if not isinstance(messages, list):
        raise InputError("expected a list of messages, or an object with `messages`", path=str(p), line=1)
    t = Trajectory(path=str(p), format="openai")
    where = _line_index(text)
    other_calls: dict[str, dict[str, Any]] = {}  # tool name -> calls without `command_arg`, and their arguments
    for mi, msg in enumerate(messages):
        if not isinstance(msg, dict):
            continue
        calls = msg.get("tool_calls") or []
        if not isinstance(calls, list):
            t.findings.append({"kind": "malformed_tool_call", "where": f"messages[{mi}].tool_calls", "line": None,
                               "message": f"tool_calls is a {type(calls).__name__}, not a list"})
            continue
        for ci, call in enumerate(calls):
            cid = call.get("id", "") if isinstance(call, dict) else ""
            line = where(f'"{cid}"') if cid else None
            fn = call.get("function") if isinstance(call, dict) else None
            label = f"messages[{mi}].tool_calls[{ci}]"
            if not isinstance(fn, dict):
                t.findings.append({"kind": "malformed_tool_call", "where": label, "line": line,
                                   "message": "tool call has no function"})
                continue
            args = fn.get("arguments")
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except json.JSONDecodeError as e:
                    t.findings.append({"kind": "malformed_arguments", "where": label, "line": line,
                                       "tool": fn.get("name"),
                                       "message": f"arguments are not valid JSON ({e.msg} at char {e.pos})"})
                    continue
            if not isinstance(args, dict):
                t.findings.append({"kind": "malformed_arguments", "where": label, "line": line,
                                   "tool": fn.get("name"), "message": "arguments are not a JSON object"})
                continue
            cmd = args.get(command_arg)
            if cmd is None:
                # A tool call without a command (another tool of the agent): not a shell step. Counted, so that a
                # shell tool whose argument has another name shows up instead of auditing to nothing.
                seen = other_calls.setdefault(str(fn.get("name")), {"count": 0, "arguments": set()})
                seen["count"] += 1
                seen["arguments"].update(str(k) for k in args)
                continue
            if not isinstance(cmd, str):
                t.findings.append({"kind": "malformed_arguments", "where": label, "line": line,
                                   "tool": fn.get("name"), "message": f"`{command_arg}` is not a string"})
                continue
            t.steps.append(Step(index=len(t.steps) + 1, command=cmd, line=line))
    for name, seen in sorted(other_calls.items()):
        names = ", ".join(sorted(seen["arguments"])) or "none"
        t.findings.append({"kind": "no_command_arg", "tool": name, "count": seen["count"],
                           "message": f"{seen['count']} call(s) of tool `{name}` have no `{command_arg}` argument "
                                      f"(their arguments: {names}); not audited. If `{name}` runs shell commands, "
                                      "pass --command-arg with its argument's name"})
    return t


# -- the persistence classifier ------------------------------------------------------------------------------


@dataclass
class PendingChange:
    """A runtime- or session-layer change that nothing declared has made durable (yet)."""

    key: str
    scope: dict[str, str]
    value: Any
    layer: str
    step: int
    command: str
    in_container: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "scope": self.scope, "value": self.value, "layer": self.layer, "step": self.step,
                "command": self.command, "in_container": self.in_container}


def _scope_id(scope: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(scope.items()))


class DurabilityLedger:
    """Tracks, key by key, whether the last change of a setting reached its declared layer."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, tuple], PendingChange] = {}
        self.made_durable: list[dict[str, Any]] = []

    def record(self, step: int, command: str, actions: Iterable[Action]) -> list[PendingChange]:
        """Account for one executed step. Returns the ephemeral changes this step introduced."""
        new: list[PendingChange] = []
        for a in actions:
            if a.mutating is False:
                continue
            in_container = any(w in _IN_CONTAINER for w in a.via)
            for k in a.keys:
                ident = (k.key, _scope_id(k.scope))
                if a.layer is Layer.DECLARED and not in_container:
                    if ident in self._pending:
                        self.made_durable.append({"key": k.key, "step": step,
                                                  "runtime_step": self._pending.pop(ident).step})
                    continue
                if a.layer in (Layer.RUNTIME, Layer.SESSION) or in_container:
                    pc = PendingChange(key=k.key, scope=dict(k.scope), value=k.value, layer=a.layer.value,
                                       step=step, command=command, in_container=in_container)
                    self._pending[ident] = pc
                    new.append(pc)
        return new

    def pending(self) -> list[PendingChange]:
        return sorted(self._pending.values(), key=lambda p: p.step)


class UnpersistedChangesCheck:
    """A declaration check: FAIL with NOT_DURABLE while a journalled runtime-only change was never made durable."""

    def __init__(self, normaliser: Callable[[str], list[Action]] | None = None):
        self._normalise = normaliser

    def check(self, env: Any, journal: Any, criteria: Any = None) -> Verdict:
        ledger = DurabilityLedger()
        for rec in journal.executed():
            if rec.get("exit_code") not in (0, None):
                continue  # a command that failed changed nothing we can count on
            actions = [Action.model_validate(a) for a in rec.get("actions", [])]
            ledger.record(int(rec["seq"]), rec["command"], actions)
        pending = ledger.pending()
        if not pending:
            return Verdict(VerdictStatus.PASS, "unpersisted_changes", message="every runtime change is declared")
        keys = ", ".join(p.key for p in pending)
        return Verdict(VerdictStatus.FAIL, "unpersisted_changes", FeedbackCode.NOT_DURABLE,
                       f"{keys} changed only in the runtime layer (lost on restart). Make each change in its "
                       "declared source too (config file, Helm values, ALTER SYSTEM, the ConfigMap), then declare "
                       "again.", {"pending": [p.to_dict() for p in pending]})


# -- the audit -----------------------------------------------------------------------------------------------


@dataclass
class StepAudit:
    """What the guard would have done with one recorded step."""

    step: Step
    actions: list[Action]
    decisions: list[Decision]
    outcome: str
    ephemeral: list[PendingChange] = field(default_factory=list)
    error: str | None = None

    @property
    def denies(self) -> list[dict[str, Any]]:
        return [f.to_dict() for d in self.decisions for f in d.denies]

    @property
    def warns(self) -> list[dict[str, Any]]:
        return [f.to_dict() for d in self.decisions for f in d.warns]

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.step.index, "line": self.step.line, "command": self.step.command,
            "ran": self.step.ran, "recorded_outcome": self.step.recorded_outcome, "outcome": self.outcome,
            "actions": [{"tool": a.tool, "verb": a.verb, "layer": a.layer.value, "mutating": a.mutating,
                         "keys": [k.key for k in a.keys], "target": a.target.name} for a in self.actions],
            "deny": self.denies, "warn": self.warns,
            "ephemeral": [p.to_dict() for p in self.ephemeral], "error": self.error,
        }


@dataclass
class AuditReport:
    """The whole audit: each step, the findings, what stayed ephemeral, and the counts."""

    trajectory: Trajectory
    steps: list[StepAudit]
    unpersisted: list[PendingChange]
    made_durable: list[dict[str, Any]]

    def summary(self) -> dict[str, Any]:
        count = lambda o: sum(1 for s in self.steps if s.outcome == o)  # noqa: E731
        return {
            "steps": len(self.steps),
            "allowed": count("allow"), "denied": count("deny"), "warned": count("warn"),
            "errors": sum(1 for s in self.steps if s.error),
            "runtime_changes": sum(len(s.ephemeral) for s in self.steps),
            "unpersisted": len(self.unpersisted),
            "findings": len(self.trajectory.findings),
            "torn": self.trajectory.torn,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "trajectory": self.trajectory.path, "format": self.trajectory.format, "summary": self.summary(),
            "steps": [s.to_dict() for s in self.steps],
            "would_deny": [{"index": s.step.index, "command": s.step.command, "rules": [f["id"] for f in s.denies]}
                           for s in self.steps if s.outcome == "deny"],
            "unpersisted": [p.to_dict() for p in self.unpersisted],
            "made_durable": self.made_durable,
            "findings": self.trajectory.findings,
        }


def audit(trajectory: Trajectory, engine: PolicyEngine, context: IncidentContext | None = None, *,
          normaliser: Callable[[str], list[Action]] | None = None) -> AuditReport:
    """Replay every step through normalisation, policy and the persistence classifier. Runs nothing."""
    if normaliser is None:
        from guardrail.actions import normalise as normaliser
    ctx = (context or IncidentContext()).policy_input()
    ledger = DurabilityLedger()
    out: list[StepAudit] = []
    for step in trajectory.steps:
        try:
            actions = normaliser(step.command)
        except Exception as e:  # noqa: BLE001 - one unreadable command must not end the audit of the rest
            out.append(StepAudit(step, [], [], "error", error=f"normaliser: {type(e).__name__}: {e}"))
            continue
        decisions = [engine.decide({"action": a.to_input(), "context": ctx, "command": step.command})
                     for a in actions]
        outcome = _outcome(decisions)
        # A journal says whether the step really ran, and how it ended; a plain log is taken as having run (it was
        # recorded). A command that failed changed nothing to count on, as the guard's own check holds.
        ran_ok = step.ran is not False and step.exit_code in (0, None)
        ephemeral = ledger.record(step.index, step.command, actions) if ran_ok else []
        out.append(StepAudit(step, actions, decisions, outcome, ephemeral))
    return AuditReport(trajectory, out, ledger.pending(), ledger.made_durable)


def _outcome(decisions: Sequence[Decision]) -> str:
    if any(d.outcome is Outcome.DENY for d in decisions):
        return "deny"
    if any(d.outcome is Outcome.WARN or d.warns for d in decisions):
        return "warn"
    return "allow"
