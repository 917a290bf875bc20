"""Per-target opcode tables: opcode reuse and target-only instructions.

Expected mnemonics come from llvm-mc-16 (assembling the instruction for one
target and checking the other rejects it) and from the reference notes'
list of gfx1010/gfx1030 differences.
"""

from __future__ import annotations

import pytest

from isa_helpers import mc_encode
from kpatch.isa import decode_one, load
from kpatch.isa.tables import TARGETS


def test_vop2_0x06_is_reused_per_target():
    data = bytes.fromhex("01050a0c")  # 0x0C0A0501
    assert decode_one(data, "gfx1010").text() == "v_mac_legacy_f32_e32 v5, v1, v2"
    assert decode_one(data, "gfx1030").text() == "v_fmac_legacy_f32_e32 v5, v1, v2"
    # same bytes from LLVM's assembler for each target
    assert mc_encode(["v_mac_legacy_f32 v5, v1, v2"], "gfx1010") == [data]
    assert mc_encode(["v_fmac_legacy_f32 v5, v1, v2"], "gfx1030") == [data]


@pytest.mark.parametrize("text,only", [
    ("v_dot2c_f32_f16 v1, v2, v3", "gfx1030"),
    ("v_dot4c_i32_i8 v1, v2, v3", "gfx1030"),
    ("v_dot2_f32_f16 v1, v2, v3, v4", "gfx1030"),
    ("global_atomic_csub v1, v[2:3], v4, off glc", "gfx1030"),
    ("v_fma_legacy_f32 v1, v2, v3, v4", "gfx1030"),
    ("v_mac_f32 v1, v2, v3", "gfx1010"),
    ("v_madmk_f32 v1, v2, 0x41000000, v3", "gfx1010"),
    ("v_mad_f32 v1, v2, v3, v4", "gfx1010"),
    ("s_dcache_wb", "gfx1010"),
    ("s_store_dword s1, s[2:3], 0x0", "gfx1010"),
])
def test_target_only_instructions(text, only):
    other = "gfx1010" if only == "gfx1030" else "gfx1030"
    (enc,) = mc_encode([text], only)
    assert enc is not None
    assert mc_encode([text], other) == [None]
    mine = decode_one(enc, only)
    assert mine.size == len(enc) and mine.text().split(" ", 1)[0] == text.split(" ", 1)[0] \
        or mine.text().startswith(text.split(" ", 1)[0])
    assert decode_one(enc, other).text() != mine.text()


def test_tables_cover_every_format():
    for t in TARGETS:
        tab = load(t)
        for fmt in ("SOP1", "SOP2", "SOPC", "SOPK", "SOPP", "SMEM", "VOP1", "VOP2", "VOPC", "VOP3",
                    "VOP3P", "VINTRP", "DS", "FLAT", "MUBUF", "MTBUF", "MIMG"):
            assert len(tab.ops[fmt]) > 0, (t, fmt)
        assert len(tab.ops["VOP3"]) > 400
        assert any(e.sdwa for e in tab.ops["VOP2"].values())
        assert any(e.dpp16 for e in tab.ops["VOP1"].values())
        assert any(e.dpp8 for e in tab.ops["VOP2"].values())


def test_gfx1030_hwreg_shader_cycles():
    # s_getreg_b32 s1, hwreg(HW_REG_SHADER_CYCLES) exists only on gfx1030
    (enc,) = mc_encode(["s_getreg_b32 s1, hwreg(HW_REG_SHADER_CYCLES)"], "gfx1030")
    assert decode_one(enc, "gfx1030").text() == "s_getreg_b32 s1, hwreg(HW_REG_SHADER_CYCLES)"
    assert "SHADER_CYCLES" not in decode_one(enc, "gfx1010").text()
