"""Integer dot products (gfx1030 only) are expanded exactly for gfx1010 (rule
KI006, fix int-dot-expand), and the forms the expansion cannot translate are
refused by scan and apply alike.

The check of meaning is independent of kpatch: llvm-objdump-16 reads the
original (gfx1030) and the patched (gfx1010) kernel, and a small interpreter
written here from the ISA's definitions of the few instructions involved
runs both on random register values of 32 lanes; every VGPR the original
kernel names must end with the same value.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from conftest import kpatch_in_process

HERE = os.path.join(os.path.dirname(__file__), "data", "int_dot.s")
MASK = np.uint64(0xFFFFFFFF)


def build(tmp_path) -> str:
    if shutil.which("clang-15") is None or shutil.which("llvm-objdump-16") is None:
        pytest.skip("clang-15 / llvm-objdump-16 not installed")
    out = str(tmp_path / "idot.hsaco")
    subprocess.run(["clang-15", "-x", "assembler", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1030",
                    "-mcode-object-version=4", HERE, "-o", out], check=True)
    return out


def kpatch(*args: str) -> subprocess.CompletedProcess:
    """The command's output and status (in this process: only they are checked)."""
    return kpatch_in_process(*args)


def kernel_text(path: str, mcpu: str, name: str) -> list[str]:
    out = subprocess.run(["llvm-objdump-16", "-d", f"--mcpu={mcpu}", path], capture_output=True, text=True,
                         check=True).stdout
    body = out.split(f"<{name}>:\n", 1)[1].split("\n\n", 1)[0]
    return [" ".join(line.split("//")[0].split()) for line in body.splitlines() if line.strip()]


# ---- an interpreter of the few instructions involved, from the ISA's definitions ----

def _field(x, sel: str):
    """SDWA operand select: the byte or word ``sel`` names, zero-extended."""
    kind, k = sel.split("_")
    bits = 8 if kind == "BYTE" else 16 if kind == "WORD" else 32
    return (x >> np.uint64(bits * int(k) if bits < 32 else 0)) & np.uint64((1 << bits) - 1), bits


def _sext(v, bits: int):
    v = v.astype(np.int64)
    return np.where(v >= 1 << (bits - 1), v - (1 << bits), v)


