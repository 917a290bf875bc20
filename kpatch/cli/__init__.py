"""The ``kpatch`` command (:mod:`kpatch.cli.main` holds the click group).

:func:`entry` is the installed entry point.  It imports the CLI only inside a
``try``, so a broken installation (a dependency missing from the
environment) is reported in one line instead of a traceback.  It also
takes Ctrl-C over from the start (:func:`on_sigint`), so that an interrupt
at any moment, even while the CLI is still being imported, ends with one
line and exit status 130.
"""

from __future__ import annotations

import os
import signal
import sys

#: Exit status when kpatch cannot start or hits an internal error.
EXIT_INTERNAL = 3
#: Exit status after Ctrl-C (128 + SIGINT; :mod:`kpatch.cli.common` says the same).
EXIT_INTERRUPTED = 130
INTERRUPTED_LINE = "error: interrupted"


def on_sigint(signum: int, frame: object) -> None:
    """kpatch's SIGINT handler: the first Ctrl-C raises KeyboardInterrupt
    (every command then cleans up and exits 130); later ones are ignored,
    so that the clean-up (removing temporary files, stopping worker
    processes) is never cut short half-way."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def missing_module_line(e: ImportError) -> str:
    """One line saying which module is missing and how to repair the installation."""
    name = getattr(e, "name", None) or str(e)
    return (f"error: kpatch cannot run: the Python module {name!r} is missing from this environment "
            f"({sys.executable}); reinstall kpatch into a virtual environment with `pip install .` "
            f"(see the README's quick start)")


def caused_by_interrupt(e: BaseException | None) -> bool:
    """Is ``e`` a KeyboardInterrupt, or an exception Python raised because of
    one (e.g. the RuntimeError that wraps an exception raised inside
    ``__set_name__`` while a class is created during an import)?"""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def _sigint_while_starting(signum: int, frame: object) -> None:
    """Ctrl-C before any command has started: nothing to clean up, so end now
    (an exception raised inside an import can surface as another error)."""
    try:
        os.write(2, (INTERRUPTED_LINE + "\n").encode())
    finally:
        os._exit(EXIT_INTERRUPTED)


def entry() -> None:
    current = signal.getsignal(signal.SIGINT)
    # (not when Ctrl-C is ignored already or handled by the program that called entry();
    # kpatch.__main__'s start-up handler is kpatch's own)
    handle = current is signal.default_int_handler or getattr(current, "kpatch_startup", False)
    if handle:
        signal.signal(signal.SIGINT, _sigint_while_starting)
    try:
        from kpatch.cli.main import main as run
    except ImportError as e:  # the CLI itself could not be imported
        if os.environ.get("KPATCH_DEBUG"):
            raise
        print(missing_module_line(e), file=sys.stderr)
        sys.exit(EXIT_INTERNAL)
    if handle:
        signal.signal(signal.SIGINT, on_sigint)
    try:
        run()
    except SystemExit as e:
        if e.code == EXIT_INTERRUPTED:  # the command cleaned up and said so
            _exit_interrupted()
        raise
    except BaseException as e:
        if not caused_by_interrupt(e):
            raise
        print(INTERRUPTED_LINE, file=sys.stderr)  # e.g. while a command imported a module
        _exit_interrupted()


def _exit_interrupted() -> None:
    """Exit with status 130 now that everything is cleaned up.  Not through
    ``sys.exit``: under ``python -m kpatch`` CPython turns the exit into a
    death by SIGINT (status -2) when the KeyboardInterrupt was raised inside
    code run by ``exec`` of a string (e.g. a dataclass being created while a
    module is imported), even though it was caught."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(EXIT_INTERRUPTED)
