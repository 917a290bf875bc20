// Kernels written for validating kpatch's emulator (kpatch.emulate) against
// numpy, and rocPRIM's block-level reduce, scan and radix sort (Debian's
// librocprim-dev) with plain pointer arguments so that the emulator can
// synthesise them.  Built for gfx1010 and gfx1030 by build.sh in this
// directory; tests/emulate/test_validate.py runs both builds.
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <rocprim/rocprim.hpp>

#include <cstdint>

#define BLOCK 256

// Integer arithmetic: one output row per operation.
extern "C" __global__ void emu_int_ops(const int* __restrict__ a, const int* __restrict__ b,
                                       int* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int x = a[i], y = b[i];
    unsigned ux = (unsigned)x, uy = (unsigned)y;
    out[0 * n + i] = x + y;
    out[1 * n + i] = x - y;
    out[2 * n + i] = x * y;
    out[3 * n + i] = y != 0 ? x / y : 0;
    out[4 * n + i] = y != 0 ? x % y : 0;
    out[5 * n + i] = (int)(uy != 0 ? ux / uy : 0u);
    out[6 * n + i] = x >> (y & 31);
    out[7 * n + i] = (int)(ux >> (uy & 31));
    out[8 * n + i] = x << (y & 31);
    out[9 * n + i] = min(x, y);
    out[10 * n + i] = max(x, y);
    out[11 * n + i] = __popc(ux);
    out[12 * n + i] = __clz(x);
    out[13 * n + i] = (int)__umulhi(ux, uy);
    out[14 * n + i] = x ^ (y | 0x0f0f);
    out[15 * n + i] = (int)(((long long)x * (long long)y) >> 32);
}

// 64-bit integer arithmetic.
extern "C" __global__ void emu_i64_ops(const long long* __restrict__ a, const long long* __restrict__ b,
                                       long long* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long x = a[i], y = b[i];
    out[0 * n + i] = x + y;
    out[1 * n + i] = x - y;
    out[2 * n + i] = x * y;
    out[3 * n + i] = x >> (y & 63);
    out[4 * n + i] = (long long)((unsigned long long)x >> (y & 63));
    out[5 * n + i] = x < y ? x : y;
}

// Float arithmetic that IEEE rounds exactly (numpy float32 agrees).
extern "C" __global__ void emu_float_ops(const float* __restrict__ a, const float* __restrict__ b,
                                         const float* __restrict__ c, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = a[i], y = b[i], z = c[i];
    out[0 * n + i] = x + y;
    out[1 * n + i] = x * y - z;
    out[2 * n + i] = fmaf(x, y, z);
    out[3 * n + i] = fminf(x, y);
    out[4 * n + i] = fmaxf(x, z);
    out[5 * n + i] = (float)(int)x;
    out[6 * n + i] = floorf(y);
    out[7 * n + i] = fabsf(z) * -2.0f;
    out[8 * n + i] = x < y ? z : x;
    out[9 * n + i] = (float)(unsigned)(fabsf(y) * 100.0f);
    out[10 * n + i] = x / y;
    out[11 * n + i] = truncf(z) + ceilf(x);
}

// Half precision, scalar and packed.
extern "C" __global__ void emu_half_ops(const __half2* __restrict__ a, const __half2* __restrict__ b,
                                        __half2* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half2 x = a[i], y = b[i];
    out[0 * n + i] = __hadd2(x, y);
    out[1 * n + i] = __hmul2(x, y);
    out[2 * n + i] = __hfma2(x, y, x);
    __half lo = __low2half(x), hi = __high2half(y);
    out[3 * n + i] = __halves2half2(__hsub(lo, hi), __hmul(lo, hi));
    out[4 * n + i] = __floats2half2_rn(__half2float(lo) * 3.0f, __half2float(hi) + 1.0f);
}

