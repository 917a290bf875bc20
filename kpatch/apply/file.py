"""`kpatch apply FILE -o OUT`: one code object, bundle, CCOB or host library.

A code object, plain bundle or CCOB is patched as a whole
(:func:`kpatch.apply.blob.patch_blob`) and written to OUT atomically.

A host ELF file (HIP executable or shared library) keeps its layout: each
bundle in ``.hip_fatbin`` is patched and written back at the same file
offset.  Bundles start at 4 KiB boundaries, each followed by a NUL byte and
zero padding, so a patched bundle may grow into the padding up to one byte
before the start of the next bundle (or the end of the section); one that no
longer fits is refused with the sizes, and the other bundles are still
patched - unless the user chose ``drop_other_targets``
(``--drop-other-targets``): then such a bundle keeps only its host entries
and its gfx1030/gfx1010 entries, which makes room (each entry for another
GPU is typically megabytes) at the price of the library no longer running
on those GPUs; it is refused if even that does not fit.  The library is copied to a
temporary file next to OUT, patched there (one bundle in memory at a time)
and renamed over OUT.

OUT is written only when something changed; it must not be in a system
directory.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

from kpatch.containers.bundle import subset_bundle
from kpatch.containers.discover import sniff
from kpatch.containers.limits import check_regular_file, open_input
from kpatch.containers.hostelf import FATBIN_SECTION, FatbinBundle, fatbin_sections, find_fatbin_bundles
from kpatch.containers.uri import Uri
from kpatch.errors import FormatError, KpatchError, UsageError
from kpatch.apply.db import ChangeFn
from kpatch.apply.blob import blob_kind, patch_blob
from kpatch.atomicfile import new_file_mode, output_errors, replacing, write_atomic
from kpatch.miopen.paths import check_output_dir
from kpatch.rewrite.outcome import KernelOutcome, PatchFn, ProvenanceFn

PART_STATUSES = ("changed", "unchanged", "refused", "error")


@dataclass
class PartReport:
    """One patched unit of the file: the whole file, or one fatbin bundle."""

    uri: str
    status: str  # changed | unchanged | refused | error
    reason: str = ""
    kernels: list[KernelOutcome] = field(default_factory=list)
    note: str = ""

    def to_json(self) -> dict:
        return {"uri": self.uri, "status": self.status, "reason": self.reason, "note": self.note,
                "kernels": [k.to_json() for k in self.kernels]}


@dataclass
class FileApplyResult:
    """The outcome of :func:`apply_to_file`."""

    source: str
    output: str
    kind: str
    parts: list[PartReport] = field(default_factory=list)
    written: bool = False
    dry_run: bool = False

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in PART_STATUSES}
        for p in self.parts:
            out[p.status] += 1
        for s in ("patched", "refused", "untouched"):
            out[f"kernels_{s}"] = sum(1 for p in self.parts for k in p.kernels if k.status == s)
        return out


def _read_head(path: str) -> bytes:
    with open_input(path) as f:
        return f.read(64)


def apply_to_file(path: str, out: str, *, mode: str, rule_sets: list[str], patch_fn: PatchFn,
                  is_patched: ProvenanceFn, dry_run: bool = False, on_change: ChangeFn | None = None,
                  drop_other_targets: bool = False) -> FileApplyResult:
    """Patch ``path`` into ``out`` (see the module doc).  ``on_change`` is
    called with (label, original code object, patched code object) for each
    code object that changed."""
    check_regular_file(path)  # (a FIFO or device is never opened: reading one would block)
    kind = sniff(_read_head(path), path)
    if kind in ("kdb", "kdb.bz2"):
        raise UsageError("is a MIOpen kernel DB: use `kpatch apply --db`", path)
    if kind not in ("hsaco", "bundle", "ccob", "hostelf"):
        raise UsageError("not a code object, offload bundle or host library", path)
    check_output_dir(os.path.dirname(os.path.abspath(out)), create=not dry_run)
    kw = dict(mode=mode, rule_sets=rule_sets, patch_fn=patch_fn, is_patched=is_patched)
    result = FileApplyResult(os.path.abspath(path), os.path.abspath(out), kind, dry_run=dry_run)
    if kind == "hostelf":
        _apply_host(path, out, result, dry_run, kw, on_change, drop_other_targets)
        return result
    with open(path, "rb") as f:
        data = f.read()
    where = Uri("file", os.path.abspath(path))
    part = PartReport(str(where), "unchanged")
    result.parts.append(part)
    try:
        r = patch_blob(data, **kw)
    except KpatchError as e:
        part.status, part.reason = "error", e.reason
        return result
    part.kernels, part.note = r.kernels, r.note
    if r.data is None:
        if r.withheld:
            part.status, part.reason = "refused", r.withheld
        return result
    part.status = "changed"
    _report_pairs(on_change, where, r.pairs)
    if not dry_run:
        with output_errors(out):
            write_atomic(out, r.data)
        result.written = True
    return result


def _fatbin_limits(path: str, bundles: list[FatbinBundle]) -> dict[int, int]:
    """For each bundle offset, the file offset it may extend to: the next
    bundle's start or the end of its ``.hip_fatbin`` section."""
    spans = fatbin_sections(path)
    limits: dict[int, int] = {}
    starts = sorted(b.offset for b in bundles)
    for b in bundles:
        end = next((hi for lo, hi in spans if lo <= b.offset < hi), b.offset + b.size)
        later = [s for s in starts if b.offset < s < end]
        limits[b.offset] = min(later) if later else end
    return limits


