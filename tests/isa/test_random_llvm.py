"""Random encodings of every opcode: kpatch against llvm-objdump-16.

For each format, seeded random encodings of opcodes from the tables (with
random fields, markers, literals and NSA address dwords) are disassembled
by llvm-objdump-16 and by kpatch.  Instruction sizes and validity must agree
for nearly all of them and the text for nearly all; every text difference
must belong to a class listed (with its reason) in known_differences.txt.
Encodings that crash llvm-objdump-16 itself are left out.
"""

from __future__ import annotations

import os
import random
import subprocess
import tempfile

import pytest

from isa_helpers import load_random_classes, objdump
from kpatch.isa import formats as F
from kpatch.isa import decode
from kpatch.isa.decoder import cache_for, decode_at
from kpatch.isa.tables import load

SLOT = 64
NOP = (0xBF800000).to_bytes(4, "little")
PER_FORMAT = 250
#: more for the image instructions, whose operand widths depend on most fields
EXTRA = {"MIMG": 750}
FORMATS = ["SOP1", "SOP2", "SOPC", "SOPK", "SOPP", "SMEM", "VOP1", "VOP2", "VOPC", "VOP3", "VOP3P",
           "VINTRP", "DS", "FLAT", "MUBUF", "MTBUF", "MIMG", "EXP"]


def random_encodings(cpu: str, fmtname: str, n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    fmt = F.FORMATS[fmtname]
    ops = load(cpu).ops[fmtname]
    keys = sorted(ops)
    out = []
    for _ in range(n):
        op = rng.choice(keys)
        info = ops[op]
        w = rng.getrandbits(fmt.size * 8)
        if rng.random() < 0.8:  # mostly keep the fields LLVM insists on
            for z, v in info.form.zero:
                w = fmt.field(z).put(w, v)
        w = (w & ~fmt.match_mask) | fmt.match_value
        if fmtname == "FLAT":
            w = fmt.field("seg").put(fmt.with_opcode(w, op & 0x7F), op >> 7)
        else:
            w = fmt.with_opcode(w, op)
        if fmtname in ("VOP1", "VOP2", "VOPC") and rng.random() < 0.5:
            w = fmt.field("src0").put(w, rng.choice([0xF9, 0xFA, 0xE9, 0xEA, 0xFF]))
        if fmtname == "VOP3P":
            w = fmt.field("unused").put(w, 0)
        out.append(w.to_bytes(fmt.size, "little") + rng.getrandbits(96).to_bytes(12, "little"))
    return out


def llvm_view(blocks: list[bytes], cpu: str) -> list[tuple[str, int] | None] | None:
    buf = b"".join(b + NOP * ((SLOT - len(b)) // 4) for b in blocks)
    with tempfile.TemporaryDirectory() as td:
        src, obj, binp = (os.path.join(td, n) for n in ("a.s", "a.o", "b.bin"))
        with open(binp, "wb") as fh:
            fh.write(buf)
        with open(src, "w") as fh:
            fh.write('.text\n.incbin "%s"\n' % binp)
        subprocess.run(["llvm-mc-16", "-triple=amdgcn-amd-amdhsa", "-mcpu=" + cpu, "-filetype=obj",
                        src, "-o", obj], check=True)
        try:
            lines = objdump(obj, cpu)
        except subprocess.CalledProcessError:
            return None  # llvm-objdump crashed on one of them
    at = {a: (t, n) for a, t, n in lines}
    return [None if at[i * SLOT][0].startswith(".long") else at[i * SLOT] for i in range(len(blocks))]


def views(blocks, cpu):
    """LLVM's view of each block, bisecting around inputs that crash it."""
    v = llvm_view(blocks, cpu)
    if v is not None:
        return v
    if len(blocks) == 1:
        return ["crash"]
    h = len(blocks) // 2
    return views(blocks[:h], cpu) + views(blocks[h:], cpu)


@pytest.mark.parametrize("cpu", ["gfx1010", "gfx1030"])
def test_random_encodings_agree(cpu):
    blocks, names = [], []
    for k, fmtname in enumerate(FORMATS):
        b = random_encodings(cpu, fmtname, EXTRA.get(fmtname, PER_FORMAT), seed=1000 + k)
        blocks += b
        names += [fmtname] * len(b)
    ref = views(blocks, cpu)
    cache = cache_for(cpu)
    # the whole buffer through the fast path too (vectorised sizes, compiled
    # validity checks, lazy text): it must find the same instruction per slot
    buf = b"".join(b + NOP * ((SLOT - len(b)) // 4) for b in blocks)
    fast = {i.address: i for i in decode(buf, cpu)}
    size_bad, text_bad, n = [], [], 0
    for k, (b, r, fmtname) in enumerate(zip(blocks, ref, names)):
        if r == "crash":
            continue
        n += 1
        d = decode_at(b, 0, cache)
        f = fast.get(k * SLOT)
        assert f is not None and f.raw == d.raw and f.text() == d.text, (b.hex(), d.text)
        if (r is None) != d.is_unknown or (r is not None and r[1] != d.size):
            size_bad.append((fmtname, b.hex(), r, d.text))
        elif r is not None and r[0] != d.text:
            text_bad.append((fmtname, b.hex(), r[0], d.text))
    assert n > 0.95 * len(blocks)
    assert len(size_bad) <= 0.001 * n, size_bad[:10]
    assert len(text_bad) <= 0.005 * n, text_bad[:10]
    classes = load_random_classes()
    unexplained = [t for t in text_bad
                   if not any(fmt == t[0] and pat.search(t[2]) for fmt, pat, _ in classes)]
    assert not unexplained, unexplained[:10]
