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
"""

from kpatch.isa import build
from kpatch.isa.decoder import decode, decode_one, iter_decode
from kpatch.isa.encoder import encode, encode_fields
from kpatch.isa.instruction import Instruction
from kpatch.isa.regs import Reg
from kpatch.isa.tables import TARGETS, load
from kpatch.isa.lines import disasm_lines, disassemble, format_lines, objdump_skips

__all__ = ["decode", "decode_one", "iter_decode", "encode", "encode_fields", "Instruction",
           "Reg", "TARGETS", "load", "build", "disasm_lines", "disassemble", "format_lines", "objdump_skips"]
