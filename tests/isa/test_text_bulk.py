"""Whole listings formatted once per distinct encoding (kpatch disasm's text
and lines output) say exactly what formatting each instruction does."""

from __future__ import annotations

import os

from conftest import FIXTURES
from kpatch.codeobject import CodeObject
from kpatch.diff.functions import text_symbols
from kpatch.isa import disassemble
from kpatch.isa.instruction import Decoded
from kpatch.isa.lines import disassemble_columns
from kpatch.isa.text import address_lines, objdump_lines


def _one_by_one(insts, names):
    out = []
    for i in insts:
        if i.address in names:
            out += ["", f"{i.address:016x} <{names[i.address]}>:"]
        t = i.text()
        enc = " ".join(f"{int.from_bytes(i.raw[k:k + 4], 'little'):08X}" for k in range(0, len(i.raw), 4))
        out.append(f"\t{t.ljust(59) if len(t) < 59 else t + ' '}// {i.address:012X}: {enc}")
    return out


def test_listing_of_a_real_object_matches_formatting_each_instruction():
    with open(os.path.join(FIXTURES, "mathops.hip.gfx1030.v5.hsaco"), "rb") as fh:
        co = CodeObject.from_bytes(fh.read())
    sec = co.section(".text")
    syms = text_symbols(co)
    insts = disassemble(co.text, "gfx1030", sec.addr, [a for a, _ in syms])
    addrs, ds = disassemble_columns(co.text, "gfx1030", sec.addr, [a for a, _ in syms])
    assert addrs.tolist() == [i.address for i in insts] and ds == [i.d for i in insts]
    names = dict(syms)
    assert objdump_lines(addrs, ds, names) == _one_by_one(insts, names)
    assert address_lines(addrs, ds) == [f"{i.address:x}\t{i.text()}" for i in insts]


def test_text_with_format_characters_is_printed_as_it_is():
    odd = Decoded(b"\x01\x02\x03\x04", None, None, None, "gfx1030", text="x %d {0} %% }{ " + "y" * 70)
    plain = Decoded(b"\x00\x00\x80\xbf", None, None, None, "gfx1030", text="s_nop 0")
    ds = [odd, plain, odd]
    addrs = [0x100, 0x104, 0x10C]
    assert address_lines(addrs, ds) == [f"{a:x}\t{d.text}" for a, d in zip(addrs, ds)]
    assert objdump_lines(addrs, ds, {0x104: "f"}) == [
        "\t" + odd.text + " // 000000000100: 04030201",
        "", "0000000000000104 <f>:",
        "\t" + "s_nop 0".ljust(59) + "// 000000000104: BF800000",
        "\t" + odd.text + " // 00000000010C: 04030201",
    ]


def test_operand_texts_shared_per_value_keep_each_literal():
    """Operand texts are memoised per (table operand, field value): a
    literal source (src0 = 255) still prints each instruction's own literal,
    and the memo gives the same text as a fresh table (texts from llvm-mc-16
    --disassemble -mcpu=gfx1030 of these bytes)."""
    from kpatch.isa import decode
    from kpatch.isa.decoder import cache_for

    want = {"ff0006020000803f": "v_cndmask_b32_e32 v3, 1.0, v0, vcc_lo",
            "ff00060200004040": "v_cndmask_b32_e32 v3, 0x40400000, v0, vcc_lo",
            "f2000602": "v_cndmask_b32_e32 v3, 1.0, v0, vcc_lo"}
    for _ in range(2):  # second time: every operand text from the memo
        for h, text in want.items():
            cache_for("gfx1030").c4.clear()
            cache_for("gfx1030").c8.clear()
            assert decode(bytes.fromhex(h), "gfx1030")[0].text() == text, h


def test_texts_made_in_bulk_are_the_printers():
    """kpatch.isa.text.make_texts spells the plain encodings (scalar ALU,
    VOP1/VOP2/VOPC, VOP3 without modifiers, VOP3P, DS) without the printer: for random
    encodings of every opcode of those formats (modifier bits, literals,
    VOP3b, invalid registers included) and a real object, its text is the
    printer's (kpatch.isa.text.render, or the unknown word's)."""
    import random

    from kpatch.isa import formats as F
    from kpatch.isa.bulk import identify_words
    from kpatch.isa.decoder import DecodeCache
    from kpatch.isa.tables import load
    from kpatch.isa.text import make_texts, render

    def fresh(d):
        return Decoded(d.raw, d.fmt, d.info, d.kind, d.target)

    rng = random.Random(5)
    for cpu in ("gfx1010", "gfx1030"):
        tables = load(cpu)
        keys = {1: set(), 2: set()}
        for fmtname in ("SOP1", "SOP2", "SOPC", "SOPK", "VOP1", "VOP2", "VOPC", "VOP3", "VOP3P", "DS"):
            fmt = F.FORMATS[fmtname]
            for op in tables.ops.get(fmtname, {}):
                for _ in range(6):
                    w = fmt.with_opcode(rng.getrandbits(8 * fmt.size), op)
                    w = (w & ~fmt.match_mask) | fmt.match_value
                    if rng.random() < 0.6 and fmt.size == 8:
                        w &= ~((0x7 << 8) | (0xF << 11) | (1 << 15) | (0x1F << 59))  # no modifiers
                        if fmtname == "VOP3P":
                            w &= ~(0x7 << 23)
                            if rng.random() < 0.8:  # op_sel_hi: the default, or some of it
                                w |= sum(b for b in (1 << 59, 1 << 60, 1 << 14) if rng.random() < 0.85)
                    if rng.random() < 0.2:  # a literal source
                        w = (w & ~0x1FF) | 0xFF if fmt.size == 4 else (w & ~(0x1FF << 32)) | (0xFF << 32)
                    if fmt.size == 4 and rng.random() < 0.5:
                        keys[2].add(w | rng.getrandbits(32) << 32)
                    else:
                        keys[fmt.size // 4].add(w)
        ds = []
        for ndw, ks in keys.items():
            ds += identify_words(sorted(ks), ndw, DecodeCache(cpu))
        ds = [fresh(d) for d in ds]
        make_texts(ds)
        for d in ds:
            e = fresh(d)
            want = (render(e) if e.fmt is not None else None) or e.unknown_text()
            assert d._text == want, (cpu, d.raw.hex())

    with open(os.path.join(FIXTURES, "mathops.hip.gfx1030.v5.hsaco"), "rb") as fh:
        co = CodeObject.from_bytes(fh.read())
    _, got = disassemble_columns(co.text, "gfx1030", 0, [])
    got = [fresh(d) for d in dict.fromkeys(got)]
    make_texts(got)
    for d in got:
        e = fresh(d)
        assert d._text == ((render(e) if e.fmt is not None else None) or e.unknown_text()), d.raw.hex()
