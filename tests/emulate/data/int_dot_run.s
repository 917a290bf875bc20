// The integer dot products of tests/rewrite/data/int_dot.s (kernel idot), made
// runnable for kpatch's emulator: the operands come from a buffer and every
// result is stored, so `kpatch verify --emulate` compares what the original
// (gfx1030) and the expansion kpatch writes for gfx1010 compute.
// Buffer: dwords [32*k, 32*k+32) are input k (v2 v3 v5 v8 v9 v10 v11 v1);
// the 7 results go to byte 1024 + 128*k.
.amdgcn_target "amdgcn-amd-amdhsa--gfx1030"
.text
.globl idot_run
.p2align 8
.type idot_run,@function
idot_run:
    s_load_dwordx2 s[2:3], s[0:1], 0
    v_lshlrev_b32 v0, 2, v0
    s_mov_b32 s7, 0x12345
    s_waitcnt lgkmcnt(0)
    global_load_dword v2, v0, s[2:3]
    global_load_dword v3, v0, s[2:3] offset:128
    global_load_dword v5, v0, s[2:3] offset:256
    global_load_dword v8, v0, s[2:3] offset:384
    global_load_dword v9, v0, s[2:3] offset:512
    global_load_dword v10, v0, s[2:3] offset:640
    global_load_dword v11, v0, s[2:3] offset:768
    global_load_dword v1, v0, s[2:3] offset:896
    s_waitcnt vmcnt(0)
    v_dot4c_i32_i8 v1, v2, v3
    v_dot4_i32_i8 v4, v2, v3, v5
    v_dot4_u32_u8 v6, v2, v3, s7
    v_dot2_i32_i16 v7, v2, v3, 5
    v_dot2_u32_u16 v8, v2, v3, v8
    v_dot4_i32_i8 v10, v10, v3, v9
    v_dot4c_i32_i8 v11, v2, v11
    global_store_dword v0, v1, s[2:3] offset:1024
    global_store_dword v0, v4, s[2:3] offset:1152
    global_store_dword v0, v6, s[2:3] offset:1280
    global_store_dword v0, v7, s[2:3] offset:1408
    global_store_dword v0, v8, s[2:3] offset:1536
    global_store_dword v0, v10, s[2:3] offset:1664
    global_store_dword v0, v11, s[2:3] offset:1792
    s_endpgm
.Lidot_run_end:
    .size idot_run, .Lidot_run_end - idot_run

.rodata
.p2align 6
.amdhsa_kernel idot_run
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_next_free_vgpr 12
    .amdhsa_next_free_sgpr 16
    .amdhsa_wavefront_size32 1
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 1 ]
amdhsa.kernels:
  - .name: idot_run
    .symbol: idot_run.kd
    .kernarg_segment_size: 8
    .group_segment_fixed_size: 0
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
