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
not built for it.

Every failed compile is listed with its reason; the summary gives objects per
source file and per target.  Writes ``gfx1030.kdb``, ``gfx1010.kdb``,
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

    def __init__(self, family: str, file: str, options: str, target: str):
        self.family, self.file, self.options, self.target = family, file, options, target

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


def perf_db_rows(src: str, solver: str, limit: int):
    """(config row dict, params) of MIOpen's shipped gfx1030 perf DB for ``solver``: fp32,
    NCHW, 2-D, group 1, no dilation; distinct params first."""
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
            "AND c.dilation_h = 1 AND c.dilation_w = 1 AND c.direction = 'F' AND c.bias = 0 "
            "ORDER BY c.id", (solver,)).fetchall()
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


def conv_dir_uni_options(c: dict, params: str) -> str | None:
    """ConvOclDirectFwd::BaseGetSolution (conv_ocl_dir2Dfwd.cpp), forward direction, fp32, NCHW
    packed, group 1: the comp_options string, or None where the solver returns an error."""
    grp_tile1, grp_tile0, in_tile1, in_tile0, opt1, opt0, n_out_pix, n_in_data, n_stacks = map(int, params.split(","))
    N, C, K = c["batchsize"], c["in_channels"], c["out_channels"]
    H, W, R, S = c["in_h"], c["in_w"], c["fil_h"], c["fil_w"]
    ph, pw, sh, sw = c["pad_h"], c["pad_w"], c["conv_stride_h"], c["conv_stride_w"]
    OH = (H + 2 * ph - R) // sh + 1
    OW = (W + 2 * pw - S) // sw + 1
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
    v = [("MLO_HW_WAVE_SZ", 64), ("MLO_DIR_FORWARD", 1), ("MLO_FILTER_SIZE0", S), ("MLO_FILTER_SIZE1", R),
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
    return "".join(f" -D{n}={x}" for n, x in v) + general_compile_options("fp32")


def conv_dir_uni_jobs(target: str, src: str, limit: int = 24) -> list[Job]:
    """ConvOclDirectFwd (MIOpenConvDirUni.cl) for the tuned fp32 forward configs of MIOpen's
    gfx1030 perf DB (the same tuned options are used on gfx1010: the kernel is generic)."""
    jobs = []
    for c, params in perf_db_rows(src, "ConvOclDirectFwd", limit * 2):
        o = conv_dir_uni_options(c, params)
        if o is not None and len(jobs) < limit:
            jobs.append(Job("conv direct fwd (OpenCL)", "MIOpenConvDirUni.cl", o, target))
    return jobs


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
                   tensor_op_jobs]


def all_jobs(src: str, targets) -> list[Job]:
    jobs = []
    for t in targets:
        for fam in SOLVER_FAMILIES:
            jobs += fam(t)
        jobs += conv_dir_uni_jobs(t, src)
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
        if proc.returncode != 0:
            raise CompileError(_reason(proc))
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
    for j, why in sorted(failures, key=lambda p: (p[0].target, p[0].file)):
        manifest["failures"].append({"target": j.target, "source": j.file, "kernel_args": j.key[1], "reason": why})
        print(f"error: {j.file} [{j.target}] {j.options!r}: {why}")
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
    print(f"{len(failures)} compile failure(s); {time.perf_counter() - t0:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
