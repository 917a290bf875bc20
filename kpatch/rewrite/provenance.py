"""The provenance note kpatch leaves in every object it patches.

An extra ELF note in the ``.note`` section: owner ``"kpatch"``, type
:data:`NT_KPATCH_PROVENANCE` (0x4b50, "KP"; note types are scoped by their
owner, but readers such as llvm-readelf give 1, 2, 0x100 and 0x101 generic
meanings for unknown owners, so kpatch avoids those),
descriptor = one JSON object (UTF-8, keys sorted), readable with
``llvm-readelf --notes`` / ``strings``.  Usual keys:

``kpatch_version``
    the kpatch that wrote it;
``rules``
    the rule ids applied;
``source_md5``
    MD5 of the object before patching;
``made_safe_for``
    the hardware the code was made safe for (``gfx1010``), which ``scan``
    uses instead of the e_flags label (``gfx1030`` in override mode);
``mode``
    ``override``, ``native`` or ``relabel``.

Writing replaces an existing kpatch note, so a second apply can recognise
its own output (idempotency) without piling notes up.
"""

from __future__ import annotations

import json

from kpatch.codeobject import CodeObject
from kpatch.containers.kdb import md5_hex
from kpatch.errors import FormatError, UsageError
from kpatch.rewrite.headers import note_bytes, note_section, replace_note, replace_section

PROVENANCE_OWNER = "kpatch"
NT_KPATCH_PROVENANCE = 0x4B50


def provenance_record(source: bytes, *, rules: list[str], made_safe_for: str, mode: str,
                      **extra) -> dict:
    """The standard record for an object made from ``source`` (its bytes)."""
    from kpatch import __version__
    rec = {"kpatch_version": __version__, "rules": list(rules),
           "source_md5": md5_hex(bytes(source)),  # (hashed once: the DB reader hashed these bytes already)
           "made_safe_for": made_safe_for, "mode": mode}
    rec.update(extra)
    return rec


def encode_record(record: dict) -> bytes:
    try:
        return json.dumps(record, sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False).encode()
    except (TypeError, ValueError) as e:
        raise UsageError(f"provenance record is not JSON-serialisable: {e}") from None


def _find(co: CodeObject):
    found = [n for n in co.elf.notes if n.owner == PROVENANCE_OWNER and n.type == NT_KPATCH_PROVENANCE]
    if len(found) > 1:
        raise FormatError(f"{len(found)} kpatch provenance notes (expected at most one)")
    return found[0] if found else None


def add_provenance(data: bytes, record: dict) -> bytes:
    """``data`` with the kpatch provenance note set to ``record`` (added or replaced)."""
    index, body = provenance_section(data, record)
    return replace_section(bytes(data), index, body)


def provenance_section(data: bytes, record: dict) -> tuple[int, bytes]:
    """(index, new contents) of the note section of ``data`` that holds the
    provenance note set to ``record``: what :func:`add_provenance` lays
    out, for callers that lay the object out themselves (the patcher adds it
    in the same pass as its code edits)."""
    desc = encode_record(record)
    co = CodeObject.from_bytes(data)
    old = _find(co)
    if old is not None:
        return replace_note(co.data, old, desc)
    anchor = co.metadata_note or (co.elf.notes[0] if co.elf.notes else None)
    if anchor is None:
        raise UsageError("the code object has no note section to hold the provenance note")
    s = note_section(co.data, anchor)
    body = co.data[s.offset:s.offset + s.size]
    align = anchor.align
    body += bytes(-len(body) % align) + note_bytes(PROVENANCE_OWNER, NT_KPATCH_PROVENANCE, desc, align)
    return s.index, body


def read_provenance(data: bytes) -> dict | None:
    """The provenance record kpatch left in ``data``, or None if it has none."""
    note = _find(CodeObject.from_bytes(data))
    if note is None:
        return None
    try:
        rec = json.loads(note.desc.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise FormatError(f"kpatch provenance note is not JSON: {e}") from None
    if not isinstance(rec, dict):
        raise FormatError("kpatch provenance note is not a JSON object")
    return rec
