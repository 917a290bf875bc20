"""Build of kpatch's one compiled part: the load-time hook.

``kpatch.delivery._kpatch_hook`` is a plain shared library (an HSA tools
library for ``HSA_TOOLS_LIB``), not a Python extension module: it does not
include Python.h and is never imported; ``kpatch.delivery.hooklib`` finds it
and loads it with ctypes.  Everything else is configured in pyproject.toml.
Needs a C compiler (gcc) at install time.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kpatch.delivery._kpatch_hook",
            sources=["kpatch/delivery/hook/kpatch_hook.c"],
            depends=["kpatch/delivery/hook/kpatch_hsa_table.h"],
            include_dirs=["kpatch/delivery/hook"],
            extra_compile_args=["-O2", "-std=gnu11", "-fvisibility=hidden", "-pthread", "-Wall", "-Wextra",
                                "-Wno-unused-parameter", "-Wno-format-truncation"],
            extra_link_args=["-pthread"],
        )
    ]
)
