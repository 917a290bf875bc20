"""Any bytes decode to instructions or unknown words; nothing raises."""

from __future__ import annotations

import struct

from hypothesis import given, settings, strategies as st

from kpatch.isa import decode, decode_one

SIZES = {4, 8, 12, 16, 20}


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=128), st.sampled_from(["gfx1010", "gfx1030"]))
def test_random_bytes_decode_cleanly(data, cpu):
    insts = decode(data, cpu, base_address=0x1000)
    pos = 0x1000
    for i in insts:
        assert i.address == pos
        pos += i.size
        if i.is_unknown:
            assert i.size == 4 or i.size == len(data) % 4
            if i.size == 4:
                assert i.text() == ".long 0x%08x" % struct.unpack("<I", i.raw)[0]
        else:
            assert i.size in SIZES
            assert i.text().split(" ", 1)[0] == i.mnemonic
            i.reads, i.writes  # register sets are computable for everything
    assert pos - 0x1000 == len(data)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFFFFFFFF))
def test_random_words_have_sane_sizes(w0, w1, w2):
    data = struct.pack("<III", w0, w1, w2)
    for cpu in ("gfx1010", "gfx1030"):
        i = decode_one(data, cpu)
        assert i.size in (4, 8, 12)


def test_unknown_word_is_explicit():
    # 0xffffffff has no GFX10 format; llvm-objdump prints ".long 0xffffffff"
    (i,) = decode(b"\xff\xff\xff\xff", "gfx1030")
    assert i.is_unknown and i.size == 4 and i.text() == ".long 0xffffffff"
    assert i.format == "UNKNOWN" and i.reads == () and i.writes == ()


def test_truncated_64bit_instruction_is_unknown():
    # first dword of v_mad_u64_u32 without its second dword
    (i,) = decode(bytes.fromhex("020076d5"), "gfx1030")
    assert i.is_unknown and i.text() == ".long 0xd5760002"


def test_trailing_bytes():
    insts = decode(bytes.fromhex("000080bf0102"), "gfx1030")
    assert [i.size for i in insts] == [4, 2]
    assert insts[0].text() == "s_nop 0" and insts[1].is_unknown
