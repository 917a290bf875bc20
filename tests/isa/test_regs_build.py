"""Registers read/written, and the rewriter's instruction builders.

Instructions are assembled by llvm-mc-16 from text; the expected register
sets follow the ISA's operand semantics (destinations written, sources
read, VALU/VMEM read EXEC, SALU arithmetic writes SCC, ...).
"""

from __future__ import annotations

import pytest

from isa_helpers import mc_encode
from kpatch.isa import build, decode_one
from kpatch.isa.regs import Reg

S = lambda i, n=1: Reg("s", i, n)  # noqa: E731
V = lambda i, n=1: Reg("v", i, n)  # noqa: E731
VCC = Reg("vcc", 0, 1)
EXEC = Reg("exec", 0, 1)
SCC = Reg("scc", 0, 1)
M0 = Reg("m0", 0, 1)

CASES = [
    ("s_add_u32 s0, s1, s2", {S(1), S(2)}, {S(0), SCC}),
    ("s_addc_u32 s3, s4, 0", {S(4), SCC}, {S(3), SCC}),
    ("s_cselect_b64 s[4:5], s[6:7], -1", {S(6, 2), SCC}, {S(4, 2)}),
    ("s_mov_b32 m0, s9", {S(9)}, {M0}),
    ("s_and_saveexec_b32 s10, vcc_lo", {VCC, EXEC}, {S(10), EXEC, SCC}),
    ("s_load_dwordx4 s[8:11], s[4:5], 0x10", {S(4, 2)}, {S(8, 4)}),
    ("s_cmp_eq_u32 s1, 5", {S(1)}, {SCC}),
    ("s_cbranch_vccz 4", {VCC}, set()),
    ("s_waitcnt_vscnt null, 0x0", set(), set()),
    ("v_mov_b32_e32 v1, s7", {S(7), EXEC}, {V(1)}),
    ("v_cmp_eq_u32_e32 vcc_lo, 0, v2", {V(2), EXEC}, {VCC}),
    ("v_cmp_gt_u32_e64 s4, v1, v2", {V(1), V(2), EXEC}, {S(4)}),
    ("v_cmpx_eq_u32_e32 0, v3", {V(3), EXEC}, {EXEC}),
    ("v_add_co_u32 v1, s5, v2, v3", {V(2), V(3), EXEC}, {V(1), S(5)}),
    ("v_add_co_ci_u32_e32 v4, vcc_lo, v5, v6, vcc_lo", {V(5), V(6), VCC, EXEC}, {V(4), VCC}),
    ("v_cndmask_b32_e32 v1, v2, v3, vcc_lo", {V(2), V(3), VCC, EXEC}, {V(1)}),
    ("v_readfirstlane_b32 s3, v9", {V(9), EXEC}, {S(3)}),
    ("v_fma_f64 v[0:1], v[2:3], v[4:5], v[6:7]", {V(2, 2), V(4, 2), V(6, 2), EXEC}, {V(0, 2)}),
    ("v_fmac_f32_e32 v1, v2, v3", {V(1), V(2), V(3), EXEC}, {V(1)}),
    ("global_load_dwordx2 v[4:5], v[2:3], off", {V(2, 2), EXEC}, {V(4, 2)}),
    ("global_store_dword v1, v2, s[4:5] offset:16", {V(1), V(2), S(4, 2), EXEC}, set()),
    ("ds_read_b128 v[0:3], v8 offset:16", {V(8), EXEC}, {V(0, 4)}),
    ("ds_write2_b32 v1, v2, v3 offset1:4", {V(1), V(2), V(3), EXEC}, set()),
    ("buffer_load_dword v1, v2, s[4:7], s8 offen", {V(2), S(4, 4), S(8), EXEC}, {V(1)}),
    ("flat_atomic_add v0, v[1:2], v3 glc", {V(1, 2), V(3), EXEC}, {V(0)}),
    # image instructions: data width from dmask/d16/tfe, address count from
    # dim/a16, NSA addresses one by one
    ("image_sample v[1:3], v[4:6], s[8:15], s[16:19] dmask:0x7 dim:SQ_RSRC_IMG_3D",
     {V(4, 3), S(8, 8), S(16, 4), EXEC}, {V(1, 3)}),
    ("image_sample v[1:2], [v4, v9, v7], s[8:15], s[16:19] dmask:0x3 dim:SQ_RSRC_IMG_CUBE",
     {V(4), V(9), V(7), S(8, 8), S(16, 4), EXEC}, {V(1, 2)}),
    ("image_load v[0:1], v[2:3], s[8:15] dmask:0xf dim:SQ_RSRC_IMG_2D d16",
     {V(2, 2), S(8, 8), EXEC}, {V(0, 2)}),
    ("image_store v[0:4], v2, s[8:15] dmask:0xf dim:SQ_RSRC_IMG_1D tfe",
     {V(0, 5), V(2), S(8, 8), EXEC}, set()),
    ("exp mrt0 v1, off, v3, off done", {V(1), V(3), EXEC}, set()),
    ("exp pos0 v4, v4, v5, v5 done compr", {V(4), V(5), EXEC}, set()),
]


@pytest.mark.parametrize("text,reads,writes", CASES, ids=[c[0] for c in CASES])
def test_registers(text, reads, writes):
    (enc,) = mc_encode([text], "gfx1030")
    inst = decode_one(enc, "gfx1030")
    assert inst.text() == text
    assert set(inst.reads) == reads
    assert set(inst.writes) == writes


