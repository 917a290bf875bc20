// HIP kernels for kpatch's rewriter tests (built for gfx1030 by build.sh):
// k_calls calls non-inlined device functions (s_getpc_b64 + s_swappc_b64)
// and reads __constant__ / __device__ data through getpc-relative
// addresses; k_fptr calls through a function pointer table in .data
// (R_AMDGPU_RELATIVE64 relocations; a computed call kpatch refuses).
#include <hip/hip_runtime.h>
__constant__ float table[64] = {1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64};
__device__ int counter;
__device__ __attribute__((noinline)) float helper(float x, int i) {
  float s = 0;
  for (int k = 0; k < i; ++k) s += table[(k * 7 + i) & 63] * x;
  return s;
}
__device__ __attribute__((noinline)) float helper2(float x) { return helper(x, 5) + table[3]; }
extern "C" __global__ void k_calls(float* out, const float* in, int n) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n) out[t] = helper(in[t], t & 15) + helper2(in[t]);
  if (t == 0) atomicAdd(&counter, 1);
}
typedef float (*fp_t)(float);
__device__ float f_a(float x) { return x * 2; }
__device__ float f_b(float x) { return x + 3; }
__device__ fp_t fps[2] = {f_a, f_b};
extern "C" __global__ void k_fptr(float* out, const float* in, int sel) {
  int t = threadIdx.x;
  out[t] = fps[sel & 1](in[t]);
}
