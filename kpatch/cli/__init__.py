"""The ``kpatch`` command (:mod:`kpatch.cli.main` holds the click group).

:func:`entry` is the installed entry point.  It imports the CLI only inside a
``try``, so a broken installation (a dependency missing from the
environment) is reported in one line instead of a traceback.
"""

from __future__ import annotations

import os
import sys

#: Exit status when kpatch cannot start or hits an internal error.
EXIT_INTERNAL = 3


def missing_module_line(e: ImportError) -> str:
    """One line saying which module is missing and how to repair the installation."""
    name = getattr(e, "name", None) or str(e)
    return (f"error: kpatch cannot run: the Python module {name!r} is missing from this environment "
            f"({sys.executable}); reinstall kpatch into a virtual environment with `pip install .` "
            f"(see the README's quick start)")


def entry() -> None:
    try:
        from kpatch.cli.main import main as run
    except ImportError as e:
        if os.environ.get("KPATCH_DEBUG"):
            raise
        print(missing_module_line(e), file=sys.stderr)
        sys.exit(EXIT_INTERNAL)
    run()
