"""GFX10 (gfx1010 / gfx1030) instruction decoder, encoder and printer.

Public API::

    from kpatch.isa import decode, decode_one, iter_decode, encode, build
    insts = decode(code_bytes, "gfx1030", base_address=0x1000)
    insts[0].mnemonic, insts[0].fields, insts[0].reads, insts[0].text()
    encode(insts[0], glc=1)           # bytes with one field changed
    build.s_nop(0); build.s_waitcnt_depctr(0xffe3)

The ISA is data: :mod:`kpatch.isa.formats` describes the encodings,
``kpatch/isa/tables/<target>.json`` (generated from LLVM by
tools/gen_isa_tables.py) the opcodes; the code here walks them.

The names below are loaded on first use (PEP 562), so that importing one
light module of the package (the tables, one-instruction decoding and
building) does not import numpy and the bulk decoder with it.
"""

from __future__ import annotations

import importlib

#: public name -> the module that defines it (a submodule when the name is one)
_WHERE = {
    "decode": "kpatch.isa.bulk", "iter_decode": "kpatch.isa.bulk",
    "decode_one": "kpatch.isa.decoder",
    "encode": "kpatch.isa.encoder", "encode_fields": "kpatch.isa.encoder",
    "Instruction": "kpatch.isa.instruction", "Reg": "kpatch.isa.regs",
    "TARGETS": "kpatch.isa.tables", "load": "kpatch.isa.tables",
    "build": "kpatch.isa.build",
    "disasm_lines": "kpatch.isa.lines", "disassemble": "kpatch.isa.lines",
    "format_lines": "kpatch.isa.lines", "objdump_skips": "kpatch.isa.lines",
}

__all__ = list(_WHERE)


def __getattr__(name: str):
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'kpatch.isa' has no attribute {name!r}")
    module = importlib.import_module(where)
    value = module if where == f"{__name__}.{name}" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
