"""LDS as the ISA defines an access past a workgroup's allocation: a read
gives 0, a write is dropped -- also when the workgroup has no LDS at all."""

import numpy as np

from kpatch.emulate.memory import LocalMemory
from tests.emulate.common import GLOBAL, VALUE, assemble, kernel


def test_lds_out_of_range():
    lds = LocalMemory(8)
    lds.write(np.array([4, 6]), np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.uint8))
    assert lds.data.tolist() == [0, 0, 0, 0, 1, 2, 5, 6]
    assert lds.read(np.array([6, 100, -4]), 4).tolist() == [[5, 6, 0, 0], [0] * 4, [0] * 4]


def test_no_lds_at_all():
    lds = LocalMemory(0)
    assert lds.read(np.array([0, 4]), 4).tolist() == [[0] * 4, [0] * 4]
    lds.write(np.array([0]), np.array([[1, 2, 3, 4]], np.uint8))
    assert len(lds.data) == 0


_OOB3_BODY = """    s_load_dwordx4 s[4:7], s[0:1], 0
    s_load_dword s12, s[0:1], 16
    v_lshlrev_b32 v2, 2, v0
    s_waitcnt lgkmcnt(0)
    s_mov_b32 s8, s4
    s_and_b32 s9, s5, 0xffff
    s_or_b32 s9, s9, 0xc0000
    s_mov_b32 s10, s12
    s_mov_b32 s11, 0x31000000
    buffer_load_dword v1, v0, s[8:11], 0 idxen offset:4
    s_waitcnt vmcnt(0)
    global_store_dword v2, v1, s[6:7]
"""

OOB3 = kernel("oob3", _OOB3_BODY, args=(GLOBAL, GLOBAL, VALUE), sgprs=16)


def test_structured_buffer_with_oob_select_3(tmp_path):
    """A structured load (idxen, stride 12, offset 4) through a resource with
    OOB_SELECT 3 and no swizzling: GFX10 checks the linear buffer offset
    (index * stride + offset) against NUM_RECORDS in bytes, as for a raw
    buffer; lanes past it read 0."""
    from kpatch.emulate.launch import run
    code = open(assemble(tmp_path, "oob3", OOB3), "rb").read()
    src = np.arange(1000, 1000 + 128, dtype=np.uint32)
    for nrec in (200, 96, 0):
        out = run(code, "oob3", [src, np.zeros(32, np.uint32), nrec], (32,), (32,)).array(1)
        lane = np.arange(32)
        want = np.where(lane * 12 + 4 + 4 <= nrec, src[3 * lane + 1], 0)
        assert out.tolist() == want.tolist(), nrec


def test_lazy_bytes_are_made_where_touched_and_compared_over_both_sides():
    """A LazyBytes buffer holds its seed's random bytes, made a page at a
    time; two with one seed agree byte for byte; a comparison covers every
    page either side touched (a write only one side made is a difference)."""
    from kpatch.emulate.memory import LazyBytes
    from kpatch.emulate.verify import comparable
    a, b = LazyBytes(1 << 24, 7, b"\x01\x02"), LazyBytes(1 << 24, 7, b"\x01\x02")
    idx = np.array([[0, 1, 2], [5 << 20, (5 << 20) + 1, (9 << 20) + 3]])
    assert a[idx].tolist() == b[idx].tolist() and a[idx][0, :2].tolist() == [1, 2]
    assert sorted(a.pages) == [0, 80, 144]
    ref = np.random.default_rng([7, 80]).integers(0, 256, LazyBytes.PAGE, dtype=np.uint8)
    assert a[np.array([5 << 20])][0] == ref[0]
    assert comparable([("arg0", a)], [("arg0", b)])[0] == comparable([("arg0", a)], [("arg0", b)])[1]
    b[np.array([[(12 << 20) + 8]])] = np.array([[a[np.array([(12 << 20) + 8])][0] ^ 1]], np.uint8)
    ia, ib = comparable([("arg0", a)], [("arg0", b)])
    # one entry per page either side touched (none adjacent): pages 0, 80, 144 and 192
    assert [e[1] for e in ia] == [e[1] for e in ib] == [p * LazyBytes.PAGE for p in (0, 80, 144, 192)]
    assert ia[:3] == ib[:3] and ia[3] != ib[3] and len(ia[3][2]) == LazyBytes.PAGE


