"""Writing files so that nothing is ever half-written, with the permissions
any new file gets.

Every file kpatch writes goes through a temporary file in the same directory
and a rename.  ``tempfile.mkstemp`` creates that temporary file with mode
0600; :func:`new_file_mode` is what ``open(path, "w")`` would have given
instead (0666 minus the umask: 0644 under the usual umask 022), and every
writer sets it before the rename.
"""

from __future__ import annotations

import os
import tempfile


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


def write_atomic(path: str, data: bytes, *, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same
    directory and a rename; the file gets ``mode`` (default
    :func:`new_file_mode`)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".kpatch-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), new_file_mode() if mode is None else mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
