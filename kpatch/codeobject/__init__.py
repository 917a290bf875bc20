"""codeobject: one AMDGPU ELF code object.

* :mod:`kpatch.elf.reader` -- the lazy ELF64 reader it reads through.
* :mod:`.target` -- every EF_AMDGPU_MACH value, ``e_flags`` <-> :class:`TargetId`.
* :mod:`.mpack` / :mod:`.metadata` -- the NT_AMDGPU_METADATA MessagePack note,
  decoded and re-encoded byte for byte.
* :mod:`.descriptor` -- the 64-byte kernel descriptor, every field named.
* :mod:`.model` -- :class:`CodeObject`, :class:`Kernel` and :class:`FunctionExtent` (where each function starts and ends).
"""

from kpatch.codeobject.descriptor import KernelDescriptor
from kpatch.codeobject.metadata import Metadata, decode_metadata, encode_metadata
from kpatch.codeobject.model import CodeObject, FunctionExtent, Kernel
from kpatch.codeobject.target import MACHS, Mach, TargetId, e_flags_for, target_from_e_flags

__all__ = [
    "CodeObject", "FunctionExtent", "Kernel", "KernelDescriptor", "Metadata", "decode_metadata",
    "encode_metadata", "TargetId", "Mach", "MACHS", "target_from_e_flags", "e_flags_for",
]
