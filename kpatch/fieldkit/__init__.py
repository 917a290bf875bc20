"""The field kit: what an RX 5600 XT owner runs to check a system and report.

``doctor`` inspects the machine (KFD topology, amdgpu driver, the override,
the ROCm runtime a PyTorch install really loads, MIOpen's cache, kpatch's
hook and cache, how much of the install's gfx1030 code the cache covers);
``selftest`` runs PyTorch cases on the GPU under ``kpatch run``, each in its
own subprocess with a timeout, compares them with the CPU and writes a
report (``report``: JSON and a self-contained HTML page).

``probe.py`` and ``cases.py`` are standalone scripts, run by the user's
Python (the one that has torch, which need not be kpatch's): they import
nothing from kpatch.
"""
