"""Delivery: where patched code reaches the runtime.

At load time: the HSA tool library (``hook/``) that swaps every gfx1030 code
object a process loads for its patched copy from the content-addressed cache
(``cache.py``); ``kpatch run`` / ``warm`` / ``cache`` (``run.py``,
``warm.py``); steering MIOpen away from solvers whose kernels kpatch refused
(``steering.py``, table in ``kpatch/data/miopen_solvers.toml``).
"""
