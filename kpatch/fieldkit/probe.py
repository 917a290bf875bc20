"""What the Python that runs it knows about PyTorch, as one JSON line on stdout.

A standalone script (it imports nothing from kpatch): ``kpatch doctor`` and
``kpatch selftest`` run it with the user's Python, which need not be
kpatch's.  It imports torch but never touches the GPU (no HIP call), so it
cannot hang on a broken driver.
"""

import json
import os
import platform
import sys


def main() -> None:
    out = {"python": sys.executable, "python_version": platform.python_version(), "torch": None, "error": None}
    try:
        import torch  # noqa: F401  (the user's install)
    except BaseException as e:  # ImportError, or a broken install failing to load its libraries
        out["error"] = f"{type(e).__name__}: {e}"
    else:
        version = getattr(torch, "version", None)
        out["torch"] = {
            "version": str(getattr(torch, "__version__", "")),
            "hip": getattr(version, "hip", None),
            "cuda": getattr(version, "cuda", None),
            "dir": os.path.dirname(os.path.abspath(torch.__file__)),
        }
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
