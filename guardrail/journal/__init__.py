"""The guard's journal: append-only JSONL, one record per line.

Written by the Guard (every command, decision, result, snapshot, declaration and verdict); read by the verifiers
(through `verifiers.protocols.JournalView`), by `guardrail audit`, and by rollback. Durability: every record is
fsync'd before append() returns, except inside batch() (one fsync at the block's end, before anyone acts on
its records) and the group-committed kinds (`result`, `feedback`: what already happened),
which become durable with the next fsync'd record or at close. So the record of a command is on disk before the
command runs, as are snapshots, declarations and verdicts. A crash can tear only the last line: reading skips it
and loses nothing before it; re-opening for append truncates the torn tail and records that it did.

Memory stays flat over a long session: a file-backed journal keeps only counts per kind, the last TAIL_RECORDS
records and the last EXECUTED_TAIL executed() entries; records() and executed() read older ones back from the
file (the verifiers ask for the whole executed() list only at a declaration). `Journal(None)` has no file and
keeps every record in memory.

The journal is the evidence of what an agent did, so it watches its own file. Before each append it compares the
file at its path with the one it holds open (st_dev, st_ino, and the size it wrote). Unlinked (`rm`) or replaced
(`sed -i`, `mv`, `cp` over it): it re-creates the file at its path from the descriptor it still holds (every record
is kept), sets any impostor aside as `<name>.replaced-<ns>`, and appends a `journal_tampered` record. Truncated in
place (`truncate -s0`, `> file`): the lost records cannot be read back, and the record says how many bytes went.
Either way it says so on stderr, and take_tampering() hands the events to the Guard, which tells the agent. The
guard also refuses commands that write its journal (guardrail.ownfiles); this catches what it could not read.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import fcntl
import json
import os
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Iterator, Mapping

from guardrail.errors import InputError, JournalError
from verifiers.datafile import read_input_bytes

__all__ = ["Journal", "JournalRecords", "read_journal", "JournalReadResult", "GROUP_COMMIT_KINDS"]


class JournalReadResult(list):
    """The records of a journal file, with `torn` set when a torn last line was skipped.

    `lines[i]` is the file line of record i (blank lines are skipped, so it can differ from i + 1); `torn_line`
    is the line of the skipped torn record and `torn_bytes` its size to the end of the file."""

    torn: bool = False
    torn_bytes: int = 0
    torn_line: int | None = None

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.lines: list[int] = []


def read_journal(path: str | Path) -> JournalReadResult:
    """Read every complete record. A torn last line is skipped; a corrupt line before it is an InputError.

    A last line that is not UTF-8 counts as torn too (a crash can leave garbage in the last block written)."""
    p = Path(path)
    # A regular file only, and bounded: a journal path given to `guardrail audit` may be anything.
    data = read_input_bytes(p, error=InputError, limit=MAX_JOURNAL_BYTES)
    out = JournalReadResult()
    lines = data.split(b"\n")
    # Everything after the last newline is an unterminated tail: complete records always end with "\n".
    tail = lines.pop()
    # The last line with content, when it is a complete one: where a non-UTF-8 record still counts as torn.
    last = 0 if tail.strip() else next((i for i in range(len(lines), 0, -1) if lines[i - 1].strip()), 0)
    pos = 0  # byte offset of line i
    for i, raw in enumerate(lines, 1):
        start, pos = pos, pos + len(raw) + 1
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            if i == last:
                out.torn, out.torn_bytes, out.torn_line = True, len(data) - start, i
                return out
            raise InputError(f"corrupt journal record: not UTF-8 (undecodable byte 0x{raw[e.start]:02x})",
                             path=str(p), line=i) from e
        except json.JSONDecodeError as e:
            raise InputError(f"corrupt journal record: {e.msg}", path=str(p), line=i) from e
        if not isinstance(rec, dict):
            raise InputError("journal record is not an object", path=str(p), line=i)
        out.append(rec)
        out.lines.append(i)
    if tail.strip():
        out.torn = True
        out.torn_bytes = len(tail)
        out.torn_line = len(lines) + 1
    return out


# Kinds whose fsync waits for the next durable record (or close): results and feedback describe a command that
# already ran, and the command's own record, fsync'd before it ran, is the durability point.
GROUP_COMMIT_KINDS = frozenset({"result", "feedback"})
# The largest journal file read back (a session's commands at ~1 KB each: a million of them).
MAX_JOURNAL_BYTES = 1024 * 1024 * 1024
# Records kept in memory for readers that want the newest (e.g. the last command record of a session).
TAIL_RECORDS = 256
# executed() entries kept in memory by a file-backed journal; older ones are read back from the file on demand.
EXECUTED_TAIL = 128


class Journal:
    """Append-only record of one guarded session. `Journal(None)` keeps records in memory only (benchmarks)."""

    def __init__(self, path: str | Path | None = None, *, session: str = "default", fsync: bool = True,
                 clock: Any = None, group_commit: bool = True):
        self.path = Path(path) if path is not None else None
        self.session = session
        self._fsync = fsync
        self._group_commit = group_commit
        self._clock = clock
        self._lock = threading.Lock()
        # Every record, only when there is no file to read them back from.
        self._records: list[dict[str, Any]] | None = [] if self.path is None else None
        self._tail: deque[dict[str, Any]] = deque(maxlen=TAIL_RECORDS)
        self._counts: Counter[str] = Counter()
        self._executed: list[tuple[int, str]] = []  # (seq, the executed() entry as JSON), the newest ones
        self._executed_dropped = 0  # older entries let go from memory (file-backed only); the file has them
        self._awaiting_result: dict[int, dict[str, Any]] = {}  # commands that ran, by seq, until their result
        self._unsynced = False
        self._batch_depth = 0  # inside batch(): every append waits for the one fsync at its end
        self._fh = None
        self._seq = 0
        self._size = 0  # bytes of the file as this journal wrote it: less on disk means it was truncated
        self._tampered: list[dict[str, Any]] = []  # events not yet taken by take_tampering()
        if self.path is not None:
            self._open()

    # -- writing ---------------------------------------------------------------------------------------------

    def _open(self) -> None:
        assert self.path is not None
        parent = self.path.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            # A regular file where a directory should be gives EEXIST or ENOTDIR; say what is wrong.
            why = "not a directory" if isinstance(e, (FileExistsError, NotADirectoryError)) else e.strerror or e
            raise JournalError(f"{self.path}: cannot create journal directory {parent}: {why}") from e
        try:
            self._fh = open(self.path, "a+b", buffering=0)  # readable: see _check_in_place
        except OSError as e:
            raise JournalError(f"{self.path}: cannot open journal: {e.strerror or e}") from e
        # One writer per journal: a second session appending with its own seq counter would interleave records
        # under duplicate seqs and read the other's changes as its own. The lock goes with the open file, so it
        # also holds between two Journals of one process, and the kernel drops it when the writer dies.
        try:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            self._fh.close()
            self._fh = None
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise JournalError(f"{self.path}: journal in use by another guard session") from e
            raise JournalError(f"{self.path}: cannot lock journal: {e.strerror or e}") from e
        torn = 0
        existing = read_journal(self.path)
        for rec in existing:
            self._index(rec)
        self._seq = max((int(r.get("seq", 0)) for r in existing), default=0)
        if existing.torn:
            torn = existing.torn_bytes
            os.ftruncate(self._fh.fileno(), self.path.stat().st_size - torn)
        self._size = os.fstat(self._fh.fileno()).st_size
        if torn:
            self.append("recovery", torn_bytes=torn, note="a torn last record from an earlier crash was dropped")

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Append one record; it is durable when this returns, unless its kind is group-committed."""
        with self._lock:
            self._seq += 1
            rec = {"seq": self._seq, "kind": kind, "session": self.session, "wall": round(time.time(), 6)}
            if self._clock is not None:
                rec["t"] = round(float(self._clock.now()), 6)
            rec.update(fields)
            if self._fh is not None:
                try:
                    event = self._check_in_place()
                    if event is not None:
                        rec["seq"] = self._seq + 1  # the tampering record takes this seq
                        self._write_locked({"seq": self._seq, "kind": "journal_tampered", "session": self.session,
                                            "wall": rec["wall"], **event})
                        self._seq += 1
                    line = json.dumps(rec, separators=(",", ":"), default=_jsonable).encode() + b"\n"
                    self._fh.write(line)
                    self._size += len(line)
                    if self._fsync:
                        if self._batch_depth or (self._group_commit and kind in GROUP_COMMIT_KINDS):
                            self._unsynced = True
                        else:
                            os.fsync(self._fh.fileno())
                            self._unsynced = False
                except (OSError, TypeError, ValueError) as e:
                    raise JournalError(f"{self.path}: cannot append record: {e}") from e
            self._index(rec)
            return rec

    def _write_locked(self, rec: dict[str, Any]) -> None:
        line = json.dumps(rec, separators=(",", ":"), default=_jsonable).encode() + b"\n"
        assert self._fh is not None
        self._fh.write(line)
        self._size += len(line)
        os.fsync(self._fh.fileno())
        self._index(rec)

    def _check_in_place(self) -> dict[str, Any] | None:
        """Is the file at the path still the one this journal writes, whole? If it was unlinked or replaced, put
        it back from the open descriptor; return what happened, or None. Called under the lock, before a write."""
        assert self._fh is not None and self.path is not None
        held = os.fstat(self._fh.fileno())
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            now = None
        except OSError:
            now = None
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            if held.st_size >= self._size:
                return None
            event = {"what": "truncated", "bytes_lost": self._size - held.st_size,
                     "note": "the journal file was cut short in place; the records in the lost bytes are gone "
                             "from the file"}
            self._size = held.st_size
            return self._report(event)
        what = "unlinked" if now is None else "replaced"
        aside = None
        if now is not None:
            aside = self.path.with_name(f"{self.path.name}.replaced-{time.time_ns()}")
            os.rename(self.path, aside)
        fresh = os.fdopen(os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600), "a+b",
                          buffering=0)
        try:
            fcntl.flock(fresh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            at = 0
            while chunk := os.pread(self._fh.fileno(), 1 << 20, at):  # every record, from the inode we hold
                fresh.write(chunk)
                at += len(chunk)
            os.fsync(fresh.fileno())
        except OSError:
            fresh.close()
            raise
        self._fh.close()
        self._fh = fresh
        self._size = at
        return self._report({"what": what, "restored_bytes": at, "impostor_moved_to": str(aside) if aside else None,
                             "note": f"the journal file was {what} while the guard held it open; it was re-created "
                                     "at its path from the guard's own descriptor, with every record"})

    def _report(self, event: dict[str, Any]) -> dict[str, Any]:
        self._tampered.append(dict(event))
        print(f"guardrail: journal {self.path} was {event['what']} by something other than the guard: "
              f"{event['note']}", file=sys.stderr, flush=True)
        return event

    def take_tampering(self) -> list[dict[str, Any]]:
        """The tampering events found since the last call (unlinked, replaced, truncated), for the agent's answer."""
        with self._lock:
            out, self._tampered = self._tampered, []
            return out

    def _index(self, rec: dict[str, Any]) -> None:
        """Keep what readers need without the whole history: counts, the tail, and the executed() list."""
        if self._records is not None:
            self._records.append(rec)
        self._tail.append(rec)
        kind = rec.get("kind")
        self._counts[kind] += 1
        if kind == "command" and rec.get("ran"):
            self._awaiting_result[rec["seq"]] = rec
        elif kind == "result":
            cmd = self._awaiting_result.pop(rec.get("ref"), None)
            if cmd is not None:
                entry = _executed_entry(cmd, rec)
                # Kept as JSON text: a third of the memory of the dicts, and decoded only when a verifier asks.
                item = (entry["seq"], json.dumps(entry, separators=(",", ":"), default=_jsonable))
                # Results arrive in command order under the guard; a late one is put back in its place.
                if self._executed and self._executed[-1][0] > item[0]:
                    bisect.insort(self._executed, item, key=lambda e: e[0])
                else:
                    self._executed.append(item)
                # Let the oldest go in batches (a list's front is dear to pop one at a time).
                if self.path is not None and len(self._executed) >= 2 * EXECUTED_TAIL:
                    drop = len(self._executed) - EXECUTED_TAIL
                    del self._executed[:drop]
                    self._executed_dropped += drop

    @contextlib.contextmanager
    def batch(self) -> Iterator["Journal"]:
        """Appends inside share one fsync, at the end of the block: for records that must all be durable before
        the same act (a command's decision and its before-run snapshots, before the shim may exec it). The caller
        must not act on any of them until the block has ended."""
        with self._lock:
            self._batch_depth += 1
        try:
            yield self
        finally:
            with self._lock:
                self._batch_depth -= 1
                if not self._batch_depth:
                    try:
                        self._sync_locked()
                    except OSError as e:
                        raise JournalError(f"{self.path}: cannot sync journal: {e}") from e

    def sync(self) -> None:
        """Make every record written so far durable (group-committed ones included)."""
        with self._lock:
            self._sync_locked()

    def _sync_locked(self) -> None:
        if self._fh is not None and self._unsynced:
            os.fsync(self._fh.fileno())
            self._unsynced = False

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._sync_locked()
                self._fh.close()
                self._fh = None

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- reading (verifiers.protocols.JournalView) -------------------------------------------------------------

    def records(self, kind: str | None = None) -> "JournalRecords":
        """Every record (of one kind), oldest first. A sequence: the newest few come from memory, the rest from
        the file when it is read as a whole."""
        with self._lock:
            n = self._counts[kind] if kind is not None else sum(self._counts.values())
            tail = [r for r in self._tail if kind is None or r["kind"] == kind]
        return JournalRecords(self, kind, n, tail)

    def since(self, seq: int) -> list[Mapping[str, Any]]:
        """The records after `seq`, oldest first: what an incremental reader (the loop watchdog) has not seen."""
        with self._lock:
            if not self._tail or self._tail[0]["seq"] <= seq + 1:
                # From the newest back: an incremental reader usually wants the last record or two.
                out = []
                for r in reversed(self._tail):
                    if r["seq"] <= seq:
                        break
                    out.append(r)
                return out[::-1]
            if self._records is not None:
                return [r for r in self._records if r["seq"] > seq]
        return [r for r in self._all(None) if r["seq"] > seq]

    def _all(self, kind: str | None) -> list[Mapping[str, Any]]:
        with self._lock:
            if self._records is not None:
                recs: list[dict[str, Any]] = self._records
            else:
                assert self.path is not None
                recs = read_journal(self.path)
            return [r for r in recs if kind is None or r["kind"] == kind]

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        return iter(self.records())

    def __len__(self) -> int:
        return sum(self._counts.values())

    def counts(self) -> dict[str, int]:
        """Records per kind."""
        with self._lock:
            return dict(self._counts)

    def executed(self) -> list[Mapping[str, Any]]:
        """Commands that ran, with their actions and exit codes, in order."""
        with self._lock:
            if self._executed_dropped:
                assert self.path is not None
                # The file holds every record written so far (written before append() returned); re-derive the
                # whole list from it, with the same join as _index.
                return _executed_from(read_journal(self.path))
            texts = [text for _, text in self._executed]
        return [json.loads(t) for t in texts]

    def executed_count(self) -> int:
        """How many commands ran (executed() without building the list)."""
        with self._lock:
            return self._executed_dropped + len(self._executed)


class JournalRecords(Sequence):
    """A journal's records as a sequence: length and the newest items from memory, everything else on demand."""

    def __init__(self, journal: Journal, kind: str | None, n: int, tail: list[Mapping[str, Any]]):
        self._journal, self._kind, self._n, self._tail = journal, kind, n, tail
        self._full: list[Mapping[str, Any]] | None = None

    def _everything(self) -> list[Mapping[str, Any]]:
        if self._full is None:
            self._full = self._journal._all(self._kind)[: self._n]
        return self._full

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, int) and -len(self._tail) <= i < 0:
            return self._tail[i]
        return self._everything()[i]

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        return iter(self._everything())

    def __eq__(self, other: Any) -> bool:
        return list(self) == list(other) if isinstance(other, (list, tuple, Sequence)) else NotImplemented

    def __repr__(self) -> str:
        return f"JournalRecords({list(self)!r})"


def _executed_entry(cmd: Mapping[str, Any], res: Mapping[str, Any]) -> dict[str, Any]:
    """One executed() entry: a command that ran, joined with its result."""
    return {"seq": cmd["seq"], "t": res.get("t", cmd.get("t")), "command": cmd["command"],
            "exit_code": res.get("exit_code"), "actions": cmd.get("actions", [])}


def _executed_from(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The executed() list of a whole journal, oldest command first."""
    awaiting: dict[Any, Mapping[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for rec in records:
        kind = rec.get("kind")
        if kind == "command" and rec.get("ran"):
            awaiting[rec["seq"]] = rec
        elif kind == "result":
            cmd = awaiting.pop(rec.get("ref"), None)
            if cmd is not None:
                out.append(_executed_entry(cmd, rec))  # read from the file: plain JSON values already
    out.sort(key=lambda e: e["seq"])
    return out


def _jsonable(o: Any) -> Any:
    if hasattr(o, "model_dump"):
        return o.model_dump(mode="json")
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if hasattr(o, "value"):
        return o.value
    return str(o)
