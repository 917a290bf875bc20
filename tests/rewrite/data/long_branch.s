// A kernel with rocBLAS/Tensile's "long branch" (s_getpc_b64; s_add_i32 sT,
// LIT, 4; s_add_u32; s_addc_u32 ..., 0; s_setpc_b64), written for kpatch's
// tests in Tensile's style: LIT is the distance from the s_add_i32 to the
// target, minus 4.  Between the branch and its target sits a
// VMEMtoScalarWriteHazard (a global load reading s[0:1], then s_mov_b32 s0),
// so patching for gfx1010 inserts code there and LIT must grow.
// TARGET_FIRST is replaced by the test: the first instruction at the target
// either writes s36 (the temporary is dead) or reads it (it is not); the
// emulator's test (tests/emulate/test_verify.py) puts a VALU add there, so a
// jump that lands elsewhere stores other bytes.  The descriptor gives the
// registers the code reads: s[4:5] the kernarg pointer (after the private
// segment buffer's s[0:3]), s6 the workgroup id.
.amdgcn_target "amdgcn-amd-amdhsa--gfx1030"
.text
.globl lb
.p2align 8
.type lb,@function
lb:
    s_load_dwordx2 s[0:1], s[4:5], 0
    s_waitcnt lgkmcnt(0)
    v_lshlrev_b32 v2, 2, v0
    s_cmp_eq_u32 s6, 0
    s_cbranch_scc0 label_NoBranch
    s_getpc_b64 s[34:35]
label_AfterGetPc:
    s_add_i32 s36, label_Target - label_AfterGetPc - 4, 4
    s_add_u32 s34, s34, s36
    s_addc_u32 s35, s35, 0
    s_setpc_b64 s[34:35]
label_NoBranch:
    global_load_dword v1, v2, s[0:1]
    s_mov_b32 s0, 0
    s_mov_b32 s1, 0
    v_add_f32 v1, v1, v1
label_Target:
    TARGET_FIRST
    s_load_dwordx2 s[0:1], s[4:5], 0
    s_waitcnt lgkmcnt(0)
    global_store_dword v2, v1, s[0:1]
    s_endpgm
.Llb_end:
    .size lb, .Llb_end - lb

.rodata
.p2align 6
.amdhsa_kernel lb
    .amdhsa_user_sgpr_private_segment_buffer 1
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_system_sgpr_workgroup_id_x 1
    .amdhsa_next_free_vgpr 8
    .amdhsa_next_free_sgpr 40
    .amdhsa_wavefront_size32 1
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 1 ]
amdhsa.kernels:
  - .name: lb
    .symbol: lb.kd
    .kernarg_segment_size: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .sgpr_count: 40
    .vgpr_count: 8
    .max_flat_workgroup_size: 256
    .args:
      - { .size: 8, .offset: 0, .value_kind: global_buffer, .address_space: global }
...
.end_amdgpu_metadata
