"""``python -m kpatch`` and the installed ``kpatch`` command.

Ctrl-C is taken over before anything else of kpatch is imported: a SIGINT
that lands while :mod:`kpatch.cli` is still being imported ends with one
line and exit status 130, like one during any later moment of start-up
(:func:`kpatch.cli.entry` takes over from here)."""

import os
import signal


def _interrupted_before_start(signum, frame):
    """Ctrl-C before the CLI is imported: nothing to clean up, end now."""
    try:
        os.write(2, b"error: interrupted\n")
    finally:
        os._exit(130)


_interrupted_before_start.kpatch_startup = True  # kpatch.cli.entry replaces it, as the default handler


def main() -> None:
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when Ctrl-C is ignored already
        signal.signal(signal.SIGINT, _interrupted_before_start)
    from kpatch.cli import entry
    entry()


if __name__ == "__main__":  # pragma: no cover
    main()
