"""Argument recipes: how to build consistent arguments for a kernel family
whose metadata alone does not say what a valid input is.

The metadata gives each argument's kind and size, not what it means: a
pointer inside a by-value struct, a counter that must start at 0, a table
whose entries index another table, a block count that must agree with the
grid.  :func:`kpatch.emulate.verify.synthesise` fills such arguments with
random bytes or zeros, so the kernel faults on both sides and is "not
verified".  A recipe says, for one family, what each such argument holds.

A recipe is keyed by a pattern searched in the kernel's (mangled) name and
states the explicit arguments it expects (:attr:`Recipe.signatures`: value
kind initial and size per argument, in order; one tuple per variant).  A
kernel whose name matches but whose arguments are not one of those
signatures gets no arguments at all: it is "not verified (recipe NAME does
not hold: ...)".  A recipe only chooses inputs: both code objects still run
on the same bytes and every byte they write is compared, so a recipe can
make a kernel checkable, never make a different kernel pass.

:attr:`Recipe.build` returns ``{explicit argument index: value}`` for the
arguments it decides; the rest are synthesised as usual.  Values:

* :class:`Fill` - a global buffer of :data:`~kpatch.emulate.verify.RECIPE_BYTES`
  whose first bytes are given (the rest zero), with the usual guard zones,
  and other Fill buffers' addresses at given offsets;
* :class:`Struct` - a by-value aggregate: bytes, with :class:`Fill` buffers'
  addresses written at given offsets;
* an int (a by-value integer) or bytes.

Where each layout comes from is in the recipe's ``source``.
"""

from __future__ import annotations

import re
import struct as _struct
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from kpatch.emulate import rocprim as _rocprim
from kpatch.emulate.argvalues import Aggregate, Buffer
from kpatch.emulate import sparse as _sparse
from kpatch.emulate import tensile as _tensile


@dataclass(frozen=True)
class Fill:
    """A global buffer whose first bytes are ``head`` (the rest zero), with
    the address of each ``(offset, Fill)`` buffer of ``pointers`` written at
    its offset (an array of pointers, as general-batched GEMMs take)."""

    head: bytes = b""
    pointers: tuple = ()


@dataclass(frozen=True)
class Struct:
    """A by-value aggregate of ``size`` bytes: ``data`` with the address of
    each ``(offset, Fill)`` buffer of ``pointers`` written at its offset."""

    size: int
    data: bytes = b""
    pointers: tuple = ()


@dataclass(frozen=True)
class Context:
    """What a recipe may look at: the run, its grid in workgroups, the
    workgroup size, and the run's random generator."""

    run: int
    groups: int
    block: tuple
    rng: np.random.Generator
    md: dict | None = None  # the kernel's metadata (argument names, for recipes that check them)


@dataclass(frozen=True)
class Recipe:
    """Consistent arguments for the kernels whose name matches ``pattern``."""

    name: str
    pattern: re.Pattern
    signatures: tuple | None  # of tuples of (value kind initial "g"/"b", size) per explicit argument;
    #   None: the recipe checks the arguments itself (raises RecipeDoesNotHold from build)
    build: Callable[[Context, tuple, str], dict]  # (context, matched signature, kernel name) -> {index: value}
    source: str
    notes: str = field(default="")
    #: (kernel name, metadata) -> the workgroup size the kernel is launched with, or None for
    #: verify's default (the metadata's required or maximum size)
    block: Callable[[str, dict], tuple | None] | None = None
    #: kernel name -> the workgroups the launch has in y (a Tensile GlobalSplitU kernel's
    #: summation splits), or None for verify's one
    groups_y: Callable[[str], int | None] | None = None
    #: kernel name -> the workgroups the launch has in x (a rocSPARSE kernel its host launches
    #: with one), or None for verify's 1-3 by run
    groups_x: Callable[[str], int | None] | None = None


class RecipeDoesNotHold(Exception):
    """A kernel matches a recipe's name but not its arguments."""


def _rocsparse(ctx, name: str) -> dict:
    """kpatch.emulate.sparse's arguments, its buffers as Fills."""
    try:
        out = _sparse.build(ctx, name)
    except _sparse.DoesNotHold as e:
        raise RecipeDoesNotHold(str(e)) from None
    return {i: _from_values(v) for i, v in out.items()}


def signature(md: dict) -> tuple:
    """The explicit arguments of a kernel as (value kind initial, size)."""
    return tuple((a.get(".value_kind", "?")[:1], a.get(".size", 0)) for a in md.get(".args", [])
                 if not a.get(".value_kind", "").startswith("hidden_"))


