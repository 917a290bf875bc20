"""Writing files so that nothing is ever half-written, with the permissions
any new file gets.

Every file kpatch writes goes through a temporary file in the same directory
and a rename.  ``tempfile.mkstemp`` creates that temporary file with mode
0600; :func:`new_file_mode` is what ``open(path, "w")`` would have given
instead (0666 minus the umask: 0644 under the usual umask 022), and every
writer sets it before the rename.
"""

from __future__ import annotations

import errno
import os
import tempfile
from contextlib import contextmanager
from typing import Iterator

from kpatch.errors import UsageError


def current_umask() -> int:
    """The process's umask: from ``/proc/self/status`` where Linux shows it
    (nothing changes), else by setting it and putting it straight back."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode(executable: bool = False) -> int:
    """The mode a newly created file gets: 0666 (0777 for an executable)
    without the bits of the umask."""
    return (0o777 if executable else 0o666) & ~current_umask()


def remove_quietly(*paths: str) -> None:
    """Remove each of ``paths`` that exists."""
    for p in paths:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


@contextmanager
def replacing(path: str, *, prefix: str, suffix: str = "", leftovers: tuple[str, ...] = ()
              ) -> Iterator[tuple[int, str]]:
    """The one way kpatch writes a file whole or not at all: yields ``(fd,
    tmp)``, a new temporary file (mode 0600, open as ``fd``) in ``path``'s
    directory, named ``prefix...suffix``; when the block ends normally,
    ``tmp`` replaces ``path`` (a rename); when it raises, ``tmp`` and
    ``tmp + s`` for each suffix of ``leftovers`` (e.g. SQLite's ``-wal``)
    are removed.  The block owns ``fd`` (it closes it)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=directory)
    try:
        yield fd, tmp
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp, *(tmp + s for s in leftovers))
        raise


def write_atomic(path: str, data: bytes, *, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same
    directory and a rename; the file gets ``mode`` (default
    :func:`new_file_mode`)."""
    with replacing(path, prefix=".kpatch-") as (fd, _):
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), new_file_mode() if mode is None else mode)
            os.fsync(f.fileno())


@contextmanager
def output_errors(path: str) -> Iterator[None]:
    """Around writing the output file ``path`` a user named: an OSError
    (its directory missing or not a directory, no permission, a name too
    long, a directory in its place) becomes a UsageError naming ``path``,
    one line and exit 2, not an internal error; a full disk (ENOSPC,
    EDQUOT) stays an OSError, for the caller's disk-full message."""
    try:
        yield
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise UsageError(f"cannot write: {e.strerror or e}", path) from None
