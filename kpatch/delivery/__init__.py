"""Delivery: where patched code reaches the runtime.

``hook/kpatch_hook.c`` is the HSA tools library that patches code objects as
a process loads them; ``hooklib`` finds the built library and exposes its
content key; ``cache`` is the content-addressed cache both share;
``patcher`` is the entry point the hook runs on a cache miss. ``run`` and
``warm`` are ``kpatch run`` / ``kpatch warm`` / ``kpatch cache``;
``steering`` turns MIOpen away from solvers whose kernels kpatch refused
(table: ``kpatch/data/miopen_solvers.toml``).
"""
