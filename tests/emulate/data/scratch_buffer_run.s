// Private memory through the private segment buffer resource (user SGPRs
// s[0:3]) as compilers spill with MUBUF on gfx10: the wave offset added to
// the base, a store and a load back at offset 16.  Buffer: dwords [0, 32)
// in; dword 32 + lane gets in[lane] + 1.
.amdgcn_target "amdgcn-amd-amdhsa--gfx1030"
.text
.globl scratch_run
.p2align 8
.type scratch_run,@function
scratch_run:
    s_load_dwordx2 s[8:9], s[4:5], 0
    v_lshlrev_b32 v1, 2, v0
    s_add_u32 s0, s0, s7
    s_addc_u32 s1, s1, 0
    s_waitcnt lgkmcnt(0)
    global_load_dword v2, v1, s[8:9]
    s_waitcnt vmcnt(0)
    buffer_store_dword v2, off, s[0:3], 0 offset:16
    buffer_load_dword v3, off, s[0:3], 0 offset:16
    s_waitcnt vmcnt(0)
    v_add_nc_u32 v3, 1, v3
    global_store_dword v1, v3, s[8:9] offset:128
    s_endpgm
.Lscratch_run_end:
    .size scratch_run, .Lscratch_run_end - scratch_run

.rodata
.p2align 6
.amdhsa_kernel scratch_run
    .amdhsa_user_sgpr_private_segment_buffer 1
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_system_sgpr_private_segment_wavefront_offset 1
    .amdhsa_private_segment_fixed_size 64
    .amdhsa_next_free_vgpr 8
    .amdhsa_next_free_sgpr 16
    .amdhsa_wavefront_size32 1
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 1 ]
amdhsa.kernels:
  - .name: scratch_run
    .symbol: scratch_run.kd
    .kernarg_segment_size: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 64
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .sgpr_count: 16
    .vgpr_count: 8
    .max_flat_workgroup_size: 32
    .args:
      - { .size: 8, .offset: 0, .value_kind: global_buffer, .address_space: global }
...
.end_amdgpu_metadata
