"""The one exception type users see.

Every parser raises :class:`FormatError` (or a subclass) for bad input, with
the item it was reading and the reason; the CLI prints ``item: reason`` on one
line and goes on with the rest of the work.  Anything else escaping a parser
is a bug in kpatch.
"""


class KpatchError(Exception):
    """An error with a one-line, user-facing message."""

    def __init__(self, reason: str, item: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.item = item

    def with_item(self, item: str) -> "KpatchError":
        if self.item is None:
            self.item = item
        return self

    def __str__(self) -> str:
        return f"{self.item}: {self.reason}" if self.item else self.reason


class FormatError(KpatchError):
    """Input bytes that do not follow the format they claim to be."""


class UsageError(KpatchError):
    """A request kpatch cannot carry out as asked (bad URI, missing file...)."""


def internal_reason(error: BaseException) -> str:
    """The one-line reason to report for a bug in kpatch met while working
    on one item (so the other items still get done); with ``KPATCH_DEBUG``
    set, the traceback goes to stderr as well."""
    import os
    import sys
    import traceback

    if os.environ.get("KPATCH_DEBUG"):
        traceback.print_exception(error, file=sys.stderr)
    return f"internal error: {type(error).__name__}: {error} (set KPATCH_DEBUG=1 for a traceback)"


#: SQLite's result code for "database or disk is full" (SQLITE_FULL: a write() failed with ENOSPC).
_SQLITE_FULL = 13
#: SQLITE_IOERR_SHMSIZE: SQLite could not grow the ``-shm`` file of a WAL DB.  os_unix.c returns it
#: when writing one byte into each new page of that file fails (ENOSPC, EDQUOT; the only other
#: source is fstat() failing on a file SQLite has open).
_SQLITE_IOERR_SHMSIZE = 4874


def disk_full_reason(error: BaseException) -> str | None:
    """``"no space left on device"`` (or ``"disk quota exceeded"``) when
    ``error`` means the file system ran out of room while kpatch was writing:
    an OSError with ENOSPC or EDQUOT, or SQLite's SQLITE_FULL ("database or
    disk is full", how SQLite reports ENOSPC) or SQLITE_IOERR_SHMSIZE (it
    could not grow a DB's ``-shm`` file); else None.  A full disk is a
    condition of the machine, not a bug: every writer removes what it had
    half-written, and the CLI says so in one line (exit status 1)."""
    import errno

    if isinstance(error, OSError):
        if error.errno == errno.ENOSPC:
            return "no space left on device"
        if error.errno == errno.EDQUOT:
            return "disk quota exceeded"
        return None
    import sqlite3

    if isinstance(error, sqlite3.Error):
        code = getattr(error, "sqlite_errorcode", None)  # Python 3.11+
        if code == _SQLITE_IOERR_SHMSIZE:
            return "no space left on device (SQLite could not grow the -shm file beside the DB)"
        if (code is not None and code & 0xFF == _SQLITE_FULL) or "database or disk is full" in str(error):
            return "no space left on device"
    return None
