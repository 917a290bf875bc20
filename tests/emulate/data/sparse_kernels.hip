// rocSPARSE-like kernels written for kpatch's tests (tests/emulate/test_sparse.py):
// internal-linkage templates whose mangled names carry rocSPARSE's types, as
// rocSPARSE's own kernels do (library/src/level1/axpyi, gthr, sctr,
// level2/csrmv), so kpatch.emulate.sparse synthesises their arguments from the
// names.  Semantics: y[x_ind[i] - base] += alpha * x_val[i] (axpyi),
// x_val[i] = y[x_ind[i] - base] (gthr), y[x_ind[i] - base] = x_val[i] (sctr),
// y = alpha * A x + beta * y, A in CSR (csrmv, one thread per row).
#include <hip/hip_runtime.h>

typedef enum rocsparse_index_base_ { rocsparse_index_base_zero = 0, rocsparse_index_base_one = 1 } rocsparse_index_base;

template <unsigned BLOCKSIZE, typename I, typename T>
static __launch_bounds__(BLOCKSIZE) __global__ void axpyi_kernel(I nnz, T alpha, const T* x_val, const I* x_ind,
                                                                 T* y, rocsparse_index_base idx_base)
{
    I i = blockIdx.x * BLOCKSIZE + threadIdx.x;
    if(i < nnz)
        y[x_ind[i] - idx_base] += alpha * x_val[i];
}

template <unsigned BLOCKSIZE, typename I, typename T>
static __launch_bounds__(BLOCKSIZE) __global__ void gthr_kernel(I nnz, const T* y, T* x_val, const I* x_ind,
                                                                rocsparse_index_base idx_base)
{
    I i = blockIdx.x * BLOCKSIZE + threadIdx.x;
    if(i < nnz)
        x_val[i] = y[x_ind[i] - idx_base];
}

template <unsigned BLOCKSIZE, typename I, typename T>
static __launch_bounds__(BLOCKSIZE) __global__ void sctr_kernel(I nnz, const T* x_val, const I* x_ind, T* y,
                                                                rocsparse_index_base idx_base)
{
    I i = blockIdx.x * BLOCKSIZE + threadIdx.x;
    if(i < nnz)
        y[x_ind[i] - idx_base] = x_val[i];
}

template <unsigned BLOCKSIZE, typename I, typename J, typename T>
static __launch_bounds__(BLOCKSIZE) __global__ void csrmv_scalar_kernel(J m, T alpha, const I* row_ptr,
                                                                        const J* col_ind, const T* val,
                                                                        const T* x, T beta, T* y,
                                                                        rocsparse_index_base idx_base)
{
    J row = blockIdx.x * BLOCKSIZE + threadIdx.x;
    if(row >= m)
        return;
    T sum = 0;
    for(I j = row_ptr[row] - idx_base; j < row_ptr[row + 1] - idx_base; ++j)
        sum += val[j] * x[col_ind[j] - idx_base];
    y[row] = alpha * sum + beta * y[row];
}

template __global__ void axpyi_kernel<256, int, float>(int, float, const float*, const int*, float*, rocsparse_index_base);
template __global__ void gthr_kernel<256, long, double>(long, const double*, double*, const long*, rocsparse_index_base);
template __global__ void sctr_kernel<256, int, float>(int, const float*, const int*, float*, rocsparse_index_base);
template __global__ void csrmv_scalar_kernel<256, int, int, float>(int, float, const int*, const int*, const float*,
                                                                   const float*, float, float*, rocsparse_index_base);
