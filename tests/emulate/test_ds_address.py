"""A DS address is the VGPR plus the instruction's offset in 32 bits: a
"negative" VGPR (its sign bit set) with an offset wraps around to a small
address.  LLVM folds constants into DS offsets on every target since Sea
Islands with no check on the base's sign (GCNSubtarget::hasUsableDSOffset:
"On SI, the offset uses a 16-bit adder and does not always wrap properly";
AMDGPUDAGToDAGISel::isDSOffsetLegal), and rocSPARSE 5.3's
csrgemm_*_fill_block_per_row_multipass kernels read their row table with
``ds_read_u8 v11, v9 offset:8704`` where v9 = tid - 512."""

import numpy as np

from tests.emulate.common import GLOBAL, assemble, kernel

DS_WRAP = kernel("ds_wrap", """    s_load_dwordx2 s[4:5], s[0:1], 0
    v_lshlrev_b32 v3, 2, v0
    v_add_nc_u32 v1, 0xfffffe00, v3
    v_add_nc_u32 v2, 0x1000, v0
    ds_write_b32 v1, v2 offset:512
    v_mov_b32 v4, 0x77
    ds_write_b8 v1, v4 offset:640
    s_waitcnt lgkmcnt(0)
    s_barrier
    ds_read_b32 v5, v3
    ds_read_u8 v6, v1 offset:640
    ds_read2_b32 v[7:8], v1 offset0:128 offset1:129
    s_waitcnt lgkmcnt(0)
    v_lshl_or_b32 v5, v6, 16, v5
    v_add_nc_u32 v5, v5, v8
    s_waitcnt lgkmcnt(0)
    global_store_dword v3, v5, s[4:5]
""", args=(GLOBAL,), vgprs=12, lds=1024)


def test_a_negative_vgpr_plus_the_offset_wraps_in_32_bits(tmp_path):
    """Lane l's VGPR is 4 l - 512: it writes 0x1000 + l at 4 l (offset 512)
    and the byte 0x77 at 4 l + 128 (offset 640); reads through the same
    wrapped addresses (read_u8, read2 with offsets 128 and 129 dwords) give
    what was written: out = (word(4 l) | byte(4 l + 128) << 16) + word(4 l + 4)."""
    from kpatch.emulate.launch import run
    code = open(assemble(tmp_path, "ds_wrap", DS_WRAP), "rb").read()
    out = run(code, "ds_wrap", [np.zeros(32, np.uint32)], (32,), (32,)).array(0)
    lds = np.zeros(1024, np.uint8)
    lane = np.arange(32)
    for l in lane:
        lds[4 * l:4 * l + 4] = np.frombuffer(np.uint32(0x1000 + l).tobytes(), np.uint8)
    for l in lane:
        lds[4 * l + 128] = 0x77
    word = lambda a: int(np.frombuffer(lds[a:a + 4].tobytes(), "<u4")[0])
    want = [(word(4 * l) | (int(lds[4 * l + 128]) << 16)) + word(4 * l + 4) for l in lane]
    assert out.tolist() == [w & 0xFFFFFFFF for w in want]
