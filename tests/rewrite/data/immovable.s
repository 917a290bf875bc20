// Hand-written gfx1030 kernels for kpatch's rewriter tests: k_odd uses the
// program counter in a way kpatch does not recognise (s_getpc_b64 whose
// result is not only offset by an s_add_u32/s_addc_u32 pair: the high half
// of the PC is combined with a 32-bit offset, as PAL-style code does), so no
// code in this object may move; k_ok is plain code.
// Build: tests/rewrite/data/build.sh.

.text

.globl k_odd
.p2align 8
.type k_odd,@function
k_odd:
    s_load_dwordx2 s[2:3], s[4:5], 0
    s_getpc_b64 s[0:1]
    s_mov_b32 s0, 0x40
    s_load_dword s6, s[0:1], 0
    s_waitcnt lgkmcnt(0)
    v_mov_b32 v1, s6
    global_store_dword v0, v1, s[2:3]
    s_endpgm
.Lk_odd_end:
    .size k_odd, .Lk_odd_end - k_odd

.globl k_ok
.p2align 8
.type k_ok,@function
k_ok:
    s_load_dwordx2 s[0:1], s[4:5], 0
    s_inst_prefetch 0x3
    v_mov_b32 v1, 1.0
    s_waitcnt lgkmcnt(0)
    global_store_dword v0, v1, s[0:1]
    s_endpgm
.Lk_ok_end:
    .size k_ok, .Lk_ok_end - k_ok

.rodata
.p2align 6
.amdhsa_kernel k_odd
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_system_vgpr_workitem_id 0
    .amdhsa_wavefront_size32 1
    .amdhsa_next_free_vgpr 8
    .amdhsa_next_free_sgpr 16
    .amdhsa_kernarg_size 8
    .amdhsa_reserve_vcc 0
    .amdhsa_reserve_flat_scratch 0
.end_amdhsa_kernel
.p2align 6
.amdhsa_kernel k_ok
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_system_vgpr_workitem_id 0
    .amdhsa_wavefront_size32 1
    .amdhsa_next_free_vgpr 8
    .amdhsa_next_free_sgpr 16
    .amdhsa_kernarg_size 8
    .amdhsa_reserve_vcc 0
    .amdhsa_reserve_flat_scratch 0
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 1 ]
amdhsa.target: amdgcn-amd-amdhsa--gfx1030
amdhsa.kernels:
  - .name: k_odd
    .symbol: k_odd.kd
    .kind: normal
    .sgpr_count: 16
    .vgpr_count: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_size: 8
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .max_flat_workgroup_size: 256
    .args:
      - { .name: out, .size: 8, .offset: 0, .value_kind: global_buffer, .address_space: global }
  - .name: k_ok
    .symbol: k_ok.kd
    .kind: normal
    .sgpr_count: 16
    .vgpr_count: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_size: 8
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .max_flat_workgroup_size: 256
    .args:
      - { .name: out, .size: 8, .offset: 0, .value_kind: global_buffer, .address_space: global }
...
.end_amdgpu_metadata
