"""Assemble GFX10 snippets with llvm-mc-16 (the oracle for encodings and
label addresses) for the analysis unit tests."""

from __future__ import annotations

import io
import subprocess

from elftools.elf.elffile import ELFFile

from conftest import need_tool


def assemble(source: str, mcpu: str = "gfx1030") -> tuple[bytes, dict[str, int]]:
    """(.text bytes, label -> offset) of ``source`` assembled by llvm-mc-16."""
    need_tool("llvm-mc-16")
    obj = subprocess.run(["llvm-mc-16", "-triple=amdgcn-amd-amdhsa", f"-mcpu={mcpu}", "-filetype=obj", "-o", "-"],
                         input=source.encode(), capture_output=True, check=True).stdout
    elf = ELFFile(io.BytesIO(obj))
    text = elf.get_section_by_name(".text")
    idx = next(i for i, s in enumerate(elf.iter_sections()) if s.name == ".text")
    labels = {s.name: s["st_value"] for s in elf.get_section_by_name(".symtab").iter_symbols()
              if s["st_shndx"] == idx and s.name}
    return text.data(), labels
