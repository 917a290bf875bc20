#!/usr/bin/env python3
"""Build realistic MIOpen kernel DBs (gfx1030, and gfx1010 where the source allows) from MIOpen's own sources.

    python3 tools/build_miopen_kdb.py --src kdb_cache/miopen-src [--out-dir tests/fixtures/miopen] [-j 2]

``--src`` is an unpacked MIOpen source tree (its ``src/`` folder and
``LICENSE.txt``), e.g. from the search tool's ``fetch`` of github:ROCm/MIOpen:

    git --git-dir=/work/.mirror/ROCm+MIOpen/repo archive HEAD src LICENSE.txt \\
        ':(exclude)src/kernels/*.db.bz2' ':(exclude)src/kernels/*.kdb.bz2' \\
        ':(exclude)src/kernels/*fdb.txt.bz2' | tar -x -C kdb_cache/miopen-src
    git --git-dir=/work/.mirror/ROCm+MIOpen/repo show HEAD:src/kernels/gfx1030_36.db.bz2 \\
        > kdb_cache/miopen-src/src/kernels/gfx1030_36.db.bz2

What each entry is: one kernel source file of ``src/kernels/`` compiled the way
MIOpen compiles it at run time, with the compile options the solver that uses
it builds (each ``*_jobs`` function below names the solver and mirrors its
``GetSolution``), stored under MIOpen's key: ``kernel_name`` = ``<file>.o``
(``make_object_file_name``), ``kernel_args`` = the solver's ``comp_options``
plus `` -mcpu=<name>`` (``Handle::LoadProgram`` with WORKAROUND_ISSUE_3001).
Tuned parameters come from MIOpen's shipped gfx1030 perf DB
(``src/kernels/gfx1030_36.db.bz2``) where the solver is tunable, else from
realistic problem shapes (ResNet-50 layers) through the solver's own formulas.

How each kind is compiled (Debian's tools; MIOpen's offline-compiler paths):

- OpenCL ``.cl`` (``HIPOCProgramImpl::BuildCodeObjectInFile``): clang-15 with
  ``-mcode-object-version=4 -target amdgcn-amd-amdhsa -x cl -D__AMD__=1 -O3
  -cl-kernel-arg-info -cl-denorms-are-zero -cl-std=CL2.0 -mllvm
  -amdgpu-early-inline-all -mllvm -amdgpu-internalize-symbols -Wno-everything``
  plus what upstream clang needs that ROCm's clang has built in
  (``-Xclang -finclude-default-header``, the device-library path).
- Assembly ``.s`` (``AmdgcnAssemble``): ``clang-15 -x assembler -target
  amdgcn--amdhsa -mcpu=<target id>`` plus the solver's options.
- HIP ``.cpp`` (``hiprtc::BuildHip`` options): hipcc ``--offload-arch``
  ``--cuda-device-only -c -O3 -std=c++17 -fno-gpu-rdc
  -D__HIP_PLATFORM_AMD__=1 -DHIP_PACKAGE_VERSION_FLAT=...
  -DMIOPEN_DONT_USE_HIP_RUNTIME_HEADERS`` (+ ``-DWORKAROUND_ISSUE_1431=1`` on
  gfx10 unless wave64 is forced); the bundle is unbundled, because hiprtc
  hands MIOpen the linked code object, which MIOpen stores as it is.

On gfx1010 MIOpen's target id is ``gfx1010:xnack-`` (comgr and the assembler
get ``-mno-xnack``), so every gfx1010 object is compiled for that target id;
the key still says ``-mcpu=gfx1010`` (the device name).  A kernel a solver
does not offer on gfx1010 (fp16 Winograd: gfx1011/gfx1012/gfx103x only) is
not built for it.  A kernel MIOpen offers there whose source does not compile
for it (spatial batch-norm training: gfx9 DPP on every gfx10 but gfx103x) is
attempted and its failure listed, marked as MIOpen's own.

Backward directions: perf DB rows of direction B/W describe the problem as
MIOpen's ProblemDescription does for Backward* (``in`` is dy, ``out`` is x);
x's size is the smallest that gives that dy.

Every failed compile is listed with its reason (exit status 1 when one is not
marked as MIOpen's own); the summary gives objects per source file and per
target.  Writes ``gfx1030.kdb``, ``gfx1010.kdb``,
``MANIFEST.json`` and ``LICENSE.txt`` (MIOpen's) into ``--out-dir``.
"""

from __future__ import annotations

import argparse
import bz2
import collections
import concurrent.futures
import hashlib
import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from kpatch.codeobject.model import CodeObject  # noqa: E402
from kpatch.containers.kdb import write_kdb  # noqa: E402
from kpatch.errors import FormatError  # noqa: E402

CLANG = "clang-15"
HIPCC = "hipcc"
BUNDLER = "/usr/lib/llvm-15/bin/clang-offload-bundler"
DEVICE_LIBS = "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode"
TARGETS = ("gfx1030", "gfx1010")
TARGET_ID = {"gfx1030": "gfx1030", "gfx1010": "gfx1010:xnack-"}

# MIOpen's KernelBuildParameters / GetDataTypeKBP (datatype.hpp), with the
# CMake defaults MIOPEN_USE_RNE_BFLOAT16=ON, FP8_IEEE_EXPONENT_BIAS=OFF,
# FP8_CLIPPING=ON.
def kbp(*pairs) -> str:
    """KernelBuildParameters{...}.GenerateFor(kbp::OpenCL{}): `-DNAME=VALUE` joined by spaces."""
    return " ".join(f"-D{n}" if v is None else f"-D{n}={v}" for n, v in pairs)


def datatype_kbp(dtype: str) -> list:
    """GetDataTypeKBP(type) as (name, value) pairs."""
    flags = {"fp16": 0, "fp32": 0, "bf16": 0}
    flags[dtype] = 1
    return [("MIOPEN_USE_FP16", flags["fp16"]), ("MIOPEN_USE_FP16x4", 0), ("MIOPEN_USE_FP16x8", 0),
            ("MIOPEN_USE_FP32", flags["fp32"]), ("MIOPEN_USE_INT8", 0), ("MIOPEN_USE_BFP16", flags["bf16"]),
            ("MIOPEN_USE_INT32", 0), ("MIOPEN_USE_RNE_BFLOAT16", 1), ("MIOPEN_FP8_IEEE_EXPONENT_BIAS", 0),
            ("MIOPEN_FP8_CLIPPING", 1)]


def general_compile_options(dtype: str) -> str:
    """ctx.general_compile_options after ProblemDescription::SetupFloats (note the leading space)."""
    return " " + kbp(*datatype_kbp(dtype))


class Job:
    """One code object to build: a source file, the solver's options, the target."""

    def __init__(self, family: str, file: str, options: str, target: str, known_failure: str | None = None):
        self.family, self.file, self.options, self.target = family, file, options, target
        # Why MIOpen's own build of this kernel fails on this target too (the solver offers it
        # there, the source does not compile): listed like any failure, not counted as the
        # builder's error.
        self.known_failure = known_failure

    @property
    def key(self) -> tuple[str, str]:
        """MIOpen's (kernel_name, kernel_args)."""
        return self.file + ".o", self.options + " -mcpu=" + self.target


# ---------------------------------------------------------------- solvers

RESNET50 = [  # (C, H, W, K, R, S, pad, stride) of ResNet-50 / VGG-like layers, batch 16
    (64, 56, 56, 64, 3, 3, 1, 1), (128, 28, 28, 128, 3, 3, 1, 1), (256, 14, 14, 256, 3, 3, 1, 1),
    (512, 7, 7, 512, 3, 3, 1, 1), (3, 224, 224, 64, 7, 7, 3, 2), (64, 56, 56, 256, 1, 1, 0, 1),
]


def winograd_jobs(target: str) -> list[Job]:
    """ConvBinWinogradRxSf2x3 / ConvBinWinogradRxSf3x2 (src/solver/conv/conv_winoRxS.cpp):
    Conv_Winograd_v30_3_1_{fp32,fp16_dot2}_{f2x3,f3x2}_{stride1,stride2,dilation2}.s with
    ROCM_METADATA_VERSION=5, FORCE_CACHE_BYPASS_ON_STORE=0 (gfx940/941 only) and
    ' -mcumode -mwavefrontsize64'.  fp16 is applicable on gfx1011/1012/103x, not gfx1010."""
    opts = "-Wa,-defsym,ROCM_METADATA_VERSION=5 -Wa,-defsym,FORCE_CACHE_BYPASS_ON_STORE=0 -mcumode -mwavefrontsize64"
    jobs = []
    for dt in ("fp32", "fp16_dot2"):
        if dt != "fp32" and not target.startswith("gfx103"):
            continue
        for f in ("f2x3", "f3x2"):
            for s in ("stride1", "stride2", "dilation2"):
                jobs.append(Job("conv winograd (asm)", f"Conv_Winograd_v30_3_1_{dt}_{f}_{s}.s", opts, target))
    return jobs


def naive_conv_jobs(target: str) -> list[Job]:
    """ConvDirectNaiveConv{Fwd,Bwd,Wrw} (conv_direct_naive_conv.cpp): naive_conv.cpp with
    ctx.general_compile_options only (one object holds every naive kernel of a data type)."""
    return [Job("conv naive (HIP)", "naive_conv.cpp", general_compile_options(dt), target)
            for dt in ("fp32",)]