def find(name: str, md: dict) -> tuple[Recipe, tuple] | None:
    """The recipe for kernel ``name`` and its matched signature, None when
    no recipe names it; RecipeDoesNotHold when one names it but its
    arguments are not what the recipe expects."""
    for r in RECIPES:
        if r.pattern.search(name):
            sig = signature(md)
            if r.signatures is not None and sig not in r.signatures:
                raise RecipeDoesNotHold(f"recipe {r.name} does not hold: the kernel's arguments are "
                                        f"{_show(sig)}, the recipe expects {' or '.join(_show(s) for s in r.signatures)}")
            return r, sig
    return None


def _show(sig: tuple) -> str:
    return "(" + ", ".join(f"{k}{n}" for k, n in sig) + ")"


# -- rocPRIM: kpatch.emulate.rocprim's builders -------------------------------------------

def _from_values(v):
    """A recipe value from a :mod:`kpatch.emulate.argvalues` value (Buffer ->
    Fill, Aggregate -> Struct); anything else as it is."""
    if isinstance(v, Buffer):
        return Fill(v.head, tuple((o, _from_values(b)) for o, b in v.pointers))
    if isinstance(v, Aggregate):
        return Struct(v.size, v.data, tuple((o, _from_values(b)) for o, b in v.pointers))
    return v


def _rocprim_recipe(label: str, build) -> Callable:
    """Recipe ``label``'s build from a kpatch.emulate.rocprim builder."""
    def run(ctx: Context, sig: tuple, name: str) -> dict:
        try:
            out = build(ctx, sig, name)
        except _rocprim.NotRead as e:
            raise RecipeDoesNotHold(f"recipe {label} does not hold: {e}") from None
        return {i: _from_values(v) for i, v in out.items()}
    return run


# -- rocRAND: discrete (Poisson) distributions --------------------------------------------

def _discrete_distribution(ctx: Context, sig: tuple, name: str) -> dict:
    """rocrand_discrete_distribution_st {unsigned size, offset; unsigned *alias;
    double *probability; double *cdf}, by value as the last argument: an
    alias table (entries index the table), probabilities in [0, 1) and an
    increasing CDF ending at 1."""
    n = 8 + 5 * ctx.run
    alias = ctx.rng.integers(0, n, n, dtype=np.uint32)
    prob = ctx.rng.random(n)
    p = ctx.rng.random(n) + 0.05
    cdf = np.cumsum(p / p.sum())
    cdf[-1] = 1.0
    head = _struct.pack("<II", n, 3)
    last = len(sig) - 1
    return {last: Struct(32, head, ((8, Fill(alias.astype("<u4").tobytes())),
                                    (16, Fill(prob.astype("<f8").tobytes())),
                                    (24, Fill(cdf.astype("<f8").tobytes()))))}


# -- MIOpen: naive (reference) convolutions ------------------------------------------------

#: Convolution problems for runs 0, 1, 2 (cyclic): per spatial axis (d, h, w) the input
#: size, filter size, stride, dilation and left pad; batch, groups, channels per group
#: (c) and output channels per group (k).  Small, so that a workgroup's loops take a few
#: thousand wave-instructions, and every grid the verifier launches (1-3 workgroups) is
#: inside the problem's own grid (MIOpen launches n*k, n*c, g*k or g*n*ho/hi workgroups:
#: at least 4 here).
NAIVE_CONV_PROBLEMS = (
    dict(n=2, g=2, c=2, k=2, size=(3, 4, 4), f=(2, 3, 3), s=(1, 1, 1), d=(1, 1, 1), p=(0, 1, 1),
         alpha=1.0, beta=0.0),
    dict(n=2, g=1, c=3, k=4, size=(2, 5, 5), f=(1, 2, 2), s=(1, 2, 2), d=(1, 1, 1), p=(0, 0, 0),
         alpha=0.5, beta=2.0),
    dict(n=2, g=3, c=1, k=2, size=(4, 6, 5), f=(2, 3, 2), s=(2, 1, 2), d=(1, 2, 1), p=(1, 1, 0),
         alpha=1.0, beta=0.0),
)


def _packed_strides(dims: dict, order: str) -> list[int]:
    """Strides of a packed tensor whose dimensions (name -> length) lie in
    memory in ``order`` (outermost first), sorted ascending as MIOpen's
    MakeStrideArray passes them (smallest, the innermost, at index 0)."""
    out, step = [], 1
    for name in reversed(order):
        out.append(step)
        step *= dims[name]
    return sorted(out)


