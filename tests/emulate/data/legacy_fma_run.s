// gfx1030's fused legacy multiply-adds, runnable for kpatch's emulator: the
// approximation legacy-fma-as-mad leaves these bytes to run as gfx1010's
// unfused v_mac_legacy_f32 / v_mad_legacy_f32, and `kpatch verify --emulate`
// measures how far the results move.
// Buffer: dwords [32*k, 32*k+32) are input k (a, b, c); each is made a float
// of magnitude [1, 2) with the input's sign and mantissa bits (exponent
// forced), so products do not overflow and a*b + c can cancel.
// Results: byte 1024 (v_fmac_legacy_f32: c += a*b), byte 1152
// (v_fma_legacy_f32 a*b + c), byte 1280 (the same with |a|, |b|, |c|: no
// cancellation).
.amdgcn_target "amdgcn-amd-amdhsa--gfx1030"
.text
.globl lfma_run
.p2align 8
.type lfma_run,@function
lfma_run:
    s_load_dwordx2 s[2:3], s[0:1], 0
    v_lshlrev_b32 v0, 2, v0
    s_waitcnt lgkmcnt(0)
    global_load_dword v2, v0, s[2:3]
    global_load_dword v3, v0, s[2:3] offset:128
    global_load_dword v5, v0, s[2:3] offset:256
    s_waitcnt vmcnt(0)
    v_and_b32 v2, 0x807fffff, v2
    v_or_b32 v2, 1.0, v2
    v_and_b32 v3, 0x807fffff, v3
    v_or_b32 v3, 1.0, v3
    v_and_b32 v5, 0x807fffff, v5
    v_or_b32 v5, 1.0, v5
    v_mov_b32 v1, v5
    v_fmac_legacy_f32 v1, v2, v3
    v_fma_legacy_f32 v4, v2, v3, v5
    v_fma_legacy_f32 v6, |v2|, |v3|, |v5|
    global_store_dword v0, v1, s[2:3] offset:1024
    global_store_dword v0, v4, s[2:3] offset:1152
    global_store_dword v0, v6, s[2:3] offset:1280
    s_endpgm
.Llfma_run_end:
    .size lfma_run, .Llfma_run_end - lfma_run

.rodata
.p2align 6
.amdhsa_kernel lfma_run
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_next_free_vgpr 8
    .amdhsa_next_free_sgpr 16
    .amdhsa_wavefront_size32 1
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 1 ]
amdhsa.kernels:
  - .name: lfma_run
    .symbol: lfma_run.kd
    .kernarg_segment_size: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .sgpr_count: 16
    .vgpr_count: 8
    .max_flat_workgroup_size: 32
    .args:
      - { .size: 8, .offset: 0, .value_kind: global_buffer, .address_space: global }
...
.end_amdgpu_metadata