def perf_db_rows(src: str, solver: str, limit: int, direction: str = "F"):
    """(config row dict, params) of MIOpen's shipped gfx1030 perf DB for ``solver`` in
    ``direction`` (F forward, B backward data, W weights): fp32, NCHW, 2-D, group 1, no
    dilation; distinct params first."""
    path = os.path.join(src, "src", "kernels", "gfx1030_36.db.bz2")
    with open(path, "rb") as f:
        data = bz2.decompress(f.read())
    tmp = tempfile.NamedTemporaryFile(suffix=".db", delete=False)
    try:
        tmp.write(data)
        tmp.close()
        db = sqlite3.connect(tmp.name)
        db.row_factory = sqlite3.Row
        rows = db.execute(
            "SELECT c.*, p.params FROM perf_db p JOIN config c ON p.config = c.id WHERE p.solver = ? "
            "AND c.data_type = 'FP32' AND c.layout = 'NCHW' AND c.spatial_dim = 2 AND c.group_count = 1 "
            "AND c.dilation_h = 1 AND c.dilation_w = 1 AND c.direction = ? AND c.bias = 0 "
            "ORDER BY c.id", (solver, direction)).fetchall()
        db.close()
    finally:
        os.unlink(tmp.name)
    seen, out = set(), []
    for r in rows:
        if r["params"] in seen:
            continue
        seen.add(r["params"])
        out.append((dict(r), r["params"]))
        if len(out) >= limit:
            break
    return out


def backward_out_hw(c: dict) -> tuple[int, int]:
    """(H, W) of x for a backward-direction row of the perf DB, whose in_h/in_w are dy's
    (ProblemDescription swaps x and y for Backward*: ``in`` is y): the smallest x giving that
    dy, (dy - 1) * stride + filter - 2 * pad (dilation 1)."""
    return ((c["in_h"] - 1) * c["conv_stride_h"] + c["fil_h"] - 2 * c["pad_h"],
            (c["in_w"] - 1) * c["conv_stride_w"] + c["fil_w"] - 2 * c["pad_w"])


