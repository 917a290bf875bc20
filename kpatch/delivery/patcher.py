"""The patcher the load-time hook runs on a cache miss (not a user command).

    KPATCH_PYTHON -m kpatch.delivery.patcher --cache DIR --mode MODE --key KEY INPUTFILE

INPUTFILE holds the code object the process is loading (the hook writes it
to DIR/tmp/ and removes it afterwards); KEY is the hook's key of those
bytes.  The patcher checks the key (a mismatch: nothing stored, exit 2),
then :func:`kpatch.delivery.cache.patch_into_cache` patches it exactly as
``kpatch apply INPUTFILE -o OUT --mode MODE`` would and stores the entry.
Exit 0 when the entry says patched/partial/safe/refused; exit 1 with one
``error: KEY: REASON`` line on stderr when patching failed (an ``error``
record is stored, so later loads pass the original without retrying) or the
cache cannot be written.  The hook puts that line into its log.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kpatch.delivery.patcher", add_help=True)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--mode", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("input")
    args = parser.parse_args(argv)
    try:
        from kpatch.delivery.cache import patch_into_cache
        from kpatch.delivery.hooklib import object_key
        from kpatch.errors import KpatchError, internal_reason

        try:
            with open(args.input, "rb") as f:
                data = f.read()
        except OSError as e:
            print(f"error: {args.input}: cannot read: {e.strerror}", file=sys.stderr)
            return 1
        actual = object_key(data)
        if actual != args.key:
            print(f"error: {args.input}: its key is {actual}, not {args.key} (the file changed); nothing stored",
                  file=sys.stderr)
            return 2
        try:
            rec = patch_into_cache(data, args.mode, args.cache)
        except OSError as e:
            print(f"error: {args.key}: cannot write the cache entry in {args.cache}: {e.strerror or e}",
                  file=sys.stderr)
            return 1
        except KpatchError as e:
            print(f"error: {args.key}: {e.reason}", file=sys.stderr)
            return 1
        except Exception as e:  # a bug: one line (KPATCH_DEBUG=1 adds the traceback)
            print(f"error: {args.key}: {internal_reason(e)}", file=sys.stderr)
            return 1
        if rec.status == "error":
            print(f"error: {args.key}: {rec.reason}", file=sys.stderr)
            return 1
        return 0
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
