"""Patch one blob: a code object, a clang offload bundle, or a CCOB.

A kernel DB entry (or a bundle in a host library) holds either a raw AMDGPU
code object or a bundle whose entries are code objects for several
processors.  :func:`patch_blob` finds the code object the mode takes as input
(gfx1030 code for ``override``/``native``, gfx1010 code for ``relabel``),
runs the patch function on it, checks the result carries the label the mode
promises, and re-wraps it exactly as it came (same bundle layout; a CCOB is
recompressed with its version and method).

In a bundle the entry id names the target, and the HIP runtime picks the
entry by it: when the label changes (``native``: gfx1030 -> gfx1010,
``relabel``: gfx1010 -> gfx1030) the entry id changes with it.  A bundle that
already has code for the result's processor keeps it: ``native`` leaves such
a bundle alone, ``relabel`` puts the relabelled gfx1010 code in place of the
gfx1030 entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kpatch.codeobject import CodeObject
from kpatch.containers.bundle import (
    BundleEntry, compress_ccob, decompress_ccob, infer_bundle_layout,
    parse_bundle, parse_ccob_header, write_bundle)
from kpatch.containers.discover import sniff
from kpatch.errors import FormatError, UsageError
from kpatch.isa.decoder import no_gc
from kpatch.apply.modes import RESULT_PROCESSOR, SOURCE_PROCESSOR
from kpatch.rewrite.outcome import KERNEL_STATUSES, KernelOutcome, PatchFn, PatchResult, ProvenanceFn

@dataclass
class BlobResult:
    """The outcome for one blob: new bytes (None = unchanged), per-kernel
    outcomes, and a short note on what was looked at (e.g. which bundle entry)."""

    data: bytes | None
    kernels: list[KernelOutcome] = field(default_factory=list)
    note: str = ""
    #: (bundle entry id or None, original code object, patched code object) for each change
    pairs: list[tuple[str | None, bytes, bytes]] = field(default_factory=list)
    #: why a patched object is not written (PatchResult.withheld): the blob is refused, not unchanged
    withheld: str = ""

    @property
    def changed(self) -> bool:
        return self.data is not None


def blob_kind(data: bytes) -> str | None:
    """``code-object``, ``bundle``, ``ccob`` or None (not something apply
    patches), by :func:`~kpatch.containers.discover.sniff`'s rule."""
    return _BLOB_KINDS.get(sniff(bytes(data[:24])))


#: What :func:`~kpatch.containers.discover.sniff` calls the blobs apply patches, and what apply calls them.
_BLOB_KINDS = {"hsaco": "code-object", "bundle": "bundle", "ccob": "ccob"}


#: Modes whose output replaces code the runtime would otherwise build or pick
#: for gfx1010: a code object is written whole or not at all.  (Override mode
#: may write an object with refused kernels, whose code is the original's.)
ALL_OR_NOTHING = ("native", "relabel", "harden")


def _processor(target_id: str) -> str:
    return target_id.split(":", 1)[0]


def patch_code_object_checked(code: bytes, *, mode: str, rule_sets: list[str], patch_fn: PatchFn,
                              is_patched: ProvenanceFn) -> PatchResult:
    """Run ``patch_fn`` on one code object the mode applies to.

    A code object for another processor, or one that already carries a
    kpatch provenance record, is left untouched (every kernel ``untouched``
    with the reason).  The patched bytes must parse and carry the label of
    :data:`RESULT_PROCESSOR` for the mode; if not, every kernel is refused.
    In the :data:`ALL_OR_NOTHING` modes a result with any refused kernel is
    not written either (every kernel refused, with the reason).
    FormatError if ``code`` is not a code object, or its metadata note or
    kernel descriptors cannot be read (nothing is patched in an object not
    wholly understood).

    The garbage collector is paused throughout (:func:`~kpatch.isa.decoder.no_gc`):
    reading the object makes hundreds of thousands of small acyclic objects
    (its metadata map, symbols, descriptors), and the collections they would
    trigger traverse the large decode caches of the objects patched before
    for nothing; the patcher pauses it too, so the pause covers the whole
    object and what it leaves is collected once, after."""
    with no_gc():
        return _patch_checked(code, mode=mode, rule_sets=rule_sets, patch_fn=patch_fn, is_patched=is_patched)