def conv_dir_uni_options(c: dict, params: str) -> str | None:
    """ConvOclDirectFwd::GetSolution (BaseGetSolution plus ` -DMLO_CONV_BIAS=`;
    conv_ocl_dir2Dfwd.cpp), fp32, NCHW packed, group 1,
    forward (direction 'F') or backward data ('B': ``in`` is dy, ``out`` is dx, the padding
    is GetBackwardPad = filter - pad - 1, and the output tile is the stride where it is > 1):
    the comp_options string, or None where the solver returns an error."""
    grp_tile1, grp_tile0, in_tile1, in_tile0, opt1, opt0, n_out_pix, n_in_data, n_stacks = map(int, params.split(","))
    fwd = c["direction"] == "F"
    N, C, K = c["batchsize"], c["in_channels"], c["out_channels"]
    H, W, R, S = c["in_h"], c["in_w"], c["fil_h"], c["fil_w"]
    ph, pw, sh, sw = c["pad_h"], c["pad_w"], c["conv_stride_h"], c["conv_stride_w"]
    if fwd:
        OH = (H + 2 * ph - R) // sh + 1
        OW = (W + 2 * pw - S) // sw + 1
    else:
        OH, OW = backward_out_hw(c)
        ph, pw = R - ph - 1, S - pw - 1
        if ph < 0 or pw < 0:  # IsApplicable: negative backward padding (issue 918)
            return None
        opt1 = sh if sh > 1 else opt1
        opt0 = sw if sw > 1 else opt0
    n_in_data = min(C, n_in_data)
    n_out_pix = min(K, n_out_pix)
    if opt1 == 0 or opt0 == 0:
        return None
    grp_tile0 = max(8, in_tile0 // opt0)
    grp_tile1 = max(8, in_tile1 // opt1)
    in_tile0 = grp_tile0 * opt0
    in_tile1 = grp_tile1 * opt1
    alu0 = (in_tile0 + opt0 - 1) // opt0
    alu1 = (in_tile1 + opt1 - 1) // opt1
    alu_sz = alu0 * alu1
    if alu_sz > 256 or alu_sz == 0:
        return None
    n_alus_total = grp_tile0 * grp_tile1
    n_stacks = min(n_stacks, (n_alus_total + alu_sz - 1) // alu_sz)
    n_stacks = min(N, n_stacks)
    if n_stacks == 0:
        return None
    n_alus_perstack = (n_alus_total + n_stacks - 1) // n_stacks
    if grp_tile1 * grp_tile0 <= in_tile1 * in_tile0:
        n_read_procs = grp_tile1 * grp_tile0
    else:
        ratio = (in_tile1 * in_tile0) / (grp_tile1 * grp_tile0)
        n_read_procs = (grp_tile1 * grp_tile0) // 4 if ratio <= 0.25 else \
            (grp_tile1 * grp_tile0) // 2 if ratio <= 0.5 else grp_tile1 * grp_tile0
    n_alu_tiles_perstack = (n_alus_perstack + alu_sz - 1) // alu_sz
    n_out_tiles_perstack = min(n_alu_tiles_perstack * n_out_pix, K)
    v = [("MLO_HW_WAVE_SZ", 64), ("MLO_DIR_FORWARD", int(fwd)), ("MLO_FILTER_SIZE0", S), ("MLO_FILTER_SIZE1", R),
         ("MLO_FILTER_PAD0", pw), ("MLO_FILTER_PAD1", ph), ("MLO_FILTER_STRIDE0", sw), ("MLO_FILTER_STRIDE1", sh),
         ("MLO_N_OUTPUTS", K), ("MLO_N_INPUTS", C), ("MLO_BATCH_SZ", N), ("MLO_OUT_WIDTH", OW),
         ("MLO_OUT_HEIGHT", OH), ("MLO_OUT_BATCH_STRIDE", K * OH * OW), ("MLO_OUT_CHANNEL_STRIDE", OH * OW),
         ("MLO_OUT_STRIDE", OW), ("MLO_IN_WIDTH", W), ("MLO_IN_HEIGHT", H), ("MLO_IN_BATCH_STRIDE", C * H * W),
         ("MLO_IN_CHANNEL_STRIDE", H * W), ("MLO_IN_STRIDE", W), ("MLO_IN_TILE0", in_tile0),
         ("MLO_IN_TILE1", in_tile1), ("MLO_GRP_TILE0", grp_tile0), ("MLO_GRP_TILE1", grp_tile1),
         ("MLO_OUT_TILE0", opt0), ("MLO_OUT_TILE1", opt1), ("MLO_N_STACKS", n_stacks),
         ("MLO_N_OUT_TILES", n_out_pix), ("MLO_N_OUT_TILES_PERSTACK", n_out_tiles_perstack),
         ("MLO_N_IN_TILES_PERSTACK", n_in_data), ("MLO_N_READ_PROCS", n_read_procs),
         ("MLO_ALU_VTILE0", alu0), ("MLO_ALU_VTILE1", alu1)]
    # ConvOclDirectFwd::GetSolution appends the bias flag after BaseGetSolution's options.
    return "".join(f" -D{n}={x}" for n, x in v) + general_compile_options("fp32") + f" -DMLO_CONV_BIAS={c['bias']}"


def conv_dir_uni_jobs(target: str, src: str, limit: int = 24, bwd_limit: int = 12) -> list[Job]:
    """ConvOclDirectFwd (MIOpenConvDirUni.cl) for the tuned fp32 forward and backward-data
    configs of MIOpen's gfx1030 perf DB (the solver serves both directions; the same tuned
    options are used on gfx1010: the kernel is generic)."""
    jobs = []
    for direction, n, family in (("F", limit, "conv direct fwd (OpenCL)"),
                                 ("B", bwd_limit, "conv direct bwd data (OpenCL)")):
        mine = []
        for c, params in perf_db_rows(src, "ConvOclDirectFwd", n * 3, direction):
            o = conv_dir_uni_options(c, params)
            if o is not None and len(mine) < n:
                mine.append(Job(family, "MIOpenConvDirUni.cl", o, target))
        jobs += mine
    return list({j.key: j for j in jobs}.values())


def conv_problem(c: dict) -> dict:
    """A perf DB row of a backward direction as the names ConvOclBwdWrW* use: ``in`` is dy
    (in_channels K, in_h x in_w), ``out`` is x (out_channels C, its H x W from
    backward_out_hw), strides of packed NCHW tensors."""
    oh, ow = backward_out_hw(c)
    p = dict(N=c["batchsize"], in_c=c["in_channels"], in_h=c["in_h"], in_w=c["in_w"],
             out_c=c["out_channels"], out_h=oh, out_w=ow, R=c["fil_h"], S=c["fil_w"],
             ph=c["pad_h"], pw=c["pad_w"], sh=c["conv_stride_h"], sw=c["conv_stride_w"], bias=c["bias"])
    p.update(in_bstride=p["in_c"] * p["in_h"] * p["in_w"], in_cstride=p["in_h"] * p["in_w"], in_hstride=p["in_w"],
             out_bstride=p["out_c"] * oh * ow, out_cstride=oh * ow, out_hstride=ow)
    return p


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def wrw2_options(p: dict, cfg: tuple, n_batch_loops: int) -> str | None:
    """ConvOclBwdWrW2<N_BATCH_LOOPS>::GetSolution (conv_ocl_dir2D_bwdWrW_2.cpp), fp32, group 1,
    for the performance config (n_waves, read_size, n_out_channels_per_tile,
    n_out_channels_tiles, n_out_rows_in_lcl): the comp_options string, or None where
    PerformanceConfigConvOclBwdWrw2::IsValid (LDS, read size, channel tiles) or
    IsApplicableBase rejects it."""
    n_waves, read_size, per_tile, tiles, rows_in_lcl = cfg
    N, R, S = p["N"], p["R"], p["S"]
    # IsApplicableBase (stride/pad/batch conditions).
    if R - p["sh"] < p["ph"] or N < n_batch_loops or (S >= 8 and S % 2 == 0):
        return None
    # IsValid.
    if not (n_waves in (1, 2, 3, 4, 8) and 6 <= read_size <= 12 and per_tile in (1, 2, 3, 4, 8)
            and tiles in (1, 2, 3, 4, 8) and 2 <= rows_in_lcl <= 11):
        return None
    n_batch_blks = _cdiv(N, n_batch_loops)
    if p["in_w"] < read_size or tiles * per_tile > p["in_c"] or rows_in_lcl < R:
        return None
    wg = 64 * n_waves
    wei_cstride = R * S
    wei_bstride = p["out_c"] * wei_cstride
    wei_per_wkitem = S if (S <= 7 or S % 2) else S // 2
    aligned_out_scan_lane = _cdiv(p["in_w"], read_size)
    in_lcl_height = (rows_in_lcl - 1) * p["sh"] + R
    in_width, out_width = p["out_w"], p["in_w"]  # out is in, in is out
    eff = max(in_width + 2 * p["pw"], max(p["pw"] + _cdiv(in_width, read_size) * read_size,
                                          S + (out_width - 1) * p["sw"]))
    right = max(eff - (in_width + 2 * p["pw"]), 0)
    in_lcl_width = p["pw"] + in_width + right
    in_lcl_width = (in_lcl_width // 2) * 2 + 1  # fp32
    in_lcl_sz = in_lcl_width * in_lcl_height + p["pw"] + right
    wei_blk_sz = R * _cdiv(S, wei_per_wkitem)
    n_wei_blk = wg // wei_blk_sz
    if n_wei_blk == 0:
        return None
    out_wei_scan_loop = _cdiv(out_width, n_wei_blk)
    max_wei_blk = min(n_wei_blk, _cdiv(out_width, out_wei_scan_loop))
    wei_lcl_sz = wei_blk_sz * wei_per_wkitem * max_wei_blk
    out_horiz = max(out_wei_scan_loop * max_wei_blk, aligned_out_scan_lane * read_size)
    total_out_lcl_sz = rows_in_lcl * out_horiz * tiles
    if max(in_lcl_sz + total_out_lcl_sz, wei_lcl_sz * tiles) * 4 > 64 * 1024:
        return None
    if n_batch_blks > 1 and wei_bstride * p["in_c"] * n_batch_blks * 4 > 6 * 1024 ** 3:
        return None
    n_out_blk = _cdiv(p["in_h"], rows_in_lcl)
    out_n_pixels_off = p["in_w"] - (p["in_w"] // read_size) * read_size
    ut_read_unit = 4 if wei_cstride % 4 == 0 else 2 if wei_cstride % 2 == 0 else 1
    rt = lambda u: "_FLOAT" if u == 1 else f"_FLOAT{u}"  # noqa: E731
    v = [("MLO_DIR_FORWARD", 0), ("MLO_GRP_SZ", wg), ("MLO_GRP_SZ0", wg), ("MLO_GRP_SZ1", 1), ("MLO_GRP_SZ2", 1),
         ("MLO_FILTER_SIZE0", S), ("MLO_FILTER_SIZE1", R), ("MLO_FILTER_PAD0", p["pw"]), ("MLO_FILTER_PAD1", p["ph"]),
         ("MLO_FILTER_STRIDE0", p["sw"]), ("MLO_FILTER_STRIDE1", p["sh"]), ("MLO_N_OUTPUTS", p["in_c"]),
         ("MLO_N_INPUTS", p["out_c"]), ("MLO_BATCH_SZ", N), ("MLO_N_BATCH_LOOPS", n_batch_loops),
         ("MLO_N_BATCH_BLKS", n_batch_blks), ("MLO_OUT_BATCH_STRIDE", p["in_bstride"]),
         ("MLO_OUT_CHANNEL_STRIDE", p["in_cstride"]), ("MLO_OUT_STRIDE", p["in_hstride"]),
         ("MLO_IN_BATCH_STRIDE", p["out_bstride"]), ("MLO_IN_CHANNEL_STRIDE", p["out_cstride"]),
         ("MLO_IN_STRIDE", p["out_hstride"]), ("MLO_WEI_BATCH_STRIDE", wei_bstride),
         ("MLO_WEI_CHANNEL_STRIDE", wei_cstride), ("MLO_IN_WIDTH", p["out_w"]), ("MLO_IN_HEIGHT", p["out_h"]),
         ("MLO_OUT_WIDTH", p["in_w"]), ("MLO_OUT_HEIGHT", p["in_h"]), ("MLO_N_LCL_OUT_MAPS", tiles),
         ("MLO_N_LCL_IN_MAPS", 1), ("MLO_N_WAVES", n_waves), ("MLO_READ_TYPE", rt(read_size)),
         ("MLO_READ_UNIT", read_size), ("MLO_ALIGNED_OUT_SCAN_LN", aligned_out_scan_lane),
         ("MLO_N_ALIGNED_OUT_SCAN_BLK", rows_in_lcl), ("MLO_WEI_WKITEM", wei_per_wkitem),
         ("MLO_N_OUT_BLK_GRP", per_tile), ("MLO_N_OUT_BLK", n_out_blk), ("MLO_HW_WAVE_SZ", 64),
         ("MLO_OUT_N_PIXS_OFF", out_n_pixels_off), ("MLO_IN_LCL_WIDTH", in_lcl_width), ("MLO_IN_LCL_SZ", in_lcl_sz),
         ("MLO_CONV_BIAS", p["bias"]), ("MLO_UT_READ_TYPE", rt(ut_read_unit)), ("MLO_UT_READ_UNIT", ut_read_unit),
         ("MLO_UT_GRP_SZ0", 256), ("MLO_GROUP_COUNTS", 1), ("MLO_N_INPUTS_PER_GROUP", p["out_c"]),
         ("MLO_N_OUTPUTS_PER_GROUP", p["in_c"])]
    return "".join(f" -D{n}={x}" for n, x in v) + general_compile_options("fp32")


def wrw2_default_config(p: dict) -> tuple:
    """PerformanceConfigConvOclBwdWrw2::HeuristicInit."""
    k = p["in_c"]
    per_tile = 4 if k % 4 == 0 else 3 if k % 3 == 0 else 2 if k % 2 == 0 else 1
    return 1, 6, per_tile, 1, p["R"]


def resnet_wrw_rows() -> list[dict]:
    """ResNet-50 / VGG layers (RESNET50, batch 16) as backward-weights perf DB rows (in = dy)."""
    rows = []
    for (C, H, W, K, R, S, pad, stride) in RESNET50:
        rows.append(dict(direction="W", batchsize=16, in_channels=K, in_h=(H + 2 * pad - R) // stride + 1,
                         in_w=(W + 2 * pad - S) // stride + 1, out_channels=C, fil_h=R, fil_w=S, pad_h=pad,
                         pad_w=pad, conv_stride_h=stride, conv_stride_w=stride, bias=0))
    return rows


def _fceil(a: float) -> int:
    """std::ceil of a float quotient, as an int."""
    import math
    return int(math.ceil(a))


def wrw53_options(p: dict) -> str | None:
    """ConvOclBwdWrW53::GetSolution (conv_ocl_dir2D_bwdWrW_53.cpp; non-tunable), fp32, group 1,
    with ComputeInputParams / ComputeOutputParams / ComputeNumInputWidthLoops: the
    MIOpenConvBwdWrW_LxG_P53.cl comp_options string, or None where IsApplicable or the
    solution rejects the problem.  read_unit is a function-static in MIOpen (fixed by the first
    problem a process sees); a fresh process's value for this problem is used."""
    N, R, S = p["N"], p["R"], p["S"]
    ph, pw, sh, sw = p["ph"], p["pw"], p["sh"], p["sw"]
    in_w, in_h, out_w, out_h = p["in_w"], p["in_h"], p["out_w"], p["out_h"]
    in_c, out_c = p["in_c"], p["out_c"]
    # IsApplicable (stride 1, padding and size conditions; fp32 workaround for issue 1242).
    if not (sw == 1 and sh == 1 and R >= ph + sh and R <= out_h + 2 * ph
            and in_h == out_h + 2 * ph - R + 1 and in_w == out_w + 2 * pw - S + 1):
        return None
    if S == 7 and R == 7 and pw in (3, 1) and (out_h % 112 == 0 or out_w % 112 == 0):
        return None
    if S == 3 and R == 3 and ph == 2 and pw == 2 and out_w == 1024:
        return None
    wei_cstride = R * S
    wei_bstride = out_c * wei_cstride
    n_stacks = min(N, 1)
    nbl = 1 if in_c * out_c <= 8 * 1024 else (N // n_stacks if (N <= 16 or in_w <= 32) else 4)
    n_batch_blks = _cdiv(N, nbl * n_stacks)
    opt0, opt1 = S, R
    n_waves = 4 if (opt0 * opt1 <= 16 and in_w > 8) else 1 if in_w <= 16 else 2
    grp_sz = 64 * n_waves
    n_in_data_tiles = 4 if (in_w <= 32 and opt0 * opt1 <= 16) else 1
    n_in_data_tiles = min(n_in_data_tiles, out_c)
    read_unit = 4 if out_w % 4 == 0 else 3 if out_w % 3 == 0 else 2 if out_w % 2 == 0 else 1
    read_type = "_FLOAT" if read_unit == 1 else f"_FLOAT{read_unit}"
    out_lcl_width = _cdiv(out_w, read_unit) * read_unit + 2 * pw
    vert = (out_h + 1) // 2 if (out_h > 32 and out_w <= 64 and opt0 * opt1 <= 16) else out_h
    # ComputeInputParams.
    horiz = out_lcl_width
    max_lds = 64 * 1024 // (2 * 4)
    while n_in_data_tiles * vert * (horiz + S - 1) > max_lds:
        if vert < 2 and n_in_data_tiles >= 2:
            vert = in_h
            n_in_data_tiles = _fceil(n_in_data_tiles / 2)
        elif vert >= R * 2:
            vert = _fceil(vert / 2)
        elif vert >= R and horiz > 2:
            horiz = _fceil(horiz / 2)
        else:
            return None
    if grp_sz * S > max_lds or vert <= 0:
        return None
    vert_loops = _fceil(out_h / vert)
    horiz = out_lcl_width if horiz == out_lcl_width else horiz + S - 1
    # ComputeNumInputWidthLoops.
    if out_lcl_width == horiz:
        h_loops, last_valid = 1, 0
    else:
        fresh = horiz - S + 1
        if fresh <= 0:
            return None
        unpadded = out_lcl_width - 2 * pw
        h_loops = _fceil((unpadded - horiz) / fresh) + 1
        last_valid = (unpadded - horiz) % fresh + (S - 1)
    if h_loops > 2 and pw != 0:
        return None
    last_units = _fceil(last_valid / read_unit)
    last_in_unit = last_valid % read_unit if last_valid % read_unit else read_unit
    in_width_chunk = in_w if h_loops == 1 else horiz + pw - S + 1
    in_last_valid = 0 if h_loops == 1 else in_w % in_width_chunk
    # ComputeOutputParams.
    by_mod = 4 if in_width_chunk % 4 == 0 else 3 if in_width_chunk % 3 == 0 else 2 if in_width_chunk % 2 == 0 else 1
    in_tile0 = max(_fceil(in_width_chunk / grp_sz), by_mod)
    n_out_stacks = 1
    if in_w == in_width_chunk:
        n_spans = _fceil(in_width_chunk / in_tile0)
        n_out_stacks = min(in_c, max(1, grp_sz // n_spans))
    spans = _fceil(in_last_valid / in_tile0)
    last_in_span = in_last_valid % in_tile0 if in_last_valid % in_tile0 else in_tile0
    ut_read_unit = 4 if wei_cstride % 4 == 0 else 2 if wei_cstride % 2 == 0 else 1
    rt = "_FLOAT" if ut_read_unit == 1 else f"_FLOAT{ut_read_unit}"
    v = [("MLO_DIR_FORWARD", 0), ("MLO_GRP_SZ", grp_sz), ("MLO_GRP_SZ0", grp_sz), ("MLO_GRP_SZ1", 1),
         ("MLO_GRP_SZ2", 1), ("MLO_FILTER_SIZE0", S), ("MLO_FILTER_SIZE1", R), ("MLO_FILTER_PAD0", pw),
         ("MLO_FILTER_PAD1", ph), ("MLO_FILTER_STRIDE0", sw), ("MLO_FILTER_STRIDE1", sh), ("STRIDE_W", sw),
         ("STRIDE_H", sh), ("MLO_N_OUTPUTS", in_c), ("MLO_N_INPUTS", out_c), ("MLO_GROUP_COUNTS", 1),
         ("MLO_N_INPUTS_PER_GROUP", out_c), ("MLO_N_OUTPUTS_PER_GROUP", in_c), ("MLO_BATCH_SZ", N),
         ("MLO_N_BATCH_LOOPS", nbl), ("MLO_OUT_BATCH_STRIDE", p["in_bstride"]),
         ("MLO_OUT_CHANNEL_STRIDE", p["in_cstride"]), ("MLO_OUT_STRIDE", p["in_hstride"]),
         ("MLO_IN_BATCH_STRIDE", p["out_bstride"]), ("MLO_IN_CHANNEL_STRIDE", p["out_cstride"]),
         ("MLO_IN_STRIDE", p["out_hstride"]), ("MLO_WEI_BATCH_STRIDE", wei_bstride),
         ("MLO_WEI_CHANNEL_STRIDE", wei_cstride), ("MLO_IN_WIDTH", out_w), ("MLO_IN_HEIGHT", out_h),
         ("MLO_OUT_WIDTH", in_w), ("MLO_OUT_HEIGHT", in_h), ("MLO_IN_TILE1", 1), ("MLO_IN_TILE0", in_tile0),
         ("MLO_N_LCL_BATCHS", n_stacks), ("MLO_N_LCL_OUT_MAPS", 1), ("MLO_N_LCL_IN_MAPS", n_in_data_tiles),
         ("MLO_OUT_TILE0", opt0), ("MLO_OUT_TILE1", opt1), ("MLO_OUT_STACKS", n_out_stacks),
         ("MLO_N_WAVES", n_waves), ("MLO_READ_TYPE", read_type), ("MLO_READ_UNIT", read_unit),
         ("MLO_HW_WAVE_SZ", 64), ("MLO_LG2_PHYS_WAVE_SZ", 6), ("MLO_IN_EXTENT1", vert),
         ("MLO_IN_N_VERT_LOOPS", vert_loops), ("MLO_IN_WIDTH_CHUNK", out_w if h_loops == 1 else horiz),
         ("MLO_IN_WIDTH_N_LOOPS", h_loops), ("MLO_IN_WIDTH_LAST_CHUNK_VALID_READ_UNITS", last_units),
         ("MLO_IN_WIDTH_LAST_CHUNK_VALID_PIXELS_IN_LAST_READ_UNIT", last_in_unit),
         ("MLO_OUT_WIDTH_CHUNK", in_width_chunk), ("MLO_OUT_WIDTH_N_LOOPS", h_loops),
         ("MLO_OUT_WIDTH_LAST_CHUNK_VALID_SPANS", spans),
         ("MLO_OUT_WIDTH_LAST_CHUNK_VALID_PIXELS_IN_LAST_SPAN", last_in_span), ("MLO_CONV_BIAS", p["bias"]),
         ("MLO_UT_READ_TYPE", rt), ("MLO_UT_READ_UNIT", ut_read_unit), ("MLO_UT_GRP_SZ0", 256)]
    return "".join(f" -D{n}={x}" for n, x in v) + general_compile_options("fp32")


WRW53_LAYERS = [  # (C, H, W, K, R, S, pad) stride-1 layers: ResNet/VGG 3x3, Inception 5x5 and 7x1
    (64, 56, 56, 64, 3, 3, 1), (128, 28, 28, 128, 3, 3, 1), (256, 14, 14, 256, 3, 3, 1), (512, 7, 7, 512, 3, 3, 1),
    (48, 35, 35, 64, 5, 5, 2), (32, 28, 28, 16, 5, 5, 2), (64, 56, 56, 64, 1, 1, 0),
]


def conv_wrw53_jobs(target: str) -> list[Job]:
    """ConvOclBwdWrW53 (MIOpenConvBwdWrW_LxG_P53.cl; weights and the _rdc batch reduction) for
    stride-1 layers, batch 16 (non-tunable: the problem alone sets the options).  Generic
    OpenCL: the same options on gfx1010.

    The third OpenCL weights solver, ConvOclBwdWrW1x1 (MIOpenConvBwdWrW1x1_PAD_read4.cl), is not
    built: WORKAROUND_SWDEV_266868 makes it inapplicable on gfx10/gfx11 unless
    MIOPEN_DEBUG_CONV_DIRECT_OCL_WRW1X1 is set, so MIOpen never stores it for these targets."""
    jobs = []
    for (C, H, W, K, R, S, pad) in WRW53_LAYERS:
        row = dict(direction="W", batchsize=16, in_channels=K, in_h=H + 2 * pad - R + 1, in_w=W + 2 * pad - S + 1,
                   out_channels=C, fil_h=R, fil_w=S, pad_h=pad, pad_w=pad, conv_stride_h=1, conv_stride_w=1, bias=0)
        o = wrw53_options(conv_problem(row))
        if o is not None:
            jobs.append(Job("conv direct wrw (OpenCL)", "MIOpenConvBwdWrW_LxG_P53.cl", o, target))
    return list({j.key: j for j in jobs}.values())


def conv_wrw2_jobs(target: str, src: str, per_solver: int = 3) -> list[Job]:
    """ConvOclBwdWrW2<1,2,4,8,16> (MIOpenConvBwdWrWS2.cl: the weights kernel and, when the batch
    is split, the _rdc reduction in the same object) for the tuned fp32 configs of MIOpen's
    gfx1030 perf DB, and ConvOclBwdWrW2NonTunable (ConvOclBwdWrW2<1> with HeuristicInit's
    defaults; 3x3 and 1x1 filters) for ResNet-50's 3x3 and 1x1 layers.  Generic OpenCL: the
    same options on gfx1010."""
    jobs = []
    for nbl in (1, 2, 4, 8, 16):
        mine = []
        for c, params in perf_db_rows(src, f"ConvOclBwdWrW2<{nbl}>", per_solver * 3, "W"):
            o = wrw2_options(conv_problem(c), tuple(map(int, params.split(","))), nbl)
            if o is not None and len(mine) < per_solver:
                mine.append(Job("conv direct wrw (OpenCL)", "MIOpenConvBwdWrWS2.cl", o, target))
        jobs += mine
    for c in resnet_wrw_rows():
        p = conv_problem(c)
        if (p["R"], p["S"]) in ((3, 3), (1, 1)):
            o = wrw2_options(p, wrw2_default_config(p), 1)
            if o is not None:
                jobs.append(Job("conv direct wrw (OpenCL)", "MIOpenConvBwdWrWS2.cl", o, target))
    return list({j.key: j for j in jobs}.values())


def activation_jobs(target: str) -> list[Job]:
    """ActivFwdSolver0 / ActivBwdSolver0 (solver/activ/fwd_0.cpp, bwd_0.cpp): MIOpenNeuron.cl,
    `-DLITE -DMIOPEN_READ_UNIT -DMIOPEN_READ_TYPE -DMIOPEN_NRN_OP_ID -DMIOPEN_USE_FP16 -DMIOPEN_USE_FP32`
    for every activation mode (0 PASTHRU .. 9 ELU), packed tensors (read unit 4) and fwd odd
    widths (read unit 1)."""
    jobs = []
    for mode in range(10):
        for unit in (4, 1):
            rt = "_FLOAT" if unit == 1 else f"_FLOAT{unit}"
            o = kbp(("LITE", None), ("MIOPEN_READ_UNIT", unit), ("MIOPEN_READ_TYPE", rt), ("MIOPEN_NRN_OP_ID", mode),
                    ("MIOPEN_USE_FP16", 0), ("MIOPEN_USE_FP32", 1))
            jobs.append(Job("activation (OpenCL)", "MIOpenNeuron.cl", o, target))
    return jobs


def _next_pow2(v: int) -> int:
    p = 1
    while p < v:
        p <<= 1
    return p


def softmax_jobs(target: str) -> list[Job]:
    """Softmax (solver/softmax/softmax.cpp): MIOpenSoftmax.cl for (N,C,H,W) shapes of
    classifier heads and attention, both modes, the three algorithms, fwd and bwd."""
    jobs = []
    for (n, c, h, w) in ((16, 1000, 1, 1), (16, 10, 1, 1), (16, 21, 32, 32)):
        for mode in ("INSTANCE", "CHANNEL"):
            for algo in ("FAST", "ACCURATE", "LOG"):
                for fwd in (1, 0):
                    vector = c * h * w if mode == "INSTANCE" else c
                    num_batch = _next_pow2(256 // vector) if vector < 256 else 1
                    p = [("NUM_BATCH", num_batch)]
                    if num_batch > 1:
                        bs = 256 // num_batch
                        p += [("BATCH_SIZE", bs), ("U_BATCH_SIZE", _next_pow2(vector // bs) if vector > bs else 1)]
                    p += [("MIOPEN_USE_FP16", 0), ("MIOPEN_USE_FP32", 1), (f"USE_SOFTMAX_{algo}", 1),
                          (f"USE_SOFTMAX_MODE_{mode}", 1), ("RUN_FORWARD", fwd)]
                    p += [("IS_INPUT_PACKED", 1), ("IS_OUTPUT_PACKED", 1)] if fwd else \
                        [("IS_OUTPUT_PACKED", 1), ("IS_DOUTPUT_PACKED", 1), ("IS_DINPUT_PACKED", 1)]
                    jobs.append(Job("softmax (OpenCL)", "MIOpenSoftmax.cl", kbp(*p), target))
    # Only distinct keys (shapes that give the same options are one entry).
    return list({j.key: j for j in jobs}.values())


def pooling_jobs(target: str) -> list[Job]:
    """PoolingForward2d (solver/pooling/forward2d.cpp): MIOpenPooling.cl for ResNet/VGG pooling
    layers (max 3x3/2, max 2x2/2, average), index type uint8 (MIOpen's default), with and
    without the saved index (training / inference)."""
    jobs = []
    for (oh, ow, k, s, op) in ((56, 56, 3, 2, 1), (112, 112, 2, 2, 1), (28, 28, 2, 2, 1), (14, 14, 2, 2, 1),
                               (7, 7, 2, 2, 1), (1, 1, 7, 1, 0), (16, 16, 3, 2, 3)):
        for save in (False, True):
            if save and op != 1:
                continue
            t1 = 1 if oh <= 8 else 4 if oh <= 32 else 8
            if oh > 16 and oh % 32 > 16:
                t1 = min(16, max(1, _prev_pow2(t1 * s)))
            g0 = 8 if ow <= 8 else (16 if ow % 32 <= 16 else 32)
            g1 = 8 if oh <= 8 else 16 if oh < 16 else 32 if oh <= 32 else 64 if oh <= 64 else 128
            g1 //= t1
            while g0 * g1 > 256 and g0 > 1:
                g0 >>= 1
            p = [("MLO_POOLING_OP_ID", op), ("MLO_POOLING_KERNEL_SZ1", k), ("MLO_POOLING_STRIDE1", s),
                 ("MLO_POOLING_KERNEL_SZ0", k), ("MLO_POOLING_STRIDE0", s), ("MLO_POOLING_N_HORIZ_OUT_PIX", 1),
                 ("MLO_POOLING_N_VERT_OUT_PIX", t1), ("MLO_POOLING_GROUP_SZ0", g0), ("MLO_POOLING_GROUP_SZ1", g1),
                 ("MLO_POOLING_INDEX_TYPE", "uchar"), ("MLO_POOLING_INDEX_MAX", "UCHAR_MAX")]
            if save:
                p += [("MLO_POOLING_SAVE_INDEX", None), ("USE_IMG_INDEX", 1)]
            p += datatype_kbp("fp32")
            jobs.append(Job("pooling (OpenCL)", "MIOpenPooling.cl", kbp(*p), target))
    return list({j.key: j for j in jobs}.values())


def _prev_pow2(v: int) -> int:
    p = 1
    while p * 2 <= v:
        p <<= 1
    return p


def batchnorm_jobs(target: str) -> list[Job]:
    """BnFwdInference (solver/batchnorm/forward_inference.cpp): MIOpenBatchNormFwdInfer{Spatial,PerAct}.cl,
    fp32, work-group (1, 256, 1); MIO_BN_GFX103X is 1 on gfx103x only, so the gfx1010 build
    differs in its options as MIOpen's would."""
    gfx103 = "1" if target.startswith("gfx103") else "0"
    jobs = []
    for f in ("MIOpenBatchNormFwdInferSpatial.cl", "MIOpenBatchNormFwdInferPerAct.cl"):
        p = [("MIOPEN_USE_FP16", 0), ("MIOPEN_USE_FP32", 1), ("MIOPEN_USE_FPMIX", 0), ("MIO_BN_GRP0", 1),
             ("MIO_BN_GRP1", 256), ("MIO_BN_GRP2", 1), ("MIO_BN_GFX103X", gfx103), ("MIO_BN_GFX110X", "0")]
        jobs.append(Job("batchnorm (OpenCL)", f, kbp(*p), target))
    return jobs


BN_SHAPES = [  # (N, C, H, W) of ResNet-50's batch-norm layers, batch 16, plus one batch-128 layer
    (16, 64, 112, 112), (16, 256, 56, 56), (16, 128, 28, 28), (16, 512, 28, 28), (16, 256, 14, 14),
    (16, 2048, 7, 7), (128, 256, 14, 14),
]


def _gfx_flags(target: str) -> list:
    """MIO_BN_GFX103X / GFX110X / GFX120X: 1 where the device name starts with that family."""
    return [("MIO_BN_GFX103X", int(target.startswith("gfx103"))), ("MIO_BN_GFX110X", int(target.startswith("gfx110"))),
            ("MIO_BN_GFX120X", int(target.startswith("gfx120")))]


def bn_fwd_train_spatial_options(target: str, n: int, c: int, h: int, w: int, save: int, running: int) -> str:
    """BnFwdTrainingSpatialSingle / BnFwdTrainingSpatialMultiple::GetSolution
    (solver/batchnorm/forward_spatial_{single,multiple}.cpp), fp32 NCHW,
    WORKAROUND_SWDEV_253606=1: MIOpenBatchNormFwdTrainSpatial.cl's options.  Single is
    applicable when H*W <= 512 or (N*H*W < 32M and H*W > 1024) (and not N > 768 with H*W > 150);
    Multiple otherwise (its options add MIO_BN_NGRPS)."""
    hw, nhw = h * w, n * h * w
    xl = 256 if (hw < 256 and n < 256) or (hw < 100 and n <= 256) else 1024
    yl, xg, yg = 1, c * xl, 1
    single = ((nhw < 33554432 and hw > 1024) or hw <= 512) and not (n > 768 and hw > 150)
    if nhw < 33554432 and hw > 1024:
        variant = 1
    elif hw <= 512:
        variant = 0
    else:
        variant = 2
    if variant == 2 or (n > 768 and hw > 150):
        variant, xl, yl = 2, 1, 1024
        xg, yg = c, _cdiv(hw, yl) * yl
    lds, ldsgcn = (xl, xl // 64) if variant != 2 else (yl, yl // 64)
    common = [("MIOPEN_USE_FP16", 0), ("MIOPEN_USE_FP32", 1), ("MIOPEN_USE_FPMIX", 0),
              ("MIO_SAVE_MEAN_VARIANCE", save), ("MIO_RUNNING_RESULT", running)]
    dims = [("MIO_BN_C", c), ("MIO_BN_HW", hw), ("MIO_BN_NHW", nhw), ("MIO_BN_CHW", c * hw), ("MIO_BN_NCHW", n * c * hw)]
    if single:
        p = common + [("MIO_BN_VARIANT", variant), ("MIO_BN_LDS_SIZE", lds), ("MIO_BN_LDSGCN_SIZE", ldsgcn),
                      ("MIO_BN_N", n), ("MIO_BN_GRP0", xl), ("MIO_BN_GRP1", yl), ("MIO_BN_GRP2", 1)] + \
            _gfx_flags(target) + [("MIO_LAYOUT_NHWC", 0)] + dims
    else:
        p = common + [("MIO_BN_N", n)] + dims + [("MIO_BN_NGRPS", _cdiv(yg, yl)), ("MIO_BN_LDS_SIZE", lds),
                                                  ("MIO_BN_LDSGCN_SIZE", ldsgcn), ("MIO_BN_VARIANT", variant),
                                                  ("MIO_BN_GRP0", xl), ("MIO_BN_GRP1", yl), ("MIO_BN_GRP2", 1)] + \
            _gfx_flags(target) + [("MIO_LAYOUT_NHWC", 0)]
    return kbp(*p)


def bn_bwd_spatial_options(target: str, n: int, c: int, h: int, w: int, use_saved: int) -> str | None:
    """BnBwdTrainingSpatialSingle::GetSolution (solver/batchnorm/backward_spatial_single.cpp),
    fp32 NCHW, the OpenCL path (the gcnAsm path is gfx8/gfx9 only): MIOpenBatchNormBwdSpatial.cl's
    options with MIO_WAVESIZE 32 on gfx10.  None where the solver is not applicable (N*H*W >=
    32M with H*W > 512: BnBwdTrainingSpatialMultiple's)."""
    hw, nhw = h * w, n * h * w
    wave = 32 if target.startswith("gfx10") else 64
    xl, yl = 1024, 1
    if nhw < 32 * 1024 * 1024 and hw > 1024:
        variant = 1
    elif nhw < 32 * 1024 * 1024 and hw > 512:
        variant = 1 if n >= 32 else 3
    elif hw <= 512:
        variant = 3 if (n > 64 and hw > 160) else 0
    else:
        return None
    p = [("MIOPEN_USE_FP16", 0), ("MIOPEN_USE_FP32", 1), ("MIOPEN_USE_FPMIX", 0), ("MIO_BN_USESAVED", use_saved),
         ("MIO_BN_N", n), ("MIO_BN_C", c), ("MIO_BN_HW", hw), ("MIO_BN_NHW", nhw), ("MIO_BN_CHW", c * hw),
         ("MIO_BN_NCHW", n * c * hw), ("MIO_BN_LDS_SIZE", xl), ("MIO_BN_LDSGCN_SIZE", xl // wave),
         ("MIO_BN_VARIANT", variant), ("MIO_WAVESIZE", wave), ("MIO_BN_GRP0", xl), ("MIO_BN_GRP1", yl),
         ("MIO_BN_GRP2", 1), ("MIO_LAYOUT_NHWC", 0)] + _gfx_flags(target)
    return kbp(*p)


def bn_per_act_options(target: str, n: int, c: int, h: int, w: int, fwd: bool, save: int = 1,
                       running: int = 1) -> str:
    """BnFwdTrainingPerActivation / BnBwdTrainingPerActivation::GetSolution
    (solver/batchnorm/{forward,backward}_per_activation.cpp), fp32: MIOpenBatchNormFwdTrainPerAct.cl /
    MIOpenBatchNormBwdPerAct.cl's options (the backward options do not depend on use-saved,
    only the kernel name does)."""
    hw = h * w
    dims = [("MIO_BN_N", n), ("MIO_BN_C", c), ("MIO_BN_HW", hw), ("MIO_BN_NHW", n * hw), ("MIO_BN_CHW", c * hw),
            ("MIO_BN_NCHW", n * c * hw)]
    types = [("MIOPEN_USE_FP16", 0), ("MIOPEN_USE_FP32", 1), ("MIOPEN_USE_FPMIX", 0)]
    if fwd:
        p = types + [("MIO_SAVE_MEAN_VARIANCE", save), ("MIO_RUNNING_RESULT", running)] + dims + \
            [("MIO_BN_LDS_SIZE", 256), ("MIO_BN_GRP0", 1), ("MIO_BN_GRP1", 256), ("MIO_BN_GRP2", 1)]
    else:
        yl = 64 if hw <= 64 else 256
        p = types + dims + [("MIO_BN_NGRPS", _cdiv(hw, yl)), ("MIO_BN_GRP0", 1), ("MIO_BN_GRP1", yl),
                            ("MIO_BN_GRP2", 1)]
    return kbp(*(p + _gfx_flags(target)))


def batchnorm_train_jobs(target: str) -> list[Job]:
    """Batch-norm training, fp32 NCHW: spatial forward (MIOpenBatchNormFwdTrainSpatial.cl; saved
    mean/variance and running averages as PyTorch's training mode asks, and neither), spatial
    backward (MIOpenBatchNormBwdSpatial.cl, with and without the saved mean), per-activation
    forward and backward (MIOpenBatchNormFwdTrainPerAct.cl, MIOpenBatchNormBwdPerAct.cl) for
    ResNet-50's layers.  Generic OpenCL: built for gfx1010 too (MIO_BN_GFX103X 0 there)."""
    # batchnorm_functions.h / the .cl files: MIOPEN_USE_AMDGCN (gfx9 DPP reductions with
    # row_bcast:15/31, reduction_functions.h) unless MIO_BN_GFX103X/110X/120X; the spatial
    # solvers do not check the device, so on gfx1010 MIOpen offers them and their build fails.
    known = None
    if not target.startswith(("gfx103", "gfx110", "gfx120")):
        known = ("MIOpen's spatial batch-norm training source uses gfx9 DPP row_bcast (reduction_functions.h "
                 "dpp_reduction) on every gfx10 but gfx103x; gfx10 has no row_bcast, so MIOpen's build fails too")
    jobs = []
    for i, (n, c, h, w) in enumerate(BN_SHAPES):
        for save, running in ((1, 1),) + (((0, 0),) if i == 0 else ()):
            jobs.append(Job("batchnorm train fwd (OpenCL)", "MIOpenBatchNormFwdTrainSpatial.cl",
                            bn_fwd_train_spatial_options(target, n, c, h, w, save, running), target, known))
        for saved in (1,) + ((0,) if i == 0 else ()):
            o = bn_bwd_spatial_options(target, n, c, h, w, saved)
            if o is not None:
                jobs.append(Job("batchnorm train bwd (OpenCL)", "MIOpenBatchNormBwdSpatial.cl", o, target, known))
    for (n, c, h, w) in ((16, 1024, 1, 1), (16, 64, 7, 7), (16, 32, 28, 28)):
        jobs.append(Job("batchnorm train fwd (OpenCL)", "MIOpenBatchNormFwdTrainPerAct.cl",
                        bn_per_act_options(target, n, c, h, w, True), target))
        jobs.append(Job("batchnorm train bwd (OpenCL)", "MIOpenBatchNormBwdPerAct.cl",
                        bn_per_act_options(target, n, c, h, w, False), target))
    return list({j.key: j for j in jobs}.values())


def tensor_op_jobs(target: str) -> list[Job]:
    """OpTensor4d (src/ocl/tensorocl.cpp, what convolution bias, residual adds and
    element-wise products run): MIOpenTensorKernels.cl with `-DMIOPEN_TYPE=float
    -DMAX_NUM_WG=4096`, the fp32 type defines, the operation (add, mul, min, max) and the
    kernel variant the tensor shapes select (fwd conv bias, packed-equal lite with read block
    4/2/1, leading ones, generic)."""
    jobs = []
    for op in ("miopenAdd", "miopenMul", "miopenMin", "miopenMax"):
        base = " -DMIOPEN_TYPE=float -DMAX_NUM_WG=4096" + general_compile_options("fp32") + " -DMIOPEN_TENSOR_OP=" + op
        variants = [" -DUSE_4D_TENSOR_LITE -DRD_BLCK=4 -DREAD_TYPE=float4", " -DUSE_4D_TENSOR_GENERIC"]
        if op == "miopenAdd":
            variants += [" -DUSE_FWD_BIAS", " -DUSE_FWD_BIAS_GENERIC", " -DUSE_LEADING_ONES",
                         " -DUSE_LEADING_ONES_GENERIC", " -DUSE_4D_TENSOR_LITE -DRD_BLCK=2 -DREAD_TYPE=float2",
                         " -DUSE_4D_TENSOR_LITE -DRD_BLCK=1 -DREAD_TYPE=float"]
        for v in variants:
            jobs.append(Job("tensor ops (OpenCL)", "MIOpenTensorKernels.cl", base + v, target))
    return jobs


def _gcd(*v: int) -> int:
    import math
    g = 0
    for x in v:
        g = math.gcd(g, abs(x))
    return g


def igemm_v4r4_fwd_options(c: dict, params: str, target: str) -> str | None:
    """ConvHipImplicitGemmV4R4Fwd::GetSolution (conv_hip_implicit_gemm_fwd_v4r4.cpp) with the
    PerformanceImplicitGemmV4R4Fwd Calculate* helpers, 2-D fp32 NCHW forward: the comp_options
    string, or None where a helper rejects the config."""
    bs, mpb, npb, kpb, mpt, npt = map(int, params.split(","))
    n, k, ch = c["batchsize"], c["out_channels"], c["in_channels"]
    hi, wi, y, x = c["in_h"], c["in_w"], c["fil_h"], c["fil_w"]
    ph, pw, sh, sw = c["pad_h"], c["pad_w"], c["conv_stride_h"], c["conv_stride_w"]
    dh, dw = c["dilation_h"], c["dilation_w"]
    ho = (hi + 2 * ph - (dh * (y - 1) + 1)) // sh + 1
    wo = (wi + 2 * pw - (dw * (x - 1) + 1)) // sw + 1
    sh, sw = (sh if ho > 1 else 1), (sw if wo > 1 else 1)
    dh, dw = (dh if y > 1 else 1), (dw if x > 1 else 1)
    rph = max(0, 1 + (y - 1) * dh + (ho - 1) * sh - (ph + hi))
    rpw = max(0, 1 + (x - 1) * dw + (wo - 1) * sw - (pw + wi))
    gemm_m, gemm_n, gemm_k = k, n * ho * wo, ch * y * x
    if gemm_m % mpb or gemm_n % npb or gemm_k % kpb:
        return None
    grid = (gemm_m // mpb) * (gemm_n // npb)
    clusters = {64: (4, 4, 2, 2), 128: (4, 4, 4, 2), 256: (4, 4, 4, 4)}.get(bs)
    if clusters is None or mpb % mpt or npb % npt:
        return None
    m0, n0, m1, n1 = clusters
    # A block copy (weights): amd_buffer_load_max_length<float> = amd_lds_write_max_length<float> = 4.
    a_src = _gcd(4, kpb)
    a_per_thread = (kpb * mpb) // bs
    if a_per_thread <= 0:
        return None
    a_src = _gcd(a_src, a_per_thread)
    a_m = a_per_thread // a_src
    a_dst = _gcd(4, a_m)
    a_cl_k, a_cl_m = kpb // a_src, mpb // a_m if a_m else 0
    if a_cl_k <= 0 or a_cl_m <= 0:
        return None
    # B block copy (input).
    b_src = _gcd(4, npb)
    if y == 1 and x == 1 and sh == 1 and sw == 1 and ph == 0 and pw == 0 and rph == 0 and rpw == 0:
        b_src = _gcd(b_src, hi * wi)
    elif sw == 1:
        b_src = _gcd(b_src, pw, wi, rpw, dw)
    else:
        b_src = 1
    b_per_thread = (kpb * npb) // bs
    if b_per_thread <= 0:
        return None
    b_src = _gcd(b_src, b_per_thread)
    b_k = b_per_thread // b_src
    b_dst = _gcd(4, b_src)
    if b_k == 0:
        return None
    b_cl_k, b_cl_n = kpb // b_k, npb // b_src
    if b_cl_k <= 0 or b_cl_n <= 0:
        return None
    c_dst = _gcd(_gcd(4, npt), ho * wo)
    fmac = "1" if target.startswith("gfx103") else "0"
    buf = "0" if target.startswith("gfx103") else "1"
    v = [("CK_PARAM_PROBLEM_N", n), ("CK_PARAM_PROBLEM_K", k), ("CK_PARAM_PROBLEM_C", ch),
         ("CK_PARAM_PROBLEM_HI", hi), ("CK_PARAM_PROBLEM_WI", wi), ("CK_PARAM_PROBLEM_HO", ho),
         ("CK_PARAM_PROBLEM_WO", wo), ("CK_PARAM_PROBLEM_Y", y), ("CK_PARAM_PROBLEM_X", x),
         ("CK_PARAM_PROBLEM_CONV_STRIDE_H", sh), ("CK_PARAM_PROBLEM_CONV_STRIDE_W", sw),
         ("CK_PARAM_PROBLEM_CONV_DILATION_H", dh), ("CK_PARAM_PROBLEM_CONV_DILATION_W", dw),
         ("CK_PARAM_PROBLEM_IN_LEFT_PAD_H", ph), ("CK_PARAM_PROBLEM_IN_LEFT_PAD_W", pw),
         ("CK_PARAM_PROBLEM_IN_RIGHT_PAD_H", rph), ("CK_PARAM_PROBLEM_IN_RIGHT_PAD_W", rpw),
         ("CK_PARAM_PROBLEM_CONV_DIRECTION_FORWARD", 1), ("CK_PARAM_PROBLEM_CONV_DIRECTION_BACKWARD_DATA", 0),
         ("CK_PARAM_PROBLEM_CONV_DIRECTION_BACKWARD_WEIGHT", 0), ("CK_PARAM_TUNABLE_BLOCK_SIZE", bs),
         ("CK_PARAM_TUNABLE_GEMM_M_PER_BLOCK", mpb), ("CK_PARAM_TUNABLE_GEMM_N_PER_BLOCK", npb),
         ("CK_PARAM_TUNABLE_GEMM_K_PER_BLOCK", kpb), ("CK_PARAM_TUNABLE_GEMM_M_PER_THREAD", mpt),
         ("CK_PARAM_TUNABLE_GEMM_N_PER_THREAD", npt), ("CK_PARAM_TUNABLE_GEMM_M_LEVEL0_CLUSTER", m0),
         ("CK_PARAM_TUNABLE_GEMM_N_LEVEL0_CLUSTER", n0), ("CK_PARAM_TUNABLE_GEMM_M_LEVEL1_CLUSTER", m1),
         ("CK_PARAM_TUNABLE_GEMM_N_LEVEL1_CLUSTER", n1),
         ("CK_PARAM_TUNABLE_GEMM_A_BLOCK_COPY_CLUSTER_LENGTHS_GEMM_K", a_cl_k),
         ("CK_PARAM_TUNABLE_GEMM_A_BLOCK_COPY_CLUSTER_LENGTHS_GEMM_M", a_cl_m),
         ("CK_PARAM_TUNABLE_GEMM_A_BLOCK_COPY_SRC_DATA_PER_READ_GEMM_K", a_src),
         ("CK_PARAM_TUNABLE_GEMM_A_BLOCK_COPY_DST_DATA_PER_WRITE_GEMM_M", a_dst),
         ("CK_PARAM_TUNABLE_GEMM_B_BLOCK_COPY_CLUSTER_LENGTHS_GEMM_K", b_cl_k),
         ("CK_PARAM_TUNABLE_GEMM_B_BLOCK_COPY_CLUSTER_LENGTHS_GEMM_N", b_cl_n),
         ("CK_PARAM_TUNABLE_GEMM_B_BLOCK_COPY_SRC_DATA_PER_READ_GEMM_N", b_src),
         ("CK_PARAM_TUNABLE_GEMM_B_BLOCK_COPY_DST_DATA_PER_WRITE_GEMM_N", b_dst),
         ("CK_PARAM_TUNABLE_GEMM_C_THREAD_COPY_DST_DATA_PER_WRITE_GEMM_N1", c_dst),
         ("CK_PARAM_DEPENDENT_GRID_SIZE", grid), ("CK_THREADWISE_GEMM_USE_AMD_INLINE_ASM", 1),
         ("CK_USE_AMD_INLINE_ASM", 1)]
    # get_static_ck_common_compiler_flag (implicitgemm_util.hpp): WORKAROUND_MIOPEN_ISSUE_557
    # turns buffer addressing off on gfx103x, v_fmac_f32 is on there.
    common = (" --std=c++14 -DCK_USE_AMD_BUFFER_ATOMIC_FADD=0 -DCK_BLOCK_SYNC_LDS_WITHOUT_SYNC_VMEM=1"
              " -DCK_WORKAROUND_SWDEV_229564=1 -DCK_WORKAROUND_SWDEV_231101=1"
              f" -DCK_USE_AMD_BUFFER_ADDRESSING={buf} -DCK_USE_AMD_V_FMAC_F32={fmac}")
    return "".join(f" -D{a}={b}" for a, b in v) + common + general_compile_options("fp32")


def igemm_jobs(target: str, src: str, limit: int = 12) -> list[Job]:
    """ConvHipImplicitGemmV4R4Fwd (static_kernel_gridwise_convolution_implicit_gemm_v4r4_nchw_kcyx_nkhw.cpp)
    for tuned fp32 forward configs of MIOpen's gfx1030 perf DB.  The solver's hardware list
    (IsComposableKernelSupportedHardware) has gfx103x but not gfx1010: gfx1030 only."""
    if not target.startswith("gfx103"):
        return []
    jobs = []
    for c, params in perf_db_rows(src, "ConvHipImplicitGemmV4R4Fwd", limit * 3):
        o = igemm_v4r4_fwd_options(c, params, target)
        if o is not None and len(jobs) < limit:
            jobs.append(Job("conv implicit GEMM fwd (HIP)",
                            "static_kernel_gridwise_convolution_implicit_gemm_v4r4_nchw_kcyx_nkhw.cpp", o, target))
    return jobs


SOLVER_FAMILIES = [winograd_jobs, naive_conv_jobs, activation_jobs, softmax_jobs, pooling_jobs, batchnorm_jobs,
                   batchnorm_train_jobs, tensor_op_jobs]


def all_jobs(src: str, targets) -> list[Job]:
    jobs = []
    for t in targets:
        for fam in SOLVER_FAMILIES:
            jobs += fam(t)
        jobs += conv_dir_uni_jobs(t, src)
        jobs += conv_wrw2_jobs(t, src)
        jobs += conv_wrw53_jobs(t)
        jobs += igemm_jobs(t, src)
    return jobs


# ---------------------------------------------------------------- compilers

def hip_package_version_flat() -> int:
    """HIP_PACKAGE_VERSION_FLAT of Debian's HIP (major*1e9 + minor*1e6 + patch), e.g. 5.2.21153 -> 5002021153."""
    out = subprocess.run(["hipconfig", "--version"], capture_output=True, text=True).stdout.strip()
    major, minor, patch = out.split("-")[0].split(".")[:3]
    return int(major) * 10**9 + int(minor) * 10**6 + int(patch)


class CompileError(Exception):
    """A compile that failed; the message is the reason (the compiler's first error line)."""


def _reason(proc) -> str:
    """The compiler's first error line (else the last line of its output, else its exit status)."""
    text = (proc.stderr or "") + (proc.stdout or "")
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    errors = [l for l in lines if "error" in l]
    return (errors or lines[-1:] or [f"exit status {proc.returncode}"])[0][:300]


def flatten_kernels(kernels: str, dest: str) -> str:
    """Symbolic links to every file under ``kernels`` (MIOpen's src/kernels, with its
    sub-folders) in one folder ``dest``: MIOpen embeds its kernel sources and headers by base
    name (no two share one) and writes the headers beside the source it compiles, so one flat
    folder is what its compilers see.  Returns ``dest``."""
    os.makedirs(dest, exist_ok=True)
    for d, _, names in os.walk(os.path.abspath(kernels)):
        for n in names:
            link = os.path.join(dest, n)
            if not os.path.lexists(link):
                os.symlink(os.path.join(d, n), link)
    return dest


def compile_job(job: Job, kernels: str, hip_flat: int) -> bytes:
    """The linked code object MIOpen would store for ``job``; ``kernels`` is the flat folder
    of flatten_kernels."""
    tid = TARGET_ID[job.target]
    kernels = os.path.abspath(kernels)
    src = os.path.join(kernels, job.file)
    with tempfile.TemporaryDirectory(prefix="miopen-kdb-") as d:
        out = os.path.join(d, "out.o")
        opts = shlex.split(job.options)
        if job.file.endswith(".s"):
            cmd = [CLANG, "-x", "assembler", "-target", "amdgcn--amdhsa", f"-mcpu={tid}", *opts,
                   "-I", kernels, src, "-o", out]
        elif job.file.endswith(".cl"):
            cmd = [CLANG, *opts, "-mcode-object-version=4", "-target", "amdgcn-amd-amdhsa", "-x", "cl",
                   "-D__AMD__=1", "-O3", "-cl-kernel-arg-info", "-cl-denorms-are-zero", "-cl-std=CL2.0",
                   "-mllvm", "-amdgpu-early-inline-all", "-mllvm", "-amdgpu-internalize-symbols",
                   "-Wno-everything", "-Xclang", "-finclude-default-header",
                   f"--rocm-device-lib-path={DEVICE_LIBS}", f"-mcpu={tid}", "-I", kernels, src, "-o", out]
        elif job.file.endswith(".cpp"):
            extra = ["-D__HIP_PLATFORM_AMD__=1", f"-DHIP_PACKAGE_VERSION_FLAT={hip_flat}"]
            if job.target.startswith(("gfx10", "gfx11")) and "-mwavefrontsize64" not in opts:
                extra.append("-DWORKAROUND_ISSUE_1431=1")
            bundle = os.path.join(d, "out.bundle")
            if not any(o.startswith(("-std=", "--std=")) for o in opts):
                extra.append("-std=c++17")
            cmd = [HIPCC, f"--offload-arch={tid}", "--cuda-device-only", "-c", "-O3",
                   "-fno-gpu-rdc", *opts, *extra, "-Wno-everything", "-I", kernels, "-x", "hip", src, "-o", bundle]
        else:
            raise CompileError(f"unknown source kind {job.file}")
        env = dict(os.environ, HIP_PLATFORM="amd")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=d)
        if proc.returncode != 0:  # the reason names MIOpen's file, not this run's temporary folder
            raise CompileError(_reason(proc).replace(kernels + os.sep, ""))
        if job.file.endswith(".cpp"):
            proc = subprocess.run([BUNDLER, "--unbundle", "--type=o", f"--input={bundle}",
                                   f"--targets=hipv4-amdgcn-amd-amdhsa--{tid}", f"--output={out}"],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise CompileError("unbundle: " + _reason(proc))
        with open(out, "rb") as f:
            data = f.read()
    if data[:4] != b"\x7fELF":
        raise CompileError("output is not an ELF code object")
    try:
        kernels_found = CodeObject.from_bytes(data, name=job.file).kernels
    except FormatError as e:
        raise CompileError(f"output does not parse as a code object: {e}") from None
    if not kernels_found:
        raise CompileError("code object has no kernels (the options select nothing in the source)")
    return data


def tool_versions() -> dict:
    def first(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, HIP_PLATFORM="amd")
                                  ).stdout.strip().splitlines()[0]
        except (OSError, IndexError):
            return "unavailable"
    return {"clang-15": first([CLANG, "--version"]), "hipcc (HIP)": first(["hipconfig", "--version"]),
            "clang-offload-bundler": first([BUNDLER, "--version"]) or "llvm-15",
            "rocm-device-libs": DEVICE_LIBS}


def miopen_commit(src: str) -> str:
    """The MIOpen commit the sources came from (--commit, else the mirror's HEAD)."""
    for gitdir in (os.path.join(src, ".git"), "/work/.mirror/ROCm+MIOpen/repo"):
        if os.path.isdir(gitdir):
            p = subprocess.run(["git", f"--git-dir={gitdir}", "rev-parse", "HEAD"], capture_output=True, text=True)
            if p.returncode == 0:
                return p.stdout.strip()
    return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=os.path.join(ROOT, "kdb_cache", "miopen-src"),
                    help="unpacked MIOpen source tree (holding src/kernels and LICENSE.txt)")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "tests", "fixtures", "miopen"))
    ap.add_argument("--commit", help="MIOpen commit of --src (default: git rev-parse HEAD of the mirror)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="parallel compiles (default 2)")
    ap.add_argument("--target", action="append", choices=TARGETS, help="build only these targets")
    a = ap.parse_args()
    kernels = os.path.abspath(os.path.join(a.src, "src", "kernels"))
    if not os.path.isdir(kernels):
        print(f"error: {a.src}: no src/kernels (unpack MIOpen's sources there; see --help)", file=sys.stderr)
        return 2
    targets = a.target or list(TARGETS)
    t0 = time.perf_counter()
    jobs = all_jobs(a.src, targets)
    hip_flat = hip_package_version_flat()
    flat_dir = tempfile.mkdtemp(prefix="miopen-kernels-")
    kernels = flatten_kernels(kernels, flat_dir)
    built: dict[str, list] = {t: [] for t in targets}
    failures = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        futs = {ex.submit(compile_job, j, kernels, hip_flat): j for j in jobs}
        for fut in concurrent.futures.as_completed(futs):
            j = futs[fut]
            try:
                built[j.target].append((j, fut.result()))
            except CompileError as e:
                failures.append((j, str(e)))
    shutil.rmtree(flat_dir, ignore_errors=True)
    os.makedirs(a.out_dir, exist_ok=True)
    manifest = {
        "about": "MIOpen kernel DBs built by tools/build_miopen_kdb.py from MIOpen's sources with Debian's "
                 "compilers; keys are MIOpen's (kernel_name = <file>.o, kernel_args = the solver's options + "
                 "' -mcpu=<device>'); md5/size are of the uncompressed code object (MIOpen's kernel_hash).",
        "miopen": {"repository": "https://github.com/ROCm/MIOpen", "commit": a.commit or miopen_commit(a.src)},
        "tools": tool_versions(),
        "dbs": {},
        "failures": [],
    }
    for t in targets:
        order = {id(j): i for i, j in enumerate(jobs)}
        items = sorted(built[t], key=lambda p: order[id(p[0])])
        path = os.path.join(a.out_dir, f"{t}.kdb")
        if os.path.exists(path):
            os.unlink(path)
        write_kdb(path, [(*j.key, data) for j, data in items], user=False)
        manifest["dbs"][f"{t}.kdb"] = {
            "target": t, "target_id": TARGET_ID[t],
            "entries": [{"kernel_name": j.key[0], "kernel_args": j.key[1], "source": j.file, "family": j.family,
                         "size": len(data), "md5": hashlib.md5(data).hexdigest()} for j, data in items]}
    for j, why in sorted(failures, key=lambda p: (p[0].target, p[0].file, p[0].options)):
        entry = {"target": j.target, "source": j.file, "kernel_args": j.key[1], "reason": why}
        if j.known_failure:
            entry["as_in_miopen"] = j.known_failure
        manifest["failures"].append(entry)
        tail = f" (as in MIOpen: {j.known_failure})" if j.known_failure else ""
        print(f"error: {j.file} [{j.target}] {j.options!r}: {why}{tail}")
    with open(os.path.join(a.out_dir, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=False)
        f.write("\n")
    lic = os.path.join(a.src, "LICENSE.txt")
    if os.path.exists(lic):
        shutil.copyfile(lic, os.path.join(a.out_dir, "LICENSE.txt"))
    # Summary: objects per source file and per target.
    per = collections.Counter((j.file, j.target) for t in targets for j, _ in built[t])
    files = sorted({f for f, _ in per})
    print(f"{'source file':72s}" + "".join(f"{t:>9s}" for t in targets))
    for fn in files:
        print(f"{fn:72s}" + "".join(f"{per[(fn, t)]:9d}" for t in targets))
    print(f"{'total (' + str(len(files)) + ' source files)':72s}" + "".join(f"{len(built[t]):9d}" for t in targets))
    for t in targets:
        p = os.path.join(a.out_dir, f"{t}.kdb")
        print(f"wrote {p}: {len(built[t])} entries, {os.path.getsize(p):,} bytes")
    unexpected = [j for j, _ in failures if not j.known_failure]
    print(f"{len(failures)} compile failure(s), {len(failures) - len(unexpected)} of them as in MIOpen's own "
          f"build; {time.perf_counter() - t0:.0f} s")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
