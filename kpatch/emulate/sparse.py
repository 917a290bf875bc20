"""rocSPARSE kernels' arguments from their mangled names.

rocSPARSE's kernels carry no argument names in their metadata, but their
(Itanium-mangled) names give every parameter's type: in
``_ZL12axpyi_kernelILj256EifPKfEvT0_T2_PKT1_PKS2_PS4_21rocsparse_index_base_``
the template arguments are <256u, int, float, const float*> and the
parameters (int nnz, const float* alpha, const float* x_val, const int*
x_ind, float* y, rocsparse_index_base).  :func:`parameters` is a small
demangler for exactly what such names hold (builtin types, class and enum
names with template arguments, ``P``/``K``/``V``, template parameters
``T_``/``Tn_``, substitutions ``S_``/``Sn_``, integer and enum literals); it
refuses (:class:`NotParsed`) anything else.

:func:`build` (the ``rocsparse`` recipe of :mod:`kpatch.emulate.recipes`)
then makes index structures valid: every pointer to an integer type is an
array that is at once a valid CSR/COO/BSR row-pointer array and a valid
column/row-index array for matrices of the run's small size ``s`` (values
non-decreasing from the index base, at most ``base + s - 1``); every
by-value integer is ``s`` (sizes, leading dimensions, block dimensions all
agree) except where the kernel's source says the host passes something
else (:data:`INT_INDEX_BASE`, :data:`REMAINDER_OFFSET`, :data:`PADDED_ROWS`);
a kernel that uses only entries off the diagonal gets column indices that lie
there (:data:`OFF_DIAGONAL`), one that drops entries below a tolerance values
on both sides of it (:data:`THRESHOLDS`), a permutation a permutation
(:data:`PERMUTATIONS`), row numbers without the base base 0 (:data:`ZERO_BASED`),
gtsv's pivots valid pivot sequences (:data:`PIVOTS`), a BSR padding kernel a
matrix with a partial last block (:data:`BLOCK_PADDING`);
a matrix checker's values hold what it must report (:data:`CHECKERS`); rocSPARSE enums take valid values (the index base the arrays are
shifted by, an operation, a direction ...); floating scalars small numbers;
bools 0 or 1.  Other pointers (values, vectors, dense matrices) are the
usual random buffers.  A parameter list that does not line up with the
metadata's explicit arguments (count, kinds, sizes), or an enum whose
values are not known here, gives no arguments at all.

The launch is the one rocSPARSE's host code makes where its source says
(the recipe's ``block`` and ``groups_x`` hooks): workgroups of the kernel's
BLOCKSIZE, its first template argument, for the kernels every launch of
which passes that as the block (:data:`LAUNCH_BLOCKSIZE`; a BLOCKSIZE the
metadata does not allow gives no arguments), and one workgroup for the
kernels launched with one (:data:`ONE_WORKGROUP`); other kernels get the
verifier's default launch.

Enum values: rocSPARSE (github ROCm/rocSPARSE) library/include/rocsparse-types.h.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import numpy as np

from kpatch.emulate.argvalues import Buffer

#: Builtin type codes: (kind, size, signed).
BUILTINS = {
    "c": ("int", 1, True), "a": ("int", 1, True), "h": ("int", 1, False),
    "s": ("int", 2, True), "t": ("int", 2, False), "i": ("int", 4, True), "j": ("int", 4, False),
    "l": ("int", 8, True), "m": ("int", 8, False), "x": ("int", 8, True), "y": ("int", 8, False),
    "b": ("bool", 1, False), "f": ("float", 4, True), "d": ("float", 8, True), "v": ("void", 0, False),
}

#: rocSPARSE enums passed by value and the values valid for them (rocsparse-types.h).
ENUMS = {
    "rocsparse_index_base_": (0, 1),
    "rocsparse_operation_": (111, 112, 113),
    "rocsparse_direction_": (0, 1),
    "rocsparse_order_": (0, 1),
    "rocsparse_diag_type_": (0, 1),
    "rocsparse_fill_mode_": (0, 1),
    "rocsparse_action_": (0, 1),
    "rocsparse_matrix_type_": (0, 1, 2, 3),
    "rocsparse_storage_mode_": (0, 1),
    "rocsparse_hyb_partition_": (0, 1, 2),
    "rocsparse_analysis_policy_": (0, 1),
    "rocsparse_solve_policy_": (0,),
    "rocsparse_pointer_mode_": (0, 1),
}

#: Kernels whose index base is a plain int parameter (not the enum): the
#: kernel's name -> the parameter's index.  rocSPARSE 5.3
#: library/src/conversion/csr2dense_device.h (csr2dense_kernel,
#: csc2dense_kernel: ``rocsparse_int base`` first).
INT_INDEX_BASE = {"csr2dense_kernel": 0, "csc2dense_kernel": 0}

#: Remainder kernels of dense-matrix products: the kernel's name -> the index
#: of the parameter holding the first column the kernel computes.  The host
#: passes ``main = n - n % chunk`` (the columns the main kernel did), which is 0
#: for every n below the smallest chunk, as all of :data:`SIZES` are: rocSPARSE
#: 5.3 library/src/level3/rocsparse_csrmm_template_row_split.cpp (chunks of 8
#: and more), rocsparse_csrmm_template_general.cpp (8 and more; below 8 only
#: the remainder kernel runs), rocsparse_coomm_template_atomic.cpp (64 and
#: more).  Given the size like every other int, the kernel's column loop
#: ``for l = offset; l < n`` would not run at all.
REMAINDER_OFFSET = {"csrmmnt_row_split_remainder_kernel": 2, "csrmmnt_general_remainder_kernel": 2,
                    "coommnn_atomic_remainder": 2}

#: Kernels whose row count is padded to whole blocks: the kernel's name -> the
#: index of its ``m_pad`` parameter, which is a multiple of BLOCKSIZE x BLOCKDIM
#: (the first two template arguments): rocSPARSE 5.3
#: library/src/precond/rocsparse_gtsv.cpp (``m_pad = ((m - 1) / (block_dim *
#: BLOCKSIZE) + 1) * (block_dim * BLOCKSIZE)``), gtsv_device.h (``nblocks =
#: m_pad / BLOCKDIM``, nothing to do when it is 0).  The recipe passes one such
#: multiple: every thread of one workgroup solves one padded block
#: (gtsv_solve_spike_propagate_kernel: ``if(gid < nblocks)`` around its stores).
PADDED_ROWS = {"gtsv_LBM_wv_kernel": 0, "gtsv_LBM_rhs_kernel": 0, "gtsv_solve_spike_propagate_kernel": 0,
               "gtsv_spike_backward_substitution_kernel": 0}

#: Kernels that follow the pivots another kernel chose: the kernel's name ->
#: the index of the pivot array.  rocSPARSE 5.3 library/src/precond/gtsv_device.h:
#: gtsv_LBM_wv_kernel stores, for the rows g + t * nblocks of each thread g,
#: 1 (a 1x1 pivot) or 2 twice (a 2x2 pivot on rows t, t + 1; never starting
#: at the last row), and gtsv_LBM_rhs_kernel steps through them (``k -=
#: nblocks * pivot[k + gid]``: any other value sends it outside its rows).  The
#: recipe's pivots are such a sequence for each thread (:func:`pivot_array`),
#: for m_pad = BLOCKSIZE x BLOCKDIM (:data:`PADDED_ROWS`).
PIVOTS = {"gtsv_LBM_rhs_kernel": 8}

#: Kernels that pad the last block row of a BSR matrix: the kernel's name ->
#: the indices of (m, mb, block_dim, bsr_row_ptr, bsr_col_ind).  rocSPARSE 5.3
#: library/src/conversion/rocsparse_bsrpad_value.cpp launches them only when
#: mb * block_dim != m (mb = ceil(m / block_dim)), and bsrpad_value_device.h
#: writes the diagonal of the last row's diagonal block past m % block_dim:
#: the recipe passes block_dim = s + 1, mb = s, m = mb * block_dim - 1 and a
#: block-diagonal matrix (row pointers base + 0 .. s, columns base + 0 .. s - 1).
BLOCK_PADDING = {"bsrpad_value_kernel_unsorted": (0, 1, 2, 6, 7), "bsrpad_value_kernel_sorted": (0, 1, 2, 6, 7)}

#: rocSPARSE kernels whose names hold no rocSPARSE type (``rocsparse_...``)
#: and which the recipe claims all the same, by name (with a template
#: argument list): the kernels a rule of this module names that are
#: templates on builtin types only (rocSPARSE 5.3 library/src/precond/gtsv_device.h,
#: conversion/csr2csc_device.h, level2/rocsparse_coomv.cpp).
UNTYPED = ("gtsv_LBM_wv_kernel", "gtsv_LBM_rhs_kernel", "gtsv_solve_spike_propagate_kernel",
           "gtsv_spike_backward_substitution_kernel", "csr2csc_permute_kernel", "coomvn_segmented_loops_reduce")

#: Kernels that gather through a permutation: the kernel's name -> the index of
#: the parameter holding it, a permutation of 0 .. n - 1 (no index base) for
#: the n = s entries the kernel moves.  rocSPARSE 5.3
#: library/src/conversion/csr2csc_device.h (csr2csc_permute_kernel: ``idx =
#: map[gid]; out1[gid] = in1[idx]``; rocsparse_csr2csc.cpp passes the
#: permutation radix_sort_pairs made of the identity).
PERMUTATIONS = {"csr2csc_permute_kernel": 3}

#: Kernels whose index arrays hold row numbers without the index base: the
#: kernel's name -> those parameters' indices; they get index arrays of base 0
#: whatever the run's base.  rocSPARSE 5.3 library/src/level2/coomv_device.h
#: (coomvn_segmented_loops_device stores ``coo_row_ind[...] - idx_base`` into
#: row_block_red, which coomvn_segmented_loops_reduce adds into ``y[row]``).
ZERO_BASED = {"coomvn_segmented_loops_reduce": (2,)}

#: Kernels rocSPARSE's host code launches with workgroups of as many
#: work-items as the kernel's first template argument (its BLOCKSIZE, a
#: literal in the mangled name): at every launch of each of these kernels in
#: rocSPARSE 5.3 library/src (``hipLaunchKernelGGL((kernel<X, ...>), grid,
#: dim3(X), ...)``, ``kernel<X, ...><<<grid, X, ...>>>``, or a ``dim3
#: threads(X)`` declared before the launch) the block is the same expression
#: as the first template argument (or both are integer literals of the same
#: value: bsrxmvn_general_kernel<64, 8> with dim3(8 * 8)).  Read from the
#: source (tag rocm-5.3.3) by listing every launch site; a kernel launched
#: anywhere with another block (two-dimensional, ``WF_SIZE *
#: NROWS_PER_BLOCK``, an expression that is not the first template argument:
#: csr2dense_kernel, csrmvn_general_kernel, bsrxmvn_17_32_kernel, csrsm, the
#: bsric0/bsrilu0 small-block kernels ...) is not here and keeps
#: :mod:`kpatch.emulate.verify`'s default.  See :func:`launch_block`.
LAUNCH_BLOCKSIZE = frozenset((
    "abs_kernel", "axpby_scale_kernel", "axpyi_kernel", "bsr2csr_block_dim_equals_one_kernel",
    "bsric0_binsearch_kernel", "bsrilu0_33_64", "bsrilu0_general", "bsrmmnn_small_blockdim_kernel",
    "bsrmmnt_small_blockdim_kernel", "bsrpad_value_kernel_sorted", "bsrpad_value_kernel_unsorted",
    "bsrsm_copy_scale", "bsrsv_lower_general", "bsrsv_lower_shared", "bsrsv_upper_general", "bsrsv_upper_shared",
    "bsrxmvn_16x16_kernel", "bsrxmvn_2x2_kernel", "bsrxmvn_3x3_kernel", "bsrxmvn_4x4_kernel", "bsrxmvn_5x5_kernel",
    "bsrxmvn_8x8_kernel", "bsrxmvn_general_kernel", "check_matrix_coo_device", "check_matrix_csr_device",
    "check_matrix_ell_device", "check_matrix_gebsr_device", "check_row_ptr_array",
    "compute_nnz_from_row_ptr_array_kernel", "conjugate", "coo2csr_kernel", "coo2dense_kernel",
    "coommnn_atomic_main", "coommnn_atomic_remainder", "coommnn_general_block_reduce", "coommnn_scale_kernel",
    "coommnn_segmented_atomic", "coommnn_segmented_main_kernel", "coommnn_segmented_remainder_kernel",
    "coommtn_atomic_main", "coomv_scale", "coomvn_aos_atomic_loops", "coomvn_aos_segmented_loops",
    "coomvn_atomic_loops", "coomvn_segmented_loops", "coomvn_segmented_loops_reduce", "coomvt_aos_kernel",
    "coomvt_kernel", "coosort_permute_kernel", "count_uncolored", "csr2bsr_65_inf_kernel",
    "csr2bsr_block_dim_equals_one_kernel", "csr2bsr_nnz_2_32_kernel", "csr2bsr_nnz_33_64_kernel",
    "csr2bsr_nnz_65_inf_kernel", "csr2bsr_nnz_block_dim_equals_one_kernel", "csr2bsr_nnz_compute_nnz_total_kernel",
    "csr2coo_kernel", "csr2csc_permute_kernel", "csr2csr_compress_kernel", "csr2ell_kernel",
    "csr2gebsr_general_kernel", "csr2gebsr_kernel_bm1", "csr2gebsr_kernel_bm1_bn1",
    "csr2gebsr_nnz_compute_nnz_total_kernel", "csr2gebsr_nnz_fast_kernel", "csr2gebsr_nnz_general_kernel",
    "csr2gebsr_nnz_kernel_bm1", "csr2gebsr_nnz_kernel_bm1_bn1", "csr2hyb_kernel", "csr_max_nnz_per_row",
    "csrcolor_kernel_count_colors", "csrcolor_kernel_count_colors_finalize", "csrcolor_kernel_count_uncolored",
    "csrcolor_kernel_count_uncolored_finalize", "csrcolor_kernel_jpl", "csrcolor_reordering_identity",
    "csrgeam_fill_multipass_kernel", "csrgeam_index_base", "csrgeam_nnz_multipass_device", "csrgemm_copy",
    "csrgemm_copy_scale_device_pointer", "csrgemm_copy_scale_host_pointer",
    "csrgemm_fill_block_per_row_device_pointer", "csrgemm_fill_block_per_row_host_pointer",
    "csrgemm_fill_block_per_row_multipass_device_pointer", "csrgemm_fill_block_per_row_multipass_host_pointer",
    "csrgemm_fill_wf_per_row_device_pointer", "csrgemm_fill_wf_per_row_host_pointer", "csrgemm_group_reduce_part1",
    "csrgemm_group_reduce_part2", "csrgemm_group_reduce_part3", "csrgemm_index_base",
    "csrgemm_intermediate_products", "csrgemm_max_row_nnz_part1", "csrgemm_max_row_nnz_part2",
    "csrgemm_nnz_block_per_row", "csrgemm_nnz_block_per_row_multipass", "csrgemm_nnz_wf_per_row",
    "csrgemm_numeric_copy_scale_kernel", "csrgemm_numeric_fill_block_per_row_kernel",
    "csrgemm_numeric_fill_block_per_row_multipass_kernel", "csrgemm_numeric_fill_wf_per_row_kernel",
    "csrgemm_set_base", "csrgemm_symbolic_copy", "csrgemm_symbolic_fill_block_per_row",
    "csrgemm_symbolic_fill_block_per_row_multipass", "csrgemm_symbolic_fill_wf_per_row",
    "csrgemm_symbolic_group_reduce_part2", "csrgemm_symbolic_group_reduce_part3",
    "csrgemm_symbolic_max_row_nnz_part1", "csrgemm_symbolic_max_row_nnz_part2", "csric0_binsearch_kernel",
    "csric0_hash_kernel", "csrilu0_binsearch", "csrilu0_hash", "csrmmnn_general_kernel",
    "csrmmnn_merge_compute_row_limits", "csrmmnn_merge_scale", "csrmmnn_row_split_kernel",
    "csrmmnt_general_block_reduce", "csrmmnt_general_main_kernel", "csrmmnt_general_remainder_kernel",
    "csrmmnt_merge_main_kernel", "csrmmnt_merge_remainder_kernel", "csrmmnt_row_split_main_kernel",
    "csrmmnt_row_split_remainder_kernel", "csrmmtn_general_kernel", "csrmmtt_general_kernel", "csrmvt_scale_kernel",
    "csrsort_shift_kernel", "csrsv_analysis_lower_kernel", "csrsv_analysis_upper_kernel", "csrsv_kernel",
    "dotci_kernel_part1", "dotci_kernel_part2", "doti_kernel_part1", "doti_kernel_part2", "ell2csr_fill",
    "ell2csr_index_base", "ell2csr_nnz_per_row", "ell_width_kernel_part1", "ell_width_kernel_part2",
    "ellmvn_kernel", "ellmvt_kernel", "ellmvt_scale_kernel", "fill_row_ptr_device", "gebsr2gebsc_permute_kernel",
    "gebsr2gebsr_compute_nnz_total_kernel", "gebsr2gebsr_fill_row_ptr_kernel", "gebsr2gebsr_nnz_fast_kernel",
    "gebsrmvn_1xn_kernel", "gebsrmvn_2xn_kernel", "gebsrmvn_3xn_kernel", "gebsrmvn_4xn_kernel",
    "gebsrmvn_general_kernel", "gebsrmvn_mxn_16_kernel", "gebsrmvn_mxn_kernel", "gemmi_scale_kernel",
    "gemmit_kernel", "gemvi_kernel", "gemvi_scale_kernel", "gpsv_interleaved_batch_givens_qr_kernel",
    "gpsv_interleaved_batch_householder_qr_kernel", "gpsv_strided_gather", "gthr_kernel", "gthrz_kernel",
    "gtsv_LBM_rhs_kernel", "gtsv_LBM_wv_kernel", "gtsv_interleaved_batch_lu_kernel",
    "gtsv_interleaved_batch_qr_kernel", "gtsv_interleaved_batch_thomas_kernel",
    "gtsv_nopivot_cr_pow2_shared_kernel", "gtsv_nopivot_cr_pow2_stage2_kernel",
    "gtsv_nopivot_crpcr_pow2_shared_kernel", "gtsv_nopivot_pcr_pow2_shared_kernel",
    "gtsv_nopivot_pcr_pow2_stage1_kernel", "gtsv_nopivot_pcr_pow2_stage1_n_kernel",
    "gtsv_nopivot_pcr_shared_kernel", "gtsv_nopivot_pcr_stage1_kernel", "gtsv_nopivot_pcr_stage1_n_kernel",
    "gtsv_nopivot_pcr_stage2_kernel", "gtsv_nopivot_strided_batch_cr_pow2_shared_kernel",
    "gtsv_nopivot_strided_batch_cr_pow2_stage2_kernel", "gtsv_nopivot_strided_batch_crpcr_pow2_shared_kernel",
    "gtsv_nopivot_strided_batch_pcr_pow2_shared_kernel", "gtsv_nopivot_strided_batch_pcr_pow2_stage1_kernel",
    "gtsv_nopivot_strided_batch_pcr_shared_kernel", "gtsv_nopivot_strided_batch_pcr_stage1_kernel",
    "gtsv_nopivot_strided_batch_pcr_stage2_kernel", "gtsv_nopivot_thomas_pow2_stage2_kernel",
    "gtsv_nopivot_thomas_stage2_kernel", "gtsv_solve_spike_grid_level_kernel", "gtsv_solve_spike_propagate_kernel",
    "gtsv_spike_backward_substitution_kernel", "gtsv_spike_block_level_kernel",
    "gtsv_transpose_and_pad_array_shared_kernel", "gtsv_transpose_back_array_kernel", "hyb2csr_fill_kernel",
    "hyb2csr_nnz_kernel", "hyb_coo_nnz", "identity_kernel", "nnz_compress_kernel", "nnz_kernel_col", "roti_kernel",
    "scale_array", "sctr_kernel", "sddmm_coox_kernel", "sddmm_csx_kernel", "sddmm_ell_kernel", "set_array_to_value",
    "shift_offsets_kernel"
))

#: Kernels rocSPARSE's host code launches with exactly one workgroup
#: (``dim3(1)`` as the grid at every launch site in rocSPARSE 5.3
#: library/src: reductions of per-block partial results, e.g.
#: rocsparse_coomv.cpp's coomvn_segmented_loops_reduce, and total counts);
#: see :func:`launch_groups`.
ONE_WORKGROUP = frozenset((
    "compute_nnz_from_row_ptr_array_kernel", "coomvn_segmented_loops_reduce",
    "csr2bsr_nnz_compute_nnz_total_kernel", "csr2gebsr_nnz_compute_nnz_total_kernel",
    "csrcolor_kernel_count_colors_finalize", "csrcolor_kernel_count_uncolored_finalize", "csrgeam_index_base",
    "csrgemm_group_reduce_part3", "csrgemm_index_base", "csrgemm_max_row_nnz_part2",
    "csrgemm_symbolic_group_reduce_part3", "csrgemm_symbolic_max_row_nnz_part2", "dotci_kernel_part2",
    "doti_kernel_part2", "ell2csr_index_base", "ell_width_kernel_part2", "gebsr2gebsr_compute_nnz_total_kernel",
    "init_kernel"
))

#: Kernels that use only the entries off the diagonal: the kernel's name -> the
#: index of its column-index parameter.  rocSPARSE 5.3
#: library/src/level2/csrmv_symm_device.h (csrmvt_symm_general_device: ``if(col
#: != row) atomicAdd(&y[col], ...)``, the transposed half of a symmetric
#: product; the diagonal is the non-transposed kernel's).  The recipe's arrays
#: make row pointers and column indices alike, so that row r's entries lie
#: mostly at column r and such a kernel often writes nothing; its column
#: indices are :func:`column_array`'s instead (row 0's entry at column s - 1).
OFF_DIAGONAL = {"csrmvt_symm_general_kernel": 4}

#: Kernels that keep the entries above a tolerance: the kernel's name -> the
#: indices of (its values parameter, its tolerance parameter, by value or
#: through a pointer).  rocSPARSE 5.3 library/src/conversion/
#: csr2csr_compress_device.h (an entry is kept when ``abs(value) >
#: real(tol)`` and above FLT_MIN; rocsparse_csr2csr_compress.cpp refuses a
#: negative tol).  The tolerance is :data:`TOLERANCE`, the values
#: :func:`threshold_values`' (kept and dropped ones alternate), so that a
#: run keeps some entries and drops others; random values against a random
#: tolerance kept none of run 0's entries as often as not.
THRESHOLDS = {"csr2csr_compress_kernel": (3, 11)}
#: The tolerance of :data:`THRESHOLDS`' kernels.
TOLERANCE = 0.5

#: Kernels that check a matrix and write only what they find wrong (rocSPARSE
#: 5.3 library/src/util/check_matrix_{csr,coo,ell,gebsr}_device.h: ``record_data_status``
#: stores a status only when it is not success): their matrices' values hold
#: infinities and NaNs among finite ones (what the check exists to find), so
#: that a run writes a status.  Values of other kernels stay random buffers.
CHECKERS = ("check_matrix_csr_device", "check_matrix_coo_device", "check_matrix_ell_device",
            "check_matrix_gebsr_device")

#: rocSPARSE's complex type: two of its template argument (float or double).
COMPLEX = "rocsparse_complex_num"

#: Matrix sizes of runs 0, 1, 2, 3 (cyclic): every by-value integer and the
#: bound of every index array.
SIZES = (4, 2, 3, 1)
#: Entries of each index array the recipe writes (the rest of its buffer is zero).
INDEX_ENTRIES = 4096


class NotParsed(Exception):
    """A mangled name this demangler does not read."""


@dataclass(frozen=True)
class Type:
    """A parameter type: ``kind`` is int, bool, float, void, enum (``name``),
    class (``name``, template ``args``), ptr (``to``), value (a literal
    template argument, ``size`` its value)."""

    kind: str
    size: int = 0
    signed: bool = False
    name: str = ""
    args: tuple = ()
    to: "Type | None" = None
    const: bool = False


class _Parser:
    def __init__(self, s: str):
        self.s, self.i = s, 0
        self.subs: list[Type] = []
        self.targs: list[Type] = []

    def peek(self, n: int = 1) -> str:
        return self.s[self.i:self.i + n]

    def take(self, text: str) -> bool:
        if self.s.startswith(text, self.i):
            self.i += len(text)
            return True
        return False

    def fail(self, what: str):
        raise NotParsed(f"{what} at {self.i} of {self.s}")

    def number(self) -> int:
        m = re.compile(r"n?\d+").match(self.s, self.i)
        if not m:
            self.fail("no number")
        self.i = m.end()
        t = m.group()
        return -int(t[1:]) if t[0] == "n" else int(t)

    def source_name(self) -> str:
        m = re.compile(r"\d+").match(self.s, self.i)
        if not m:
            self.fail("no source name")
        n = int(m.group())
        self.i = m.end()
        name = self.s[self.i:self.i + n]
        if len(name) != n:
            self.fail("short source name")
        self.i += n
        return name

    def seq_id(self, close: str) -> int:
        """The index a ``S_``/``Sn_`` or ``T_``/``Tn_`` names (base 36, ``_`` first)."""
        if self.take(close):
            return 0
        m = re.compile(r"[0-9A-Z]+").match(self.s, self.i)
        if not m or not self.s.startswith(close, m.end()):
            self.fail("bad sequence id")
        self.i = m.end() + len(close)
        return int(m.group(), 36) + 1

    def template_args(self) -> tuple:
        if not self.take("I"):
            self.fail("no template arguments")
        out = []
        while not self.take("E"):
            if self.take("L"):
                t = self.type()
                value = self.number()
                if not self.take("E"):
                    self.fail("literal not closed")
                out.append(Type("value", value, name=t.name or t.kind))
            elif self.peek() in ("X", "J"):
                self.fail("expression or pack template argument")
            else:
                out.append(self.type())
        return tuple(out)

    def type(self) -> Type:
        c = self.peek()
        if c in BUILTINS:
            self.i += 1
            k, n, sg = BUILTINS[c]
            return Type(k, n, sg)
        if c == "P":
            self.i += 1
            t = Type("ptr", 8, to=self.type())
            self.subs.append(t)
            return t
        if c in ("K", "V"):
            self.i += 1
            inner = self.type()
            t = Type(inner.kind, inner.size, inner.signed, inner.name, inner.args, inner.to, const=True)
            self.subs.append(t)
            return t
        if c == "T":
            self.i += 1
            k = self.seq_id("_")
            if k >= len(self.targs):
                self.fail("template parameter out of range")
            t = self.targs[k]
            self.subs.append(t)
            return t
        if c == "S":
            self.i += 1
            if self.peek() not in "_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ" or not self.peek():
                self.fail("special substitution")
            k = self.seq_id("_")
            if k >= len(self.subs):
                self.fail("substitution out of range")
            t = self.subs[k]
            if self.peek() == "I":  # a substituted template name with its arguments
                t = Type("class", name=t.name, args=self.template_args())
                self.subs.append(t)
            return t
        if c.isdigit():
            name = self.source_name()
            if name in ENUMS or (name.startswith("rocsparse_") and name.endswith("_") and self.peek() != "I"):
                t = Type("enum", 4, name=name)
                self.subs.append(t)
                return t
            t = Type("class", name=name)
            self.subs.append(t)
            if self.peek() == "I":
                t = Type("class", name=name, args=self.template_args())
                self.subs.append(t)
            return t
        self.fail(f"type code {c!r}")


def parameters(mangled: str) -> tuple[Type, ...]:
    """The parameter types of function ``mangled`` (``_Z`` or ``_ZL``, an
    unscoped name, optionally a template), or NotParsed."""
    return template_and_parameters(mangled)[1]


def template_and_parameters(mangled: str) -> tuple[tuple[Type, ...], tuple[Type, ...]]:
    """(template arguments, parameter types) of function ``mangled`` (see
    :func:`parameters`); no template arguments for a function that is not a
    template."""
    p = _Parser(mangled)
    if not p.take("_Z"):
        p.fail("not a mangled name")
    p.take("L")
    if not p.peek().isdigit():
        p.fail("not an unscoped name")
    name = p.source_name()
    if p.peek() == "I":
        p.subs.append(Type("class", name=name))
        p.targs = list(p.template_args())
        p.type()  # the return type
    params = []
    while p.i < len(p.s):
        params.append(p.type())
    if params == [Type("void")]:
        params = []
    return tuple(p.targs), tuple(params)


def kernel_name(mangled: str) -> str:
    """The unqualified name of internal-linkage kernel ``mangled`` (``_ZL<n><name>...``), "" for others."""
    m = re.match(r"_ZL(\d+)", mangled)
    return mangled[m.end():m.end() + int(m.group(1))] if m else ""


def host_blocksize(mangled: str) -> int | None:
    """The block rocSPARSE's host code launches kernel ``mangled`` with: its
    first template argument when the kernel is one of
    :data:`LAUNCH_BLOCKSIZE` and that argument is a positive literal; None
    otherwise (the name not read, or the block not known from the name)."""
    if kernel_name(mangled) not in LAUNCH_BLOCKSIZE:
        return None
    try:
        targs = template_and_parameters(mangled)[0]
    except NotParsed:
        return None
    if not targs or targs[0].kind != "value" or targs[0].size <= 0:
        return None
    return targs[0].size


def launch_block(mangled: str, md: dict) -> tuple | None:
    """The workgroup size of kernel ``mangled`` as rocSPARSE launches it
    (:func:`host_blocksize`), when the metadata allows it (at most
    ``.max_flat_workgroup_size``, equal to a ``.reqd_workgroup_size``);
    None for the verifier's default otherwise (:func:`build` then refuses
    a kernel whose host block is known but not the launch's)."""
    bs = host_blocksize(mangled)
    if bs is None or md.get(".max_flat_workgroup_size") is None or bs > int(md[".max_flat_workgroup_size"]):
        return None
    req = md.get(".reqd_workgroup_size")
    if req and tuple(int(x) for x in req) + (1,) * (3 - len(req)) != (bs, 1, 1):
        return None
    return (bs, 1, 1)


