// HIP kernels for the device-function tests (built for gfx1030 by build.sh):
// k_dot calls a non-inlined device function whose v_dot2 instruction gfx1010
// lacks (no exact fix: the function, and so k_dot, must be refused);
// k_plain calls nothing and has a hazard of its own (it is patched).
#include <hip/hip_runtime.h>
typedef _Float16 half2_t __attribute__((ext_vector_type(2)));
__device__ __attribute__((noinline)) float dotf(half2_t a, half2_t b, float c) {
  return __builtin_amdgcn_fdot2(a, b, c, false);
}
extern "C" __global__ void k_dot(float* out, const half2_t* a, const half2_t* b) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  out[t] = dotf(a[t], b[t], out[t]);
}
extern "C" __global__ void k_plain(float* out, const float* in, int n) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  float s = 0;
  for (int k = t; k < n; k += 64) s += in[k] * 2.0f;
  out[t] = s;
}
