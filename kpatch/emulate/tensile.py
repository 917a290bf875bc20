"""Argument recipe for Tensile's assembly GEMM kernels (rocBLAS' library,
``TensileLibrary_*_gfx1030.co``): a small, consistent contraction problem.

A Tensile assembly kernel gets every size, stride and pointer of the
problem by value (``AddressA`` is a u64, not a global buffer), so the
generic synthesis gives it random addresses and it faults.  This recipe
builds what Tensile's host library passes for a GEMM D = alpha*A*B + beta*C
of a few tiles, from the kernel's own name (macro tile ``MT0xMT1xDU``,
work-group shape ``WG``, ``WGM``, ``GSU``, ``SU``/``SUS``, the data-type
code) and its metadata's argument names.

Where each value comes from (Tensile, github ROCm/Tensile,
Tensile/Source/lib/source/ContractionSolution.cpp, ``solveArgs``/
``generateSingleCall`` - the argument order ``tensor2dSizeA, tensor2dSizeB,
d, c, a, b, [offsetD, offsetC, offsetA, offsetB,] alpha[, alpha_2], beta[,
beta_2], strideD1.., strideC1.., strideA1.., strideB1.., size_0..,
[staggerUIter,] problemNumGroupTiles0, problemNumGroupTiles1,
[numFullBlocks, wgmRemainder1, magicNumberWgmRemainder1]``):

* ``Tensor2dSizeA``/``B``: ``allocatedElementsNonBatchA``: 1 + sum over the
  non-batch dimensions of stride * (size - 1) (ContractionProblem.cpp);
* Half ``alpha``/``beta`` are passed twice (``alpha_2``), so the 4-byte
  ``Alpha`` holds the f16 value in both halves;
* strides from index 1 (``useInitialStrides`` false): ``StridesD`` is
  (strideD1J, strideDK), ``StridesA`` the strides of A's second and third
  index in the order the kernel name gives them (``Ailk``: l then k);
* ``SizesFree`` = (size I, size J, size K batch), ``SizesSum`` = size L;
* ``OrigStaggerUIter``: ``ContractionSolution::staggerUIter`` with
  ``staggerStrideShift = ceil(log2(StaggerUStride / (DepthU * bpe)))``
  (SolutionStructs.py);
* ``NumWorkGroups0/1`` = problemNumGroupTiles0/1 (ceil(size / macro tile));
* ``NumFullBlocks``, ``WgmRemainder1``, ``MagicNumberWgmRemainder1``: for
  WorkGroupMapping > 1, tiles1 / WGM, tiles1 % WGM (WGM when 0) and
  ``smallMagicNumber(x) = (1 << 31) / x + 1``.

The problem: I = groups * MT0 - d (d = 0, 1, 3 by run: full and edge
tiles), J = MT1 or MT1 - 1 in run 1 (one tile row: the verifier's grid has
one workgroup in y), K = 2 * DU + (0, 1, 5) (unroll loop and tail loop), batch 1; leading
dimensions padded to 16 elements past the rows.  Values are small
integers (exact in every covered type, so the product is exactly what
numpy computes).  With GlobalSplitU > 1 the real launch has GSU workgroups
in y (ContractionSolution.cpp: ``numWorkGroups.y *= globalSplitU``), each
summing its share of the unroll iterations (the last split with a
remainder takes the tail loop; KernelWriterSource.py
``calculateLoopNumIterGsu``): the recipe launches all of them
(:func:`launch_groups_y`), so the comparison covers the whole GEMM.  The
GlobalSplitU kernels of this library are HIP source kernels with the
MultipleBuffer algorithm (``GSUAMB``): D and C are then a workspace of the
compute type (plain pointers even when general-batched), each split writes
its partial sum without alpha and beta to its own packed I x J slice
(``GLOBAL_D + gsuSumIdx * strideW``, strides (I, I*J)), and a second kernel
(not run here) reduces them; the slices must sum to numpy's A @ B.  The
assembly GlobalSplitU kernels (named SingleBuffer or MultipleBuffer alike)
add alpha times their partial sums into D with atomics, beta applied before
by a separate kernel (:attr:`Kernel.atomic`): D ends as D + alpha * A @ B.

General-batched kernels (``_GB``: not strided-batched, so ``batchD``..
arrays of pointers and ``offsetD``.. by value) get a one-entry array per
tensor pointing at its matrix, which starts :data:`GB_OFFSETS` elements into
its buffer.  Kernels whose names or arguments are not these (other data
types; a workgroup size other than the name's) are refused: "not verified".
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass

import numpy as np

#: bfloat16 (no numpy type): stored as its 16 bits (:func:`encode`, :func:`decode`).
BF16 = "bf16"

#: Tensile data-type codes of the kernel name (DataType, DestDataType, ComputeDataType + "B"/"BH")
#: -> (A/B element, C/D element, alpha/beta type: numpy dtype of one value, times repeated in 4 bytes).
TYPES = {
    "SB": (np.float32, np.float32, (np.float32, 1)),
    "HB": (np.float16, np.float16, (np.float16, 2)),
    "HHS_BH": (np.float16, np.float16, (np.float32, 1)),
    "I8II_BH": (np.int8, np.int32, (np.int32, 1)),
    "DB": (np.float64, np.float64, (np.float64, 1)),
    "HSS_BH": (np.float16, np.float32, (np.float32, 1)),
    "CB": (np.complex64, np.complex64, (np.complex64, 1)),
    "ZB": (np.complex128, np.complex128, (np.complex128, 1)),
    "BBS_BH": (BF16, BF16, (np.float32, 1)),
    "BSS_BH": (BF16, np.float32, (np.float32, 1)),
}


def itemsize(t) -> int:
    """Bytes of one element of type ``t`` (a numpy type or BF16)."""
    return 2 if t is BF16 else np.dtype(t).itemsize


def encode(x: np.ndarray, t) -> np.ndarray:
    """Exact values ``x`` stored as type ``t`` (bfloat16: f32 rounded to nearest even, the high 16 bits)."""
    if t is BF16:
        f = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
        return ((f + ((f >> 16) & 1) + 0x7FFF) >> 16).astype(np.uint16)
    return np.asarray(x).astype(t)


def decode(a: np.ndarray, t) -> np.ndarray:
    """Stored elements as exact numbers (int64, float64 or complex128)."""
    if t is BF16:
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if np.issubdtype(np.dtype(t), np.integer):
        return a.astype(np.int64)
    if np.issubdtype(np.dtype(t), np.complexfloating):
        return a.astype(np.complex128)
    return a.astype(np.float64)

#: Element offsets of D, C, A, B in their buffers for general-batched kernels
#: (``OffsetD``..: the kernel adds them to the pointer it reads from the array;
#: 16-byte multiples, as aligned as the buffers).
GB_OFFSETS = {"D": 16, "C": 32, "A": 16, "B": 48}

_COMMON = ("Tensor2dSizeA", "Tensor2dSizeB", "AddressD", "AddressC", "AddressA", "AddressB")
_MIDDLE = ("Alpha", "Beta", "StridesD", "StridesC", "StridesA", "StridesB", "SizesFree", "SizesSum")
_WGM = ("NumFullBlocks", "WgmRemainder1", "MagicNumberWgmRemainder1")
_SIZES = {"Tensor2dSizeA": 8, "Tensor2dSizeB": 8, "AddressD": 8, "AddressC": 8, "AddressA": 8, "AddressB": 8,
          "OffsetD": 8, "OffsetC": 8, "OffsetA": 8, "OffsetB": 8, "Alpha": 4, "Beta": 4, "StridesD": 8,
          "StridesC": 8, "StridesA": 8, "StridesB": 8, "SizesFree": 12, "SizesSum": 4, "OrigStaggerUIter": 4,
          "NumWorkGroups0": 4, "NumWorkGroups1": 4, "NumFullBlocks": 4, "WgmRemainder1": 4,
          "MagicNumberWgmRemainder1": 4}


def argument_names(stagger: bool, wgm: bool, batched_pointers: bool = False) -> tuple:
    """The explicit argument names of a Tensile assembly kernel, in order."""
    offsets = ("OffsetD", "OffsetC", "OffsetA", "OffsetB") if batched_pointers else ()
    return (_COMMON + offsets + _MIDDLE + (("OrigStaggerUIter",) if stagger else ())
            + ("NumWorkGroups0", "NumWorkGroups1") + (_WGM if wgm else ()))


def signatures() -> tuple:
    """Every (value kind, size) signature the recipe may hold for (all by value)."""
    return tuple(tuple(("b", _SIZES[n]) for n in argument_names(s, w, g))
                 for s in (False, True) for w in (False, True) for g in (False, True))


@dataclass(frozen=True)
class Kernel:
    """What a Tensile kernel name says about its problem."""

    a_order: str  # "il" (A is I x L, column-major: Ailk) or "li" (Alik)
    b_order: str  # "lj" (Bljk) or "jl" (Bjlk)
    types: str  # key of TYPES
    batched_pointers: bool  # "_GB": arrays of pointers (general batched)
    mt0: int
    mt1: int
    depth_u: int
    workgroup: tuple
    wgm: int
    gsu: int
    stagger_u: int
    stagger_stride: int
    conj_a: bool = False  # "AlikC": A conjugated (complex types)
    conj_b: bool = False
    gsu_algorithm: str = "SB"  # GlobalSplitUAlgorithm: "SB" SingleBuffer, "MB" MultipleBuffer (``GSUAMB``)
    source: bool = False  # a HIP source kernel (``_ISA000_``), not an assembly one

    @property
    def workspace(self) -> bool:
        """A HIP source kernel with GlobalSplitU > 1 and MultipleBuffer (Tensile's
        ``_GlobalAccumulation``): each split writes its partial sum, without alpha or beta, into
        its own slice of a workspace that a second kernel reduces (KernelWriterSource.py:
        ``GLOBAL_D(..) + gsuSumIdx * strideW``, ``TYPE_MAC_WRITE: DST = REG``)."""
        return self.gsu > 1 and self.gsu_algorithm == "MB" and self.source

    @property
    def atomic(self) -> bool:
        """An assembly kernel with GlobalSplitU > 1: each split adds alpha times its partial sum
        into D with atomics (KernelWriterAssembly.py ``globalWriteElements``: ``atomic =
        GlobalSplitU > 1 and _GlobalAccumulation != 'MultipleBuffer'``, a ``buffer_atomic_cmpswap``
        loop for f32), beta applied before by a separate kernel (ContractionSolution.cpp
        ``generateBetaOnlyCall``), so D ends as D + alpha * A @ B.  The library's assembly
        kernels named ``GSUAMB`` are such kernels too: SolutionStructs.py keeps a logic file's own
        ``_GlobalAccumulation``, and theirs is not 'MultipleBuffer' -- they hold the atomic
        store loop and take D, not a workspace (their original computes D + alpha * A @ B over all
        splits: tests/emulate/test_tensile.py)."""
        return self.gsu > 1 and not self.source


_NAME = re.compile(r"^Cijk_A(il|li)k(C?)_B(lj|jl)k(C?)_([A-Z0-9]+(?:_BH)?)(_GB)?_")


def parse(name: str) -> Kernel:
    """The problem fields of Tensile kernel ``name``; ValueError when it is not one this recipe covers."""
    m = _NAME.match(name)
    if not m:
        raise ValueError("not a Tensile Cijk_A..k_B..k kernel name")
    if m.group(5) not in TYPES:
        raise ValueError(f"data type {m.group(5)} not covered")
    fields = name.split("_")

    def field(prefix: str, pattern: str = r"(\d+)") -> tuple:
        for f in fields:
            mm = re.fullmatch(prefix + pattern, f)
            if mm:
                return tuple(int(x) for x in mm.groups())
        raise ValueError(f"no {prefix} field in the name")

    mt = field("MT", r"(\d+)x(\d+)x(\d+)")
    wg_i = fields.index(next(f for f in fields if re.fullmatch(r"WG\d+", f)))
    wg = (int(fields[wg_i][2:]), int(fields[wg_i + 1]), int(fields[wg_i + 2]))
    gsua = re.search(r"_GSUA(SB|MB)(?:_|$)", name)
    return Kernel(m.group(1), m.group(3), m.group(5), bool(m.group(6)), mt[0], mt[1], mt[2], wg,
                  field("WGM")[0], field("GSU")[0], field("SU")[0], field("SUS")[0],
                  bool(m.group(2)), bool(m.group(4)), gsua.group(1) if gsua else "SB", "_ISA000_" in name)


def small_magic_number(x: int) -> int:
    """Tensile's ContractionSolution::smallMagicNumber: (1 << 31) / x + 1."""
    return ((1 << 31) // x + 1) & 0xFFFFFFFF


def stagger_u_iter(k: Kernel, size_l: int, bpe_ab: float) -> int:
    """Tensile's ContractionSolution::staggerUIter for a problem of summation size ``size_l``."""
    if k.stagger_u == 0:
        return 0
    shift = max(0, math.ceil(math.log2(k.stagger_stride / (k.depth_u * bpe_ab))))
    it = k.stagger_u
    loop_iters = size_l // k.depth_u // k.gsu
    while it > 1:
        if loop_iters >= it * (1 << shift):
            break
        it //= 2
    return it - 1 if it >= 1 else it


@dataclass
class GemmProblem:
    """A GEMM of the kernel's types: sizes, leading dimensions, the host arrays and alpha/beta."""

    i: int
    j: int
    l: int
    lda: int
    ldb: int
    ldc: int
    a: np.ndarray  # as stored (column-major by the kernel name's index order)
    b: np.ndarray
    c: np.ndarray
    d: np.ndarray  # D's initial bytes (a pattern the kernel overwrites inside I x J)
    alpha: float
    beta: float

    def expected(self, k: Kernel) -> np.ndarray:
        """alpha * op(A) @ op(B) + beta * C (op: conjugate for "AlikC"), computed by numpy in
        int64 / float64 / complex128, as an I x J array of D's element type stored (rounded once:
        the recipe's values make the exact result representable before that rounding).  For a
        workspace kernel (:attr:`Kernel.workspace`) op(A) @ op(B) alone, in the compute type: what
        its splits' partial sums add up to."""
        ab, cd, _ = TYPES[k.types]
        am = decode(self.matrix_a(k), ab)
        bm = decode(self.matrix_b(k), ab)
        am, bm = (np.conj(am) if k.conj_a else am), (np.conj(bm) if k.conj_b else bm)
        if k.workspace:
            return encode(am @ bm, TYPES[k.types][2][0])
        if k.atomic:
            dm = decode(self.d[:self.ldc * self.j].reshape(self.j, self.ldc).T[:self.i, :], cd)
            out = encode(dm + self.alpha * (am @ bm), cd)
            return decode(out, cd) if cd is BF16 else out
        cm = decode(self.c[:self.ldc * self.j].reshape(self.j, self.ldc).T[:self.i, :], cd)
        out = encode(self.alpha * (am @ bm) + self.beta * cm, cd)
        return decode(out, cd) if cd is BF16 else out  # bfloat16 compared by value, as the other floats

    def matrix_a(self, k: Kernel) -> np.ndarray:
        """A as an I x L matrix."""
        if k.a_order == "il":
            return self.a[:self.lda * self.l].reshape(self.l, self.lda).T[:self.i, :]
        return self.a[:self.lda * self.i].reshape(self.i, self.lda)[:, :self.l]

    def matrix_b(self, k: Kernel) -> np.ndarray:
        """B as an L x J matrix."""
        if k.b_order == "lj":
            return self.b[:self.ldb * self.j].reshape(self.j, self.ldb).T[:self.l, :]
        return self.b[:self.ldb * self.l].reshape(self.l, self.ldb)[:, :self.j]

    def result(self, d: bytes, k: Kernel) -> np.ndarray:
        """The I x J result out of D's bytes (column-major, leading dimension ldc; bfloat16 as float64);
        for a workspace kernel the sum of its GSU slices of I x J (compute type, packed: strideW = I * J)."""
        if k.workspace:
            t = TYPES[k.types][2][0]
            ws = np.frombuffer(d, t)[:k.gsu * self.i * self.j].reshape(k.gsu, self.j, self.i)
            return ws.sum(axis=0, dtype=t).T
        cd = TYPES[k.types][1]
        arr = np.frombuffer(d, np.uint16 if cd is BF16 else cd)[:self.ldc * self.j]
        out = arr.reshape(self.j, self.ldc).T[:self.i, :]
        return decode(out, cd) if cd is BF16 else out


def _pad16(n: int) -> int:
    return (n + 1 + 15) // 16 * 16


def problem(k: Kernel, groups: int, run: int, rng: np.random.Generator) -> GemmProblem:
    """The run's problem: ``groups`` tiles in I, one in J, two unroll iterations and a tail in L.
    Tensile picks its store path per workgroup (edge or not) and per launch (beta 0 or not):
    run 0 has full tiles and beta -1; run 1 edge tiles in I and J and beta 3; run 2 full
    tiles and an edge tile in I with beta 0, so runs 0-2 take all four."""
    ab, cd, (alpha_t, _) = TYPES[k.types]
    d = min((0, 1, 3)[run % 3], k.mt0 - 1)  # the last tile partial, never empty
    e = min((0, 1, 0)[run % 3], k.mt1 - 1)
    i, j, l = groups * k.mt0 - d, k.mt1 - e, 2 * k.depth_u + (0, 1, 5)[run % 3]
    rows_a, cols_a = (i, l) if k.a_order == "il" else (l, i)
    rows_b, cols_b = (l, j) if k.b_order == "lj" else (j, l)
    lda, ldb, ldc = _pad16(rows_a), _pad16(rows_b), _pad16(i)
    if k.workspace:  # D and C are the workspace: GSU packed I x J slices of the compute type
        ldc, cd = i, TYPES[k.types][2][0]
    def values(n: int, t, lo: int = -2, hi: int = 3):
        x = rng.integers(lo, hi, n)
        if t is not BF16 and np.issubdtype(np.dtype(t), np.complexfloating):
            x = x + 1j * rng.integers(lo, hi, n)
        return encode(x, t)

    a, b = values(lda * cols_a, ab), values(ldb * cols_b, ab)
    slices = k.gsu if k.workspace else 1
    c, dd = values(ldc * j * slices, cd), values(ldc * j * slices, cd, -100, 100)
    alpha, beta = ((2, -1), (1, 3), (-1, 0))[run % 3]
    return GemmProblem(i, j, l, lda, ldb, ldc, a, b, c, dd, alpha, beta)


def _scalar(value: float, k: Kernel, source: bool = False) -> bytes:
    """alpha or beta as passed: a Half twice (``alpha_2``) to assembly kernels, once to source kernels."""
    t, n = TYPES[k.types][2]
    return np.array([value] * (1 if source else n), t).tobytes()


class DoesNotHold(ValueError):
    """The kernel's name or arguments are not what the recipe covers."""


@dataclass(frozen=True)
class Value:
    """A tensor argument: ``data`` in a buffer of its own, passed as a by-value
    u64 (``by_value``, assembly kernels) or as a global buffer; through a
    one-entry array of pointers when ``array`` (general batched)."""

    by_value: bool
    array: bool
    data: bytes



def _check_workgroup(recipe: str, ctx, k) -> None:
    """The launch's workgroup must be the flat WG0*WG1*WG2 the kernel's name says."""
    flat = k.workgroup[0] * k.workgroup[1] * k.workgroup[2]
    if tuple(ctx.block) != (flat, 1, 1):
        raise DoesNotHold(f"recipe {recipe} does not hold: workgroup {ctx.block}, the name says "
                          f"{k.workgroup} (flat {flat})")

def build(ctx, sig: tuple, name: str) -> dict:
    """The arguments for Tensile kernel ``name`` as {explicit argument index: int, bytes or
    :class:`Value`} (kpatch.emulate.recipes makes them buffers); DoesNotHold when the kernel's
    name or arguments are not what the recipe covers."""
    try:
        k = parse(name)
    except ValueError as e:
        raise DoesNotHold(f"recipe tensile-gemm does not hold: {e}") from None
    names = tuple(a.get(".name") for a in (ctx.md or {}).get(".args", [])
                  if not a.get(".value_kind", "").startswith("hidden_"))
    want = argument_names(k.stagger_u > 0, k.wgm > 1, k.batched_pointers)
    if names != want:
        raise DoesNotHold(f"recipe tensile-gemm does not hold: the kernel's arguments are {names}, "
                               f"its name says {want}")
    _check_workgroup("tensile-gemm", ctx, k)
    if len(_scalar(1, k)) != _SIZES["Alpha"]:
        raise DoesNotHold(f"recipe tensile-gemm does not hold: {k.types} alpha is {len(_scalar(1, k))} bytes, "
                               f"the kernel's Alpha {_SIZES['Alpha']}")
    p = problem(k, ctx.groups, ctx.run, ctx.rng)
    values = _values(k, p, ctx.groups)
    out = {}
    for idx, n in enumerate(want):
        v = values[n]
        if n.startswith("Address") and k.batched_pointers:  # a one-entry array of pointers to the matrix
            elem = itemsize(TYPES[k.types][0 if n[-1] in "AB" else 1])
            out[idx] = Value(True, True, bytes(GB_OFFSETS[n[-1]] * elem) + v)
        elif n.startswith("Address"):
            out[idx] = Value(True, False, v)
        else:
            out[idx] = v
    return out


def _values(k: Kernel, p: GemmProblem, groups: int) -> dict:
    """Argument name -> int / bytes (Address*: the buffer's bytes)."""
    ab = TYPES[k.types][0]
    rows_a, cols_a = (p.i, p.l) if k.a_order == "il" else (p.l, p.i)
    rows_b, cols_b = (p.l, p.j) if k.b_order == "lj" else (p.j, p.l)
    size_a = 1 + (rows_a - 1) + p.lda * (cols_a - 1)
    size_b = 1 + (rows_b - 1) + p.ldb * (cols_b - 1)
    tiles0, tiles1 = -(-p.i // k.mt0), -(-p.j // k.mt1)
    if (tiles0, tiles1) != (groups, 1):
        raise DoesNotHold(f"the problem has {tiles0} x {tiles1} tiles, the grid {groups} x 1")
    u32 = lambda *xs: struct.pack(f"<{len(xs)}I", *xs)  # noqa: E731
    v = {"Tensor2dSizeA": size_a, "Tensor2dSizeB": size_b,
         "AddressA": p.a.tobytes(), "AddressB": p.b.tobytes(), "AddressC": p.c.tobytes(),
         "AddressD": p.d.tobytes(), "Alpha": _scalar(p.alpha, k), "Beta": _scalar(p.beta, k),
         "StridesD": u32(p.ldc, p.ldc * p.j), "StridesC": u32(p.ldc, p.ldc * p.j),
         "StridesA": u32(p.lda, p.lda * cols_a), "StridesB": u32(p.ldb, p.ldb * cols_b),
         "SizesFree": u32(p.i, p.j, 1), "SizesSum": p.l,
         "OrigStaggerUIter": stagger_u_iter(k, p.l, itemsize(ab)),
         "NumWorkGroups0": tiles0, "NumWorkGroups1": tiles1}
    if k.batched_pointers:
        v.update({f"Offset{x}": GB_OFFSETS[x] for x in "DCAB"})
    if k.wgm > 1:
        full, rem = tiles1 // k.wgm, tiles1 % k.wgm
        rem = rem or k.wgm
        v.update(NumFullBlocks=full, WgmRemainder1=rem, MagicNumberWgmRemainder1=small_magic_number(rem))
    return v


# -- Tensile's HIP source kernels (the ``*_fallback_gfx1030.hsaco`` objects) -----------------

def source_signatures() -> tuple:
    """(value kind, size) signatures of Tensile source kernels: D, C, A, B (global buffers; arrays of
    pointers when general-batched, then offsetD..offsetB), alpha, beta, 8 strides, 4 sizes,
    staggerUIterParm, problemNumGroupTiles0/1 (KernelWriterSource.functionSignature)."""
    out = []
    for gb in (False, True):
        for size in sorted({np.dtype(t[2][0]).itemsize for t in TYPES.values()}):
            out.append((("g", 8),) * 4 + (("b", 8),) * (4 if gb else 0) + (("b", size),) * 2 + (("b", 4),) * 15)
    return tuple(out)


def launch_groups_y(name: str) -> int | None:
    """The workgroups Tensile launches in y for a problem of one tile row: GlobalSplitU
    (ContractionSolution.cpp: ``numWorkGroups.y *= globalSplitU``; the kernel takes its
    summation split from the workgroup id in y), None for GSU 1 or a name it cannot read."""
    try:
        k = parse(name)
    except ValueError:
        return None
    return k.gsu if k.gsu > 1 else None


def launch_block(name: str, md: dict) -> tuple | None:
    """The workgroup size Tensile launches a kernel with: (WG0 * WG1 * WG2, 1, 1)
    (ContractionSolution.cpp: rv.workGroupSize.x is the product), None when the name has no WG."""
    m = re.search(r"_WG(\d+)_(\d+)_(\d+)(?:_|$)", name)
    return (int(m.group(1)) * int(m.group(2)) * int(m.group(3)), 1, 1) if m else None


def build_source(ctx, sig: tuple, name: str) -> dict:
    """The arguments for Tensile source kernel ``name`` (the same problem as :func:`build`)."""
    try:
        k = parse(name)
    except ValueError as e:
        raise DoesNotHold(f"recipe tensile-gemm-source does not hold: {e}") from None
    scalar = np.dtype(TYPES[k.types][2][0]).itemsize
    want = (("g", 8),) * 4 + (("b", 8),) * (4 if k.batched_pointers else 0) + (("b", scalar),) * 2 + (("b", 4),) * 15
    if sig != want:
        raise DoesNotHold(f"recipe tensile-gemm-source does not hold: the kernel's arguments are {sig}, its "
                               f"name says {want}")
    _check_workgroup("tensile-gemm-source", ctx, k)
    p = problem(k, ctx.groups, ctx.run, ctx.rng)
    v = _values(k, p, ctx.groups)
    out = {}
    for idx, n in enumerate("DCAB"):
        data = v["Address" + n]
        if k.workspace and n in "DC":  # the workspace: a plain pointer even for general-batched kernels
            out[idx] = Value(False, False, data)
        elif k.batched_pointers:
            elem = itemsize(TYPES[k.types][0 if n in "AB" else 1])
            out[idx] = Value(False, True, bytes(GB_OFFSETS[n] * elem) + data)
        else:
            out[idx] = Value(False, False, data)
    rest = ([GB_OFFSETS[n] for n in "DCAB"] if k.batched_pointers else []) + [
        _scalar(p.alpha, k, True), _scalar(p.beta, k, True)]
    strides = [struct.unpack("<2I", v[f"Strides{n}"]) for n in "DCAB"]
    rest += [x for pair in strides for x in pair] + [p.i, p.j, 1, p.l, v["OrigStaggerUIter"],
                                                     v["NumWorkGroups0"], v["NumWorkGroups1"]]
    for i, x in enumerate(rest, start=4):
        out[i] = x
    return out
