// wave64 validation kernels for kpatch's emulator (HIP refuses wave64 on
// GFX10; OpenCL does not).  Built by build.sh with -mwavefrontsize64.
__kernel void w64_ops(__global const int* a, __global const int* b, __global int* out, int n) {
    int i = get_global_id(0);
    if (i < n) {
        int x = a[i], y = b[i];
        out[i] = x / (y | 1) + (x > y ? 3 : -4);
        out[n + i] = (x % 1000 > 500) ? x * 3 : y - x;
    }
}

__kernel void w64_reduce(__global const int* in, __global int* out) {
    __local int t[256];
    int l = get_local_id(0);
    t[l] = in[get_global_id(0)];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 128; s > 0; s >>= 1) {
        if (l < s) t[l] += t[l + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (l == 0) out[get_group_id(0)] = t[0];
}

__kernel void w64_subgroup(__global const int* in, __global int* sum, __global int* scan) {
    int i = get_global_id(0);
    int v = in[i];
    int s = sub_group_reduce_add(v);
    scan[i] = sub_group_scan_inclusive_add(v);
    if (get_sub_group_local_id() == 0) sum[i / get_max_sub_group_size()] = s;
}
