"""Kernel descriptors: every bit named, byte-exact round trips, and the values
llvm-objdump prints as ``.amdhsa_*`` directives.

LLVM's disassembler refuses GFX10 descriptors whose
GRANULATED_WAVEFRONT_SGPR_COUNT (RSRC1 bits 9:6) is not 0, and clang 15
writes non-zero values there, so for GFX10 objects the test first clears
those four bits in a copy (at the offset llvm-readelf gives for the symbol)
and compares every other field; the cleared field is checked against the
raw bytes.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kpatch.codeobject import CodeObject, KernelDescriptor
from kpatch.codeobject.descriptor import KD, LAYOUTS
from kpatch.errors import FormatError, UsageError

from .conftest import (
    CLANG19, OBJDUMP16, OBJDUMP19, compile_asm, kd_file_offset, objdump_descriptors, read)

# .amdhsa_<directive> -> kpatch field (value compared as is)
DIRECT = {
    "group_segment_fixed_size": "GROUP_SEGMENT_FIXED_SIZE",
    "private_segment_fixed_size": "PRIVATE_SEGMENT_FIXED_SIZE",
    "kernarg_size": "KERNARG_SIZE",
    "float_round_mode_32": "FLOAT_ROUND_MODE_32",
    "float_round_mode_16_64": "FLOAT_ROUND_MODE_16_64",
    "float_denorm_mode_32": "FLOAT_DENORM_MODE_32",
    "float_denorm_mode_16_64": "FLOAT_DENORM_MODE_16_64",
    "dx10_clamp": "ENABLE_DX10_CLAMP",
    "ieee_mode": "ENABLE_IEEE_MODE",
    "fp16_overflow": "FP16_OVFL",
    "workgroup_processor_mode": "WGP_MODE",
    "memory_ordered": "MEM_ORDERED",
    "forward_progress": "FWD_PROGRESS",
    "shared_vgpr_count": "SHARED_VGPR_COUNT",
    "tg_split": "TG_SPLIT",
    "system_sgpr_private_segment_wavefront_offset": "ENABLE_PRIVATE_SEGMENT",
    "enable_private_segment": "ENABLE_PRIVATE_SEGMENT",
    "system_sgpr_workgroup_id_x": "ENABLE_SGPR_WORKGROUP_ID_X",
    "system_sgpr_workgroup_id_y": "ENABLE_SGPR_WORKGROUP_ID_Y",
    "system_sgpr_workgroup_id_z": "ENABLE_SGPR_WORKGROUP_ID_Z",
    "system_sgpr_workgroup_info": "ENABLE_SGPR_WORKGROUP_INFO",
    "system_vgpr_workitem_id": "ENABLE_VGPR_WORKITEM_ID",
    "exception_fp_ieee_invalid_op": "ENABLE_EXCEPTION_IEEE_754_FP_INVALID_OPERATION",
    "exception_fp_denorm_src": "ENABLE_EXCEPTION_FP_DENORMAL_SOURCE",
    "exception_fp_ieee_div_zero": "ENABLE_EXCEPTION_IEEE_754_FP_DIVISION_BY_ZERO",
    "exception_fp_ieee_overflow": "ENABLE_EXCEPTION_IEEE_754_FP_OVERFLOW",
    "exception_fp_ieee_underflow": "ENABLE_EXCEPTION_IEEE_754_FP_UNDERFLOW",
    "exception_fp_ieee_inexact": "ENABLE_EXCEPTION_IEEE_754_FP_INEXACT",
    "exception_int_div_zero": "ENABLE_EXCEPTION_INT_DIVIDE_BY_ZERO",
    "user_sgpr_private_segment_buffer": "ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER",
    "user_sgpr_dispatch_ptr": "ENABLE_SGPR_DISPATCH_PTR",
    "user_sgpr_queue_ptr": "ENABLE_SGPR_QUEUE_PTR",
    "user_sgpr_kernarg_segment_ptr": "ENABLE_SGPR_KERNARG_SEGMENT_PTR",
    "user_sgpr_dispatch_id": "ENABLE_SGPR_DISPATCH_ID",
    "user_sgpr_flat_scratch_init": "ENABLE_SGPR_FLAT_SCRATCH_INIT",
    "user_sgpr_private_segment_size": "ENABLE_SGPR_PRIVATE_SEGMENT_SIZE",
    "user_sgpr_count": "USER_SGPR_COUNT",
    "wavefront_size32": "ENABLE_WAVEFRONT_SIZE32",
    "uses_dynamic_stack": "USES_DYNAMIC_STACK",
    "kernarg_preload_length": "KERNARG_PRELOAD_SPEC_LENGTH",
    "kernarg_preload_offset": "KERNARG_PRELOAD_SPEC_OFFSET",
    "round_robin_scheduling": "ENABLE_WG_RR_EN",
}
# objdump prints these as 0 without reading them from the descriptor
IGNORED = {"reserve_vcc", "reserve_flat_scratch", "reserve_xnack_mask"}


def _compare_with_objdump(path: str, objdump: str, clear_sgpr_granule: bool, tmp_path) -> int:
    co = CodeObject.from_bytes(read(path))
    data = bytearray(co.data)
    raw_granule = {}
    for k in co.kernels:
        off = kd_file_offset(path, k.symbol)
        assert off == k.descriptor_offset
        assert bytes(data[off:off + 64]) == k.descriptor.to_bytes()
        rsrc1 = struct.unpack_from("<I", data, off + 48)[0]
        raw_granule[k.symbol] = (rsrc1 >> 6) & 0xF
        if clear_sgpr_granule:
            struct.pack_into("<I", data, off + 48, rsrc1 & ~(0xF << 6))
    copy = tmp_path / "kd.hsaco"
    copy.write_bytes(bytes(data))
    dumped = objdump_descriptors(str(copy), [k.symbol for k in co.kernels], objdump)
    assert set(dumped) == {k.symbol for k in co.kernels}, "objdump decoded every descriptor"
    for k in co.kernels:
        kd = k.descriptor
        assert kd.get("GRANULATED_WAVEFRONT_SGPR_COUNT") == raw_granule[k.symbol]
        for directive, value in dumped[k.symbol].items():
            if directive in IGNORED:
                continue
            if directive in DIRECT:
                assert kd.get(DIRECT[directive]) == value, (k.symbol, directive)
            elif directive == "next_free_vgpr":
                assert kd.vgpr_blocks_count == value, k.symbol
            elif directive == "next_free_sgpr":
                if not clear_sgpr_granule:
                    assert kd.sgpr_blocks_count == value, k.symbol
            elif directive == "accum_offset":
                assert (kd.get("ACCUM_OFFSET") + 1) * 4 == value, k.symbol
            else:
                raise AssertionError(f"unhandled directive .amdhsa_{directive}")
    return len(co.kernels)


def test_fixture_descriptors_match_objdump16(fixture_paths, tmp_path):
    n = sum(_compare_with_objdump(p, OBJDUMP16, True, tmp_path) for p in fixture_paths)
    assert n >= 30


@pytest.mark.corpus
def test_rocrand_descriptors_match_objdump(rocrand_objects, tmp_path):
    """gfx803..gfx908 with llvm-objdump-16, gfx90a (accum_offset) with -19,
    gfx1030 with -16 after clearing RSRC1 bits 9:6."""
    for target, path in rocrand_objects.items():
        if target.startswith("gfx90a"):
            n = _compare_with_objdump(path, OBJDUMP19, False, tmp_path)
        else:
            n = _compare_with_objdump(path, OBJDUMP16, target.startswith("gfx10"), tmp_path)
        assert n == 80


@pytest.mark.corpus
def test_rocrand_descriptor_fields_agree_with_metadata(rocrand_objects):
    """LLVM wrote the same facts in the note and in the descriptor."""
    for path in rocrand_objects.values():
        co = CodeObject.from_bytes(read(path))
        for k in co.kernels:
            md = k.metadata
            kd = k.descriptor
            assert md is not None and md[".name"] == k.name
            assert kd.group_segment_fixed_size == md[".group_segment_fixed_size"]
            assert kd.private_segment_fixed_size == md[".private_segment_fixed_size"]
            assert kd.kernarg_size == md[".kernarg_segment_size"]
            assert kd.wavefront_size == md[".wavefront_size"]
            assert kd.vgpr_blocks_count >= md[".vgpr_count"]
            assert kd.vgpr_blocks_count - md[".vgpr_count"] < kd.vgpr_granule


COMMON = """  .amdhsa_user_sgpr_dispatch_ptr 1
  .amdhsa_system_vgpr_workitem_id 2
  .amdhsa_exception_int_div_zero 1
  .amdhsa_float_denorm_mode_32 1
  .amdhsa_group_segment_fixed_size 1024
  .amdhsa_private_segment_fixed_size 16
  .amdhsa_kernarg_size 40
