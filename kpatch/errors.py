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