def launch_groups(mangled: str) -> int | None:
    """The workgroups rocSPARSE launches kernel ``mangled`` with: 1 for
    :data:`ONE_WORKGROUP`'s kernels, None (the verifier's 1-3 by run) for others."""
    return 1 if kernel_name(mangled) in ONE_WORKGROUP else None


#: Kernels this recipe is for: internal-linkage rocSPARSE kernels (a rocSPARSE
#: type in the name, or one of :data:`UNTYPED`'s templates).
PATTERN = re.compile(r"^_ZL(?:.*rocsparse_|\d+(?:" + "|".join(UNTYPED) + r")I)")


def claims(name: str) -> bool:
    """Whether the recipe is for kernel ``name`` (:data:`PATTERN`)."""
    return PATTERN.search(name) is not None


def _scalar_bytes(t: Type, rng) -> bytes | None:
    """A small random floating value (or complex pair) of type ``t``, None if not one."""
    if t.kind == "float":
        v = float(rng.uniform(-2, 2))
        return struct.pack("<f" if t.size == 4 else "<d", v)
    if t.kind == "class" and t.name == COMPLEX and len(t.args) == 1 and t.args[0].kind == "float":
        fmt = "<2f" if t.args[0].size == 4 else "<2d"
        return struct.pack(fmt, *rng.uniform(-2, 2, 2))
    return None


