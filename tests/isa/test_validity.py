"""The compiled validity checks agree with the printers, and the vectorised
sizes with the one-position ones.

kpatch decides whether LLVM accepts a common encoding without printing it
(kpatch.isa.validity) and finds instruction boundaries for a whole buffer
with numpy (kpatch.isa.bulk.Sizer); both are shortcuts for slower
reference paths (printing, kpatch.isa.sizes.measure) that the LLVM
agreement tests check.  Here the shortcuts must give exactly the reference
answers on seeded random encodings of every opcode of both targets.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from kpatch.isa import formats as F
from kpatch.isa.decoder import identify_by_printing
from kpatch.isa.bulk import Sizer
from kpatch.isa.sizes import measure
from kpatch.isa.tables import load
from kpatch.isa.validity import COMPILED, checker

PER_OPCODE = 24


def random_word(rng: random.Random, fmt: F.Format, op: int, info) -> int:
    w = rng.getrandbits(fmt.size * 8)
    if rng.random() < 0.7:  # mostly keep the fields LLVM insists on
        for name, v in info.form.zero:
            w = fmt.field(name).put(w, v)
    if rng.random() < 0.5:  # and often leave the modifier bits clear
        for name in ("abs", "neg", "neg_hi", "op_sel", "clamp", "omod", "unused"):
            if name in {f.name for f in fmt.fields}:
                w = fmt.field(name).put(w, 0)
    if fmt is F.FLAT:
        w = fmt.field("seg").put(fmt.with_opcode(w, op & 0x7F), op >> 7)
    else:
        w = fmt.with_opcode(w, op)
    return (w & ~fmt.match_mask) | fmt.match_value


@pytest.mark.parametrize("cpu", ["gfx1010", "gfx1030"])
def test_compiled_checks_agree_with_printing(cpu):
    tables = load(cpu)
    rng = random.Random(7)
    n = checked = 0
    for fmtname in COMPILED:
        fmt = F.FORMATS[fmtname]
        for op, info in sorted(tables.ops.get(fmtname, {}).items()):
            check = checker(info, None, tables)
            assert check is not None or fmtname == "SOPK"
            if check is None:
                continue
            checked += 1
            for _ in range(PER_OPCODE):
                w = random_word(rng, fmt, op, info)
                raw = w.to_bytes(fmt.size, "little") + rng.getrandbits(32).to_bytes(4, "little")
                want = identify_by_printing(raw, fmt, info, None, tables) is not None
                assert check(w) == want, (fmtname, info.mnemonic, raw.hex())
                n += 1
    assert checked > 1000 and n > 20000


@pytest.mark.parametrize("cpu", ["gfx1010", "gfx1030"])
def test_vectorised_sizes_match_measure(cpu):
    tables = load(cpu)
    rng = random.Random(11)
    words = []
    for fmt in F.FORMAT_ORDER:  # every format, with its opcodes and markers
        ops = sorted(tables.ops.get(fmt.name, {}))
        for _ in range(400):
            op = rng.choice(ops) if ops else 0
            info = tables.ops.get(fmt.name, {}).get(op)
            w = random_word(rng, fmt, op, info) if info else rng.getrandbits(fmt.size * 8)
            if fmt.name in ("VOP1", "VOP2", "VOPC") and rng.random() < 0.5:
                w = fmt.field("src0").put(w, rng.choice([0xF9, 0xFA, 0xE9, 0xEA, 0xFF]))
            if fmt.size == 8 and rng.random() < 0.3:
                for name in ("src0", "src1", "src2", "soffset"):
                    fld = {f.name: f for f in fmt.fields}.get(name)
                    if fld is not None and fld.width >= 8 and rng.random() < 0.5:
                        w = fld.put(w, 0xFF)
            words += [w & 0xFFFFFFFF, w >> 32] if fmt.size == 8 else [w]
    words += [rng.getrandbits(32) for _ in range(2000)]
    data = np.array(words, "<u4").tobytes()
    got = Sizer(tables).sizes(np.frombuffer(data, "<u4"))
    for i in range(len(words)):
        m = measure(data, 4 * i, len(data), tables)
        assert got[i] == (0 if m is None else m[0] // 4), (i, data[4 * i:4 * i + 8].hex())


@pytest.mark.parametrize("cpu", ["gfx1010", "gfx1030"])
def test_identifying_many_encodings_at_once_agrees_with_one_at_a_time(cpu):
    """kpatch.isa.bulk.identify_words (grouped by opcode, compiled checks)
    gives, for every encoding, what kpatch.isa.decoder.identify_word gives
    alone: random 1- and 2-dword encodings of every opcode of every format."""
    from kpatch.isa.bulk import identify_words
    from kpatch.isa.decoder import DecodeCache, identify_word

    tables = load(cpu)
    rng = random.Random(11)
    for ndw in (1, 2):
        keys = set()
        for fmtname, ops in tables.ops.items():
            fmt = F.FORMATS[fmtname]
            for op, info in ops.items():
                for _ in range(4):
                    w = random_word(rng, fmt, op, info)
                    if ndw == 2 and fmt.size == 4:
                        w |= rng.getrandbits(32) << 32
                    keys.add(w & ((1 << 32 * ndw) - 1) if fmt.size <= 4 * ndw else w & 0xFFFFFFFF)
        keys |= {rng.getrandbits(32 * ndw) for _ in range(2000)}
        keys = sorted(keys)
        got = identify_words(keys, ndw, DecodeCache(cpu))
        one = DecodeCache(cpu)
        for w, d in zip(keys, got):
            e = identify_word(w, ndw, one)
            assert (d.raw, d.fmt, d.info, d.kind, d.text) == (e.raw, e.fmt, e.info, e.kind, e.text), hex(w)


@pytest.mark.parametrize("cpu", ["gfx1010", "gfx1030"])
def test_identifying_long_encodings_at_once_agrees_with_decoding_each(cpu):
    """For encodings longer than 2 dwords (VOP3 and VOP3P with a literal,
    NSA images), kpatch.isa.bulk.identify_words at the size the sizes give
    is what kpatch.isa.decoder.decode_at decodes there."""
    from kpatch.isa.bulk import identify_words
    from kpatch.isa.decoder import DecodeCache, decode_at

    tables = load(cpu)
    rng = random.Random(13)
    by_size: dict[int, set[bytes]] = {}
    for fmtname, ops in tables.ops.items():
        fmt = F.FORMATS[fmtname]
        for op, info in ops.items():
            for _ in range(6):
                w = random_word(rng, fmt, op, info)
                if fmt.size == 8 and rng.random() < 0.5:
                    w = (w & ~(0x1FF << 32)) | (0xFF << 32)  # src0: a literal
                raw = w.to_bytes(fmt.size, "little") + rng.getrandbits(128).to_bytes(16, "little")
                m = measure(raw, 0, len(raw), tables)
                if m is not None and m[0] > 8:
                    by_size.setdefault(m[0] // 4, set()).add(raw[:m[0]])
    assert sum(map(len, by_size.values())) > 200
    for ndw, raws in sorted(by_size.items()):
        raws = sorted(raws)
        got = identify_words([int.from_bytes(r, "little") for r in raws], ndw, DecodeCache(cpu))
        for raw, d in zip(raws, got):
            e = decode_at(raw, 0, DecodeCache(cpu))
            assert (d.raw, d.fmt, d.info, d.kind, d.text) == (e.raw, e.fmt, e.info, e.kind, e.text), raw.hex()
