"""Shared CLI plumbing: consoles, one-line errors, progress, exit codes."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager

from rich.console import Console

EXIT_OK = 0
EXIT_SOME_FAILED = 1
EXIT_USAGE = 2

err_console = Console(stderr=True, highlight=False, soft_wrap=True)
# when piped, never wrap: a URI must stay one copy-pasteable token
out_console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 100_000)


def error_line(item: str | None, reason: str) -> None:
    """Print one line naming the item and the reason, on stderr."""
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
        console=err_console,
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
