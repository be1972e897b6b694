"""One bench run's files, written aside and moved into --out together: the folder describes one run or the other.

Called by `guardrail bench` (arena/cli.py) once run_plan has finished the episodes (their rows stay in
`results.jsonl.partial`). The summary, the reports and the plots are written into `.guardrail-bench.staging/` inside
--out (the same file system, so every move is a rename); only when all of them are written does `commit()` move
them in, with the partial file as `results.jsonl`, and take out the plots of the earlier run that this one does not
draw. Before that, a failure (a plot that cannot be drawn, a full disk, Ctrl-C) leaves every file of the earlier run
as it was and the new rows in the partial file, for `--resume` to report without running them again. `commit()`
keeps a hard link of each file it replaces and, should a rename fail half way, puts the earlier files back; SIGINT
and SIGTERM wait until it is done.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Iterator

__all__ = ["RunPublication", "STAGING_NAME"]

STAGING_NAME = ".guardrail-bench.staging"
# Directories of --out that belong to one run as a whole: an entry the new run does not write is the earlier run's.
RUN_DIRS = ("plots",)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block ends (in the main thread; elsewhere they are not ours to hold)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class RunPublication:
    """The files of one bench run, staged in --out and moved in together by commit()."""

    def __init__(self, out_dir: Path):
        self.out_dir = Path(out_dir)
        self.root = self.out_dir / STAGING_NAME
        self.discard()  # a staging directory a killed run left behind
        self.dir = self.root / "new"
        self.dir.mkdir(parents=True)
        self._adopted: list[tuple[Path, str]] = []

    def adopt(self, src: Path, name: str) -> None:
        """Move `src`, a file already written in --out (the partial results), in as `name` on commit."""
        self._adopted.append((Path(src), name))

    def _moves(self) -> list[tuple[Path, str]]:
        staged = sorted((p, p.relative_to(self.dir).as_posix()) for p in self.dir.rglob("*") if p.is_file())
        return staged + self._adopted

    def commit(self) -> None:
        """Move every staged and adopted file into --out; on an OSError, put the earlier files back and raise."""
        moves = self._moves()
        names = {name for _, name in moves}
        stale = [p.relative_to(self.out_dir).as_posix() for d in RUN_DIRS if (self.out_dir / d).is_dir()
                 for p in sorted((self.out_dir / d).iterdir()) if p.is_file()]
        stale = [name for name in stale if name not in names]
        backup = self.root / "old"
        done: list[tuple[Path | None, str, bool]] = []  # (where the new file came from, name, had an earlier one)
        made: list[Path] = []
        with _signals_held():
            try:
                for src, name in moves:
                    dest = self.out_dir / name
                    if not dest.parent.is_dir():
                        dest.parent.mkdir(parents=True)
                        made.append(dest.parent)
                    had = dest.exists()
                    if had:
                        (backup / name).parent.mkdir(parents=True, exist_ok=True)
                        _keep_copy(dest, backup / name)
                    os.replace(src, dest)
                    done.append((src, name, had))
                for name in stale:
                    (backup / name).parent.mkdir(parents=True, exist_ok=True)
                    os.replace(self.out_dir / name, backup / name)
                    done.append((None, name, True))
                _fsync_dir(self.out_dir)
            except OSError:
                self._roll_back(done, made, backup)
                raise
        self.discard()

    def _roll_back(self, done: list[tuple[Path | None, str, bool]], made: list[Path], backup: Path) -> None:
        for src, name, had in reversed(done):
            dest = self.out_dir / name
            with contextlib.suppress(OSError):
                if src is not None:
                    os.replace(dest, src)  # the new file back where it was (the partial results stay for --resume)
                if had:
                    os.replace(backup / name, dest)
        for d in reversed(made):
            with contextlib.suppress(OSError):
                d.rmdir()

    def discard(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _keep_copy(src: Path, dest: Path) -> None:
    """`dest` names the same bytes as `src`: a hard link, or a copy where the file system has none."""
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
