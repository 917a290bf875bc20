"""``--mode relabel``: code compiled for gfx1010, relabelled gfx1030.

Under ``HSA_OVERRIDE_GFX_VERSION=10.3.0`` the HSA loader accepts only code
objects whose ISA says gfx1030.  Code compiled for gfx1010 is correct on the
real (gfx1010) hardware, so changing its label, and nothing else, lets it
load under the override.  The label is in two places:

* ``e_flags``: EF_AMDGPU_MACH becomes gfx1030 (0x036) with no xnack/sramecc
  bits (gfx1030 supports neither);
* the metadata note (V4+): ``amdhsa.target`` becomes
  ``amdgcn-amd-amdhsa--gfx1030``.

The kernel descriptor fields are encoded the same way on both processors,
and no instruction is touched.  When the re-encoded note keeps its size the
edit is made in place; otherwise the rewriter's
:func:`kpatch.rewrite.headers.set_metadata` lays the note out again (an
object it cannot lay out is refused with the reason).
"""

from __future__ import annotations

import struct
from typing import Any

from kpatch.codeobject import CodeObject, TargetId, decode_metadata, e_flags_for, encode_metadata
from kpatch.elf.reader import EHDR
from kpatch.codeobject.metadata import KEY_TARGET
from kpatch.errors import FormatError, KpatchError
from kpatch.rewrite.headers import set_metadata
from kpatch.rewrite.outcome import KernelOutcome, PatchResult

RULE = "relabel-gfx1030"
FROM_PROCESSOR = "gfx1010"
TO_TARGET = TargetId("gfx1030")
E_FLAGS_OFFSET = EHDR.offset_of("e_flags")


def _kernel_names(co: CodeObject) -> list[str]:
    return co.legacy_kernel_names if co.is_legacy else [k.name for k in co.kernels]


def _all(co: CodeObject, status: str, reason: str, rules: tuple[str, ...] = ()) -> PatchResult:
    return PatchResult(None, tuple(KernelOutcome(n, status, reason, rules) for n in _kernel_names(co)))


def _retarget_note(data: bytearray, co: CodeObject) -> tuple[bytes | None, str]:
    """Rewrite ``amdhsa.target`` in ``data`` (already carrying the new
    e_flags).  Returns (new bytes, '') or (None, reason for refusing)."""
    note = co.metadata_note
    if note is None or co.metadata is None or KEY_TARGET not in co.metadata:
        return bytes(data), ""  # V3: no amdhsa.target
    md = decode_metadata(note.desc)
    md[KEY_TARGET] = TO_TARGET.hsa_target
    desc = encode_metadata(md)
    if len(desc) == len(note.desc) and len(co.metadata_notes) == 1:
        data[note.desc_offset:note.desc_offset + len(desc)] = desc
        return bytes(data), ""
    def update(m: Any) -> Any:
        m[KEY_TARGET] = TO_TARGET.hsa_target
        return m

    try:
        return bytes(set_metadata(bytes(data), update)), ""
    except KpatchError as e:
        return None, f"cannot re-lay out the metadata note: {e.reason}"


def relabel_code_object(data: bytes) -> PatchResult:
    """Relabel one gfx1010 code object as gfx1030 (see the module doc).

    Any xnack setting is accepted: xnack+ code only avoids what XNACK replay
    would break, so it is also correct with XNACK off (and a V3 object says
    xnack+ whenever it was built for "any").  Objects for another processor
    are left untouched; V2 objects are refused.  FormatError if ``data`` is
    not a code object."""
    co = CodeObject.from_bytes(data)
    if co.is_legacy:
        return _all(co, "refused", "code object V2 (legacy metadata): not relabelled")
    target = co.target
    if target is None or target.processor != FROM_PROCESSOR:
        label = target.processor if target is not None else "unknown"
        why = "already labelled gfx1030" if label == TO_TARGET.processor else f"labelled {label}, not {FROM_PROCESSOR}"
        return _all(co, "untouched", why)
    out = bytearray(data)
    struct.pack_into("<I", out, E_FLAGS_OFFSET, e_flags_for(TO_TARGET, co.code_object_version))
    new, reason = _retarget_note(out, co)
    if new is None:
        return _all(co, "refused", reason)
    check = CodeObject.from_bytes(new)
    if check.target != TO_TARGET or (check.metadata is not None and check.metadata.target
                                     not in (None, TO_TARGET.hsa_target)):
        raise FormatError(f"relabelled object reads back as {check.target_id}, not {TO_TARGET}")
    return PatchResult(new, tuple(KernelOutcome(n, "patched", f"relabelled {target} -> {TO_TARGET}, code unchanged",
                                                (RULE,)) for n in _kernel_names(co)))


def relabel_patch_fn(data: bytes, *, mode: str = "relabel", rule_sets: list[str] | None = None) -> PatchResult:
    """:func:`relabel_code_object` with the patch-function signature."""
    return relabel_code_object(data)
