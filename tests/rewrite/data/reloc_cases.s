// Hand-written gfx1030 kernels for kpatch's rewriter tests: every kind of
// PC-relative code the rewriter must relocate, and two it must refuse.
// Build: tests/rewrite/data/build.sh (clang-15 + ld.lld, code object V4).
//
// k_main      getpc+add+addc references to .rodata and .data, a call address
//             materialised once and called in a loop (s_swappc_b64), an
//             s_call_b64, and a forward branch over 62 dwords (simm16 0x3e,
//             one insertion away from Offset3fBug's 0x3f).
// helper      a non-kernel function (returns with s_setpc_b64 s[30:31]).
// k_indirect  calls helper (s_call_b64), then an address loaded from memory:
//             a computed jump kpatch cannot bound.
// k_plain     a loop and nothing PC-relative but branches.
// k_setpc     jumps (s_setpc_b64) to an address loaded from memory.
// k_chain     two overlapping forward branches (simm16 0x3d and 0x3e): one
//             insertion at the start of the skipped code gives the inner one
//             0x3f; its s_nop 0 then gives the outer one 0x3f (the fixpoint
//             needs a second round).

.text

.globl k_main
.p2align 8
.type k_main,@function
k_main:
    s_load_dwordx2 s[0:1], s[4:5], 0
    s_getpc_b64 s[8:9]
    s_add_u32 s8, s8, table@rel32@lo+4
    s_addc_u32 s9, s9, table@rel32@hi+12
    s_load_dword s10, s[8:9], 0x10
    s_getpc_b64 s[12:13]
    s_add_u32 s12, s12, counter@rel32@lo+4
    s_addc_u32 s13, s13, counter@rel32@hi+12
    s_getpc_b64 s[34:35]
    s_add_u32 s34, s34, helper@rel32@lo+4
    s_addc_u32 s35, s35, helper@rel32@hi+12
    s_mov_b32 s32, 0
    s_mov_b32 s11, 4
.Lmain_loop:
    s_swappc_b64 s[30:31], s[34:35]
    s_sub_u32 s11, s11, 1
    s_cmp_lg_u32 s11, 0
    s_cbranch_scc1 .Lmain_loop
    s_call_b64 s[30:31], helper
    s_waitcnt lgkmcnt(0)
    s_cmp_eq_u32 s10, 0
    s_cbranch_scc1 .Lmain_skip
    .rept 62
    v_add_f32 v1, v1, v0
    .endr
.Lmain_skip:
    s_load_dword s14, s[12:13], 0
    s_waitcnt lgkmcnt(0)
    v_add_f32 v1, s14, v1
    global_store_dword v0, v1, s[0:1]
    s_endpgm
.Lk_main_end:
    .size k_main, .Lk_main_end - k_main

.p2align 2
.type helper,@function
helper:
    v_add_f32 v1, 1.0, v1
    s_cbranch_execz .Lhelper_out
    v_mul_f32 v1, v1, v1
.Lhelper_out:
    s_setpc_b64 s[30:31]
.Lhelper_end:
    .size helper, .Lhelper_end - helper

.globl k_indirect
.p2align 8
.type k_indirect,@function
k_indirect:
    s_load_dwordx2 s[0:1], s[4:5], 0
    s_waitcnt lgkmcnt(0)
    s_load_dwordx2 s[2:3], s[0:1], 0
    s_waitcnt lgkmcnt(0)
    s_mov_b32 s32, 0
    s_call_b64 s[30:31], helper
    s_swappc_b64 s[30:31], s[2:3]
    s_endpgm
.Lk_indirect_end:
    .size k_indirect, .Lk_indirect_end - k_indirect

.globl k_plain
.p2align 8
.type k_plain,@function
k_plain:
    s_load_dwordx2 s[0:1], s[4:5], 0
    s_load_dword s2, s[4:5], 8
    v_mov_b32 v1, 0
    s_waitcnt lgkmcnt(0)
    s_cmp_eq_u32 s2, 0
    s_cbranch_scc1 .Lplain_done
.Lplain_loop:
    v_add_f32 v1, 1.0, v1
    s_sub_u32 s2, s2, 1
    s_cmp_lg_u32 s2, 0
    s_cbranch_scc1 .Lplain_loop
.Lplain_done:
    global_store_dword v0, v1, s[0:1]
    s_endpgm
.Lk_plain_end:
    .size k_plain, .Lk_plain_end - k_plain

.globl k_setpc
.p2align 8
.type k_setpc,@function
k_setpc:
    s_load_dwordx2 s[0:1], s[4:5], 0
    s_waitcnt lgkmcnt(0)
    s_load_dwordx2 s[2:3], s[0:1], 8
    s_waitcnt lgkmcnt(0)
    s_setpc_b64 s[2:3]
.Lk_setpc_end:
    .size k_setpc, .Lk_setpc_end - k_setpc