_FAR_BODY = _OOB3_BODY.replace("""    s_load_dword s12, s[0:1], 16
    v_lshlrev_b32 v2, 2, v0
    s_waitcnt lgkmcnt(0)
    s_mov_b32 s8, s4
    s_and_b32 s9, s5, 0xffff
    s_or_b32 s9, s9, 0xc0000
    s_mov_b32 s10, s12
    s_mov_b32 s11, 0x31000000
    buffer_load_dword v1, v0, s[8:11], 0 idxen offset:4
    s_waitcnt vmcnt(0)
    global_store_dword v2, v1, s[6:7]""", """    v_lshlrev_b32 v2, 2, v0
    v_add_nc_u32 v3, 0x2000000, v2
    s_waitcnt lgkmcnt(0)
    global_load_dword v1, v3, s[4:5]
    s_waitcnt vmcnt(0)
    global_store_dword v3, v1, s[6:7]""")
FAR = kernel("far", _FAR_BODY, args=(GLOBAL, GLOBAL, VALUE), sgprs=16)


def test_a_kernel_addressing_tensors_past_a_mebibyte_is_verified(tmp_path):
    """Kernels with compile-time tensor sizes (MIOpen's OpenCL kernels)
    address far into their buffers: one reading and writing 32 MiB in is
    proven equal to itself, not stopped by a fault."""
    from kpatch.emulate.verify import EQUAL, verify_kernel
    code = open(assemble(tmp_path, "far", FAR), "rb").read()
    v = verify_kernel(code, code, "far", runs=2)
    assert v.status == EQUAL, v.detail


SCRATCH = kernel("pscr", """    s_load_dwordx2 s[8:9], s[4:5], 0
    s_add_u32 s0, s0, s7
    s_addc_u32 s1, s1, 0
    v_lshlrev_b32 v2, 2, v0
    v_mov_b32 v3, 8
    s_waitcnt lgkmcnt(0)
    global_load_dword v1, v2, s[8:9]
    s_waitcnt vmcnt(0)
    buffer_store_dword v1, v3, s[0:3], 0 offen offset:4
    v_add_nc_u32 v4, v1, 1
    buffer_store_dword v4, off, s[0:3], 0 offset:16
    buffer_load_dword v5, off, s[0:3], 0 offset:12
    buffer_load_dword v6, v3, s[0:3], 0 offen offset:8
    s_waitcnt vmcnt(0)
    v_mul_lo_u32 v5, v5, v6
    global_store_dword v2, v5, s[8:9] offset:128
""", args=(GLOBAL,), vgprs=8, sgprs=16, scratch=32, descriptor="""    .amdhsa_user_sgpr_private_segment_buffer 1
    .amdhsa_system_sgpr_private_segment_wavefront_offset 1
""")


def test_scratch_through_the_private_segment_buffer(tmp_path):
    """MUBUF through the private segment buffer the dispatch puts in s[0:3]
    (after the kernel adds its wave offset, as LLVM's prologue does) reaches
    each lane's private memory: two dwords stored at private bytes 12 and 16
    (offen and off), read back swapped, multiplied."""
    from kpatch.emulate.launch import run
    code = open(assemble(tmp_path, "pscr", SCRATCH), "rb").read()
    buf = np.zeros(64, np.uint32)
    buf[:32] = np.random.default_rng(3).integers(0, 1 << 32, 32, dtype=np.uint32)
    out = run(code, "pscr", [buf], (32,), (32,)).array(0)
    x = buf[:32].astype(np.uint64)
    assert out[32:].tolist() == ((x * (x + 1)) & 0xFFFFFFFF).tolist()


