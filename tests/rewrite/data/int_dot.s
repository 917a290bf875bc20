// Integer dot products (gfx1030 only) for the int-dot-expand fix (rule KI006).
// Kernel idot holds every form kpatch expands, including one whose destination
// is also a source (the partial sum then needs a spare VGPR of its own); the
// other kernels hold one form each that kpatch must refuse. The code is only
// VALU work on registers, so tests/rewrite/test_int_dot.py can run the
// original and the patched instructions (as llvm-objdump-16 reads them) on
// random register values and compare.
.amdgcn_target "amdgcn-amd-amdhsa--gfx1030"
.text
.globl idot
.p2align 8
.type idot,@function
idot:
    v_dot4c_i32_i8 v1, v2, v3
    v_dot4_i32_i8 v4, v2, v3, v5
    v_dot4_u32_u8 v6, v2, v3, s7
    v_dot2_i32_i16 v7, v2, v3, 5
    v_dot2_u32_u16 v8, v2, v3, v8
    v_dot4_i32_i8 v10, v10, v3, v9
    v_dot4c_i32_i8 v11, v2, v11
    s_endpgm
.Lidot_end:
    .size idot, .Lidot_end - idot

.globl idot_clamp
.p2align 8
.type idot_clamp,@function
idot_clamp:
    v_dot4_i32_i8 v1, v2, v3, v1 clamp
    s_endpgm
.Lidot_clamp_end:
    .size idot_clamp, .Lidot_clamp_end - idot_clamp

.globl idot_sgpr
.p2align 8
.type idot_sgpr,@function
idot_sgpr:
    v_dot4_i32_i8 v1, s2, v3, v1
    s_endpgm
.Lidot_sgpr_end:
    .size idot_sgpr, .Lidot_sgpr_end - idot_sgpr

.globl idot_i4
.p2align 8
.type idot_i4,@function
idot_i4:
    v_dot8_i32_i4 v1, v2, v3, v1
    s_endpgm
.Lidot_i4_end:
    .size idot_i4, .Lidot_i4_end - idot_i4

.rodata
.p2align 6
.amdhsa_kernel idot
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_next_free_vgpr 12
    .amdhsa_next_free_sgpr 16
    .amdhsa_wavefront_size32 1
.end_amdhsa_kernel
.amdhsa_kernel idot_clamp
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_next_free_vgpr 12
    .amdhsa_next_free_sgpr 16
    .amdhsa_wavefront_size32 1
.end_amdhsa_kernel
.amdhsa_kernel idot_sgpr
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_next_free_vgpr 12
    .amdhsa_next_free_sgpr 16
    .amdhsa_wavefront_size32 1
.end_amdhsa_kernel
.amdhsa_kernel idot_i4
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_next_free_vgpr 12
    .amdhsa_next_free_sgpr 16
    .amdhsa_wavefront_size32 1
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 1 ]
amdhsa.kernels:
  - .name: idot
    .symbol: idot.kd
    .kernarg_segment_size: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .sgpr_count: 16
    .vgpr_count: 12
    .max_flat_workgroup_size: 256
    .args:
      - { .size: 8, .offset: 0, .value_kind: global_buffer, .address_space: global }
  - .name: idot_clamp
    .symbol: idot_clamp.kd
    .kernarg_segment_size: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .sgpr_count: 16
    .vgpr_count: 12
    .max_flat_workgroup_size: 256
    .args:
      - { .size: 8, .offset: 0, .value_kind: global_buffer, .address_space: global }
  - .name: idot_sgpr
    .symbol: idot_sgpr.kd
    .kernarg_segment_size: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .sgpr_count: 16
    .vgpr_count: 12
    .max_flat_workgroup_size: 256
    .args:
      - { .size: 8, .offset: 0, .value_kind: global_buffer, .address_space: global }
  - .name: idot_i4
    .symbol: idot_i4.kd
    .kernarg_segment_size: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .sgpr_count: 16
    .vgpr_count: 12
    .max_flat_workgroup_size: 256
    .args:
      - { .size: 8, .offset: 0, .value_kind: global_buffer, .address_space: global }
...
.end_amdgpu_metadata
