"""Caps on what one input may cost, and reading that respects them.

Every input kpatch reads is untrusted: a kernel DB row, a compressed
bundle, a zip member or a ``.kdb.bz2`` may claim (or decompress to) far more
than any real object is.  The caps below are set from what real objects
are (README, "Limits", gives the reasons); anything beyond them is refused
with a one-line reason before the memory or disk it would take is used.
Code reads each cap from this module at call time (tests lower them).
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from kpatch.errors import FormatError, UsageError

MiB = 1 << 20
GiB = 1 << 30

#: Largest code object or offload bundle held in memory: a decompressed
#: kernel DB blob, a decompressed CCOB, a raw code object or bundle file (or
#: zip member) read whole.  Real ones: librocrand's largest code object is
#: 1.8 MB, librocsparse's bundles (8 targets each) about 12 MB.
MAX_OBJECT_BYTES = 256 * MiB

#: Largest ``NT_AMDGPU_METADATA`` note decoded (librocrand's, with hundreds
#: of kernels, is 170 KB).
MAX_METADATA_BYTES = 16 * MiB

#: Largest SQLite file a ``.kdb.bz2`` may decompress to (the gfx1030 system
#: DB, the largest MIOpen ships, is about 745 MB).
MAX_KDB_BYTES = 2 * GiB

#: Largest zip/wheel member copied out to a temporary file (host libraries
#: are then mapped, not read; librocsparse.so.0.1 is 1.3 GB).
MAX_ZIP_MEMBER_BYTES = 4 * GiB

#: Free space a temporary file must leave in its file system.
MIN_FREE_BYTES = 256 * MiB

#: SQLite virtual-machine steps one statement may take on an input DB
#: (listing the row ids of a 745 MB system DB takes well under a million).
MAX_SQL_STEPS = 100_000_000
#: How often (in VM steps) SQLite checks that budget.
SQL_STEP_CHECK = 10_000

_COPY_CHUNK = 4 * MiB


def check_regular_file(path: str) -> os.stat_result:
    """``os.stat(path)`` when it names a regular file (symlinks followed);
    UsageError otherwise, without ever opening it (a FIFO would block)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UsageError("no such file", path) from None
    except OSError as e:
        raise UsageError(f"cannot read: {e.strerror or e}", path) from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError("is a directory", path)
    if not stat.S_ISREG(st.st_mode):
        raise UsageError("not a regular file", path)
    return st


def open_input(path: str) -> BinaryIO:
    """``open(path, "rb")``, or UsageError naming ``path`` and why it cannot
    be read (the one wording for every input kpatch opens)."""
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise UsageError("no such file", path) from None
    except IsADirectoryError:
        raise UsageError("is a directory", path) from None
    except OSError as e:
        raise UsageError(f"cannot read: {e.strerror}", path) from None


def read_capped(f: BinaryIO, cap: int, what: str) -> bytes:
    """All of ``f`` (from its position), or FormatError as soon as it has
    more than ``cap`` bytes (at most ``cap + 1`` are read)."""
    data = f.read(cap + 1)
    if len(data) > cap:
        raise FormatError(f"{what} is larger than the limit of {cap} bytes")
    return data


def _free_bytes(fd: int) -> int | None:
    try:
        st = os.fstatvfs(fd)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def copy_capped(src: BinaryIO, dst: BinaryIO, cap: int, what: str) -> int:
    """Stream ``src`` into ``dst``; FormatError once more than ``cap`` bytes
    came out, or when writing on would leave less than
    :data:`MIN_FREE_BYTES` free where ``dst`` lives.  Returns the byte count."""
    written = 0
    fd = dst.fileno()
    free_checked_at = -_COPY_CHUNK * 16
    while True:
        chunk = src.read(min(_COPY_CHUNK, cap + 1 - written))
        if not chunk:
            return written
        written += len(chunk)
        if written > cap:
            raise FormatError(f"{what} is larger than the limit of {cap} bytes")
        if written - free_checked_at >= _COPY_CHUNK * 16:
            free_checked_at = written
            free = _free_bytes(fd)
            if free is not None and free - len(chunk) < MIN_FREE_BYTES:
                raise FormatError(f"{what}: the temporary directory has only {free} bytes free "
                                  f"after {written - len(chunk)} bytes written")
        dst.write(chunk)