"""
GFX10_11 = """  .amdhsa_ieee_mode 0
  .amdhsa_dx10_clamp 0
  .amdhsa_wavefront_size32 0
  .amdhsa_shared_vgpr_count 2
  .amdhsa_workgroup_processor_mode 0
  .amdhsa_memory_ordered 1
  .amdhsa_forward_progress 1
"""
GFX12 = """  .amdhsa_wavefront_size32 0
  .amdhsa_workgroup_processor_mode 0
  .amdhsa_memory_ordered 1
  .amdhsa_forward_progress 1
"""


@pytest.mark.parametrize("mcpu, extra, layout", [
    ("gfx906", "  .amdhsa_ieee_mode 0\n  .amdhsa_dx10_clamp 0\n", "gfx6"),
    ("gfx90a", "  .amdhsa_accum_offset 8\n  .amdhsa_tg_split 1\n", "gfx90a"),
    ("gfx942", "  .amdhsa_accum_offset 4\n", "gfx90a"),
    ("gfx1010", GFX10_11, "gfx10"), ("gfx1030", GFX10_11, "gfx10"),
    ("gfx1100", GFX10_11, "gfx11"), ("gfx1200", GFX12, "gfx12"),
])
def test_assembled_descriptors_match_objdump19(tmp_path, mcpu, extra, layout):
    """Descriptors llvm-mc 19 builds from .amdhsa_* directives, read back both ways."""
    path = compile_asm(tmp_path, CLANG19, mcpu, 5, extra=COMMON + extra, link=False)
    co = CodeObject.from_bytes(read(path))
    assert co.kernels[0].descriptor.layout == layout
    assert _compare_with_objdump(path, OBJDUMP19, False, tmp_path) == 1
    kd = co.kernels[0].descriptor
    assert (kd["ENABLE_VGPR_WORKITEM_ID"], kd.group_segment_fixed_size, kd.kernarg_size) == \
        (2, 1024, 40)


def test_every_bit_of_every_word_has_exactly_one_name():
    for name, layout in LAYOUTS.items():
        for word in ("COMPUTE_PGM_RSRC1", "COMPUTE_PGM_RSRC2", "COMPUTE_PGM_RSRC3",
                     "KERNEL_CODE_PROPERTIES", "KERNARG_PRELOAD"):
            fields = [f for f in layout.values() if f.word == word]
            seen = 0
            for f in fields:
                assert seen & f.mask == 0, (name, f)
                seen |= f.mask
            assert seen == (1 << (32 if word.startswith("COMPUTE") else 16)) - 1, (name, word)
    assert KD.size == 64
    assert [KD.offset_of(n) for n in ("KERNEL_CODE_ENTRY_BYTE_OFFSET", "COMPUTE_PGM_RSRC3",
                                      "COMPUTE_PGM_RSRC1", "COMPUTE_PGM_RSRC2",
                                      "KERNEL_CODE_PROPERTIES", "KERNARG_PRELOAD")] == \
        [16, 44, 48, 52, 56, 58]


def test_named_gfx10_bits_are_where_amdgpuusage_puts_them():
    kd = KernelDescriptor()
    kd.wgp_mode = True
    assert kd.compute_pgm_rsrc1 == 1 << 29
    kd.wavefront_size = 32
    assert kd.kernel_code_properties == 1 << 10
    kd["GRANULATED_WORKITEM_VGPR_COUNT"] = 63
    kd["USER_SGPR_COUNT"] = 31
    kd["ENABLE_VGPR_WORKITEM_ID"] = 2
    kd["SHARED_VGPR_COUNT"] = 15
    kd.kernel_code_entry_byte_offset = -256
    raw = kd.to_bytes()
    assert struct.unpack_from("<q", raw, 16)[0] == -256
    assert struct.unpack_from("<I", raw, 48)[0] == (1 << 29) | 63
    assert struct.unpack_from("<I", raw, 52)[0] == (31 << 1) | (2 << 11)
    assert struct.unpack_from("<I", raw, 44)[0] == 15
    kd.wgp_mode = False
    assert not kd.wgp_mode and kd.compute_pgm_rsrc1 == 63
    with pytest.raises(UsageError):
        kd["WGP_MODE"] = 2
    with pytest.raises(UsageError):
        kd["NO_SUCH_FIELD"]
    with pytest.raises(UsageError):
        kd.wavefront_size = 16
    with pytest.raises(UsageError):
        KernelDescriptor(layout="gfx5")


@pytest.mark.parametrize("size", [0, 1, 63, 65, 128])
def test_wrong_size_is_format_error(size):
    with pytest.raises(FormatError):
        KernelDescriptor.from_bytes(bytes(size))


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=64, max_size=64), st.sampled_from(sorted(LAYOUTS)))
def test_fields_rebuild_the_same_bytes(data, layout):
    kd = KernelDescriptor.from_bytes(data, layout)
    assert kd.to_bytes() == data
    fields = kd.fields()
    rebuilt = KernelDescriptor(layout=layout)
    for name in ("GROUP_SEGMENT_FIXED_SIZE", "PRIVATE_SEGMENT_FIXED_SIZE", "KERNARG_SIZE",
                 "RESERVED0", "KERNEL_CODE_ENTRY_BYTE_OFFSET", "RESERVED1", "RESERVED2"):
        rebuilt[name] = fields[name]
    for name in LAYOUTS[layout]:  # the words RSRC1/2/3 etc. only from their bit fields
        rebuilt[name] = fields[name]
    assert rebuilt.to_bytes() == data


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_give_descriptor_or_format_error(data):
    try:
        kd = KernelDescriptor.from_bytes(data)
    except FormatError:
        assert len(data) != 64
        return
    assert kd.to_bytes() == data
