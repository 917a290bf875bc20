// tests/rewrite/data/long_branch.s (Tensile's long branch: s_getpc_b64;
// s_add_i32 sT, LIT, 4; s_add_u32; s_addc_u32; s_setpc_b64) made runnable for
// kpatch's emulator: the branch is taken when the kernel's integer argument is
// below 100, and the first instruction at the target changes the stored
// value, so a jump that lands anywhere else writes other bytes.  Between the
// branch and its target sits a VMEMtoScalarWriteHazard (a global load reading
// s[4:5], then s_mov_b32 s4), so patching for gfx1010 inserts code there and
// LIT must grow.
.amdgcn_target "amdgcn-amd-amdhsa--gfx1030"
.text
.globl lbr
.p2align 8
.type lbr,@function
lbr:
    s_load_dwordx2 s[4:5], s[0:1], 0
    s_load_dword s6, s[0:1], 8
    v_lshlrev_b32 v2, 2, v0
    v_cvt_f32_u32 v1, v0
    s_waitcnt lgkmcnt(0)
    s_cmp_lt_u32 s6, 100
    s_cbranch_scc0 label_NoBranch
    s_getpc_b64 s[34:35]
label_AfterGetPc:
    s_add_i32 s36, label_Target - label_AfterGetPc - 4, 4
    s_add_u32 s34, s34, s36
    s_addc_u32 s35, s35, 0
    s_setpc_b64 s[34:35]
label_NoBranch:
    global_load_dword v1, v2, s[4:5]
    s_mov_b32 s4, 0
    s_mov_b32 s5, 0
    v_add_f32 v1, v1, v1
label_Target:
    v_add_f32 v1, 1.0, v1
    v_mul_f32 v1, 4.0, v1
    s_load_dwordx2 s[4:5], s[0:1], 0
    s_waitcnt lgkmcnt(0)
    global_store_dword v2, v1, s[4:5] offset:1024
    s_endpgm
.Llbr_end:
    .size lbr, .Llbr_end - lbr

.rodata
.p2align 6
.amdhsa_kernel lbr
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_next_free_vgpr 8
    .amdhsa_next_free_sgpr 40
    .amdhsa_wavefront_size32 1
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 1 ]
amdhsa.kernels:
  - .name: lbr
    .symbol: lbr.kd
    .kernarg_segment_size: 12
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .sgpr_count: 40
    .vgpr_count: 8
    .max_flat_workgroup_size: 64
    .args:
      - { .size: 8, .offset: 0, .value_kind: global_buffer, .address_space: global }
      - { .size: 4, .offset: 8, .value_kind: by_value }
...
.end_amdgpu_metadata
