"""`kpatch warm` and `kpatch cache`: fill the load-time cache ahead of time, and look at it.

:func:`warm` reads everything ``kpatch scan`` reads (``containers.discover``:
kernel DBs, bundles, CCOBs, fat binaries in host libraries, directories such
as a PyTorch install's ``torch/lib``), takes every code object for the mode's
source processor (gfx1030 for override, gfx1010 for harden) as the ELF bytes
the loader sees (decompressed), and patches each one not yet in the cache
with ``cache.patch_into_cache`` -- the function the hook's patcher runs -- so
a later ``kpatch run`` finds it as a cache hit.  :func:`cache_report`
summarises a cache directory.
"""

from __future__ import annotations

import collections
import os
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from kpatch.containers.discover import Found, discover
from kpatch.apply.blob import blob_kind
from kpatch.apply.modes import SOURCE_PROCESSOR
from kpatch.errors import KpatchError


@dataclass
class WarmResult:
    """What warming did: per status, objects newly patched into the cache
    and objects found there already; other targets skipped; errors."""

    new: collections.Counter = field(default_factory=collections.Counter)
    present: collections.Counter = field(default_factory=collections.Counter)
    other_targets: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)
    refusals: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"new": dict(self.new), "already_cached": dict(self.present), "other_targets": self.other_targets,
                "errors": [{"item": i, "reason": r} for i, r in self.errors], "refusals": self.refusals}


@dataclass(frozen=True)
class SourceItem:
    """One item :func:`source_objects` found: a distinct code object for the
    mode's source processor (``data`` and its cache ``key``), an item that
    could not be read (``error``), or neither (other code, another processor)."""

    uri: object
    data: bytes | None = None
    key: str = ""
    error: str = ""


def source_objects(paths: Iterable[str], mode: str) -> Iterator[SourceItem]:
    """Every code object for *mode*'s source processor under *paths*, as the
    loader sees it, each distinct one (by content key) once; what cannot be
    read and what is skipped come too.  What warm patches and doctor's
    coverage counts."""
    from kpatch.delivery import cache, hooklib

    seen: set[str] = set()
    for item in discover(paths):
        if not isinstance(item, Found):
            yield SourceItem(item.uri, error=item.error)
            continue
        data = bytes(item.data)
        if blob_kind(data) != "code-object":
            yield SourceItem(item.uri)
            continue
        try:  # (a code object that cannot be read is an error, never "another target")
            processor = cache.processor_or_error(data)
        except KpatchError as e:
            yield SourceItem(str(item.uri), error=e.reason)
            continue
        if processor != SOURCE_PROCESSOR[mode]:
            yield SourceItem(item.uri)
            continue
        key = hooklib.object_key(data)
        if key not in seen:
            seen.add(key)
            yield SourceItem(item.uri, data, key)


def warm(paths: Iterable[str], mode: str, directory: str,
         on_object: Callable[[str], None] | None = None) -> WarmResult:
    """Patch every code object for *mode* under *paths* into the cache."""
    from kpatch.delivery import cache

    out = WarmResult()
    for item in source_objects(paths, mode):
        if item.error:
            out.errors.append((item.uri, item.error))
            continue
        if item.data is None:
            out.other_targets += 1
            continue
        data, key = item.data, item.key
        if on_object:
            on_object(str(item.uri))
        rec = cache.read_record(directory, key, mode)
        if rec is not None:
            out.present[rec.status] += 1
        else:
            try:
                rec = cache.patch_into_cache(data, mode, directory)
            except OSError as e:
                out.errors.append((str(item.uri), f"cannot write the cache: {e.strerror or e}"))
                continue
            out.new[rec.status] += 1
        if rec.status == "error":
            out.errors.append((str(item.uri), rec.reason or "patching failed"))
        for k in rec.kernels:
            if k.get("outcome") == "refused":
                out.refusals.append({"uri": str(item.uri), "key": key, "kernel": k.get("name"),
                                     "reasons": list(k.get("reasons") or [])})
    return out


def cache_report(directory: str) -> dict:
    """Size, entries by mode and status, and the refused kernels of a cache directory."""
    from kpatch.delivery import cache

    size = 0
    for dirpath, _dirs, names in os.walk(directory):
        for n in names:
            try:
                size += os.lstat(os.path.join(dirpath, n)).st_size
            except OSError:
                pass
    by = collections.Counter()
    refusals = []
    for rec in cache.entries(directory):
        by[f"{rec.mode}/{rec.status}"] += 1
        for k in rec.kernels:
            if k.get("outcome") == "refused":
                refusals.append({"key": rec.key, "mode": rec.mode, "status": rec.status, "kernel": k.get("name"),
                                 "reasons": list(k.get("reasons") or [])})
        if rec.status == "error":
            refusals.append({"key": rec.key, "mode": rec.mode, "status": "error", "kernel": None,
                             "reasons": [rec.reason]})
    return {"cache_dir": directory, "bytes": size, "entries": sum(by.values()), "by_status": dict(sorted(by.items())),
            "refusals": refusals}