def _size_of(t: Type) -> int | None:
    if t.kind in ("int", "bool", "float", "enum", "ptr"):
        return t.size
    if t.kind == "class" and t.name == COMPLEX and len(t.args) == 1 and t.args[0].kind == "float":
        return 2 * t.args[0].size
    return None


class DoesNotHold(Exception):
    """The kernel's name or metadata do not fit the rocSPARSE recipe
    (:mod:`kpatch.emulate.recipes` reports it as its RecipeDoesNotHold)."""


def index_array(size: int, base: int, entries: int, itemsize: int, rng) -> bytes:
    """``entries`` integers that are at once a CSR/BSR row-pointer array and a
    column (row) index array for ``size`` x ``size`` matrices with index base
    ``base``: the first is ``base``, each next one the same or one more (the
    second one more: row 0 is not empty), none past ``base + size - 1``."""
    steps = np.concatenate([[0], rng.integers(0, 2, entries - 1)])
    if entries > 1:
        steps[1] = 1  # row 0 (the row every one-row-per-workgroup kernel's first workgroup takes) has an entry
    a = base + np.minimum(np.cumsum(steps), max(size - 1, 0))
    return a.astype("<i8" if itemsize == 8 else "<i4").tobytes()


def pivot_array(blocksize: int, blockdim: int, itemsize: int, rng) -> bytes:
    """gtsv's pivots for m_pad = ``blocksize`` x ``blockdim`` rows: for each
    thread g, at rows g + t * blocksize (t < ``blockdim``), 1 or a pair 2, 2
    (not starting at the last t), about a third of them pairs."""
    p = np.zeros((blockdim, blocksize), np.int64)
    for t in range(blockdim):
        free = p[t] == 0
        pair = free & (rng.random(blocksize) < 0.3) if t < blockdim - 1 else np.zeros(blocksize, bool)
        p[t][free] = 1
        p[t][pair] = 2
        if t + 1 < blockdim:
            p[t + 1][pair] = 2
    return p.reshape(-1).astype("<i8" if itemsize == 8 else "<i4").tobytes()


