"""Header-level edits: ``e_flags``, the metadata note, kernel descriptor fields.

None of these moves code by itself.  A metadata note that changes size
changes the size of the ``.note`` section; everything after it is laid out
again by :func:`kpatch.rewrite.relocate.rewrite` (section offsets,
segments, symbols, dynamic entries, descriptor entry offsets and getpc
literals when code and data end up at new distances).

:func:`note_bytes` / :func:`replace_note` build and splice ELF notes (name
and descriptor padded to the note area's alignment).

Header actions of rules (``header = {KEY = VALUE}`` in ``rules/*.toml``)
are data: :data:`kpatch.rewrite.headeractions.HEADER_ACTIONS` is the one
table from a key to what it does, the loader (:mod:`kpatch.rewrite.rules`)
accepts exactly its keys and values, and :func:`perform` executes them:

* kernel actions (``wgp_mode``) change the descriptor and the metadata of
  the kernels whose findings the rule handled;
* object actions (``mach``, ``xnack``) change the code object's target id:
  ``e_flags`` and ``amdhsa.target``.
"""

from __future__ import annotations

from typing import Callable

from kpatch.codeobject import CodeObject, KernelDescriptor, Metadata, e_flags_for
from kpatch.codeobject.descriptor import KD_SIZE
from kpatch.elf.reader import EHDR, NHDR, SHT_NOTE, ElfFile, Note
from kpatch.codeobject import mpack
from kpatch.codeobject.metadata import KEY_KERNELS, decode_metadata, encode_metadata, spread_metadata
from kpatch.errors import UsageError
from kpatch.rewrite.headeractions import HEADER_ACTIONS


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
    return replace_notes(data, note_section(data, note), [(note, new_desc)])


def replace_notes(data: bytes, s, changes: list[tuple[Note, bytes]]) -> tuple[int, bytes]:
    """(section index, new contents of section ``s``) with each (note, new
    descriptor) of ``changes`` (notes of that section) replaced."""
    body = bytes(data[s.offset:s.offset + s.size])
    for note, new_desc in sorted(changes, key=lambda c: c[0].offset, reverse=True):  # later first: offsets hold
        start = note.offset - s.offset
        end = min(note.desc_offset - s.offset + _pad(len(note.desc), note.align), len(body))
        body = body[:start] + note_bytes(note.owner, note.type, new_desc, note.align) + body[end:]
    return s.index, body


def replace_section(data: bytes, index: int, body: bytes) -> bytes:
    """``data`` with section ``index`` holding ``body``, laid out again if the size changed."""
    s = ElfFile(data).sections[index]
    if len(body) == s.size:
        return bytes(data[:s.offset]) + bytes(body) + bytes(data[s.offset + s.size:])
    # the re-layout (with the code scan, the ISA and numpy) only when a size changes
    from kpatch.rewrite.relocate import rewrite

    return rewrite(data, None, [], section_contents={index: bytes(body)}).data


def set_e_flags(data: bytes, e_flags: int) -> bytes:
    """``data`` with the ELF header's e_flags set (the target: mach, xnack, sramecc)."""
    ElfFile(data)
    if not 0 <= e_flags < 2**32:
        raise UsageError(f"e_flags {e_flags} does not fit 32 bits")
    at = EHDR.offset_of("e_flags")
    return bytes(data[:at]) + e_flags.to_bytes(4, "little") + bytes(data[at + 4:])


def set_metadata(data: bytes, updater: Callable[[Metadata], None]) -> bytes:
    """Re-encode the NT_AMDGPU_METADATA note(s) after ``updater`` changed the
    map (:attr:`CodeObject.metadata`: with several notes, the merged map).

    Each note's size and padding follow its new encoding; when a note grows
    or shrinks, the layout after it is redone.
    """
    co = CodeObject.from_bytes(data)
    if co.metadata_note is None:
        raise UsageError("the code object has no NT_AMDGPU_METADATA note")
    md = co.metadata
    updater(md)
    return write_metadata(co, md)


