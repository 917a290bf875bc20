"""Run byte sequences through llvm-objdump-16 and return what it prints.

Shared by tools/gen_isa_tables.py (which learns the opcode tables from
LLVM) and the ISA tests/agreement tools.  Each probe gets its own 64-byte
slot padded with ``s_nop 0`` so a probe that LLVM rejects (and whose later
dwords it then decodes as something else) cannot disturb the next probe.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import tempfile

LINE = re.compile(r"^\t(.*?)\s*// ([0-9A-F]{12}): ([0-9A-F]{8}(?: [0-9A-F]{8})*)")
NOP = struct.pack("<I", 0xBF800000)
SLOT = 64
MAX_PROBE = SLOT - 32


def objdump_lines(data: bytes, cpu: str) -> list[tuple[int, str, int]]:
    """Disassemble raw ``data`` as a .text section: [(address, text, size)].

    Runs of zero bytes that llvm-objdump skips (prints ``...``) are absent.
    """
    with tempfile.TemporaryDirectory() as td:
        binp = os.path.join(td, "b.bin")
        src = os.path.join(td, "a.s")
        obj = os.path.join(td, "a.o")
        with open(binp, "wb") as fh:
            fh.write(data)
        with open(src, "w") as fh:
            fh.write('.text\n.incbin "%s"\n' % binp)
        subprocess.run(["llvm-mc-16", "-triple=amdgcn-amd-amdhsa", "-mcpu=" + cpu,
                        "-filetype=obj", src, "-o", obj], check=True)
        return objdump_file(obj, cpu)


def objdump_file(path: str, cpu: str) -> list[tuple[int, str, int]]:
    """llvm-objdump-16 -d of an ELF file: [(address, text, size)]."""
    p = subprocess.run(["llvm-objdump-16", "-d", "--mcpu=" + cpu, path],
                       capture_output=True, text=True, check=True)
    return parse_objdump(p.stdout)


def parse_objdump(out: str) -> list[tuple[int, str, int]]:
    """Instruction lines of llvm-objdump -d output: [(address, text, size)]."""
    res = []
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            res.append((int(m.group(2), 16), m.group(1), len(m.group(3).replace(" ", "")) // 2))
    return res


#: blocks that made llvm-objdump-16 crash (LLVM bugs), found by bisection
CRASHED: list[bytes] = []


def _probe_chunk(part: list[bytes], cpu: str) -> list:
    buf = bytearray()
    for blk in part:
        if len(blk) > MAX_PROBE or len(blk) % 4:
            raise ValueError("bad probe length %d" % len(blk))
        buf += blk + NOP * ((SLOT - len(blk)) // 4)
    try:
        res = {a: (t, n) for a, t, n in objdump_lines(bytes(buf), cpu)}
    except subprocess.CalledProcessError:
        if len(part) == 1:
            CRASHED.append(part[0])
            return [None]
        h = len(part) // 2
        return _probe_chunk(part[:h], cpu) + _probe_chunk(part[h:], cpu)
    out = []
    for i in range(len(part)):
        r = res.get(i * SLOT)
        if r is None:
            raise RuntimeError("probe slot %d lost" % i)
        out.append(None if r[0].startswith(".long") else r)
    return out


def probe(blocks: list[bytes], cpu: str) -> list[tuple[str, int] | None]:
    """LLVM's reading of each block: (text, size) or None when it is invalid
    (or crashed llvm-objdump: such blocks are appended to :data:`CRASHED`)."""
    out: list[tuple[str, int] | None] = []
    chunk = 8000
    for start in range(0, len(blocks), chunk):
        out += _probe_chunk(blocks[start:start + chunk], cpu)
    return out


def words(*ws: int) -> bytes:
    """Little-endian dwords."""
    return b"".join(struct.pack("<I", w & 0xFFFFFFFF) for w in ws)


_ASM_ERROR = re.compile(r"^<stdin>:(\d+):\d+: error", re.M)


def assemble_ok(lines: list[str], cpu: str) -> list[bool]:
    """Whether llvm-mc-16 accepts each assembly line (one pass for all)."""
    out: list[bool] = []
    chunk = 40000
    for start in range(0, len(lines), chunk):
        part = lines[start:start + chunk]
        p = subprocess.run(["llvm-mc-16", "-triple=amdgcn-amd-amdhsa", "-mcpu=" + cpu],
                           input="\n".join(part) + "\n", capture_output=True, text=True)
        bad = {int(m.group(1)) for m in _ASM_ERROR.finditer(p.stderr)}
        out += [i + 1 not in bad for i in range(len(part))]
    return out
