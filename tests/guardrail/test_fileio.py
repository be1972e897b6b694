"""guardrail/fileio.py: whole-or-absent output files, and checks made before the work that fills them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from guardrail import fileio
from guardrail.fileio import ensure_writable_file, write_atomic


def test_write_atomic_replaces_a_file_whole_and_keeps_its_mode(tmp_path: Path):
    f = tmp_path / "out.json"
    f.write_text("old")
    f.chmod(0o640)
    write_atomic(f, "new")
    assert f.read_text() == "new" and (f.stat().st_mode & 0o777) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_symlink_is_followed_and_kept(tmp_path: Path):
    target = tmp_path / "target.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target.name)
    ensure_writable_file(link)
    write_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_a_fifo_is_written_through_not_replaced(tmp_path: Path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so the writer's open does not block
    try:
        ensure_writable_file(fifo)
        write_atomic(fifo, "through")
        assert os.read(r, 100) == b"through"
    finally:
        os.close(r)
    assert fifo.is_fifo()


def test_a_path_under_a_regular_file_is_refused_before_any_work(tmp_path: Path):
    (tmp_path / "afile").write_text("keep")
    with pytest.raises(OSError, match="is a file, not a directory"):
        ensure_writable_file(tmp_path / "afile" / "out.json")
    assert (tmp_path / "afile").read_text() == "keep"


def test_a_failure_after_the_temporary_file_leaves_no_file_and_no_descriptor(tmp_path: Path, monkeypatch):
    def refuse(fd, mode):
        raise OSError("chmod refused")

    monkeypatch.setattr(fileio.os, "fchmod", refuse)
    fds = len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        with pytest.raises(OSError, match="chmod refused"):
            write_atomic(tmp_path / "out.json", "x")
    assert len(os.listdir("/proc/self/fd")) == fds
    assert list(tmp_path.iterdir()) == []