def set_kernel_metadata(data: bytes, symbols, update: Callable[[dict], object], needs=None) -> bytes:
    """``data`` with ``update(kmd)`` done to the metadata map of every kernel
    whose ``.symbol`` is in ``symbols``: what :func:`set_metadata` gives
    with an updater that does this to those maps of ``md.kernels`` (and
    nothing else), without decoding the whole map losslessly (a Tensile
    object's is megabytes of MessagePack, kpatch's lossless reader is pure
    Python).

    Each kernel map is one MessagePack value of the note, whose bytes
    :func:`~kpatch.codeobject.mpack.pack` gives back exactly for what it did
    not change (``pack(unpack(b)) == b``), and the containers around it keep
    their headers (a kernel map stays one element of ``amdhsa.kernels``): so
    the note set_metadata writes is the note with each changed kernel map's
    bytes replaced by that map decoded losslessly, updated and encoded
    again, and only those maps are.  The note is read by the C reader first
    (:func:`~kpatch.codeobject.metadata.decode_metadata` with ``lossless=False``
    refuses what the lossless reader refuses: its size, repeated keys,
    nesting) and walked with it for where each kernel map starts and ends.
    An object this does not cover exactly (no note or several, a note whose
    root is not a map, or whose ``amdhsa.kernels`` is not a list of maps)
    goes through :func:`set_metadata`, as does any error (set_metadata
    reports it).

    ``needs`` (keys): the caller's word that ``update`` leaves a map that
    has none of these keys as it is (e.g. a header action's
    ``metadata_key``): such maps are not decoded at all."""
    try:
        new = _spliced_kernel_maps(data, symbols, update, needs)
    except Exception:  # (set_metadata meets the same problem and says it in its words)
        new = None
    if new is None:
        def updater(md: Metadata) -> None:
            for kmd in md.kernels:
                if kmd.get(".symbol") in symbols:
                    update(kmd)

        return set_metadata(data, updater)
    return new


def _spliced_kernel_maps(data: bytes, symbols, update: Callable[[dict], object], needs=None) -> bytes | None:
    """:func:`set_kernel_metadata`'s result, or None where it does not apply."""
    import msgpack  # (imported on first use, as the read-only metadata reader does)

    co = CodeObject.from_bytes(data, lossless=False)
    if len(co.metadata_notes) != 1:
        return None
    note = co.metadata_notes[0]
    desc = note.desc
    plain = decode_metadata(desc, lossless=False)
    root = plain.root
    if type(root) is not dict:
        return None
    kernels = root.get(KEY_KERNELS)
    if not kernels:  # (set_metadata's md.kernels: nothing to update)
        return bytes(data)
    if type(kernels) is not list or any(type(k) is not dict for k in kernels):
        return None
    chosen = [j for j, k in enumerate(kernels) if k.get(".symbol") in symbols
              and (needs is None or any(n in k for n in needs))]
    if not chosen:
        return bytes(data)
    # where each element of amdhsa.kernels starts and ends in the note
    u = msgpack.Unpacker(raw=False, strict_map_key=False, unicode_errors="surrogateescape",
                         max_buffer_size=max(len(desc), 1))
    u.feed(desc)
    spans = None
    for _ in range(u.read_map_header()):
        key = u.unpack()
        if key != KEY_KERNELS:
            u.skip()
            continue
        spans = []
        for _ in range(u.read_array_header()):
            at = u.tell()
            u.skip()
            spans.append((at, u.tell()))
    if spans is None or len(spans) != len(kernels):
        return None
    out, pos = [], 0
    for j in chosen:
        a, b = spans[j]
        kmd = mpack.unpack(desc[a:b])
        update(kmd)
        out += [desc[pos:a], mpack.pack(kmd)]
        pos = b
    new_desc = b"".join(out) + desc[pos:]
    return _write_notes(bytes(data), co.metadata_notes, [new_desc])


def write_metadata(co: CodeObject, md: Metadata) -> bytes:
    """``co`` with its NT_AMDGPU_METADATA notes re-encoded from ``md`` (its
    :attr:`~CodeObject.metadata`, changed; see :func:`set_metadata`) - for a
    caller that has decoded the map already (decoding is the slow part).
    A kernel's map goes back into the note that describes it; a top-level
    change (``amdhsa.target``) into every note that has the key; notes that
    did not change keep their bytes."""
    parts = co.metadata_parts
    spread_metadata(md, parts)
    return _write_notes(bytes(co.data), co.metadata_notes, [encode_metadata(p) for p in parts])


