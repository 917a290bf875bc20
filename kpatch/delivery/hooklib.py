"""The built load-time hook (``kpatch/delivery/hook/kpatch_hook.c``), from Python.

The hook is a plain shared library built when kpatch is installed
(``kpatch.delivery._kpatch_hook*.so``: a setuptools Extension that is not a
Python module).  :func:`hook_library_path` finds it (for ``HSA_TOOLS_LIB``);
:func:`object_key` calls its ``kpatch_object_key`` through ctypes, so the
content key the cache is addressed by has exactly one implementation, the
C one the hook uses.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading

from kpatch.errors import UsageError

_HERE = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


def hook_library_path() -> str:
    """Absolute path of the built hook library; UsageError if kpatch was
    installed without it (no C compiler at install time)."""
    found = sorted(glob.glob(os.path.join(_HERE, "_kpatch_hook*.so")))
    if not found:
        raise UsageError("the load-time hook library was not built (kpatch/delivery/_kpatch_hook*.so is missing): "
                         "install gcc and reinstall kpatch (`pip install .`)")
    return found[0]


def _library() -> ctypes.CDLL:
    global _lib
    with _lock:
        if _lib is None:
            lib = ctypes.CDLL(hook_library_path())
            lib.kpatch_object_key.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
            lib.kpatch_object_key.restype = None
            _lib = lib
        return _lib


def object_key(data: bytes | bytearray | memoryview) -> str:
    """The cache key of ``data``: 32 lowercase hex digits (kpatch-key-1, a
    128-bit non-cryptographic hash of the bytes with their size mixed in;
    see kpatch_hook.c)."""
    lib = _library()
    out = ctypes.create_string_buffer(33)
    view = memoryview(data).cast("B")
    n = view.nbytes
    if n == 0:
        lib.kpatch_object_key(None, 0, out)
    elif isinstance(data, bytes):
        lib.kpatch_object_key(ctypes.c_char_p(data), n, out)
    else:
        buf = (ctypes.c_char * n).from_buffer_copy(view) if view.readonly else (ctypes.c_char * n).from_buffer(view)
        lib.kpatch_object_key(ctypes.addressof(buf), n, out)
    return out.value.decode("ascii")