def permutation_array(size: int, entries: int, itemsize: int, rng) -> bytes:
    """``entries`` integers whose first ``size`` are a random permutation of
    0 .. size - 1 (the rest 0)."""
    a = np.zeros(entries, np.int64)
    a[:size] = rng.permutation(size)
    return a.astype("<i8" if itemsize == 8 else "<i4").tobytes()


def column_array(size: int, base: int, entries: int, itemsize: int, rng) -> bytes:
    """``entries`` column indices of an ``size`` x ``size`` matrix with index
    base ``base``, the mirror image of :func:`index_array`'s: the first is
    ``base + size - 1``, each next the same or one less (the second one less),
    none below ``base``; with the recipe's row pointers the entries of row 0
    (and most others) lie off the diagonal when ``size`` > 1."""
    a = np.frombuffer(index_array(size, base, entries, itemsize, rng), "<i8" if itemsize == 8 else "<i4")
    return (2 * base + max(size - 1, 0) - a).astype(a.dtype).tobytes()


def _float_parts(t: Type) -> tuple[int, str] | None:
    """(parts, numpy dtype) of element type ``t``: float, double or rocSPARSE's complex of them."""
    if t.kind == "float" and t.size in (4, 8):
        return 1, ("<f4" if t.size == 4 else "<f8")
    if t.kind == "class" and t.name == COMPLEX and len(t.args) == 1 and t.args[0].kind == "float":
        return 2, ("<f4" if t.args[0].size == 4 else "<f8")
    return None