OFF = kernel("woff", _OOB3_BODY.replace("""    s_mov_b32 s11, 0x31000000
    buffer_load_dword v1, v0, s[8:11], 0 idxen offset:4
    s_waitcnt vmcnt(0)
    global_store_dword v2, v1, s[6:7]
""", """    s_mov_b32 s11, 0
    buffer_load_dword v1, v0, s[8:11], 0 idxen offset:4
    v_mov_b32 v3, 7
    buffer_store_dword v3, v0, s[8:11], 0 idxen
    s_waitcnt vmcnt(0)
    global_store_dword v2, v1, s[6:7]
"""), args=(GLOBAL, GLOBAL, VALUE), sgprs=16)


def test_a_resource_with_word3_zero_is_switched_off(tmp_path):
    """A buffer resource whose word 3 is zero (invalid format, the way
    MIOpen's Winograd v30 kernels switch their bias buffer off) reads 0 and
    writes nothing, though its base, stride and NUM_RECORDS cover a real
    buffer."""
    from kpatch.emulate.launch import run
    code = open(assemble(tmp_path, "woff", OFF), "rb").read()
    src = np.arange(1000, 1000 + 128, dtype=np.uint32)
    r = run(code, "woff", [src, np.full(32, 5, np.uint32), 200], (32,), (32,))
    assert r.array(1).tolist() == [0] * 32
    assert r.array(0).tolist() == list(range(1000, 1128))


FAR320 = kernel("far320", _FAR_BODY.replace("""    global_load_dword v1, v3, s[4:5]""", """    v_add_nc_u32 v4, 0x14000000, v2
    global_load_dword v1, v4, s[6:7]""").replace("global_store_dword v3, v1, s[6:7]", "global_store_dword v3, v1, s[4:5]"),
                args=(GLOBAL, GLOBAL, VALUE), sgprs=16)


def test_a_kernel_reading_320_mib_into_a_buffer_is_verified(tmp_path):
    """MIOpenCvBwdWrW_rdc sums MLO_N_BATCH_BLKS partial weight tensors: 256 x
    192 x 64 x 25 floats, 314.6 MB, past 256 MiB.  A kernel copying from 320
    MiB into its second buffer to 32 MiB into its first is proven equal to itself;
    only the pages it touched are made and compared."""
    from kpatch.emulate.verify import EQUAL, verify_kernel
    code = open(assemble(tmp_path, "far320", FAR320), "rb").read()
    v = verify_kernel(code, code, "far320", runs=1)
    assert v.status == EQUAL, v.detail


PART = kernel("part", _OOB3_BODY.replace("""    s_mov_b32 s11, 0x31000000
    buffer_load_dword v1, v0, s[8:11], 0 idxen offset:4
    s_waitcnt vmcnt(0)
    global_store_dword v2, v1, s[6:7]
""", """    s_mov_b32 s11, 0x31000000
    s_and_b32 s9, s9, 0xffff
    v_lshlrev_b32 v3, 4, v0
    buffer_load_dwordx4 v[4:7], v3, s[8:11], 0 offen
    v_mov_b32 v8, -1
    v_mov_b32 v9, -2
    v_mov_b32 v10, -3
    v_mov_b32 v11, -4
    buffer_store_dwordx4 v[8:11], v3, s[8:11], 0 offen offset:512
    s_waitcnt vmcnt(0)
    v_lshlrev_b32 v2, 4, v0
    global_store_dwordx4 v2, v[4:7], s[6:7]
"""), args=(GLOBAL, GLOBAL, VALUE), sgprs=16, vgprs=12)


