// The DS d16 forms, runnable for kpatch's emulator (Tensile's HPA half and
// int8 kernels use them).  Buffer: dwords [0, 32) are a, [32, 64) are b
// (one per lane).  LDS dwords [0, 32) get a, then per lane
// ds_write_b16_d16_hi (b's high short to the low short) and
// ds_write_b8_d16_hi (b's byte 2 to byte 3); dwords [32, 64) get a and the
// d16 loads read from them into a copy of b.  Results: dword 64 + 32*k + lane.
.amdgcn_target "amdgcn-amd-amdhsa--gfx1030"
.text
.globl ds16_run
.p2align 8
.type ds16_run,@function
ds16_run:
    s_load_dwordx2 s[2:3], s[0:1], 0
    v_lshlrev_b32 v0, 2, v0
    s_waitcnt lgkmcnt(0)
    global_load_dword v1, v0, s[2:3]
    global_load_dword v2, v0, s[2:3] offset:128
    s_waitcnt vmcnt(0)
    ds_write_b32 v0, v1
    ds_write_b32 v0, v1 offset:128
    ds_write_b16_d16_hi v0, v2
    ds_write_b8_d16_hi v0, v2 offset:3
    s_waitcnt lgkmcnt(0)
    ds_read_b32 v4, v0
    v_mov_b32 v5, v2
    v_mov_b32 v6, v2
    v_mov_b32 v7, v2
    v_mov_b32 v8, v2
    v_mov_b32 v9, v2
    v_mov_b32 v10, v2
    ds_read_u16_d16_hi v5, v0 offset:130
    ds_read_u8_d16 v6, v0 offset:129
    ds_read_i8_d16_hi v7, v0 offset:131
    ds_read_u16_d16 v8, v0 offset:128
    ds_read_u8_d16_hi v9, v0 offset:130
    ds_read_i8_d16 v10, v0 offset:129
    s_waitcnt lgkmcnt(0)
    global_store_dword v0, v4, s[2:3] offset:256
    global_store_dword v0, v5, s[2:3] offset:384
    global_store_dword v0, v6, s[2:3] offset:512
    global_store_dword v0, v7, s[2:3] offset:640
    global_store_dword v0, v8, s[2:3] offset:768
    global_store_dword v0, v9, s[2:3] offset:896
    global_store_dword v0, v10, s[2:3] offset:1024
    s_endpgm
.Lds16_run_end:
    .size ds16_run, .Lds16_run_end - ds16_run

.rodata
.p2align 6
.amdhsa_kernel ds16_run
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_group_segment_fixed_size 256
    .amdhsa_next_free_vgpr 12
    .amdhsa_next_free_sgpr 16
    .amdhsa_wavefront_size32 1
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 1 ]
amdhsa.kernels:
  - .name: ds16_run
    .symbol: ds16_run.kd
    .kernarg_segment_size: 8
    .group_segment_fixed_size: 256
    .private_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .sgpr_count: 16
    .vgpr_count: 12
    .max_flat_workgroup_size: 32
    .args:
      - { .size: 8, .offset: 0, .value_kind: global_buffer, .address_space: global }
...
.end_amdgpu_metadata
