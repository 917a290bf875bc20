// rocPRIM's device segmented radix sort and radix sort (Debian's
// librocprim-dev 5.3) instantiated as rocSPARSE instantiates them: the
// segment partition kernel (a counting_iterator over segment indices and a
// by-value lambda holding the begin/end offset pointers), the per-segment
// sort kernels, and sort_and_scatter over 64-bit keys and values with a
// size_t size.  Only the host wrappers' instantiations matter: build.sh
// keeps the device code objects.  tests/emulate/test_rocprim_sorts.py runs
// the gfx1030 kernels with the recipes' inputs and checks them against numpy.
#include <hip/hip_runtime.h>
#include <rocprim/rocprim.hpp>

#include <cstddef>

// keys only, int keys, int offsets (begin = offsets, end = offsets + 1)
hipError_t seg_sort_keys_int(void* tmp, size_t& bytes, int* in, int* out, unsigned size, unsigned segments,
                             int* offsets, hipStream_t s) {
    return rocprim::segmented_radix_sort_keys(tmp, bytes, in, out, size, segments, offsets, offsets + 1,
                                              0, 32, s);
}

// key-value pairs, int keys and values, size_t offsets
hipError_t seg_sort_pairs_int(void* tmp, size_t& bytes, int* kin, int* kout, int* vin, int* vout,
                              unsigned size, unsigned segments, size_t* offsets, hipStream_t s) {
    return rocprim::segmented_radix_sort_pairs(tmp, bytes, kin, kout, vin, vout, size, segments, offsets,
                                               offsets + 1, 0, 32, s);
}

// 64-bit keys and values, a size_t size (sort_and_scatter_kernel<..., long*, ..., unsigned long>)
hipError_t sort_pairs_long(void* tmp, size_t& bytes, long* kin, long* kout, long* vin, long* vout, size_t size,
                           hipStream_t s) {
    return rocprim::radix_sort_pairs(tmp, bytes, kin, kout, vin, vout, size, 0, 64, s);
}