def test_a_dwordx4_partly_out_of_range_keeps_the_dwords_inside(tmp_path):
    """OOB_SELECT 3 (raw buffer, stride 0): each dword of a dwordx4 is
    range-checked on its own (RDNA ISA, range checking: "Load/store-Dword-
    x{2,3,4} range-check per component"), all its bytes inside NUM_RECORDS.
    Lane k loads 16 bytes at byte 16k and stores 16 at 512 + 16k; with
    NUM_RECORDS 530 / 40 / 38 the dwords ending at or before it load and
    store, the rest read 0 and are not written."""
    from kpatch.emulate.launch import run
    code = open(assemble(tmp_path, "part", PART), "rb").read()
    src = np.arange(1000, 1000 + 256, dtype=np.uint32)
    for nrec in (530, 40, 38):
        buf = src.copy()
        r = run(code, "part", [buf, np.zeros(128, np.uint32), nrec], (32,), (32,))
        dword_end = (np.arange(128) + 1) * 4  # byte after dword d of the loads (lane d // 4)
        want = np.where(dword_end <= nrec, src[:128], 0)
        assert r.array(1).tolist() == want.tolist(), nrec
        stored = np.arange(128, 256)  # dwords the stores address
        kept = (stored + 1) * 4 > nrec
        after = r.array(0)
        assert after[:128].tolist() == src[:128].tolist()
        assert after[128:].tolist() == np.where(kept, src[128:], [(-1 - k % 4) & 0xFFFFFFFF for k in range(128)]).tolist(), nrec


_D16_BODY = """    v_lshlrev_b32 v2, 2, v0
    s_waitcnt lgkmcnt(0)
    global_load_dword v1, v2, s[4:5]
    v_lshlrev_b32 v3, 1, v0
    s_waitcnt vmcnt(0)
    ds_write_b16_d16_hi v3, v1
    ds_write_b8_d16_hi v0, v1 offset:128
    s_waitcnt lgkmcnt(0)
    v_mov_b32 v4, v1
    v_mov_b32 v5, v1
    v_mov_b32 v6, v1
    ds_read_u16_d16 v4, v3
    ds_read_u16_d16_hi v5, v3
    ds_read_i8_d16 v6, v0 offset:128
    s_waitcnt lgkmcnt(0)
    global_store_dword v2, v4, s[6:7]
    global_store_dword v2, v5, s[6:7] offset:128
    global_store_dword v2, v6, s[6:7] offset:256
"""

_D16_ALL = _OOB3_BODY.replace("""    s_load_dword s12, s[0:1], 16
    v_lshlrev_b32 v2, 2, v0
    s_waitcnt lgkmcnt(0)
    s_mov_b32 s8, s4
    s_and_b32 s9, s5, 0xffff
    s_or_b32 s9, s9, 0xc0000
    s_mov_b32 s10, s12
    s_mov_b32 s11, 0x31000000
    buffer_load_dword v1, v0, s[8:11], 0 idxen offset:4
    s_waitcnt vmcnt(0)
    global_store_dword v2, v1, s[6:7]
""", _D16_BODY)
D16 = kernel("dsd16", _D16_ALL, args=(GLOBAL, GLOBAL, VALUE), sgprs=16, vgprs=8, lds=256)


def test_lds_d16_reads_and_writes_keep_the_other_half(tmp_path):
    """ds_write_b16_d16_hi / ds_write_b8_d16_hi store the high half's short /
    low byte (bits 23:16); ds_read_u16_d16 / _hi load a short into the low /
    high half, ds_read_i8_d16 a byte sign-extended to 16 bits into the low
    half; the other half of the VGPR is kept."""
    from kpatch.emulate.launch import run
    code = open(assemble(tmp_path, "dsd16", D16), "rb").read()
    x = np.random.default_rng(5).integers(0, 1 << 32, 32, dtype=np.uint64).astype(np.uint32)
    out = run(code, "dsd16", [x, np.zeros(96, np.uint32), 0], (32,), (32,)).array(1)
    hi16 = x >> 16
    byte = (x >> 16) & 0xFF
    sext = np.where(byte >= 128, byte + 0xFF00, byte)
    assert out[:32].tolist() == ((x & 0xFFFF0000) | hi16).tolist()
    assert out[32:64].tolist() == ((hi16 << 16) | (x & 0xFFFF)).tolist()
    assert out[64:].tolist() == ((x & 0xFFFF0000) | sext).tolist()


