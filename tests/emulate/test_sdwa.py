"""SDWA's S1 bit: a VOP2 in SDWA form whose second source is an SGPR (GFX10
SDWA dword bit 63, "src1 is an SGPR"; llvm-mc-16 encodes
``v_add_nc_u32_sdwa v1, v2, s6`` with it) reads the SGPR, not the VGPR of the
same number.  rocSPARSE 5.3's gebsrmvn_mxn_kernel computes its BSR block
index this way (``v_add_nc_u32_sdwa v1, v6, s14 ... src0_sel:WORD_1``)."""

import numpy as np

from tests.emulate.common import GLOBAL, VALUE, assemble, kernel

SDWA_S1 = kernel("sdwa_s1", """    s_load_dwordx2 s[4:5], s[0:1], 0
    s_load_dword s6, s[0:1], 8
    v_lshlrev_b32 v3, 2, v0
    v_lshlrev_b32 v2, 16, v0
    v_mov_b32 v6, 0x7777
    v_mov_b32 v4, 0x55550000
    s_waitcnt lgkmcnt(0)
    v_add_nc_u32_sdwa v1, v2, s6 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1 src1_sel:DWORD
    v_sub_nc_u32_sdwa v4, v2, s6 dst_sel:WORD_0 dst_unused:UNUSED_PRESERVE src0_sel:WORD_1 src1_sel:BYTE_0
    v_add_nc_u32 v1, v1, v4
    global_store_dword v3, v1, s[4:5]
""", args=(GLOBAL, VALUE), vgprs=8)


def test_a_vop2_sdwa_second_source_may_be_an_sgpr(tmp_path):
    """v1 = lane + s6 (src0's high half is the lane); v4's low half
    lane - (s6 & 0xff), its high half kept (0x5555): the SGPR's value, not
    v6's 0x7777; the store writes v1 + v4."""
    import subprocess
    from kpatch.emulate.launch import run
    path = assemble(tmp_path, "sdwa_s1", SDWA_S1)
    enc = subprocess.run(["llvm-objdump-16", "-d", "--mcpu=gfx1030", path], capture_output=True, text=True).stdout
    assert "v_add_nc_u32_sdwa v1, v2, s6" in enc  # the assembler took the SGPR form
    code = open(path, "rb").read()
    s6 = 0x1234
    lane = np.arange(32, dtype=np.uint32)
    r = run(code, "sdwa_s1", [np.zeros(32, np.uint32), s6], (32,), (32,), seed=1)
    out = r.array(0)
    v4 = 0x55550000 | ((lane - (s6 & 0xFF)) & 0xFFFF)
    assert out.tolist() == ((lane + s6 + v4) & 0xFFFFFFFF).tolist()