def _patch_checked(code: bytes, *, mode: str, rule_sets: list[str], patch_fn: PatchFn,
                   is_patched: ProvenanceFn) -> PatchResult:
    """:func:`patch_code_object_checked`'s work."""
    co = CodeObject.read_only(code)  # (read only: the C MessagePack reader; the patcher gets the same parse)
    co.metadata  # noqa: B018 - read now: a note that does not decode is this blob's error
    co.kernels  # noqa: B018
    names = co.legacy_kernel_names if co.is_legacy else [k.name for k in co.kernels]
    want = SOURCE_PROCESSOR[mode]
    have = co.target.processor if co.target is not None else "unknown"
    if have != want:
        if mode == "relabel" and have == RESULT_PROCESSOR[mode]:
            why = "already labelled gfx1030"
        else:
            why = f"code for {have}; --mode {mode} takes {want} code"
        return PatchResult(None, tuple(KernelOutcome(n, "untouched", why) for n in names))
    if is_patched(code):
        return PatchResult(None, tuple(KernelOutcome(n, "untouched", "already patched by kpatch (provenance record)")
                                       for n in names))
    result = _checked_result(patch_fn(code, mode=mode, rule_sets=list(rule_sets)), code)
    if result.data is None:
        return result
    refused = [k for k in result.kernels if k.status == "refused"]
    if refused and mode in ALL_OR_NOTHING:
        # the object would replace what the runtime builds for the GPU itself:
        # a refused kernel's unsafe code must not ride along in it
        why = (f"not written: --mode {mode} writes a code object only when every kernel in it is safe, and "
               f"{len(refused)} of {len(result.kernels)} were refused ({refused[0].name}: {refused[0].reason})")
        return PatchResult(None, tuple(k if k.status == "refused" else KernelOutcome(k.name, "refused", why, k.rules)
                                       for k in result.kernels))
    try:
        out = CodeObject.from_bytes(result.data)
        label = out.target.processor if out.target is not None else "unknown"
        problem = "" if label == RESULT_PROCESSOR[mode] else \
            f"the patched object is labelled {label}, --mode {mode} needs {RESULT_PROCESSOR[mode]}"
    except FormatError as e:
        problem = f"the patched object does not parse: {e.reason}"
    if problem:
        return PatchResult(None, tuple(KernelOutcome(k.name, "refused", problem, k.rules) for k in result.kernels)
                           or tuple(KernelOutcome(n, "refused", problem) for n in names))
    return result


def _checked_result(result: PatchResult, original: bytes) -> PatchResult:
    """What a patch function returned, as apply takes it: bytes equal to the
    original are no change; a kernel status outside :data:`KERNEL_STATUSES`
    is an error of the patch function (UsageError naming it)."""
    for k in result.kernels:
        if k.status not in KERNEL_STATUSES:
            raise UsageError(f"patch function returned kernel status {k.status!r} "
                             f"(expected one of {', '.join(KERNEL_STATUSES)})")
    if result.data is not None and bytes(result.data) == original:
        return replace(result, data=None)
    return result


def _renamed(entry_id: str, old_target: str, new_target: str) -> str:
    """``entry_id`` with its trailing target id replaced."""
    if not entry_id.endswith(old_target):
        raise FormatError(f"bundle entry id {entry_id!r} does not end with its target id {old_target!r}")
    return entry_id[: len(entry_id) - len(old_target)] + new_target


