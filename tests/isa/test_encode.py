"""Changing fields gives the bytes llvm-mc-16 gives for the changed text.

Real instructions from the fixtures get cache-policy bits, offsets,
immediates, registers and opcodes changed with :func:`kpatch.isa.encode`;
the changed instruction's text (printed by kpatch) is assembled by
llvm-mc-16, which must produce exactly kpatch's bytes.
"""

from __future__ import annotations

import glob
import os

import pytest

from isa_helpers import FIXTURES, mc_encode, target_of, text_section
from kpatch.isa import decode, decode_one, encode
from kpatch.isa import special as SP

FIXTURE_OBJECTS = sorted(glob.glob(os.path.join(FIXTURES, "*.v5.hsaco")))


def changes_for(inst):
    """Field changes worth testing for this instruction."""
    f, fmt, mn = inst.d.fields, inst.format, inst.mnemonic
    out = []
    if fmt in ("SMEM",) and "s_load" in mn:
        out += [dict(glc=1), dict(dlc=1), dict(offset=0x24), dict(sdata=(f["sdata"] + 8) % 64)]
    if fmt == "FLAT":
        out += [dict(glc=1), dict(slc=1), dict(dlc=1), dict(glc=1, slc=1)]
        if f["seg"] == 2:
            out += [dict(offset=0xFF0), dict(offset=0x7FC)]
        else:
            out += [dict(offset=0x10)]
    if fmt in ("MUBUF", "MTBUF") and inst.d.info.form.operands:
        out += [dict(glc=1), dict(slc=1), dict(dlc=1), dict(offset=0x40)]
    if fmt == "DS":
        out += [dict(offset0=8), dict(offset1=1)]
    if fmt == "SOPP" and mn == "s_waitcnt":
        out += [dict(simm16=SP.encode_waitcnt(lgkmcnt=0)), dict(simm16=SP.encode_waitcnt(vmcnt=3, expcnt=0))]
    if fmt == "SOPP" and inst.is_branch:
        out += [dict(simm16=0x40), dict(simm16=0xFFC0)]
    if fmt == "SOPK" and mn == "s_movk_i32":
        out += [dict(simm16=0x1234)]
    if fmt in ("SOP1", "SOP2") and "sdst" in f and f["sdst"] < 96:
        out += [dict(sdst=f["sdst"] + 4 - f["sdst"] % 4)]
    printed = {o.field for o in inst.d.info.form.operands if o.tag == "f"}
    if fmt in ("VOP1", "VOP2", "VOP3") and inst.encoding is None and "vdst" in printed and f["vdst"] < 200:
        out += [dict(vdst=f["vdst"] + 7)]
    return out


OPCODE_SWAPS = {  # (format, from mnemonic) -> other opcode with the same operands
    ("VOP2", "v_add_f32_e32"): 0x04, ("VOP2", "v_mul_f32_e32"): 0x03,
    ("VOP2", "v_and_b32_e32"): 0x1C, ("VOP2", "v_add_nc_u32_e32"): 0x26,
    ("VOP3", "v_fma_f32"): 0x14A,
}


@pytest.mark.skipif(not FIXTURE_OBJECTS, reason="no fixture code objects built yet")
@pytest.mark.parametrize("path", FIXTURE_OBJECTS, ids=os.path.basename)
def test_field_changes_match_llvm_mc(path):
    cpu = target_of(path)
    data, _, _ = text_section(path)
    cases = []
    seen = set()
    for inst in decode(data, cpu):
        if inst.is_unknown:
            continue
        for chg in changes_for(inst):
            key = (inst.mnemonic, tuple(sorted(chg.items())))
            if key in seen:
                continue
            seen.add(key)
            cases.append(encode(inst, **chg))
        swap = OPCODE_SWAPS.get((inst.format, inst.mnemonic))
        if swap is not None and inst.mnemonic not in seen:
            seen.add(inst.mnemonic)
            cases.append(encode(inst, opcode=swap))
    assert len(cases) > 10
    texts = []
    for b in cases:
        i = decode_one(b, cpu)
        assert not i.is_unknown and i.size == len(b), b.hex()
        texts.append(i.text())
    encs = mc_encode(texts, cpu)
    bad = [(t, b.hex(), e.hex() if e else None) for t, b, e in zip(texts, cases, encs) if e != b]
    assert not bad, bad[:10]
