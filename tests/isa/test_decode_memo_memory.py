"""Forgetting a code object's decodes gives their memory back to the
system (issue 14: on the largest Tensile object the original's freed
decode stayed resident, about a third of a GiB, under the patched object's
analysis -- apply's peak).  glibc keeps freed chunks below the top of its
heap resident until ``malloc_trim``; this builds that case."""

from __future__ import annotations

import sys

import pytest

from kpatch.isa import decodememo

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_forget_returns_the_freed_memory_to_the_system():
    if not _has_malloc_trim():
        pytest.skip("no glibc malloc_trim")
    with decodememo.decode_memo():
        memo = decodememo._LOCAL.memo
        # 24 MiB in chunks below glibc's mmap threshold (so on its heap),
        # each followed by one as large that stays (freeing the first leaves
        # holes between them, not a free top the heap could shrink by)
        big, pin = [], []
        for k in range(256):
            big.append(bytes([k & 0xFF]) * 96_000)
            pin.append(bytes([k & 0xFF]) * 96_000)
        # (the decode of a Tensile object's code: at least TRIM_FROM bytes of it)
        memo[("gfx1030", 0, bytes(decodememo.TRIM_FROM))] = big
        big = None
        before = _rss_mib()
        decodememo.forget()
        after = _rss_mib()
        assert before - after > 16, (before, after)
        assert pin


def test_forget_trims_only_after_large_code(monkeypatch):
    """A trim walks the whole heap: forgetting the decode of less code than
    TRIM_FROM bytes leaves the freed memory for the next decode to reuse."""
    calls = []
    monkeypatch.setattr(decodememo, "return_freed_memory", lambda: calls.append(1))
    for size, trims in ((decodememo.TRIM_FROM - 4, 0), (decodememo.TRIM_FROM, 1)):
        calls.clear()
        with decodememo.decode_memo():
            half = size // 2 // 4 * 4  # (two ranges: the code of every key counts)
            decodememo._LOCAL.memo[("gfx1030", 0, bytes(half))] = []
            decodememo._LOCAL.memo[("gfx1030", half, bytes(size - half))] = []
            decodememo.forget()
            assert not decodememo._LOCAL.memo
        assert len(calls) == trims, (size, calls)


def _has_malloc_trim() -> bool:
    import ctypes
    import ctypes.util
    name = ctypes.util.find_library("c")
    return bool(name) and hasattr(ctypes.CDLL(name), "malloc_trim")