.globl k_chain
.p2align 8
.type k_chain,@function
k_chain:
    s_load_dwordx2 s[0:1], s[4:5], 0
    s_load_dword s2, s[4:5], 8
    v_mov_b32 v1, 0
    s_waitcnt lgkmcnt(0)
    s_cmp_eq_u32 s2, 0
    s_cbranch_vccz .Lchain_outer
    s_cbranch_scc1 .Lchain_inner
    .rept 60
    v_add_f32 v1, v1, v0
    .endr
.Lchain_outer:
    v_add_f32 v1, 1.0, v1
    v_add_f32 v1, 1.0, v1
.Lchain_inner:
    global_store_dword v0, v1, s[0:1]
    s_endpgm
.Lk_chain_end:
    .size k_chain, .Lk_chain_end - k_chain

.rodata
.p2align 6
.amdhsa_kernel k_main
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_system_vgpr_workitem_id 0
    .amdhsa_wavefront_size32 1
    .amdhsa_next_free_vgpr 8
    .amdhsa_next_free_sgpr 40
    .amdhsa_kernarg_size 16
    .amdhsa_reserve_vcc 0
    .amdhsa_reserve_flat_scratch 0
.end_amdhsa_kernel
.p2align 6
.amdhsa_kernel k_indirect
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_system_vgpr_workitem_id 0
    .amdhsa_wavefront_size32 1
    .amdhsa_next_free_vgpr 8
    .amdhsa_next_free_sgpr 40
    .amdhsa_kernarg_size 16
    .amdhsa_reserve_vcc 0
    .amdhsa_reserve_flat_scratch 0
.end_amdhsa_kernel
.p2align 6
.amdhsa_kernel k_plain
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_system_vgpr_workitem_id 0
    .amdhsa_wavefront_size32 1
    .amdhsa_next_free_vgpr 8
    .amdhsa_next_free_sgpr 16
    .amdhsa_kernarg_size 16
    .amdhsa_reserve_vcc 0
    .amdhsa_reserve_flat_scratch 0
.end_amdhsa_kernel
.p2align 6
.amdhsa_kernel k_setpc
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_system_vgpr_workitem_id 0
    .amdhsa_wavefront_size32 1
    .amdhsa_next_free_vgpr 8
    .amdhsa_next_free_sgpr 16
    .amdhsa_kernarg_size 16
    .amdhsa_reserve_vcc 0
    .amdhsa_reserve_flat_scratch 0
.end_amdhsa_kernel
.p2align 6
.amdhsa_kernel k_chain
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_system_vgpr_workitem_id 0
    .amdhsa_wavefront_size32 1
    .amdhsa_next_free_vgpr 8
    .amdhsa_next_free_sgpr 16
    .amdhsa_kernarg_size 16
    .amdhsa_reserve_vcc 1
    .amdhsa_reserve_flat_scratch 0
.end_amdhsa_kernel

.p2align 4
.type table,@object
table:
    .long 1, 2, 3, 4, 5, 6, 7, 8
    .size table, 32

.data
.p2align 2
.globl counter
.protected counter
.type counter,@object
counter:
    .long 0
    .size counter, 4

.amdgpu_metadata
---
amdhsa.version: [ 1, 1 ]
amdhsa.target: amdgcn-amd-amdhsa--gfx1030
amdhsa.kernels:
  - .name: k_main
    .symbol: k_main.kd
    .kind: normal
    .sgpr_count: 40
    .vgpr_count: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_size: 16
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .max_flat_workgroup_size: 256
    .args:
      - { .name: out, .size: 8, .offset: 0, .value_kind: global_buffer, .address_space: global }
  - .name: k_indirect
    .symbol: k_indirect.kd
    .kind: normal
    .sgpr_count: 40
    .vgpr_count: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_size: 16
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .max_flat_workgroup_size: 256
    .args:
      - { .name: table, .size: 8, .offset: 0, .value_kind: global_buffer, .address_space: global }
  - .name: k_plain
    .symbol: k_plain.kd
    .kind: normal
    .sgpr_count: 16
    .vgpr_count: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_size: 16
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .max_flat_workgroup_size: 256
    .args:
      - { .name: out, .size: 8, .offset: 0, .value_kind: global_buffer, .address_space: global }
      - { .name: count, .size: 4, .offset: 8, .value_kind: by_value }
  - .name: k_setpc
    .symbol: k_setpc.kd
    .kind: normal
    .sgpr_count: 16
    .vgpr_count: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_size: 16
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .max_flat_workgroup_size: 256
    .args:
      - { .name: table, .size: 8, .offset: 0, .value_kind: global_buffer, .address_space: global }
  - .name: k_chain
    .symbol: k_chain.kd
    .kind: normal
    .sgpr_count: 18
    .vgpr_count: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_size: 16
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .max_flat_workgroup_size: 256
    .args:
      - { .name: out, .size: 8, .offset: 0, .value_kind: global_buffer, .address_space: global }
      - { .name: count, .size: 4, .offset: 8, .value_kind: by_value }
...
.end_amdgpu_metadata