ATOM64 = kernel("atom64", _D16_ALL.replace(_D16_BODY, """    v_lshlrev_b32 v2, 3, v0
    s_waitcnt lgkmcnt(0)
    global_load_dwordx2 v[4:5], v2, s[4:5]
    global_load_dwordx2 v[6:7], v2, s[4:5] offset:256
    global_load_dwordx2 v[14:15], v2, s[4:5] offset:512
    s_waitcnt vmcnt(0)
    global_atomic_add_x2 v[8:9], v2, v[4:5], s[6:7] glc
    global_atomic_cmpswap_x2 v[10:11], v2, v[4:7], s[6:7] offset:256 glc
    ds_write_b64 v2, v[14:15]
    s_waitcnt lgkmcnt(0)
    ds_cmpst_rtn_b64 v[12:13], v2, v[6:7], v[4:5]
    s_waitcnt lgkmcnt(0)
    ds_read_b64 v[16:17], v2
    s_waitcnt vmcnt(0) lgkmcnt(0)
    global_store_dwordx2 v2, v[8:9], s[4:5] offset:1024
    global_store_dwordx2 v2, v[10:11], s[4:5] offset:1280
    global_store_dwordx2 v2, v[12:13], s[4:5] offset:1536
    global_store_dwordx2 v2, v[16:17], s[4:5] offset:1792
"""), args=(GLOBAL, GLOBAL, VALUE), sgprs=16, vgprs=24, lds=256)


def test_64_bit_atomics_follow_the_isa(tmp_path):
    """global_atomic_add_x2 and global_atomic_cmpswap_x2 (new value in
    data[0:1], compare value in data[2:3]) and ds_cmpst_rtn_b64 (compare with
    data0, store data1) on 64-bit values, with the old value returned (GLC /
    _rtn), computed here from the GFX10 ISA's definitions with Python ints."""
    from kpatch.emulate.launch import run
    code = open(assemble(tmp_path, "atom64", ATOM64), "rb").read()
    rng = np.random.default_rng(11)
    q = lambda n: rng.integers(0, 1 << 63, n, dtype=np.uint64) * 2 + rng.integers(0, 2, n, dtype=np.uint64)  # noqa: E731
    x = np.zeros(256, np.uint64)
    a, b, c = q(32), q(32), q(32)
    c[::2] = b[::2]  # the LDS compare matches in even lanes
    x[:32], x[32:64], x[64:96] = a, b, c
    out = np.zeros(64, np.uint64)
    out[:32] = q(32)
    out[32:] = q(32)
    out[32::2] = b[::2]  # the global compare matches in even lanes
    before = out.copy()
    r = run(code, "atom64", [x.view(np.uint32).copy(), out.view(np.uint32).copy(), 0], (32,), (32,))
    got_x, got_out = r.array(0).view(np.uint64), r.array(1).view(np.uint64)
    m64 = (1 << 64) - 1
    for lane in range(32):
        ai, bi, ci = int(a[lane]), int(b[lane]), int(c[lane])
        o_add, o_cas = int(before[lane]), int(before[32 + lane])
        assert int(got_out[lane]) == (o_add + ai) & m64
        assert int(got_out[32 + lane]) == (ai if o_cas == bi else o_cas)
        assert int(got_x[128 + lane]) == o_add  # add's old value
        assert int(got_x[160 + lane]) == o_cas  # cmpswap's old value
        assert int(got_x[192 + lane]) == ci  # ds_cmpst's old value
        assert int(got_x[224 + lane]) == (ai if ci == bi else ci)


_BATOM32 = ("cmpswap", "add", "sub", "smin", "umin", "smax", "umax", "and", "or", "xor", "inc", "dec", "swap")
_BATOM64 = ("add_x2", "cmpswap_x2", "smin_x2", "umax_x2", "dec_x2")