// rocPRIM block reduce (sum and max) of ints.
extern "C" __global__ __launch_bounds__(BLOCK) void emu_rp_block_reduce(const int* __restrict__ in,
                                                                      int* __restrict__ out) {
    using reduce_t = rocprim::block_reduce<int, BLOCK>;
    __shared__ typename reduce_t::storage_type storage;
    int v = in[blockIdx.x * BLOCK + threadIdx.x];
    int sum, mx;
    reduce_t().reduce(v, sum, storage, rocprim::plus<int>());
    __syncthreads();
    reduce_t().reduce(v, mx, storage, rocprim::maximum<int>());
    if (threadIdx.x == 0) {
        out[2 * blockIdx.x] = sum;
        out[2 * blockIdx.x + 1] = mx;
    }
}

// rocPRIM block scans: inclusive and exclusive prefix sums, 2 items per thread.
extern "C" __global__ __launch_bounds__(BLOCK) void emu_rp_block_scan(const int* __restrict__ in,
                                                                    int* __restrict__ incl,
                                                                    int* __restrict__ excl) {
    using scan_t = rocprim::block_scan<int, BLOCK>;
    __shared__ typename scan_t::storage_type storage;
    int items[2];
    size_t base = (size_t)blockIdx.x * BLOCK * 2 + threadIdx.x * 2;
    items[0] = in[base];
    items[1] = in[base + 1];
    int o[2];
    scan_t().inclusive_scan(items, o, storage, rocprim::plus<int>());
    incl[base] = o[0];
    incl[base + 1] = o[1];
    __syncthreads();
    scan_t().exclusive_scan(items, o, 0, storage, rocprim::plus<int>());
    excl[base] = o[0];
    excl[base + 1] = o[1];
}

// rocPRIM block radix sort of unsigned keys with int values, 4 items per thread.
extern "C" __global__ __launch_bounds__(BLOCK) void emu_rp_block_sort(const unsigned* __restrict__ kin,
                                                                    unsigned* __restrict__ kout,
                                                                    const int* __restrict__ vin,
                                                                    int* __restrict__ vout) {
    using sort_t = rocprim::block_radix_sort<unsigned, BLOCK, 4, int>;
    __shared__ typename sort_t::storage_type storage;
    unsigned k[4];
    int v[4];
    size_t base = (size_t)blockIdx.x * BLOCK * 4;
    for (int j = 0; j < 4; j++) {
        k[j] = kin[base + threadIdx.x * 4 + j];
        v[j] = vin[base + threadIdx.x * 4 + j];
    }
    sort_t().sort(k, v, storage);
    for (int j = 0; j < 4; j++) {
        kout[base + threadIdx.x * 4 + j] = k[j];
        vout[base + threadIdx.x * 4 + j] = v[j];
    }
}

// rocPRIM warp-level reduce and scan (DPP / swizzle paths).
extern "C" __global__ void emu_rp_warp(const float* __restrict__ in, int* __restrict__ iin,
                                       float* __restrict__ fsum, int* __restrict__ iscan) {
    using wr_t = rocprim::warp_reduce<float, 32>;
    using ws_t = rocprim::warp_scan<int, 32>;
    __shared__ typename wr_t::storage_type rs[BLOCK / 32];
    __shared__ typename ws_t::storage_type ss[BLOCK / 32];
    unsigned w = threadIdx.x / 32;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    float s;
    wr_t().reduce(in[i], s, rs[w]);
    if (threadIdx.x % 32 == 0) fsum[i / 32] = s;
    int o;
    ws_t().inclusive_scan(iin[i], o, ss[w]);
    iscan[i] = o;
}

// Private memory (a local array indexed at run time: scratch) and a call to a
// function that is not inlined (s_getpc_b64 / s_swappc_b64 / s_setpc_b64).
__device__ __attribute__((noinline)) int emu_helper(int x, int y) { return x * 3 + y; }

extern "C" __global__ void emu_private_call(const int* __restrict__ in, int* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    volatile int buf[16];
    for (int k = 0; k < 16; k++) buf[k] = in[(i * 16 + k) % n];
    int idx = in[i % n] & 15;
    out[i] = emu_helper(buf[idx], buf[(idx + 3) & 15]);
}
