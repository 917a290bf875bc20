"""elf: ELF64 little-endian files, whatever they carry.

* :mod:`.layout` -- :class:`Layout`, a declarative fixed-size record (every
  ELF structure is one).
* :mod:`.reader` -- the ELF constants (the one set kpatch uses), the record
  layouts (EHDR, SHDR, PHDR, SYM, NHDR) and :class:`ElfFile`, a lazy reader.

Nothing here knows about AMDGPU code objects (:mod:`kpatch.codeobject`) or
host libraries (:mod:`kpatch.containers.hostelf`); both read through it.
"""