def _batom_kernel():
    """buffer_atomic_OP with GLC of each op on its own 128-byte (32-bit) or
    256-byte (64-bit) region of arg1 through a raw resource of NUM_RECORDS
    arg2, the old values stored to arg0 from byte 4096; then every lane adds
    to one dword (lanes in order) and xors without GLC (the data register
    kept)."""
    body = ["    v_lshlrev_b32 v3, 2, v0", "    v_lshlrev_b32 v10, 3, v0", "    s_waitcnt lgkmcnt(0)",
            "    global_load_dword v1, v3, s[4:5]", "    global_load_dword v2, v3, s[4:5] offset:128",
            "    global_load_dwordx2 v[11:12], v10, s[4:5] offset:256",
            "    global_load_dwordx2 v[13:14], v10, s[4:5] offset:512", "    s_waitcnt vmcnt(0)"]
    out = 4096
    for r, op in enumerate(_BATOM32):
        body += ["    v_mov_b32 v4, v1", "    v_mov_b32 v5, v2", f"    v_add_nc_u32 v6, {r * 128}, v3",
                 f"    buffer_atomic_{op} {'v[4:5]' if op == 'cmpswap' else 'v4'}, v6, s[8:11], 0 offen glc",
                 "    s_waitcnt vmcnt(0)", f"    v_add_nc_u32 v7, {out + r * 128}, v3",
                 "    global_store_dword v7, v4, s[4:5]"]
    base = 128 * len(_BATOM32)
    for r, op in enumerate(_BATOM64):
        body += ["    v_mov_b32 v4, v11", "    v_mov_b32 v5, v12", "    v_mov_b32 v6, v13", "    v_mov_b32 v7, v14",
                 f"    v_add_nc_u32 v8, {base + r * 256}, v10",
                 f"    buffer_atomic_{op} {'v[4:7]' if op == 'cmpswap_x2' else 'v[4:5]'}, v8, s[8:11], 0 offen glc",
                 "    s_waitcnt vmcnt(0)", f"    v_add_nc_u32 v9, {out + base + r * 256}, v10",
                 "    global_store_dwordx2 v9, v[4:5], s[4:5]"]
    one = base + 256 * len(_BATOM64)
    body += ["    v_mov_b32 v4, v1", f"    v_mov_b32 v6, {one}", "    buffer_atomic_add v4, v6, s[8:11], 0 offen glc",
             "    v_mov_b32 v5, v2", "    buffer_atomic_xor v5, v6, s[8:11], 0 offen offset:4", "    s_waitcnt vmcnt(0)",
             f"    v_add_nc_u32 v7, {out + one}, v3", "    global_store_dword v7, v4, s[4:5]",
             "    global_store_dword v7, v5, s[4:5] offset:128"]
    text = kernel("batom", _OOB3_BODY.replace("""    v_lshlrev_b32 v2, 2, v0
    s_waitcnt lgkmcnt(0)
    s_mov_b32 s8, s4
    s_and_b32 s9, s5, 0xffff
    s_or_b32 s9, s9, 0xc0000
    s_mov_b32 s10, s12
    s_mov_b32 s11, 0x31000000
    buffer_load_dword v1, v0, s[8:11], 0 idxen offset:4
    s_waitcnt vmcnt(0)
    global_store_dword v2, v1, s[6:7]
""", """    s_waitcnt lgkmcnt(0)
    s_mov_b32 s8, s6
    s_and_b32 s9, s7, 0xffff
    s_mov_b32 s10, s12
    s_mov_b32 s11, 0x31000000
""" + "\n".join(body) + "\n"), args=(GLOBAL, GLOBAL, VALUE), sgprs=16, vgprs=16)
    return text, one


def _isa_atomic(op, old, d, cmp, bits):
    """The GFX10 ISA's definition of buffer_atomic_OP: the new memory value."""
    m = (1 << bits) - 1
    sx = lambda v: v - (1 << bits) if v >> (bits - 1) else v  # noqa: E731
    return {"cmpswap": d if old == cmp else old, "add": (old + d) & m, "sub": (old - d) & m,
            "smin": old if sx(old) <= sx(d) else d, "umin": min(old, d),
            "smax": old if sx(old) >= sx(d) else d, "umax": max(old, d),
            "and": old & d, "or": old | d, "xor": old ^ d, "swap": d,
            "inc": 0 if old >= d else old + 1, "dec": d if old == 0 or old > d else old - 1}[op]