def _patch_bundle(bundle: bytes, **kw) -> BlobResult:
    mode = kw["mode"]
    entries: list[BundleEntry] = parse_bundle(bundle)
    want, result_proc = SOURCE_PROCESSOR[mode], RESULT_PROCESSOR[mode]
    sources = [e for e in entries if not e.is_host and _processor(e.target_id) == want]
    if not sources:
        ids = ", ".join(e.id for e in entries) or "none"
        return BlobResult(None, [], f"bundle has no {want} entry (entries: {ids})")
    existing = [e for e in entries if not e.is_host and _processor(e.target_id) == result_proc]
    if mode == "relabel":
        sources = sources[:1]  # one gfx1010 entry provides the gfx1030 code
    if mode == "native" and existing:
        return BlobResult(None, [], f"bundle already has native {result_proc} code ({existing[0].id}); left as is")
    new_data: dict[str, bytes] = {}
    new_ids: dict[str, str] = {}
    kernels: list[KernelOutcome] = []
    pairs: list[tuple[str | None, bytes, bytes]] = []
    withheld: list[str] = []
    for e in sources:
        original = bytes(e.data(bundle))
        r = patch_code_object_checked(original, **kw)
        kernels.extend(r.kernels)
        if r.data is None:
            if r.withheld:
                withheld.append(f"{e.id}: {r.withheld}")
            continue
        pairs.append((e.id, original, r.data))
        new_target = CodeObject.from_bytes(r.data).target_id
        if mode == "relabel" and existing:
            # the bundle's gfx1030 slot gets the relabelled code; the gfx1010 entry stays
            for slot in existing:
                new_data[slot.id] = r.data
            continue
        new_data[e.id] = r.data
        if _processor(new_target) != want:
            new_ids[e.id] = _renamed(e.id, e.target_id, new_target)
    note = "bundle entries " + ", ".join(e.id for e in sources)
    if not new_data:
        return BlobResult(None, kernels, note, withheld="; ".join(withheld))
    align, pad_tail = infer_bundle_layout(bundle)
    items = [(new_ids.get(e.id, e.id), new_data.get(e.id, bytes(e.data(bundle)))) for e in entries]
    ids = [i for i, _ in items]
    if len(set(ids)) != len(ids) or not all(ids):
        raise FormatError("offload bundle has duplicate or empty entry ids; cannot rewrite it")
    return BlobResult(write_bundle(items, align, pad_tail=pad_tail), kernels, note, pairs)


def patch_blob(data: bytes, *, mode: str, rule_sets: list[str], patch_fn: PatchFn,
               is_patched: ProvenanceFn) -> BlobResult:
    """Patch a code object, bundle or CCOB (see the module doc).  FormatError
    if ``data`` is none of these or is malformed."""
    r = _patch_blob(data, mode=mode, rule_sets=rule_sets, patch_fn=patch_fn, is_patched=is_patched)
    if r.data is not None:
        partial = written_with_unchanged(r.kernels)
        if partial:
            r.note = f"{r.note}; {partial}" if r.note else partial
    return r


def written_with_unchanged(kernels: list[KernelOutcome]) -> str:
    """For a blob that is written: which of its kernels keep their original
    code because they were refused ('' when none)."""
    refused = [k for k in kernels if k.status == "refused"]
    if not refused:
        return ""
    names = "; ".join(f"{k.name} ({k.reason})" for k in refused)
    return (f"written with {len(refused)} of {len(kernels)} kernels unchanged (their original code, "
            f"what MIOpen would run without kpatch): {names}")


def _patch_blob(data: bytes, **kw) -> BlobResult:
    kind = blob_kind(data)
    if kind == "code-object":
        r = patch_code_object_checked(bytes(data), **kw)
        pairs = [(None, bytes(data), r.data)] if r.data is not None else []
        return BlobResult(r.data, list(r.kernels), "code object", pairs, r.withheld)
    if kind == "bundle":
        return _patch_bundle(bytes(data), **kw)
    if kind == "ccob":
        header = parse_ccob_header(data)
        plain = decompress_ccob(data)
        r = _patch_bundle(plain, **kw)
        r.note = f"CCOB v{header.version} {header.method_name}: {r.note}"
        if r.data is not None:
            r.data = compress_ccob(r.data, version=header.version, method=header.method)
        return r
    raise FormatError(f"not a code object or offload bundle (starts with {bytes(data[:8])!r})")