def _dot(a, b, bits: int, signed: bool):
    total = np.zeros_like(a, dtype=np.int64)
    for k in range(32 // bits):
        x = (a >> np.uint64(bits * k)) & np.uint64((1 << bits) - 1)
        y = (b >> np.uint64(bits * k)) & np.uint64((1 << bits) - 1)
        total += _sext(x, bits) * _sext(y, bits) if signed else x.astype(np.int64) * y.astype(np.int64)
    return total


def run(lines: list[str], regs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    regs = dict(regs)

    def val(op: str):
        op = re.sub(r"^sext\((.*)\)$", r"\1", op)
        if re.fullmatch(r"[vs]\d+", op):
            return regs[op]
        return np.full(32, int(op, 0) & 0xFFFFFFFF, dtype=np.uint64)

    def put(reg: str, v) -> None:
        regs[reg] = np.asarray(v).astype(np.int64).astype(np.uint64) & MASK

    for line in lines:
        m = line.split(" ", 1)
        op, args = m[0], [a.strip() for a in m[1].split(",")] if len(m) > 1 else []
        dots = {"v_dot4c_i32_i8_e32": (8, True), "v_dot4_i32_i8": (8, True), "v_dot4_u32_u8": (8, False),
                "v_dot2_i32_i16": (16, True), "v_dot2_u32_u16": (16, False)}
        if op in dots:
            bits, signed = dots[op]
            d, a, b = args[:3]
            c = d if op.endswith("_e32") else args[3]
            put(d, val(c).astype(np.int64) + _dot(val(a), val(b), bits, signed))
        elif op in ("v_mul_i32_i24_sdwa", "v_mul_u32_u24_sdwa"):
            d, a, b = args[0], args[1].split(" ")[0], args[2].split(" ")[0]
            opts = dict(t.split(":") for t in line.split() if ":" in t)
            assert opts["dst_sel"] == "DWORD" and opts["dst_unused"] == "UNUSED_PAD"
            xs = []
            for src, sel in ((a, opts.get("src0_sel", "DWORD")), (b, opts.get("src1_sel", "DWORD"))):
                x, bits = _field(val(src), sel)
                x = _sext(x, bits) if src.startswith("sext(") else x.astype(np.int64)
                xs.append(_sext(x.astype(np.uint64) & np.uint64(0xFFFFFF), 24) if op == "v_mul_i32_i24_sdwa"
                          else x & 0xFFFFFF)  # the 24-bit multiply reads the low 24 bits
            put(d, (xs[0] * xs[1]))
        elif op == "v_add_nc_u32_e32":
            put(args[0], val(args[1]).astype(np.int64) + val(args[2]).astype(np.int64))
        elif op == "v_mov_b32_e32":
            put(args[0], val(args[1]).astype(np.int64))
        elif op in ("s_endpgm", "s_nop", "s_code_end"):
            continue
        else:
            raise AssertionError(f"the test's interpreter does not model {line!r}")
    return regs


def random_regs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    regs = {f"v{k}": rng.integers(0, 1 << 32, 32, dtype=np.uint64) for k in range(16)}
    regs.update({f"s{k}": np.full(32, rng.integers(0, 1 << 32), dtype=np.uint64) for k in range(16)})
    # extremes: every byte/word -128 / 127 / 0x80... / 0xff...
    for k, pattern in enumerate((0x80808080, 0x7F7F7F7F, 0xFFFFFFFF, 0x80007FFF)):
        for v in regs:
            if v.startswith("v"):
                regs[v][k] = pattern
    return regs


def test_the_expansion_computes_the_same_values(tmp_path):
    src = build(tmp_path)
    out = str(tmp_path / "out.hsaco")
    p = kpatch("apply", "--mode", "override", src, "-o", out)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"patched\s+\S+ idot \[KI006\]", p.stdout), p.stdout
    old = kernel_text(src, "gfx1030", "idot")
    new = kernel_text(out, "gfx1010", "idot")
    assert not [x for x in new if "dot" in x or x.startswith(".long")]
    assert len([x for x in old if "dot" in x]) == 7
    named = {r for x in old for r in re.findall(r"\bv\d+\b", x)}
    for seed in range(20):
        regs = random_regs(seed)
        want, got = run(old, regs), run(new, regs)
        for r in sorted(named):
            assert np.array_equal(want[r], got[r]), (r, seed)
    # the interpreter can tell: a wrong byte select is caught
    broken = [x.replace("src0_sel:BYTE_2", "src0_sel:BYTE_1", 1) for x in new]
    assert any(not np.array_equal(run(old, random_regs(0))[r], run(broken, random_regs(0))[r]) for r in named)


def test_scan_and_apply_agree_on_what_cannot_be_expanded(tmp_path):
    src = build(tmp_path)
    kernels = scan_kernels(src)
    assert kernels["idot"]["verdict"] == "patchable" and kernels["idot"]["rules"] == ["gfx1010-isa"]
    assert all("KI006" in f["mitigation"] for f in kernels["idot"]["findings"])
    reasons = {n: " ".join(kernels[n]["reasons"]) for n in ("idot_clamp", "idot_sgpr", "idot_i4")}
    assert all(kernels[n]["verdict"] == "unpatchable" for n in reasons)
    assert "clamp" in reasons["idot_clamp"] and "SGPR or constant multiplicand" in reasons["idot_sgpr"]
    assert "v_dot8_i32_i4" in kernels["idot_i4"]["findings"][0]["detail"]
    out = str(tmp_path / "out.hsaco")
    p = kpatch("apply", "--mode", "override", "--json", src, "-o", out)
    res = json.loads(p.stdout)
    status = {k["name"]: k["status"] for e in res["parts"] for k in e["kernels"]}
    assert status == {"idot": "patched", "idot_clamp": "refused", "idot_sgpr": "refused", "idot_i4": "refused"}
    # the refused kernels keep their bytes: what the runtime would have run anyway
    for n in reasons:
        assert kernel_text(out, "gfx1030", n) == kernel_text(src, "gfx1030", n)
    assert scan_kernels(out)["idot"]["verdict"] == "ok"


def scan_kernels(path: str) -> dict[str, dict]:
    doc = json.loads(kpatch("scan", "--target", "gfx1010", "--json", path).stdout)
    return {k["name"]: k for o in doc["code_objects"] for k in o["kernels"]}
