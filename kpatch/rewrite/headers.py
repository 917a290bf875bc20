"""Header-level edits: ``e_flags``, the metadata note, kernel descriptor fields.

None of these moves code by itself.  A metadata note that changes size
changes the size of the ``.note`` section; everything after it is laid out
again by :func:`kpatch.rewrite.relocate.rewrite` (section offsets,
segments, symbols, dynamic entries, descriptor entry offsets and getpc
literals when code and data end up at new distances).

:func:`note_bytes` / :func:`replace_note` build and splice ELF notes (name
and descriptor padded to the note area's alignment).
"""

from __future__ import annotations

from typing import Callable

from kpatch.codeobject import CodeObject, KernelDescriptor, Metadata
from kpatch.codeobject.descriptor import KD_SIZE
from kpatch.codeobject.elf import EHDR, NHDR, SHT_NOTE, ElfFile, Note
from kpatch.codeobject.metadata import decode_metadata, encode_metadata
from kpatch.errors import UsageError


def _pad(n: int, align: int) -> int:
    return (n + align - 1) // align * align


def note_bytes(owner: str, note_type: int, desc: bytes, align: int = 4) -> bytes:
    """One ELF note: header, NUL-terminated owner name and descriptor, each padded."""
    name = owner.encode() + b"\0"
    out = NHDR.pack((len(name), len(desc), note_type))
    out += name + bytes(_pad(len(name), align) - len(name))
    out += desc + bytes(_pad(len(desc), align) - len(desc))
    return out


def note_section(data: bytes, note: Note):
    """The SHT_NOTE section holding ``note``, or UsageError."""
    elf = ElfFile(data)
    for s in elf.sections:
        if s.type == SHT_NOTE and s.offset <= note.offset < s.offset + s.size:
            return s
    raise UsageError("the note is in no SHT_NOTE section (stripped section headers?)")


def replace_note(data: bytes, note: Note, new_desc: bytes) -> tuple[int, bytes]:
    """(section index, new section contents) with ``note``'s descriptor replaced."""
    s = note_section(data, note)
    body = data[s.offset:s.offset + s.size]
    start = note.offset - s.offset
    end = min(note.desc_offset - s.offset + _pad(len(note.desc), note.align), len(body))
    new = note_bytes(note.owner, note.type, new_desc, note.align)
    return s.index, body[:start] + new + body[end:]


def replace_section(data: bytes, index: int, body: bytes) -> bytes:
    """``data`` with section ``index`` holding ``body``, laid out again if the size changed."""
    s = ElfFile(data).sections[index]
    if len(body) == s.size:
        return bytes(data[:s.offset]) + bytes(body) + bytes(data[s.offset + s.size:])
    from kpatch.rewrite.relocate import rewrite  # relocate re-exports this module
    return rewrite(data, None, [], section_contents={index: bytes(body)}).data


def set_e_flags(data: bytes, e_flags: int) -> bytes:
    """``data`` with the ELF header's e_flags set (the target: mach, xnack, sramecc)."""
    ElfFile(data)
    if not 0 <= e_flags < 2**32:
        raise UsageError(f"e_flags {e_flags} does not fit 32 bits")
    at = EHDR.offset_of("e_flags")
    return bytes(data[:at]) + e_flags.to_bytes(4, "little") + bytes(data[at + 4:])


def set_metadata(data: bytes, updater: Callable[[Metadata], None]) -> bytes:
    """Re-encode the NT_AMDGPU_METADATA note after ``updater`` changed the map.

    The note's size and padding follow the new encoding; when the note
    grows or shrinks, the layout after it is redone.
    """
    co = CodeObject.from_bytes(data)
    note = co.metadata_note
    if note is None:
        raise UsageError("the code object has no NT_AMDGPU_METADATA note")
    md = decode_metadata(note.desc)
    updater(md)
    return write_metadata(co, md)


def write_metadata(co: CodeObject, md: Metadata) -> bytes:
    """``co`` with its NT_AMDGPU_METADATA note re-encoded from ``md`` (its
    decoded map, changed; see :func:`set_metadata`) - for a caller that has
    decoded the map already (decoding is the slow part)."""
    note = co.metadata_note
    desc = encode_metadata(md)
    if desc == note.desc:
        return bytes(co.data)
    index, body = replace_note(co.data, note, desc)
    return replace_section(co.data, index, body)


def set_descriptor_field(data: bytes, kernel_symbol: str, field: str, value: int) -> bytes:
    """Set one field (word or bit field, e.g. ``WGP_MODE``) of a kernel's descriptor.

    ``kernel_symbol`` is the kernel's name or its ``NAME.kd`` symbol.
    """
    co = CodeObject.from_bytes(data)
    k = co.kernel(kernel_symbol)
    if k is None:
        raise UsageError(f"no kernel {kernel_symbol!r} in the code object")
    kd = KernelDescriptor.from_bytes(co.data[k.descriptor_offset:k.descriptor_offset + KD_SIZE],
                                     k.descriptor.layout)
    kd.set(field, value)
    at = k.descriptor_offset
    return bytes(co.data[:at]) + kd.to_bytes() + bytes(co.data[at + KD_SIZE:])