def _naive_conv(ctx: Context, sig: tuple, name: str) -> dict:
    # naive_conv_ab_{packed,nonpacked}_{fwd,bwd,wrw}_{nchw,nhwc,ncdhw,ndhwc}_<src>_<acc>_<dst>(
    #     p_in, p_wei, double alpha, double beta, p_out, StridesND in_strides, wei_strides,
    #     out_strides, [di,] hi, wi, n, k_per_group, c_per_group, [do,] ho, wo, [sz,] sy, sx,
    #     [dz,] dy, dx, [pz,] py, px, [fz,] fy, fx, group): the strides are the packed tensors'
    #     with C (K for weights) split into (G, C per group), sorted ascending; the tensors
    #     themselves are the synthesised random buffers.
    nhwc = "_nhwc_" in name or "_ndhwc_" in name
    three = "_ncdhw_" in name or "_ndhwc_" in name
    pr = NAIVE_CONV_PROBLEMS[ctx.run % len(NAIVE_CONV_PROBLEMS)]
    axes = slice(0, 3) if three else slice(1, 3)
    size, f, s, d, p = (pr[x][axes] for x in ("size", "f", "s", "d", "p"))
    out = tuple((i + 2 * q - dd * (ff - 1) - 1) // ss + 1 for i, ff, ss, dd, q in zip(size, f, s, d, p))
    sp = "zyx"[3 - len(size):]
    n, g, c, k = pr["n"], pr["g"], pr["c"], pr["k"]
    in_dims = dict(n=n, g=g, c=c, **dict(zip(sp, size)))
    out_dims = dict(n=n, g=g, c=k, **dict(zip(sp, out)))
    wei_dims = dict(g=g, k=k, c=c, **dict(zip(sp, f)))
    act, wei = ("n" + sp + "gc", "gk" + sp + "c") if nhwc else ("ngc" + sp, "gkc" + sp)
    width = 8 * (len(sp) + 3)

    def strides(dims, order):
        return Struct(width, _struct.pack(f"<{len(sp) + 3}Q", *_packed_strides(dims, order)))

    ints = [*size, n, k, c, *out, *s, *d, *p, *f, g]
    values = {2: _struct.pack("<d", pr["alpha"]), 3: _struct.pack("<d", pr["beta"]),
              5: strides(in_dims, act), 6: strides(wei_dims, wei), 7: strides(out_dims, act)}
    values.update({8 + i: v for i, v in enumerate(ints)})
    return values


_G, _B1, _B4, _B8, _B24 = ("g", 8), ("b", 1), ("b", 4), ("b", 8), ("b", 24)


def _tensile_arguments(build, ctx: Context, sig: tuple, name: str) -> dict:
    """kpatch.emulate.tensile's arguments as recipe values: a tensor is a
    Fill (global buffer) or a Struct holding its address (by-value u64), through
    a one-entry pointer array for general-batched kernels."""
    try:
        args = build(ctx, sig, name)
    except _tensile.DoesNotHold as e:
        raise RecipeDoesNotHold(str(e)) from None
    out = {}
    for i, v in args.items():
        if isinstance(v, _tensile.Value):
            buf = Fill(b"", ((0, Fill(v.data)),)) if v.array else Fill(v.data)
            v = Struct(8, b"", ((0, buf),)) if v.by_value else buf
        out[i] = v
    return out


RECIPES: tuple[Recipe, ...] = (
    Recipe("rocprim-lookback-scan", re.compile(r"rocprim6detail20lookback_scan_kernel"),
           tuple((_G, _G, _B8, (("b", v)), _B1, st, _B4, _G, _G, _G, _B1, _B1)
                 for v in (4, 8) for st in (_G, _B24)),
           _rocprim_recipe("rocprim-lookback-scan", _rocprim.lookback_scan),
           "rocPRIM (librocprim-dev) device/device_scan.hpp lookback_scan_kernel, "
           "device/detail/lookback_scan_state.hpp (padding, prefix_flag, packed and three-array states)"),
    Recipe("rocprim-init-lookback", re.compile(r"rocprim6detail31init_lookback_scan_state_kernel"),
           ((_G, _B4, _G, _B4, _G), (_B24, _B4, _G, _B4, _G)),
           _rocprim_recipe("rocprim-init-lookback", _rocprim.init_lookback),
           "rocPRIM device/detail/device_scan_common.hpp init_lookback_scan_state_kernel"),
    Recipe("rocprim-segment-partition",
           re.compile(r"rocprim6detail16partition_kernelILNS0_13select_methodE1ELb0E.*counting_iteratorIjlEE"
                      r".*segmented_radix_sort_implI.*UljE_EEEv"),
           ((_B4, _G, _G, _G, _G, _G, _G, _B8, _B1, _G, _B4, _G, ("b", 16)),),
           _rocprim_recipe("rocprim-segment-partition", _rocprim.segment_partition),
           "rocPRIM device/device_segmented_radix_sort.hpp (segmented_radix_sort_impl: the large segment "
           "selector, the partition of a counting_iterator), device/device_partition.hpp"),
    Recipe("rocprim-partition", re.compile(r"rocprim6detail16partition_kernel"),
           ((_G, _G, _G, _G, _G, _G, _G, _B8, _B1, _G, _B4, _G, _B1),),
           _rocprim_recipe("rocprim-partition", _rocprim.partition),
           "rocPRIM device/device_partition.hpp partition_kernel (offset state: unsigned int, packed)"),
    Recipe("rocprim-segmented-sort", re.compile(r"rocprim6detail(21segmented_sort|27segmented_sort_large)_kernelI"),
           ((_G, _G, _G, _G, _G, _G, _B1, _G, _G, _B4, _B4, _B4, _B4),
            (_G, _G, _G, _G, _G, _G, _B1, _G, _G, _G, _B4, _B4, _B4, _B4)),
           _rocprim_recipe("rocprim-segmented-sort", _rocprim.segmented_sort),
           "rocPRIM device/device_segmented_radix_sort.hpp (segmented_radix_sort_impl: iterations, "
           "launches), device/detail/device_segmented_radix_sort.hpp (segmented_sort, segmented_sort_large), "
           "device/device_segmented_radix_sort_config.hpp; see kpatch/emulate/rocprim.py"),
    # (with DisabledWarpSortHelperConfig the kernel sorts nothing: not claimed, it writes nothing)
    Recipe("rocprim-segmented-sort-small",
           re.compile(r"rocprim6detail37segmented_sort_small_or_medium_kernelINS0_20WarpSortHelperConfigI"),
           ((_G, _G, _G, _G, _G, _G, _B1, _B4, _G, _G, _G, _B4, _B4),),
           _rocprim_recipe("rocprim-segmented-sort-small", _rocprim.segmented_sort_small),
           "rocPRIM device/device_segmented_radix_sort.hpp (segmented_radix_sort_impl: small and medium "
           "segment launches), device/detail/device_segmented_radix_sort.hpp (segmented_sort_small)"),
    Recipe("rocprim-sort-and-scatter", re.compile(r"rocprim6detail23sort_and_scatter_kernelILj\d+ELj\d+ELj\d+E"),
           ((_G, _G, _G, _G, _B4, _G, _G, _B4, _B4, _B4, _B4),
            (_G, _G, _G, _G, _B8, _G, _G, _B4, _B4, _B4, _B4)),  # Offset size_t
           _rocprim_recipe("rocprim-sort-and-scatter", _rocprim.sort_and_scatter),
           "rocPRIM device/device_radix_sort.hpp (sort_and_scatter_kernel, batches and blocks per batch), "
           "device/detail/device_radix_sort.hpp (sort_and_scatter)"),
    Recipe("rocprim-block-merge", re.compile(r"rocprim6detail18block_merge_kernelILj\d+ELj\d+E.*jNS_4lessI"),
           ((_G, _G, _G, _G, _B4, _B4, _B1, _G),),
           _rocprim_recipe("rocprim-block-merge", _rocprim.block_merge),
           "rocPRIM device/detail/device_merge_sort_mergepath.hpp (block_merge_kernel_impl: partitions, "
           "tile groups), device/device_merge_sort.hpp"),
    Recipe("rocprim-reduce-by-key", re.compile(r"rocprim6detail20reduce_by_key_kernelILj\d+ELj\d+E"),
           ((_G, _G, _B4, _G, _G, _G, _G, _G, _B1, _B1, _B4, _B4),
            (_G, ("b", 16), _B4, _G, _G, _G, _G, _G, _B1, _B1, _B4, _B4)),  # values: a constant_iterator
           _rocprim_recipe("rocprim-reduce-by-key", _rocprim.reduce_by_key),
           "rocPRIM device/device_reduce_by_key.hpp (batches), device/detail/device_reduce_by_key.hpp"),
    Recipe("rocprim-scatter-carry-outs",
           re.compile(r"rocprim6detail34scan_and_scatter_carry_outs_kernelILj\d+ELj\d+E[fjiI]"),
           ((_G, _G, _G, _B1, _B4),),
           _rocprim_recipe("rocprim-scatter-carry-outs", _rocprim.scatter_carry_outs),
           "rocPRIM device/detail/device_reduce_by_key.hpp (carry_out, scan_and_scatter_carry_outs)"),
    Recipe("rocprim-segmented-reduce", re.compile(r"rocprim6detail23segmented_reduce_kernelI.*Pj"),
           ((_G, _G, _G, _G, _B1, _B4),),
           _rocprim_recipe("rocprim-segmented-reduce", _rocprim.segmented_reduce),
           "rocPRIM device/device_segmented_reduce.hpp (segmented_reduce_kernel: a segment per block, "
           "begin and end offsets)"),
    Recipe("rocrand-discrete", re.compile(r"rocrand_host6detail.*poisson_distribution"),
           tuple(s for s in (
               (("b", 48), _G, _B8, ("b", 32)),
               (_G, _B4, _G, _B8, ("b", 32)),
               (_G, _B8, _G, _B4, ("b", 32)),
               (_G, _G, _B8, ("b", 32)))),
           _discrete_distribution,
           "rocRAND library/include/rocrand/rocrand_discrete_types.h (rocrand_discrete_distribution_st), "
           "library/src/rng/distribution/poisson.hpp"),
    Recipe("miopen-naive-conv", re.compile(r"^naive_conv_ab_(non)?packed_(fwd|bwd|wrw)_(nchw|nhwc|ncdhw|ndhwc)_"),
           ((_G, _G, _B8, _B8, _G, ("b", 40), ("b", 40), ("b", 40)) + (_B4,) * 16,
            (_G, _G, _B8, _B8, _G, ("b", 48), ("b", 48), ("b", 48)) + (_B4,) * 22),
           _naive_conv,
           "MIOpen (github ROCm/MIOpen) src/kernels/gpu_reference_kernel/naive_conv.cpp (the kernels' "
           "arguments and loops), src/solver/conv/conv_direct_naive_conv*.cpp and "
           "src/include/miopen/solver/conv_direct_naive_conv.hpp (SplitStrideCtoGC, SplitWeiStrideKtoGK, "
           "MakeStrideArray: strides split by group and sorted ascending)"),
    Recipe("tensile-gemm", re.compile(r"^Cijk_.*_ISA(?!000_)\d+_"),  # assembly kernels (source ones: ISA000)
           _tensile.signatures(),
           lambda ctx, sig, name: _tensile_arguments(_tensile.build, ctx, sig, name),
           "Tensile (github ROCm/Tensile) Tensile/Source/lib/source/ContractionSolution.cpp (kernel "
           "arguments, staggerUIter, smallMagicNumber), ContractionProblem.cpp (allocatedElementsNonBatch), "
           "SolutionStructs.py (staggerStrideShift); see kpatch/emulate/tensile.py",
           groups_y=_tensile.launch_groups_y),
    Recipe("tensile-gemm-source", re.compile(r"^Cijk_.*_ISA000_"),  # Tensile's HIP source kernels (fallback)
           _tensile.source_signatures(),
           lambda ctx, sig, name: _tensile_arguments(_tensile.build_source, ctx, sig, name),
           "Tensile (github ROCm/Tensile) Tensile/KernelWriterSource.py (functionSignature: the argument "
           "order), ContractionSolution.cpp (values, workgroup size WG0*WG1*WG2); see kpatch/emulate/tensile.py",
           block=_tensile.launch_block, groups_y=_tensile.launch_groups_y),
    Recipe("rocsparse", _sparse.PATTERN,  # internal-linkage rocSPARSE kernels
           None,
           lambda ctx, sig, name: _rocsparse(ctx, name),
           "rocSPARSE (github ROCm/rocSPARSE) library/include/rocsparse-types.h (enum values); the "
           "parameter types from the kernel's mangled name (Itanium C++ ABI); the launch's block and grid from "
           "library/src's launch sites (sparse.LAUNCH_BLOCKSIZE, sparse.ONE_WORKGROUP); see kpatch/emulate/sparse.py",
           block=_sparse.launch_block, groups_x=_sparse.launch_groups),
)
