"""Decoding a whole buffer as columns (:class:`kpatch.isa.bulk.Columns`):
the boundaries found all at once with numpy (:meth:`Buffer.starts_many`)
are the ones the instruction-by-instruction walk (:meth:`Buffer.starts`)
finds, and the encoding index per instruction names the same decode."""

from __future__ import annotations

import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from kpatch.codeobject import CodeObject
from kpatch.diff.functions import text_symbols
from kpatch.isa import disassemble
from kpatch.isa.bulk import MAX_PEEL, Buffer, Columns, distinct, per_instruction
from kpatch.isa.decoder import cache_for
from kpatch.isa.lines import disassemble_ids

#: dwords real code is made of (s_nop, v_mov_b32 with a literal, a VOP3,
#: s_endpgm, zero), so that random buffers hold instructions of 1-3 dwords,
#: zero runs and words that start nothing
WORDS = [0xBF800000, 0x7E0002FF, 0xD5030000, 0x00020100, 0xBF810000, 0, 0, 0xFFFFFFFF, 0x3F800000,
         0xF4000000, 0xFA000000, 0xDC508000]


def _walk(buf: Buffer, bounds, skip_zeros):
    out = []
    for a, b in bounds:
        out += buf.starts(a, b, skip_zeros)
    return out


def _real():
    with open(os.path.join(FIXTURES, "mathops.hip.gfx1030.v5.hsaco"), "rb") as fh:
        co = CodeObject.from_bytes(fh.read())
    return co, co.section(".text")


def test_starts_many_is_the_walk_on_a_real_object():
    co, sec = _real()
    buf = Buffer(bytes(co.text), cache_for("gfx1030"))
    cuts = sorted({(a - sec.addr) // 4 for a, _ in text_symbols(co)} | {0})
    bounds = list(zip(cuts, cuts[1:] + [buf.nwords]))
    for skip in (True, False):
        got = buf.starts_many(bounds, skip)
        assert got is not None and got.tolist() == _walk(buf, bounds, skip)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(WORDS) | st.integers(0, 2**32 - 1), min_size=1, max_size=200),
       st.lists(st.integers(0, 200), max_size=8), st.booleans(), st.booleans())
def test_starts_many_is_the_walk(words, cuts, skip_zeros, gaps):
    data = np.array(words, "<u4").tobytes()
    buf = Buffer(data, cache_for("gfx1030"))
    n = buf.nwords
    cuts = sorted({c % n for c in cuts} | {0})
    bounds = list(zip(cuts, cuts[1:] + [n]))
    if gaps:  # segments that do not cover the buffer
        bounds = [(a, max(a + 1, (a + b) // 2)) for a, b in bounds]
    got = buf.starts_many(bounds, skip_zeros)
    assert got is not None and got.tolist() == _walk(buf, bounds, skip_zeros)


def test_starts_many_refuses_overlapping_or_empty_segments():
    buf = Buffer(np.array([0xBF800000] * 8, "<u4").tobytes(), cache_for("gfx1030"))
    assert buf.starts_many([(0, 4), (2, 6)], False) is None
    assert buf.starts_many([(0, 0)], False) is None
    assert buf.starts_many([(0, 9)], False) is None


def test_two_walks_that_never_meet_fall_back_to_the_walk():
    """v_mov_b32 v0, 0x7e0002ff repeated: its literal is the instruction
    again, so the decode from the second dword runs beside the real one to
    the end without meeting it (llvm-mc-16 -mcpu=gfx1030 assembles
    `v_mov_b32 v0, 0x7e0002ff` to ff 02 00 7e ff 02 00 7e)."""
    n = 2 * (MAX_PEEL + 10)
    data = np.array([0x7E0002FF] * n, "<u4").tobytes()
    buf = Buffer(data, cache_for("gfx1030"))
    assert buf.starts_many([(0, n)], False) is None
    assert buf.starts_many([(0, 40)], False).tolist() == list(range(0, 40, 2))
    cols = disassemble_ids(data, "gfx1030", 0x1000)
    assert cols.addrs.tolist() == list(range(0x1000, 0x1000 + 4 * n, 8))
    assert {d.text for d in cols.table} == {"v_mov_b32_e32 v0, 0x7e0002ff"}


def test_columns_name_the_instructions_decode_finds():
    co, sec = _real()
    syms = [a for a, _ in text_symbols(co)]
    insts = disassemble(co.text, "gfx1030", sec.addr, syms)
    cols = disassemble_ids(co.text, "gfx1030", sec.addr, syms)
    assert cols.addrs.tolist() == [i.address for i in insts]
    assert [cols.table[k] for k in cols.ids.tolist()] == [i.d for i in insts]
    assert len(set(map(id, cols.table))) == len(cols.table) < len(insts)  # one entry per distinct encoding
    again = Columns.of(cols.address_list(), cols.ds())
    assert per_instruction(again.ids, again.table) == cols.ds()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1) | st.sampled_from([0, 1, 2**16, 2**32 - 1, 2**63]), max_size=300),
       st.booleans())
def test_distinct_is_numpys_unique(keys, narrow):
    arr = np.array(keys, np.uint64)
    if narrow:
        arr = (arr & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    want_u, want_i = np.unique(arr, return_inverse=True)
    got_u, got_i = distinct(arr)
    assert got_u.dtype == arr.dtype
    assert got_u.tolist() == want_u.tolist() and got_i.tolist() == want_i.reshape(-1).tolist()
