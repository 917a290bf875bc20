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

from kpatch.isa.bulk import Columns, walk_ids
from kpatch.isa.decoder import cache_for, no_gc
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
                symbols: Iterable[int] = (), text: bool = True) -> list[Instruction]:
    """Instructions llvm-objdump -d lists for a section holding ``data`` at
    ``base_address`` whose symbols start at the addresses ``symbols``.

    ``text`` is accepted for compatibility: the text of each distinct
    encoding is made on first use (``Instruction.text()``) either way."""
    addrs, ds = disassemble_columns(data, target, base_address, symbols)
    if not isinstance(addrs, list):
        addrs = addrs.tolist()
    return list(map(Instruction, addrs, ds))


def disassemble_columns(data: bytes, target: str, base_address: int = 0,
                        symbols: Iterable[int] = ()) -> tuple:
    """:func:`disassemble` as two columns: the addresses (int64 array or
    list) and the :class:`~kpatch.isa.instruction.Decoded` of each
    instruction, without an object per instruction."""
    cols = disassemble_ids(data, target, base_address, symbols)
    return cols.addrs, cols.ds()


def disassemble_ids(data: bytes, target: str, base_address: int = 0,
                    symbols: Iterable[int] = ()) -> Columns:
    """:func:`disassemble` as :class:`~kpatch.isa.bulk.Columns`: the
    addresses, an encoding index per instruction and the
    :class:`~kpatch.isa.instruction.Decoded` of each distinct encoding."""
    check_target(target)
    cache = cache_for(target)
    data = bytes(data)
    end_all = len(data)
    starts = sorted({a - base_address for a in symbols if 0 <= a - base_address < end_all} | {0})
    bounds = list(zip(starts, starts[1:] + [end_all]))
    with no_gc():
        return walk_ids(data, bounds, cache, base_address, skip_zeros=True)


def disasm_lines(data: bytes, target: str, base_address: int = 0,
                 symbols: Iterable[int] = ()) -> list[str]:
    """``--format lines`` output: ``<hex address>\t<llvm-objdump text>``."""
    return format_lines(disassemble(data, target, base_address, symbols))


def format_lines(insts: list[Instruction]) -> list[str]:
    """``<hex address>\t<text>`` for each instruction."""
    return [f"{i.address:x}\t{i.d._text or i.d.text}" for i in insts]