BUILDERS = [
    (lambda: build.s_nop(0), "s_nop 0"),
    (lambda: build.s_nop(3), "s_nop 3"),
    (lambda: build.s_waitcnt_depctr(0xffe3), "s_waitcnt_depctr 0xffe3"),
    (lambda: build.s_waitcnt_depctr(0xfffe), "s_waitcnt_depctr 0xfffe"),
    (lambda: build.sopp_branch("s_branch", 0x40), "s_branch 64"),
    (lambda: build.sopp_branch("s_cbranch_execz", -2), "s_cbranch_execz 65534"),
    (lambda: build.s_mov_b32_null_0(), "s_mov_b32 null, 0"),
    (lambda: build.s_waitcnt_vscnt_null(0), "s_waitcnt_vscnt null, 0x0"),
    (lambda: build.v_mov_b32(5, "v5"), "v_mov_b32_e32 v5, v5"),
    (lambda: build.v_mov_b32("v2", "s3"), "v_mov_b32_e32 v2, s3"),
    (lambda: build.s_waitcnt(lgkmcnt=0), "s_waitcnt lgkmcnt(0)"),
    (lambda: build.instruction("s_load_dword", sdata=3, sbase=2, soffset=0x7D, offset=8),
     "s_load_dword s3, s[4:5], 0x8"),
]


@pytest.mark.parametrize("make,text", BUILDERS, ids=[b[1] for b in BUILDERS])
def test_builders_match_llvm_mc(make, text):
    data = make()
    assert mc_encode([text], "gfx1010") == [data]
    assert decode_one(data, "gfx1010").text() == text


def test_known_encodings_from_notes():
    assert build.s_mov_b32_null_0() == (0xBEFD0380).to_bytes(4, "little")
    assert build.s_waitcnt_vscnt_null(0) == (0xBBFD0000).to_bytes(4, "little")
    assert build.s_nop(0) == (0xBF800000).to_bytes(4, "little")


def test_builder_rejects_bad_input():
    from kpatch.errors import UsageError
    with pytest.raises(UsageError):
        build.sopp_branch("s_nop", 1)
    with pytest.raises(UsageError):
        build.instruction("v_no_such_op")
    with pytest.raises(UsageError):
        build.instruction("s_nop", simm16=1 << 20)


def test_branch_target():
    inst = decode_one(build.branch_to("s_branch", 0x100, 0x80), "gfx1010", address=0x100)
    assert inst.branch_target == 0x80


# --- built bytes are kept per request (build._instruction) -----------------------------------

def test_kept_bytes_are_per_target():
    """v_fmac_legacy_f32 is gfx1030's name for the opcode gfx1010 calls v_mac_legacy_f32 (llvm-mc-16
    takes each name only for its own target): a request kept for one target must not answer the other."""
    from kpatch.errors import UsageError
    assert mc_encode(["v_fmac_legacy_f32_e32 v0, v0, v0"], "gfx1010") == [None]
    want = mc_encode(["v_fmac_legacy_f32_e32 v0, v0, v0"], "gfx1030")[0]
    for _ in range(2):  # the second time from what was kept
        assert build.instruction("v_fmac_legacy_f32_e32", "gfx1030", src0=256) == want
        with pytest.raises(UsageError):
            build.instruction("v_fmac_legacy_f32_e32", "gfx1010", src0=256)


def test_a_failed_request_fails_again():
    from kpatch.errors import UsageError
    for _ in range(2):
        with pytest.raises(UsageError, match="does not fit"):
            build.instruction("s_nop", simm16=1 << 20)


def test_kept_bytes_are_those_of_the_request(monkeypatch):
    """Requests that differ in a field, the literal or an SDWA field get their own bytes (llvm-mc-16's);
    a memo keyed without the SDWA dword's fields (the broken variant) is caught."""
    from kpatch.isa import formats as F
    texts = ["v_mul_u32_u24_sdwa v1, v2, v3 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:BYTE_0 src1_sel:BYTE_1",
             "v_mul_u32_u24_sdwa v1, v2, v3 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:BYTE_1 src1_sel:BYTE_1",
             "v_mul_u32_u24_e32 v1, v2, v3", "v_mul_u32_u24_e32 v4, v2, v3",
             "v_mov_b32_e32 v1, 0x12345678", "v_mov_b32_e32 v1, 0x1234"]
    want = mc_encode(texts, "gfx1010")

    def requests():
        sdwa = dict(dst_sel=6, dst_unused=0, src1_sel=1)
        return [build.instruction("v_mul_u32_u24_e32", vdst=1, src0=F.SRC_SDWA, vsrc1=3,
                                  extra=dict(src0=2, src0_sel=0, **sdwa)),
                build.instruction("v_mul_u32_u24_e32", vdst=1, src0=F.SRC_SDWA, vsrc1=3,
                                  extra=dict(src0=2, src0_sel=1, **sdwa)),
                build.instruction("v_mul_u32_u24_e32", vdst=1, src0=258, vsrc1=3),
                build.instruction("v_mul_u32_u24_e32", vdst=4, src0=258, vsrc1=3),
                build.instruction("v_mov_b32_e32", vdst=1, src0=0xFF, literal=0x12345678),
                build.instruction("v_mov_b32_e32", vdst=1, src0=0xFF, literal=0x1234)]

    assert requests() == want and requests() == want
    real = build._instruction
    monkeypatch.setattr(build, "_instruction", lambda m, t, lit, extra, fields: real(m, t, lit, None if extra is None
                        else tuple(kv for kv in extra if kv[0] != "src0_sel") + (("src0_sel", 0),), fields))
    assert requests() != want
