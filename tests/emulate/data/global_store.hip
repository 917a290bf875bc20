#include <hip/hip_runtime.h>
// A device global written by a kernel: the code reaches it through the GOT,
// whose entry the loader fills from an R_AMDGPU_ABS64 relocation.
static __device__ int counter_device;
__device__ int* counter_ptr = &counter_device;
extern "C" __global__ void store_global(int v) {
    if (threadIdx.x == 0 && blockIdx.x == 0) *counter_ptr = v * 3 + 1;
}
