"""Whether the largest workgroup of a kernel can be resident on gfx1010.

All waves of a workgroup must be resident at the same time (they meet at
barriers and share LDS).  On gfx10 a WGP holds two CUs of two SIMD32s each;
a workgroup's waves are spread over the 4 SIMDs of a WGP in WGP mode
(RSRC1.WGP_MODE = 1) and over the 2 SIMDs of one CU in CU mode.  Clearing
WGP mode (the LdsMisalignedBug fix) therefore doubles the waves each SIMD
must hold, and growing a kernel's VGPR allocation (fixes that need spare
registers) raises what each wave takes from the SIMD's register file.
:func:`fits` is the one check both decisions use.

The numbers are LLVM's (``llvm/lib/Target/AMDGPU/Utils/AMDGPUBaseInfo.cpp``)
for the hardware that runs the code, gfx1010 (GFX10, not GFX10.3):

* ``getEUsPerCU``: 2 SIMDs in CU mode, 4 in WGP mode;
* ``getWavesPerEUForWorkGroup`` = ceil(ceil(work-items / wave size) / SIMDs);
* ``getMaxWavesPerEU``: 20 waves per SIMD (16 on GFX10.3);
* ``getTotalNumVGPRs``: 1024 VGPRs per SIMD in wave32, 512 in wave64;
* ``getAddressableNumVGPRs``: 256 per wave;
* ``getVGPRAllocGranule``: 8 (wave32) / 4 (wave64) on GFX10.1, the same
  as the descriptor's encoding granule, so the allocation is
  ``(GRANULATED_WORKITEM_VGPR_COUNT + 1) * granule``; wave64 adds the
  RSRC3.SHARED_VGPR_COUNT blocks of 8 (AMDGPUUsage, ``.amdhsa_shared_vgpr_count``);
* ``getMaxFlatWorkGroupSize``: 1024 work-items, the bound when the
  metadata does not say;
* ``getLocalMemorySize``: 64 KiB of LDS per workgroup.  The WGP's 128 KiB
  are two halves, one per CU; a CU-mode workgroup is given LDS on its own
  CU's side (RDNA ISA guide, "CU mode and WGP mode"), i.e. the same 64 KiB
  it may have in WGP mode.
* SGPRs do not limit residency on GFX10 (``getMaxNumSGPRs`` is fixed,
  ``getMinNumSGPRs`` 0: every wave gets its SGPRs whatever runs beside it).

The workgroup size is the smallest bound the metadata gives: the product
of ``.reqd_workgroup_size`` when present, ``.max_flat_workgroup_size``, and
the hardware's 1024.
"""

from __future__ import annotations

SIMDS = {True: 2, False: 4}  # cu_mode -> SIMDs a workgroup's waves are spread over
MAX_WAVES_PER_SIMD = 20
VGPRS_PER_SIMD = {32: 1024, 64: 512}
ADDRESSABLE_VGPRS = 256
MAX_WORKGROUP = 1024
LDS_PER_WORKGROUP = 64 * 1024
SHARED_VGPR_GRANULE = 8


def workgroup_size(kernel) -> tuple[int, str]:
    """The largest workgroup ``kernel`` can be launched with, and where that comes from."""
    md = kernel.metadata or {}
    size, source = MAX_WORKGROUP, "the hardware's maximum (the metadata gives none)"
    flat = md.get(".max_flat_workgroup_size")
    if isinstance(flat, int) and 0 < flat < size:
        size, source = flat, ".max_flat_workgroup_size"
    reqd = md.get(".reqd_workgroup_size")
    if isinstance(reqd, (list, tuple)) and reqd and all(isinstance(x, int) and x > 0 for x in reqd):
        n = 1
        for x in reqd:
            n *= x
        if n < size:
            size, source = n, ".reqd_workgroup_size"
    return size, source


def allocation(kernel, vgprs: int | None = None) -> int:
    """VGPRs each wave of ``kernel`` takes from its SIMD's file: ``vgprs`` (or
    the descriptor's allocation) in whole granules, plus wave64 shared VGPRs."""
    kd = kernel.descriptor
    g = kd.vgpr_granule
    n = kd.vgpr_blocks_count if vgprs is None else -(-vgprs // g) * g
    if kd.wavefront_size == 64 and "SHARED_VGPR_COUNT" in kd.bit_fields:  # RSRC3 of the GFX10 layout
        n += kd.get("SHARED_VGPR_COUNT") * SHARED_VGPR_GRANULE
    return n


def fits(kernel, *, cu_mode: bool, vgprs: int | None = None) -> str | None:
    """None when the largest workgroup of ``kernel`` fits one CU (``cu_mode``)
    or one WGP with ``vgprs`` VGPRs per wave (default: its descriptor's
    allocation); otherwise why not, in one phrase."""
    kd = kernel.descriptor
    wave = kd.wavefront_size
    alloc = allocation(kernel, vgprs)
    where = "one CU (CU mode)" if cu_mode else "one WGP"
    if alloc > ADDRESSABLE_VGPRS:
        return f"{alloc} VGPRs exceed the {ADDRESSABLE_VGPRS} a wave can address"
    size, source = workgroup_size(kernel)
    waves = -(-size // wave)
    simds = SIMDS[cu_mode]
    per_simd = -(-waves // simds)
    what = f"a workgroup of {size} work-items ({source}) is {waves} wave{wave}s"
    if per_simd > MAX_WAVES_PER_SIMD:
        return f"{what}, {per_simd} per SIMD on {where}, above the {MAX_WAVES_PER_SIMD} a SIMD holds"
    total = VGPRS_PER_SIMD[wave]
    if per_simd * alloc > total:
        return (f"{what}, {per_simd} per SIMD on {where}: {per_simd} x {alloc} VGPRs = {per_simd * alloc} "
                f"exceed the SIMD's {total}")
    md = kernel.metadata or {}
    fixed = md.get(".group_segment_fixed_size")
    lds = max(kd.get("GROUP_SEGMENT_FIXED_SIZE"), fixed if isinstance(fixed, int) else 0)
    if lds > LDS_PER_WORKGROUP:
        return f"its {lds} bytes of LDS exceed the {LDS_PER_WORKGROUP} a workgroup may have"
    return None