def constant_array(t: Type, entries: int, value: float) -> bytes | None:
    """``entries`` copies of ``value`` (a complex one's imaginary part 0) of element type ``t``; None for other types."""
    pd = _float_parts(t)
    if pd is None:
        return None
    v = np.zeros((entries, pd[0]))
    v[:, 0] = value
    return v.astype(pd[1]).tobytes()


def threshold_values(t: Type, entries: int, tol: float, rng) -> bytes | None:
    """``entries`` values of element type ``t`` whose magnitudes (moduli)
    lie above ``tol`` (in [2 tol, 4 tol)) at even positions and below it (in
    [0, tol / 2)) at odd ones, with random signs (phases); None for other types."""
    pd = _float_parts(t)
    if pd is None:
        return None
    mag = np.where(np.arange(entries) % 2 == 0, rng.uniform(2 * tol, 4 * tol, entries),
                   rng.uniform(0, tol / 2, entries))
    if pd[0] == 1:
        v = (mag * rng.choice([-1.0, 1.0], entries))[:, None]
    else:
        phase = rng.uniform(0, 2 * np.pi, entries)
        v = np.stack([mag * np.cos(phase), mag * np.sin(phase)], axis=1)
    return v.astype(pd[1]).tobytes()


def value_array(t: Type, entries: int, rng, special: bool = False) -> bytes | None:
    """``entries`` small random values of element type ``t`` (float, double or
    rocSPARSE's complex of them), every third (from the first on: the entry
    of row 0, which the recipe's matrices always have) +inf or a NaN (one
    part of a complex one) when ``special`` -- rocSPARSE 5.3's
    rocsparse_is_inf is ``== +inf`` (library/src/include/common.h), a -inf
    is not reported; None for other types."""
    if t.kind == "float" and t.size in (4, 8):
        parts, dt = 1, ("<f4" if t.size == 4 else "<f8")
    elif t.kind == "class" and t.name == COMPLEX and len(t.args) == 1 and t.args[0].kind == "float":
        parts, dt = 2, ("<f4" if t.args[0].size == 4 else "<f8")
    else:
        return None
    v = rng.uniform(-2, 2, (entries, parts))
    if special:
        at = np.arange(0, entries, 3)
        v[at, rng.integers(0, parts, len(at)) if parts > 1 else 0] = rng.choice([np.inf, np.nan], len(at))
    return v.astype(dt).tobytes()


