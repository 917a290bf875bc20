"""Inputs for the rewriter tests: objects, and edit sets chosen from LLVM's view of them.

Edit addresses come from llvm-objdump-16 / llvm-readelf-16 output (see
:mod:`rw_oracle`), not from kpatch's decoder, so the inputs do not depend on
the code under test either.
"""

from __future__ import annotations

import bisect
import glob
import os
import shutil
import subprocess

import pytest

from conftest import ROCBLAS_LIBRARY, gfx1030_code_objects
from rw_oracle import Line, branch_target, objdump, symbols

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "bin")
LIBROCRAND = os.path.join(ROOT, "kdb_cache", "root", "usr", "lib", "x86_64-linux-gnu",
                          "librocrand.so.1.1")

RELOC = os.path.join(DATA, "reloc_cases.gfx1030.hsaco")
IMMOVABLE = os.path.join(DATA, "immovable.gfx1030.hsaco")
CALLS = os.path.join(DATA, "calls.hip.gfx1030.hsaco")
#: a small Tensile gfx1030 object that override mode patches (kernels with hazards to mitigate)
TENSILE_SMALL = os.path.join(ROCBLAS_LIBRARY, "TensileLibrary_Type_BS_HPA_Contraction_l_Alik_Bjlk_Cijk_Dijk_fallback_gfx1030.hsaco")

# Marker instructions (none of them occurs in the objects under test).
NOP7 = bytes.fromhex("070080bf")  # s_nop 7: inserted before (a branch lands on it)
NOP6 = bytes.fromhex("060080bf")  # s_nop 6: inserted after
NOP0 = bytes.fromhex("000080bf")  # s_nop 0
MARK_BEFORE, MARK_AFTER = "s_nop 7", "s_nop 6"


def need(tool: str) -> str:
    path = shutil.which(tool)
    if not path:
        pytest.skip(f"{tool} is not installed")
    return path


HAZARDS = os.path.join(ROOT, "tests", "fixtures", "hazards", "bin")
ROCPRIM = os.path.join(FIXTURES, "rocprim", "rocprim_algos.gfx1030.hsaco")
#: holds image_bvh_intersect_ray ... a16, which kpatch's decoder does not know (yet)
ISA_DIFFERENCES = os.path.join(HAZARDS, "isa_differences.gfx1030.hsaco")


def fixture_objects() -> list[str]:
    """Every small gfx1030 code object among the shared fixtures (the hazard cases
    included) and this directory's."""
    shared = sorted(glob.glob(os.path.join(FIXTURES, "*.gfx1030.*hsaco")))
    hazards = sorted(p for p in glob.glob(os.path.join(HAZARDS, "*.gfx1030.hsaco"))
                     if p != ISA_DIFFERENCES)
    return shared + hazards + [RELOC, CALLS]


def librocrand_and_tensile(librocrand: str, first: int | None = None) -> list[bytes]:
    """The bytes of librocrand's gfx1030 code objects (the ``first`` ones, if
    given) and, when rocBLAS is fetched, of :data:`TENSILE_SMALL`."""
    objs = [co.data for co in gfx1030_code_objects(librocrand)[:first]]
    if os.path.exists(TENSILE_SMALL):
        objs.append(read(TENSILE_SMALL))
    return objs


def built_layouts(data: bytes, monkeypatch) -> list:
    """(layout, the .text it built) of every code layout the patcher wrote
    when patching ``data`` in override mode (``TextLayout._build`` watched)."""
    from kpatch.rewrite import patcher, textlayout
    built = []
    real = textlayout.TextLayout._build

    def keep(lay):
        got = real(lay)
        built.append((lay, bytes(got[0])))
        return got

    with monkeypatch.context() as m:
        m.setattr(textlayout.TextLayout, "_build", keep)
        r = patcher.patch_code_object(data, mode="override")
    assert r.data is not None, r.note
    return built


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def write_tmp(tmp_path, name: str, data: bytes) -> str:
    p = os.path.join(str(tmp_path), name)
    with open(p, "wb") as f:
        f.write(data)
    return p


def function_lines(path: str, lines: list[Line] | None = None) -> dict[str, list[Line]]:
    """Instructions inside each sized function symbol, by function name."""
    lines = sorted(objdump(path) if lines is None else lines, key=lambda x: x.addr)
    starts = [x.addr for x in lines]
    out = {}
    for f in symbols(path):
        if f.type == "FUNC" and f.size:
            out[f.name] = lines[bisect.bisect_left(starts, f.value):
                                bisect.bisect_left(starts, f.value + f.size)]
    return out


def getpc_sequences(lines: list[Line]) -> list[tuple[Line, Line, Line]]:
    return [(a, b, c) for a, b, c in zip(lines, lines[1:], lines[2:])
            if a.mnemonic == "s_getpc_b64" and b.mnemonic == "s_add_u32"
            and c.mnemonic == "s_addc_u32"]


def spread_edits(path: str, every: int, *, targets: bool = True, getpc: bool = True):
    """insert_before s_nop 7 at every ``every``-th instruction of every function, at
    every branch target and every s_getpc_b64 (from llvm-objdump's listing)."""
    from kpatch.rewrite.edits import Edit
    lines = objdump(path)
    funcs = function_lines(path, lines)
    inside = {x.addr for ls in funcs.values() for x in ls}
    picked: set[int] = set()
    for ls in funcs.values():
        picked.update(x.addr for x in ls[::every])
        if getpc:
            picked.update(x.addr for x in ls if x.mnemonic == "s_getpc_b64")
        if targets:
            picked.update(t for x in ls if (t := branch_target(x)) is not None and t in inside)
    return [Edit(a, "insert_before", NOP7, "test") for a in sorted(picked)]


def readelf_notes(path: str) -> str:
    return subprocess.run(["llvm-readelf-16", "--notes", path], capture_output=True,
                          text=True, check=True).stdout