def test_buffer_atomics_follow_the_isa(tmp_path):
    """The 32-bit and 64-bit MUBUF atomics (cmpswap: the new value first, the
    compare value next) return the old value with GLC and write what the GFX10
    ISA defines; lanes on one address go in order; without GLC the data VGPR
    is kept; the resource's range check is all or nothing per atomic: a lane
    whose 4 / 8 bytes are not all inside NUM_RECORDS changes nothing and
    returns 0."""
    from kpatch.emulate.launch import run
    text, one = _batom_kernel()
    code = open(assemble(tmp_path, "batom", text), "rb").read()
    rng = np.random.default_rng(23)
    x = np.zeros(4096 // 4 + one // 4 + 64, np.uint32)
    x[:192] = rng.integers(0, 1 << 32, 192, dtype=np.uint64).astype(np.uint32)
    x[:64:3] = rng.integers(0, 40, 22)  # small values for inc/dec
    mem0 = rng.integers(0, 1 << 32, one // 4 + 64, dtype=np.uint64).astype(np.uint32)
    mem0[1:32:2] = x[32 + 1:64:2]  # the 32-bit compare matches in odd lanes
    cas64 = (128 * len(_BATOM32) + 256) // 4
    mem0[cas64:cas64 + 64].view(np.uint64)[::2] = x[128:192].view(np.uint64)[::2]  # 64-bit: even lanes
    x[:32:2] = rng.integers(0, 40, 16)  # small data for inc/dec in even lanes
    inc, dec = 32 * _BATOM32.index("inc"), 32 * _BATOM32.index("dec")
    mem0[inc:inc + 64] = rng.integers(0, 40, 64)
    mem0[inc:inc + 32:4] = x[:32:4]  # inc: old == data
    mem0[dec:dec + 32:4] = 0  # dec: old 0
    mem0[dec + 2:dec + 32:4] = x[2:32:4]  # dec: old == data
    a32, b32 = [int(v) for v in x[:32]], [int(v) for v in x[32:64]]
    a64, b64 = [int(v) for v in x[64:128].view(np.uint64)], [int(v) for v in x[128:192].view(np.uint64)]
    for nrec in (one + 8, 128 * 5 + 4 * 9 + 2, 128 * len(_BATOM32) + 256 * 2 + 8 * 7 + 4, 4):
        r = run(code, "batom", [x.copy(), mem0.copy(), nrec], (32,), (32,))
        got, mem = r.array(0), r.array(1)
        want = mem0.astype(object).tolist()
        ret = {}
        for k, op in enumerate(_BATOM32):
            for lane in range(32):
                at = k * 32 + lane
                inside = at * 4 + 4 <= nrec
                old = want[at] if inside else 0
                if inside:
                    want[at] = _isa_atomic(op, old, a32[lane], b32[lane], 32)
                ret[(op, lane)] = old
        base = 32 * len(_BATOM32)
        for k, op in enumerate(_BATOM64):
            for lane in range(32):
                at = base + (k * 32 + lane) * 2
                inside = at * 4 + 8 <= nrec
                old = (want[at] | want[at + 1] << 32) if inside else 0
                if inside:
                    new = _isa_atomic(op[:-3], old, a64[lane], b64[lane], 64)
                    want[at], want[at + 1] = new & 0xFFFFFFFF, new >> 32
                ret[(op, lane)] = old
        one_w = one // 4
        for lane in range(32):
            inside = one + 4 <= nrec
            ret[("one", lane)] = want[one_w] if inside else 0
            if inside:
                want[one_w] = (want[one_w] + a32[lane]) & 0xFFFFFFFF
            if one + 8 <= nrec:
                want[one_w + 1] ^= b32[lane]
        assert mem.tolist() == want, nrec
        o = 4096 // 4
        for k, op in enumerate(_BATOM32):
            assert got[o + 32 * k:o + 32 * k + 32].tolist() == [ret[(op, n)] for n in range(32)], (nrec, op)
        g64 = got[o + base:o + base + 64 * len(_BATOM64)].view(np.uint64)
        for k, op in enumerate(_BATOM64):
            assert g64[32 * k:32 * k + 32].tolist() == [ret[(op, n)] for n in range(32)], (nrec, op)
        assert got[o + one_w:o + one_w + 32].tolist() == [ret[("one", n)] for n in range(32)], nrec
        assert got[o + one_w + 32:o + one_w + 64].tolist() == b32, nrec
