"""Output files that are whole or absent: checked before the work that fills them, replaced in one rename.

A report, a summary or an episode's JSON that a crash, Ctrl-C or a full disk interrupts must not be left half
written over the previous good one: `write_atomic` writes a temporary file beside the target, fsyncs it and
renames it into place (a rename within one directory is atomic on POSIX). `ensure_writable_dir` and
`ensure_writable_file` run first, before minutes of work, and raise an OSError whose message names the path
and the reason in words an operator can act on.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

__all__ = ["write_atomic", "ensure_writable_dir", "ensure_writable_file"]

# The process's umask, read once at import (os.umask can only be read by setting it): a new file gets the mode
# open() would have given it, not mkstemp's 0600.
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def _not_a_dir_ancestor(path: Path) -> Path | None:
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.is_dir():
            return parent
    return None


def ensure_writable_dir(path: Path) -> None:
    """Create `path` (and its parents) if missing and check that files can be created in it."""
    blocker = _not_a_dir_ancestor(path)
    if blocker is not None:
        raise OSError(errno.ENOTDIR, f"{blocker} is a file, not a directory", str(path))
    path.mkdir(parents=True, exist_ok=True)
    # Create and remove a file rather than ask os.access: that also catches a read-only mount, and root.
    fd, probe = tempfile.mkstemp(prefix=".probe.", dir=path)
    os.close(fd)
    os.unlink(probe)


def _special(path: Path) -> bool:
    """An existing target that is not a regular file (a device such as /dev/null or /dev/stdout, a FIFO, a
    process substitution's /dev/fd/N): written through, never replaced."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def ensure_writable_file(path: Path) -> None:
    """Check that `path` can be written (its directory created if missing) without touching an existing file."""
    path = Path(path)
    if path.is_dir():
        raise OSError(errno.EISDIR, "is a directory", str(path))
    if _special(path):
        if not os.access(path, os.W_OK):
            raise OSError(errno.EACCES, "not writable", str(path))
        return
    real = Path(os.path.realpath(path))  # a symlink's target is what gets written
    ensure_writable_dir(real.parent)
    if real.exists() and not os.access(real, os.W_OK):
        raise OSError(errno.EACCES, "the file is not writable", str(path))


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step: readers see the old content or the new, never a part. A symlink
    is followed (its target is replaced, the link kept); a device, FIFO or /dev/fd/N is written through."""
    path = Path(path)
    if _special(path):
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        return
    path = Path(os.path.realpath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:  # owns fd from here: closed on any error below
            try:
                mode = path.stat().st_mode & 0o7777
            except OSError:
                mode = 0o666 & ~_UMASK
            os.fchmod(fh.fileno(), mode)
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
