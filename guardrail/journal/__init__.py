"""The guard's journal: append-only JSONL, one fsync'd record per line.

Written by the Guard (every command, decision, result, snapshot, declaration and verdict) before anything runs;
read by the verifiers (through `verifiers.protocols.JournalView`), by `guardrail audit`, and by rollback. A crash
can tear only the last line: reading skips it and loses nothing before it; re-opening for append truncates the
torn tail and records that it did.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

from guardrail.errors import InputError, JournalError

__all__ = ["Journal", "read_journal", "JournalReadResult"]


class JournalReadResult(list):
    """The records of a journal file, with `torn` set when a torn last line was skipped."""

    torn: bool = False
    torn_bytes: int = 0


def read_journal(path: str | Path) -> JournalReadResult:
    """Read every complete record. A torn last line is skipped; a corrupt line before it is an InputError."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read journal: {e.strerror or e}", path=str(p)) from e
    out = JournalReadResult()
    lines = data.split(b"\n")
    # Everything after the last newline is an unterminated tail: complete records always end with "\n".
    tail = lines.pop()
    for i, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError as e:
            raise InputError(f"corrupt journal record: {e.msg}", path=str(p), line=i) from e
        if not isinstance(rec, dict):
            raise InputError("journal record is not an object", path=str(p), line=i)
        out.append(rec)
    if tail.strip():
        out.torn = True
        out.torn_bytes = len(tail)
    return out


class Journal:
    """Append-only record of one guarded session. `Journal(None)` keeps records in memory only (benchmarks)."""

    def __init__(self, path: str | Path | None = None, *, session: str = "default", fsync: bool = True,
                 clock: Any = None):
        self.path = Path(path) if path is not None else None
        self.session = session
        self._fsync = fsync
        self._clock = clock
        self._lock = threading.Lock()
        self._records: list[dict[str, Any]] = []
        self._fh = None
        self._seq = 0
        if self.path is not None:
            self._open()

    # -- writing ---------------------------------------------------------------------------------------------

    def _open(self) -> None:
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        torn = 0
        if self.path.exists():
            existing = read_journal(self.path)
            self._records = list(existing)
            self._seq = max((int(r.get("seq", 0)) for r in existing), default=0)
            if existing.torn:
                torn = existing.torn_bytes
                size = self.path.stat().st_size
                with open(self.path, "r+b") as fh:
                    fh.truncate(size - torn)
        try:
            self._fh = open(self.path, "ab", buffering=0)
        except OSError as e:
            raise JournalError(f"{self.path}: cannot open journal: {e.strerror or e}") from e
        if torn:
            self.append("recovery", torn_bytes=torn, note="a torn last record from an earlier crash was dropped")

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Append one record and make it durable before returning it."""
        with self._lock:
            self._seq += 1
            rec = {"seq": self._seq, "kind": kind, "session": self.session, "wall": round(time.time(), 6)}
            if self._clock is not None:
                rec["t"] = round(float(self._clock.now()), 6)
            rec.update(fields)
            if self._fh is not None:
                try:
                    line = json.dumps(rec, separators=(",", ":"), default=_jsonable).encode() + b"\n"
                    self._fh.write(line)
                    if self._fsync:
                        os.fsync(self._fh.fileno())
                except (OSError, TypeError, ValueError) as e:
                    raise JournalError(f"{self.path}: cannot append record: {e}") from e
            self._records.append(rec)
            return rec

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- reading (verifiers.protocols.JournalView) -------------------------------------------------------------

    def records(self, kind: str | None = None) -> list[Mapping[str, Any]]:
        with self._lock:
            return [r for r in self._records if kind is None or r["kind"] == kind]

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        return iter(self.records())

    def __len__(self) -> int:
        return len(self._records)

    def executed(self) -> list[Mapping[str, Any]]:
        """Commands that ran, with their actions and exit codes, in order."""
        with self._lock:
            results = {r["ref"]: r for r in self._records if r["kind"] == "result"}
            out = []
            for r in self._records:
                if r["kind"] != "command" or not r.get("ran"):
                    continue
                res = results.get(r["seq"])
                if res is None:
                    continue
                out.append({"seq": r["seq"], "t": res.get("t", r.get("t")), "command": r["command"],
                            "exit_code": res.get("exit_code"), "actions": r.get("actions", [])})
            return out


def _jsonable(o: Any) -> Any:
    if hasattr(o, "model_dump"):
        return o.model_dump(mode="json")
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if hasattr(o, "value"):
        return o.value
    return str(o)