def _write_notes(data: bytes, notes, wanted: list[bytes]) -> bytes:
    """``data`` with each of its metadata ``notes`` holding the descriptor of
    ``wanted`` at the same place (notes whose bytes did not change are kept)."""
    while True:
        changed = [(n, d) for n, d in zip(notes, wanted) if d != n.desc]
        if not changed:
            return data
        section = note_section(data, changed[0][0])
        in_section = [(n, d) for n, d in changed if section.offset <= n.offset < section.offset + section.size]
        index, body = replace_notes(data, section, in_section)
        data = replace_section(data, index, body)
        notes = CodeObject.from_bytes(data).metadata_notes  # the same notes, where they are now


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


# --- header actions of rules --------------------------------------------------------


def perform(data: bytes, kernel_actions: list[tuple[tuple, list]], object_actions: tuple = ()) -> bytes:
    """``data`` with rules' header actions done.

    ``kernel_actions``: (``((KEY, VALUE), ...)``, kernels) pairs - each
    kernel's descriptor and metadata changed (descriptors in one parse, the
    metadata decoded once and written once, only when a kernel's map
    changed); ``object_actions``: ``((KEY, VALUE), ...)`` for the target
    id, then written to ``e_flags`` and ``amdhsa.target`` (when the metadata
    has it).
    """
    kernel_actions = [(acts, ks) for acts, ks in kernel_actions if acts and ks]
    if kernel_actions:
        data = _perform_kernel(data, kernel_actions)
    if object_actions:
        data = _perform_object(data, object_actions)
    return data


def _perform_kernel(data: bytes, kernel_actions: list[tuple[tuple, list]]) -> bytes:
    co = CodeObject.read_only(data)  # (descriptors; the metadata is written from the next one)
    by_symbol: dict[str, object] = {}
    for k in co.kernels:  # first match wins, as in CodeObject.kernel
        by_symbol.setdefault(k.name, k)
        by_symbol.setdefault(k.symbol, k)
    out = bytearray(co.data)
    for acts, kernels in kernel_actions:
        for want in kernels:
            k = by_symbol.get(want.symbol)
            if k is None:
                raise UsageError(f"no kernel {want.symbol!r} in the code object")
            at = k.descriptor_offset
            kd = KernelDescriptor.from_bytes(bytes(out[at:at + KD_SIZE]), k.descriptor.layout)
            for key, value in acts:
                HEADER_ACTIONS[key].descriptor(kd, value)
            out[at:at + KD_SIZE] = kd.to_bytes()
    data = bytes(out)
    if not co.metadata_notes:
        return data
    by_kernel: dict[str, list] = {}  # symbol -> the actions on its map, in the order set_metadata did them
    for acts, kernels in kernel_actions:
        for k in kernels:
            by_kernel.setdefault(k.symbol, []).extend(acts)

    def update(kmd: dict) -> None:
        for key, value in by_kernel[kmd[".symbol"]]:
            HEADER_ACTIONS[key].metadata(kmd, value)

    keys = {HEADER_ACTIONS[key].metadata_key for acts in by_kernel.values() for key, _ in acts
            if HEADER_ACTIONS[key].metadata is not None}
    return set_kernel_metadata(data, set(by_kernel), update, needs=None if None in keys else keys)


def _perform_object(data: bytes, object_actions: tuple) -> bytes:
    co = CodeObject.from_bytes(data, lossless=False)  # (read only: set_metadata writes)
    t = co.target
    if t is None:
        raise UsageError("the code object has no target id to change")
    order = list(HEADER_ACTIONS)  # the processor first: the features are the new processor's
    for key, value in sorted(object_actions, key=lambda kv: order.index(kv[0])):
        t = HEADER_ACTIONS[key].target(t, value)
    data = set_e_flags(data, e_flags_for(t, co.code_object_version))
    if co.metadata is not None and "amdhsa.target" in co.metadata:
        def update(md):
            md["amdhsa.target"] = t.hsa_target

        data = set_metadata(data, update)
    return data
