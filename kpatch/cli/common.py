"""Shared CLI plumbing: consoles, one-line errors, progress, exit codes."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager

#: Exit statuses of every command (README "Exit status and errors", `kpatch --help`).
EXIT_OK = 0
EXIT_SOME_FAILED = 1  # an input could not be read (or a check failed); the rest was done
EXIT_USAGE = 2  # the command line is wrong, or asks for what kpatch will not do as asked
EXIT_INTERNAL = 3  # a bug in kpatch
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)

EXIT_STATUS_HELP = """\b
Exit status (every command):
  0    done; every input was read (refused kernels, unpatchable findings
       and differences are results, not failures)
  1    some input could not be read: missing, unreadable or malformed
       (each gets one `error: ITEM: REASON` line on stderr and an entry
       under "errors" with --json; the rest is still done); also `diff`
       found a control-flow problem or, with --exit-code, a difference;
       or the disk filled up while writing (nothing half-written is left)
  2    usage: a wrong command line, or a request kpatch will not carry
       out as asked (input of the wrong kind, output in a system
       directory or already there, user DB in use, no backup left to
       revert, mode or CU count that cannot be detected); nothing changed
  3    internal error (a bug in kpatch), or a module kpatch needs is missing
       from its environment; KPATCH_DEBUG=1 shows the traceback
  130  interrupted (Ctrl-C); nothing half-written is left behind
"""

class LazyConsole:
    """A rich ``Console`` made on first use, with the given settings.

    Importing rich costs about 40 ms, more than `kpatch --help` may take in
    all (issue 14), and `--help` never prints through a console.  Every
    attribute is the real console's; :attr:`real` is the console itself,
    for rich classes that take one (``Progress(console=...)``).
    """

    def __init__(self, **settings) -> None:
        self._settings = settings
        self._real = None

    @property
    def real(self):
        if self._real is None:
            from rich.console import Console

            settings = {k: (v() if callable(v) else v) for k, v in self._settings.items()}
            self._real = Console(**settings)
        return self._real

    def __getattr__(self, name: str):
        return getattr(self.real, name)


err_console = LazyConsole(stderr=True, highlight=False, soft_wrap=True)
# when piped, never wrap: a URI must stay one copy-pasteable token (decided when first used)
out_console = LazyConsole(highlight=False, soft_wrap=True, width=lambda: None if sys.stdout.isatty() else 100_000)


def error_line(item: str | None, reason: str) -> None:
    """Print one line naming the item and the reason, on stderr (a reason
    that spans lines, e.g. quoted from SQLite, is joined into one)."""
    reason = "; ".join(part.strip() for part in str(reason).splitlines() if part.strip())
    text = f"error: {item}: {reason}" if item else f"error: {reason}"
    err_console.print(text, markup=False, style="red")


def show_progress() -> bool:
    return err_console.is_terminal and not os.environ.get("KPATCH_NO_PROGRESS")


@contextmanager
def progress(label: str):
    """A transient progress line on stderr (only on a terminal).

    Yields ``update(description)``; a no-op when stderr is not a terminal.
    """
    if not show_progress():
        yield lambda *_a, **_k: None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        TextColumn("{task.completed} found"),
        TimeElapsedColumn(),
        console=err_console.real,
        transient=True,
    ) as p:
        task = p.add_task(label, total=None)

        def update(description: str | None = None, advance: int = 0) -> None:
            p.update(task, description=description or label, advance=advance)

        yield update


def debug() -> bool:
    return bool(os.environ.get("KPATCH_DEBUG"))


def flush_stdout() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # pragma: no cover - e.g. `kpatch scan | head`
        pass
