"""Walk a code section the way llvm-objdump -d does.

llvm-objdump disassembles a section symbol by symbol (the bytes before the
first symbol included): decoding restarts at every symbol address, and a run
of at least 8 zero bytes is skipped (in multiples of 4; it prints ``...``)
instead of being decoded.  :func:`disassemble` reproduces that walk so that
``kpatch disasm --format lines`` lists exactly the instructions llvm-objdump
lists, at the same addresses.
"""

from __future__ import annotations

from typing import Iterable

from kpatch.isa.decoder import cache_for, decode_at
from kpatch.isa.instruction import Instruction
from kpatch.isa.tables import check_target


def objdump_skips(data: bytes, pos: int, end: int) -> int:
    """Bytes llvm-objdump skips as zeros at ``pos`` (0: none)."""
    n = pos
    while n < end and data[n] == 0:
        n += 1
    n -= pos
    if n < 8:
        return 0
    return n & ~3


def disassemble(data: bytes, target: str, base_address: int = 0,
                symbols: Iterable[int] = ()) -> list[Instruction]:
    """Instructions llvm-objdump -d lists for a section holding ``data`` at
    ``base_address`` whose symbols start at the addresses ``symbols``."""
    check_target(target)
    cache = cache_for(target)
    data = bytes(data)
    end_all = len(data)
    starts = sorted({a - base_address for a in symbols if 0 <= a - base_address < end_all} | {0})
    out: list[Instruction] = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else end_all
        pos = start
        while pos < end:
            z = objdump_skips(data, pos, end)
            if z:
                pos += z
                continue
            d = decode_at(data, pos, cache, end_all)
            out.append(Instruction(base_address + pos, d))
            pos += d.size
    return out


def disasm_lines(data: bytes, target: str, base_address: int = 0,
                 symbols: Iterable[int] = ()) -> list[str]:
    """``--format lines`` output: ``<hex address>\\t<llvm-objdump text>``."""
    return [f"{i.address:x}\t{i.text()}" for i in disassemble(data, target, base_address, symbols)]
