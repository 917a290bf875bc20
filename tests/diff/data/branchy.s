// A small gfx1030 kernel with forward and backward branches and a call, for
// kpatch diff's tests.  VARIANT (clang-15 -Wa,-defsym,VARIANT=N) adds what a
// rewriter would add, at a place the tests know:
//   0: the original;
//   1: s_waitcnt_depctr 0xffe3 inside the loop (the loop branch and the
//      call now span one more instruction);
//   2: s_nop 0 in front of the target of the forward branch (.Ldone now
//      names the s_nop: a mitigation placed in front of a branch target).
// Arguments: count (u32, offset 0).  Wave32.

.text
.globl k_branchy
.p2align 8
.type k_branchy,@function
k_branchy:
    s_load_dword s7, s[4:5], 0x0
    s_waitcnt lgkmcnt(0)
    s_cmp_eq_u32 s7, 0
    s_cbranch_scc1 .Ldone
.Lloop:
    v_add_f32 v1, v1, v2
.if VARIANT == 1
    s_waitcnt_depctr 0xffe3
.endif
    s_sub_u32 s7, s7, 1
    s_cmp_lg_u32 s7, 0
    s_cbranch_scc1 .Lloop
    s_call_b64 s[30:31], helper
.Ldone:
.if VARIANT == 2
    s_nop 0
.endif
    s_endpgm
.Lk_branchy_end:
    .size k_branchy, .Lk_branchy_end - k_branchy

// a device function right after the kernel: it moves when the kernel grows
.local helper
.type helper,@function
helper:
    v_mov_b32 v3, 1.0
    s_setpc_b64 s[30:31]
.Lhelper_end:
    .size helper, .Lhelper_end - helper

// identical in every variant
.globl k_other
.p2align 8
.type k_other,@function
k_other:
    s_branch .Lother_done
    v_mov_b32 v0, 0
.Lother_done:
    s_endpgm
.Lk_other_end:
    .size k_other, .Lk_other_end - k_other

.rodata
.p2align 6
.amdhsa_kernel k_branchy
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_wavefront_size32 1
    .amdhsa_next_free_vgpr 4
    .amdhsa_next_free_sgpr 32
    .amdhsa_kernarg_size 4
    .amdhsa_reserve_vcc 0
    .amdhsa_reserve_flat_scratch 0
.end_amdhsa_kernel

.p2align 6
.amdhsa_kernel k_other
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_wavefront_size32 1
    .amdhsa_next_free_vgpr 1
    .amdhsa_next_free_sgpr 8
    .amdhsa_kernarg_size 4
    .amdhsa_reserve_vcc 0
    .amdhsa_reserve_flat_scratch 0
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 1 ]
amdhsa.target: amdgcn-amd-amdhsa--gfx1030
amdhsa.kernels:
  - .name: k_branchy
    .symbol: k_branchy.kd
    .kind: normal
    .sgpr_count: 32
    .vgpr_count: 4
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_size: 4
    .kernarg_segment_align: 4
    .wavefront_size: 32
    .max_flat_workgroup_size: 256
    .args:
      - { .name: count, .size: 4, .offset: 0, .value_kind: by_value }
  - .name: k_other
    .symbol: k_other.kd
    .kind: normal
    .sgpr_count: 8
    .vgpr_count: 1
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_size: 4
    .kernarg_segment_align: 4
    .wavefront_size: 32
    .max_flat_workgroup_size: 256
    .args:
      - { .name: count, .size: 4, .offset: 0, .value_kind: by_value }
...
.end_amdgpu_metadata