def build(ctx, name: str) -> dict:
    """{explicit argument index: value (a :class:`Buffer` for an index array)}
    for rocSPARSE kernel ``name`` (see the module's docstring); DoesNotHold
    when its name is not read or does not line up with the metadata."""
    try:
        targs, params = template_and_parameters(name)
    except NotParsed as e:
        raise DoesNotHold(f"recipe rocsparse does not hold: the name is not read: {e}") from None
    explicit = [a for a in (ctx.md or {}).get(".args", []) if not a.get(".value_kind", "").startswith("hidden_")]
    if len(params) != len(explicit):
        raise DoesNotHold(f"recipe rocsparse does not hold: {len(params)} parameters in the name, "
                                f"{len(explicit)} explicit arguments in the metadata")
    size = SIZES[ctx.run % len(SIZES)]
    base = ctx.run % 2
    kernel = kernel_name(name)
    bs = host_blocksize(name)
    if bs is not None and tuple(ctx.block) != (bs, 1, 1):
        md = ctx.md or {}
        raise DoesNotHold(f"recipe rocsparse does not hold: rocSPARSE launches {kernel} with {bs} work-items "
                          f"(its BLOCKSIZE), the metadata allows "
                          + (f"only {tuple(md['.reqd_workgroup_size'])}" if md.get(".reqd_workgroup_size") else
                             f"at most {md.get('.max_flat_workgroup_size', 'an unstated number')}"))
    int_base = INT_INDEX_BASE.get(kernel, None)
    offset = REMAINDER_OFFSET.get(kernel, None)
    padded = PADDED_ROWS.get(kernel, None)
    if padded is not None and not (len(targs) >= 2 and all(a.kind == "value" for a in targs[:2])):
        raise DoesNotHold(f"recipe rocsparse does not hold: {kernel} without BLOCKSIZE and BLOCKDIM")
    out = {}
    for i, (t, a) in enumerate(zip(params, explicit)):
        kind, n = a.get(".value_kind", ""), a.get(".size", 0)
        if t.kind == "ptr":
            if kind != "global_buffer" or n != 8:
                raise DoesNotHold(f"recipe rocsparse does not hold: parameter {i} is a pointer, "
                                        f"the metadata says {kind} of {n} bytes")
            if t.to is not None and t.to.kind == "int" and t.to.size in (4, 8):
                if PIVOTS.get(kernel) == i:
                    if padded is None:
                        raise DoesNotHold(f"recipe rocsparse does not hold: {kernel}'s pivots without padded rows")
                    out[i] = Buffer(pivot_array(targs[0].size, targs[1].size, t.to.size, ctx.rng))
                elif kernel in BLOCK_PADDING and i in BLOCK_PADDING[kernel][3:]:
                    diag = np.arange(size + 1 if i == BLOCK_PADDING[kernel][3] else size) + base
                    out[i] = Buffer(diag.astype("<i8" if t.to.size == 8 else "<i4").tobytes())
                elif PERMUTATIONS.get(kernel) == i:
                    out[i] = Buffer(permutation_array(size, INDEX_ENTRIES, t.to.size, ctx.rng))
                else:
                    make = column_array if OFF_DIAGONAL.get(kernel) == i else index_array
                    out[i] = Buffer(make(size, 0 if i in ZERO_BASED.get(kernel, ()) else base, INDEX_ENTRIES,
                                         t.to.size, ctx.rng))
            elif kernel in THRESHOLDS and i in THRESHOLDS[kernel]:
                made = (threshold_values(t.to, INDEX_ENTRIES, TOLERANCE, ctx.rng) if i == THRESHOLDS[kernel][0]
                        else constant_array(t.to, 16, TOLERANCE))
                if made is None:
                    raise DoesNotHold(f"recipe rocsparse does not hold: parameter {i} of {kernel} "
                                      f"is not a pointer to floating values")
                out[i] = Buffer(made)
            elif kernel in CHECKERS and t.to is not None and t.to.const:  # the values read
                values = value_array(t.to, INDEX_ENTRIES, ctx.rng, special=True)
                if values is not None:
                    out[i] = Buffer(values)
            continue  # other pointers: the usual random buffer
        if kind != "by_value" or _size_of(t) != n:
            raise DoesNotHold(f"recipe rocsparse does not hold: parameter {i} ({t.kind} {t.name}) "
                                    f"does not match the metadata's {kind} of {n} bytes")
        if t.kind == "enum":
            if t.name not in ENUMS:
                raise DoesNotHold(f"recipe rocsparse does not hold: no valid values known for {t.name}")
            values = ENUMS[t.name]
            out[i] = base if t.name == "rocsparse_index_base_" else values[(ctx.run + i) % len(values)]
        elif t.kind == "int":
            if i == int_base:
                out[i] = base
            elif i == offset:
                out[i] = 0
            elif i == padded:
                out[i] = targs[0].size * targs[1].size
            elif kernel in BLOCK_PADDING and i in BLOCK_PADDING[kernel][:3]:
                mi, mbi, bdi = BLOCK_PADDING[kernel][:3]
                out[i] = {mi: size * (size + 1) - 1, mbi: size, bdi: size + 1}[i]
            else:
                out[i] = size
        elif t.kind == "bool":
            out[i] = (ctx.run + i) % 2
        elif kernel in THRESHOLDS and i == THRESHOLDS[kernel][1]:
            v = constant_array(t, 1, TOLERANCE)
            if v is None:
                raise DoesNotHold(f"recipe rocsparse does not hold: parameter {i} of {kernel} is no tolerance")
            out[i] = v
        else:
            v = _scalar_bytes(t, ctx.rng)
            if v is None:
                raise DoesNotHold(f"recipe rocsparse does not hold: parameter {i} ({t.kind} {t.name}) "
                                        f"has no known value")
            out[i] = v
    return out
