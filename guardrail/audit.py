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
    claude-code  a Claude Code session transcript (~/.claude/projects/*/SESSION.jsonl): one entry per line;
              `type: "assistant"` entries whose `message.content` has `tool_use` blocks named `Bash` (or an MCP
              server's `exec` tool, `mcp__<server>__exec`, such as the guard's own) with `input.command`; a
              `tool_result` block in a later `user` entry with `is_error: true` marks the command as failed
    codex     an OpenAI Codex CLI rollout (~/.codex/sessions/.../rollout-*.jsonl): `response_item` lines whose
              payload is a `function_call` named `shell`, `shell_command`, `exec_command` (or `local_shell_call`,
              or an MCP `exec`), with JSON `arguments` holding `command` (an argv such as ["bash", "-lc", "..."],
              or a string) or `cmd`; the exit code comes from the call's output or its `exec_command_end` event.
              Older rollouts (the items one per line, without the `response_item` wrapper) are read too

`auto` tells them apart by the first line that is one of theirs; a JSON-lines file with a line that fits none of
them (or not JSON) is bad input naming that line.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

from guardrail.actions.model import Action, Layer
from guardrail.context import IncidentContext
from guardrail.errors import InputError
from guardrail.journal import read_journal
from guardrail.policy.base import Decision, Outcome, PolicyEngine, distinct_findings
from verifiers.datafile import decode_text, read_input_bytes
from verifiers.protocols import FeedbackCode, Verdict, VerdictStatus

# The largest recorded session `guardrail audit` reads (a journal of a long session is ~1 KB per command).
MAX_TRAJECTORY_BYTES = 256 * 1024 * 1024

__all__ = ["Step", "Trajectory", "PendingChange", "DurabilityLedger", "StepAudit", "AuditReport",
           "load_trajectory", "audit", "UnpersistedChangesCheck", "FORMATS"]

FORMATS = ("auto", "journal", "commands", "openai", "claude-code", "codex")
Format = Literal["auto", "journal", "commands", "openai", "claude-code", "codex"]
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
    exit_code: int | None = None  # from a journal's result record, or a Codex rollout's; unknown otherwise
    failed: bool = False  # the transcript's tool result says it failed (Claude Code's is_error), exit code unknown


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
    return "json" if _JSON_START.match(text) else "commands"


# Entry types of a Claude Code transcript, and of a Codex rollout (its envelope, then its items unwrapped, as older
# rollouts wrote them), by which a line says which of the two it is.
_CLAUDE_TYPES = frozenset({"user", "assistant", "system", "summary", "file-history-snapshot", "queue-operation",
                           "progress", "attachment"})
_CODEX_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
_CODEX_ITEMS = frozenset({"message", "function_call", "function_call_output", "local_shell_call", "reasoning",
                          "custom_tool_call", "custom_tool_call_output", "web_search_call"})
# Tools that run a shell command: Claude Code's Bash, Codex's shell tools, and any MCP server's `exec` (the guard's
# own MCP tool; Claude Code names it mcp__<server>__exec, Codex <server>__exec or the bare name).
_CLAUDE_SHELL = re.compile(r"^(Bash|mcp__[\w.-]+__exec)$")
_CODEX_SHELL = re.compile(r"^(shell|shell_command|exec_command|local_shell|container\.exec|(mcp__)?[\w.-]+__exec)$")


def _line_format(rec: Any) -> str | None:
    """Which transcript format one parsed JSON line belongs to, or None when it says nothing of its own."""
    if not isinstance(rec, dict):
        return None
    if "kind" in rec and "seq" in rec:
        return "journal"
    if "role" in rec and "type" not in rec:
        return "openai"
    kind = rec.get("type")
    if kind in _CODEX_TYPES or (kind in _CODEX_ITEMS and "message" not in rec):
        return "codex"
    if kind in _CLAUDE_TYPES and ("message" in rec or "sessionId" in rec or "uuid" in rec):
        return "claude-code"
    return None


def _fits(fmt: str, rec: Any) -> bool:
    """Whether a line can be a line of `fmt` (the format's other entries are skipped, not errors)."""
    if not isinstance(rec, dict):
        return False
    if fmt == "openai":
        return "role" in rec
    kind = rec.get("type")
    if fmt == "claude-code":  # entry types come and go with Claude Code's versions; the envelope stays
        return isinstance(kind, str) and (kind in _CLAUDE_TYPES or "message" in rec or "sessionId" in rec
                                          or "uuid" in rec)
    if fmt == "codex":  # the first line of an older rollout is the session's meta, with no type
        return "type" not in rec or (isinstance(kind, str) and ("payload" in rec or kind in _CODEX_ITEMS))
    return False


@dataclass
class _JsonLines:
    records: list[tuple[int, Any]]  # (file line, parsed record), blank lines left out
    torn_line: int | None = None  # a last line cut short (the session was being written), left out


def _json_lines(p: Path, text: str) -> _JsonLines:
    """Parse a JSON-lines file; a line that is not JSON is bad input at its line, except a last line with no
    newline after it, which a crash or a session still being written leaves cut short."""
    out = _JsonLines([])
    lines = text.split("\n")
    for n, ln in enumerate(lines, 1):
        if not ln.strip():
            continue
        try:
            out.records.append((n, json.loads(ln)))
        except json.JSONDecodeError as e:
            if n == len(lines) and out.records:
                out.torn_line = n
                break
            raise InputError(f"not a JSON line ({e.msg} at column {e.colno})", path=str(p), line=n) from e
        except RecursionError as e:
            raise InputError("nested too deeply to read", path=str(p), line=n) from e
    return out


def _detect_json(p: Path, text: str) -> tuple[str, Any]:
    """The format of a JSON (or JSON-lines) text, and its parsed content: the document, or a _JsonLines."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    except RecursionError as e:
        raise InputError("nested too deeply to read", path=str(p)) from e
    if isinstance(doc, list) or (isinstance(doc, dict) and ("messages" in doc or not doc)):
        return "openai", doc
    jl = _json_lines(p, text)
    fmt = next((f for _, rec in jl.records if (f := _line_format(rec)) is not None), None)
    if fmt is None:
        where = jl.records[0][0] if jl.records else 1
        raise InputError("a JSON line of no transcript format guardrail reads (journal, openai, claude-code, "
                         "codex); pass --format, or give one shell command per line", path=str(p), line=where)
    return fmt, jl


def _check_lines(p: Path, fmt: str, jl: _JsonLines, *, detected: bool = False) -> None:
    for n, rec in jl.records:
        if not _fits(fmt, rec):
            what = type(rec).__name__ if not isinstance(rec, dict) else f"keys {', '.join(sorted(rec)[:6])}"
            how = (f"the file was read as {fmt} from its first line of that format" if detected else
                   f"--format {fmt}")
            raise InputError(f"not a line of the {fmt} format ({what}; {how})", path=str(p), line=n)


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
    if fmt not in FORMATS and fmt != "json":
        raise InputError(f"unknown trajectory format {fmt!r} (one of {', '.join(FORMATS)})", path=str(p))
    text = decode_text(raw, path=p, error=InputError)
    if fmt == "commands":
        return _from_commands(p, text)
    detected = fmt == "json"
    if detected:  # auto: which of the JSON formats, by the first line that is one of theirs
        fmt, parsed = _detect_json(p, text)  # type: ignore[assignment]
        if fmt == "journal":
            return _from_journal(p)
        if fmt == "openai":
            return _from_openai(p, text, command_arg, parsed)
    elif fmt == "openai":
        return _from_openai(p, text, command_arg)
    else:
        parsed = _json_lines(p, text)
    _check_lines(p, fmt, parsed, detected=detected)
    t = _from_claude_code(p, parsed, command_arg) if fmt == "claude-code" else _from_codex(p, parsed, command_arg)
    if parsed.torn_line is not None:
        t.torn = True
        t.findings.append({"kind": "torn_tail", "line": parsed.torn_line,
                           "message": "the last line is incomplete (the session was still being written, or a "
                                      "crash mid-write); audited up to the last complete line"})
    return t


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


def _from_openai(p: Path, text: str, command_arg: str, doc: Any = None) -> Trajectory:
    if isinstance(doc, _JsonLines):
        _check_lines(p, "openai", doc, detected=True)
        doc = [rec for _, rec in doc.records]
    elif doc is None:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            first = next((ln for ln in text.splitlines() if ln.strip()), "")
            try:
                json.loads(first)
            except json.JSONDecodeError:  # one document, broken where the parser says
                raise InputError(f"not a JSON chat transcript: {e.msg}", path=str(p), line=e.lineno) from e
            jl = _json_lines(p, text)  # one message per line, as transcripts are often logged
            _check_lines(p, "openai", jl)  # a line that is no message is named, not "Extra data"
            doc = [rec for _, rec in jl.records]
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


def _argv_command(argv: list[Any]) -> str:
    """The command an argv runs, as the agent wrote it: the script of `bash -lc SCRIPT`, else the argv quoted."""
    words = [str(w) for w in argv]
    if len(words) == 3 and words[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh") and words[1] in ("-c", "-lc"):
        return words[2]
    return shlex.join(words)


class _ShellCalls:
    """The shell tool calls of a transcript in order, their results joined to them by call id when they come."""

    def __init__(self, t: Trajectory) -> None:
        self.t = t
        self.calls: list[dict[str, Any]] = []
        self.by_id: dict[str, dict[str, Any]] = {}
        self.other_tools: dict[str, int] = {}

    def add(self, command: Any, *, line: int, call_id: Any, tool: str, where: str) -> None:
        if isinstance(command, list) and command and all(isinstance(w, (str, int, float)) for w in command):
            command = _argv_command(command)
        if not isinstance(command, str) or not command.strip():
            self.t.findings.append({"kind": "malformed_arguments", "where": where, "line": line, "tool": tool,
                                    "message": "the shell tool call has no command (a string or an argv list)"})
            return
        call = {"command": command, "line": line, "exit_code": None, "failed": False}
        self.calls.append(call)
        if isinstance(call_id, str) and call_id:
            self.by_id[call_id] = call

    def result(self, call_id: Any, *, exit_code: int | None = None, failed: bool = False) -> None:
        call = self.by_id.get(call_id) if isinstance(call_id, str) else None
        if call is not None:
            if isinstance(exit_code, int) and not isinstance(exit_code, bool):
                call["exit_code"] = exit_code
            call["failed"] = call["failed"] or failed

    def finish(self) -> Trajectory:
        for c in self.calls:
            self.t.steps.append(Step(index=len(self.t.steps) + 1, command=c["command"], line=c["line"],
                                     exit_code=c["exit_code"], failed=c["failed"] and c["exit_code"] is None))
        for name, count in sorted(self.other_tools.items()):
            self.t.findings.append({"kind": "other_tool", "tool": name, "count": count,
                                    "message": f"{count} call(s) of tool `{name}`: not a shell command, not audited"})
        return self.t


def _from_claude_code(p: Path, jl: _JsonLines, command_arg: str) -> Trajectory:
    calls = _ShellCalls(Trajectory(path=str(p), format="claude-code"))
    for n, rec in jl.records:
        msg = rec.get("message")
        content = msg.get("content") if isinstance(msg, dict) else None
        if not isinstance(content, list):
            continue
        for bi, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            if rec.get("type") == "assistant" and block.get("type") == "tool_use":
                name = str(block.get("name"))
                if not _CLAUDE_SHELL.match(name):
                    calls.other_tools[name] = calls.other_tools.get(name, 0) + 1
                    continue
                args = block.get("input")
                key = "command" if name == "Bash" else command_arg
                calls.add(args.get(key) if isinstance(args, dict) else None, line=n, call_id=block.get("id"),
                          tool=name, where=f"line {n} content[{bi}]")
            elif rec.get("type") == "user" and block.get("type") == "tool_result":
                calls.result(block.get("tool_use_id"), failed=block.get("is_error") is True)
    return calls.finish()


_EXIT_IN_OUTPUT = re.compile(r"(?:Process exited with code|Exit code:?)\s*(-?\d+)")


def _codex_exit_code(output: Any) -> int | None:
    """A function_call_output's exit code: `{"metadata": {"exit_code": N}}` (shell), or the text's `Process exited
    with code N` (exec_command); None when it says none."""
    if isinstance(output, str):
        try:
            doc = json.loads(output)
        except (json.JSONDecodeError, RecursionError):
            doc = None
        if isinstance(doc, dict):
            meta = doc.get("metadata")
            code = meta.get("exit_code") if isinstance(meta, dict) else doc.get("exit_code")
            return code if isinstance(code, int) and not isinstance(code, bool) else None
        m = _EXIT_IN_OUTPUT.search(output)
        return int(m.group(1)) if m else None
    return None


def _from_codex(p: Path, jl: _JsonLines, command_arg: str) -> Trajectory:
    calls = _ShellCalls(Trajectory(path=str(p), format="codex"))
    for n, rec in jl.records:
        item = rec.get("payload") if rec.get("type") in _CODEX_TYPES else rec
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "function_call":
            name = str(item.get("name"))
            if not _CODEX_SHELL.match(name):
                calls.other_tools[name] = calls.other_tools.get(name, 0) + 1
                continue
            args = item.get("arguments")
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except json.JSONDecodeError as e:
                    calls.t.findings.append({"kind": "malformed_arguments", "where": f"line {n}", "line": n,
                                             "tool": name, "message": f"arguments are not valid JSON ({e.msg})"})
                    continue
            if not isinstance(args, dict):
                args = {}
            command = next((args[k] for k in (command_arg, "command", "cmd") if k in args), None)
            calls.add(command, line=n, call_id=item.get("call_id"), tool=name, where=f"line {n}")
        elif kind == "local_shell_call":
            action = item.get("action")
            calls.add(action.get("command") if isinstance(action, dict) else None, line=n,
                      call_id=item.get("call_id"), tool="local_shell_call", where=f"line {n}")
        elif kind == "function_call_output":
            calls.result(item.get("call_id"), exit_code=_codex_exit_code(item.get("output")))
        elif kind == "exec_command_end":
            calls.result(item.get("call_id"), exit_code=item.get("exit_code"))
    return calls.finish()


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
        return [f.to_dict() for f in distinct_findings(f for d in self.decisions for f in d.denies)]

    @property
    def warns(self) -> list[dict[str, Any]]:
        denies = distinct_findings(f for d in self.decisions for f in d.denies)
        return [f.to_dict() for f in distinct_findings((f for d in self.decisions for f in d.warns), besides=denies)]

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
        ran_ok = step.ran is not False and step.exit_code in (0, None) and not step.failed
        ephemeral = ledger.record(step.index, step.command, actions) if ran_ok else []
        out.append(StepAudit(step, actions, decisions, outcome, ephemeral))
    return AuditReport(trajectory, out, ledger.pending(), ledger.made_durable)


def _outcome(decisions: Sequence[Decision]) -> str:
    if any(d.outcome is Outcome.DENY for d in decisions):
        return "deny"
    if any(d.outcome is Outcome.WARN or d.warns for d in decisions):
        return "warn"
    return "allow"