def _report_pairs(on_change: ChangeFn | None, where: Uri, pairs) -> None:
    if on_change is not None:
        for entry_id, old, new in pairs:
            on_change(str(where.with_(entry=entry_id)) if entry_id else str(where), old, new)


#: processors whose bundle entries --drop-other-targets keeps (the ones kpatch patches or labels)
KEEP_PROCESSORS = ("gfx1030", "gfx1010")


def _keep_entry(e) -> bool:
    return e.is_host or e.target_id.split(":")[0] in KEEP_PROCESSORS


def _make_room(data: bytes, room: int) -> tuple[bytes, list[str]] | None:
    """``data`` (a patched plain bundle) without the entries for other GPUs,
    if that fits in ``room`` bytes; None otherwise."""
    if blob_kind(data) != "bundle":
        return None
    small, dropped = subset_bundle(data, _keep_entry)
    return (small, dropped) if dropped and len(small) <= room else None


def _apply_host(path: str, out: str, result: FileApplyResult, dry_run: bool, kw: dict,
                on_change: ChangeFn | None, drop_other_targets: bool = False) -> None:
    bundles = find_fatbin_bundles(path)
    if not bundles:
        raise UsageError(f"host ELF file without a {FATBIN_SECTION} section: nothing to patch", path)
    limits = _fatbin_limits(path, bundles)
    base = Uri("file", os.path.abspath(path))
    writes: list[tuple[int, bytes, int]] = []
    with open(path, "rb") as f:
        for b in bundles:
            where = base.with_(offset=b.offset, size=b.size)
            part = PartReport(str(where), "unchanged")
            result.parts.append(part)
            try:
                r = patch_blob(os.pread(f.fileno(), b.size, b.offset), **kw)
            except KpatchError as e:
                part.status, part.reason = "error", e.reason
                continue
            part.kernels, part.note = r.kernels, r.note
            if r.data is None:
                if r.withheld:
                    part.status, part.reason = "refused", r.withheld
                continue
            # keep the NUL byte HIP puts after each bundle
            room = max(b.size, limits[b.offset] - b.offset - 1)
            smaller = _make_room(r.data, room) if drop_other_targets and len(r.data) > room else None
            if smaller is not None:
                r.data, dropped = smaller
                part.note = f"{part.note}; dropped entries for other GPUs: {', '.join(dropped)}".lstrip("; ")
            if len(r.data) > room:
                part.status = "refused"
                part.reason = (f"the patched bundle is {len(r.data)} bytes; only {room} fit before the next "
                               f"bundle (was {b.size})" + ("" if drop_other_targets else
                                                           "; --drop-other-targets can make room"))
                part.kernels = [KernelOutcome(k.name, "refused", part.reason, k.rules) if k.status == "patched"
                                else k for k in part.kernels]
                continue
            part.status = "changed"
            _report_pairs(on_change, where, r.pairs)
            writes.append((b.offset, r.data, b.size))
    if not writes or dry_run:
        return
    with output_errors(out):
        _write_patched_copy(path, out, writes)
    result.written = True


def _write_patched_copy(path: str, out: str, writes: list[tuple[int, bytes, int]]) -> None:
    """Copy ``path`` next to ``out``, overwrite the bundles, rename over ``out``."""
    with replacing(out, prefix=f".{os.path.basename(out)}.kpatch-", suffix=".tmp") as (fd, tmp):
        os.close(fd)
        shutil.copyfile(path, tmp)
        # a new file's mode (0644 under umask 022; 0755 if the source is executable): not mkstemp's 0600
        os.chmod(tmp, new_file_mode(executable=bool(os.stat(path).st_mode & 0o111)))
        with open(tmp, "rb+") as f:
            for offset, data, old_size in writes:
                f.seek(offset)
                f.write(data)
                if len(data) < old_size:
                    f.write(bytes(old_size - len(data)))
            f.flush()
            os.fsync(f.fileno())
