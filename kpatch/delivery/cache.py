"""The content-addressed cache of patched code objects the load-time hook reads.

Layout under :func:`cache_dir` (``$KPATCH_CACHE_DIR``, else
``$XDG_CACHE_HOME/kpatch``, else ``~/.cache/kpatch``)::

    objects/<key[0:2]>/<key>.<mode>.rec   the record of one (object, mode)
    objects/<key[0:2]>/<key>.<mode>.co    the patched ELF (patched/partial only)
    locks/<key>.<mode>.lock               flock'ed by the hook while it patches
    tmp/                                  the hook's hand-over files to the patcher

``key`` is :func:`kpatch.delivery.hooklib.object_key` of the original bytes.
A record's first line is for the C hook, fixed and ASCII::

    kpatch-cache 1 STATUS OUTSIZE OUTKEY

STATUS: ``patched`` (every unsafe kernel fixed; load the .co), ``partial``
(override mode, as ``kpatch apply FILE`` writes it: fixable kernels patched,
refused ones byte-identical to the original; load the .co unless strict),
``safe`` (nothing to change; load the original), ``refused`` (nothing could
be made safe; no .co), ``error`` (patching failed; the original passes).
OUTSIZE/OUTKEY are the .co's size and key, ``0 -`` without one.  The second
line is one JSON object for Python and humans: key, mode, size, target,
status, kernels (name, outcome, reasons, rules), reason, kpatch_version,
created.

Entries are written atomically (temp file in the same directory, fsync,
rename), the .co before the .rec, so a record exists only when its object is
complete; a patcher killed halfway leaves at most a temp file or a .co
without a record, which no reader uses.  Readers check the .co's size and
key against the record: a mismatch is a corrupt entry, reported as missing
(the hook patches it again).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import kpatch
from kpatch.codeobject import CodeObject
from kpatch.errors import KpatchError, internal_reason
from kpatch.apply.blob import blob_kind, patch_blob
from kpatch.atomicfile import remove_quietly, write_atomic
from kpatch.apply.modes import DEFAULT_RULE_SETS, SOURCE_PROCESSOR, default_patch_fn, default_provenance_fn
from kpatch.rewrite.outcome import KernelOutcome

#: record statuses (see the module doc)
STATUSES = ("patched", "partial", "safe", "refused", "error")
#: modes the hook patches in (KPATCH_MODE)
HOOK_MODES = ("override", "harden")
RECORD_VERSION = 1
_LINE1 = re.compile(r"kpatch-cache (\d+) (\w+) (\d+) ([0-9a-f]{32}|-)\Z")
_KEY = re.compile(r"[0-9a-f]{32}\Z")
_REC_NAME = re.compile(r"([0-9a-f]{32})\.(\w+)\.rec\Z")


def cache_dir() -> str:
    """The cache directory, as the hook finds it: ``$KPATCH_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/kpatch`` (an absolute XDG_CACHE_HOME only), else
    ``~/.cache/kpatch``."""
    env = os.environ
    if env.get("KPATCH_CACHE_DIR"):
        return env["KPATCH_CACHE_DIR"]
    xdg = env.get("XDG_CACHE_HOME", "")
    if xdg.startswith("/"):
        return os.path.join(xdg, "kpatch")
    return os.path.join(os.path.expanduser("~"), ".cache", "kpatch")


def entry_paths(directory: str, key: str, mode: str) -> tuple[str, str]:
    """(record path, patched-object path) of the entry for (key, mode)."""
    if not _KEY.match(key):
        raise ValueError(f"not a cache key: {key!r}")
    base = os.path.join(directory, "objects", key[:2], f"{key}.{mode}")
    return base + ".rec", base + ".co"


@dataclass
class Record:
    """One cache entry: what patching one code object in one mode gave."""

    key: str
    mode: str
    status: str  # patched | partial | safe | refused | error
    size: int = 0  # of the original
    target: str | None = None  # processor of the original, e.g. gfx1030
    kernels: list[dict] = field(default_factory=list)  # {"name", "outcome", "reasons", "rules"}
    reason: str = ""
    out_size: int = 0
    out_key: str | None = None
    kpatch_version: str = kpatch.__version__
    created: str = ""
    path: str = ""  # the .rec file

    @property
    def co_path(self) -> str | None:
        """The patched object's file (patched/partial), else None."""
        return self.path[: -len(".rec")] + ".co" if self.out_key and self.path else None

    def to_json(self) -> dict:
        return {"key": self.key, "mode": self.mode, "size": self.size, "target": self.target,
                "status": self.status, "kernels": self.kernels, "reason": self.reason,
                "kpatch_version": self.kpatch_version, "created": self.created}

    def text(self) -> str:
        """The record file's content (two lines)."""
        line1 = f"kpatch-cache {RECORD_VERSION} {self.status} {self.out_size} {self.out_key or '-'}"
        return line1 + "\n" + json.dumps(self.to_json(), sort_keys=True) + "\n"


def _object_key(data: bytes) -> str:
    from kpatch.delivery.hooklib import object_key

    return object_key(data)


def _parse(text: str, path: str) -> Record | None:
    lines = text.split("\n")
    if len(lines) < 2:
        return None
    m = _LINE1.match(lines[0])
    if not m or int(m.group(1)) != RECORD_VERSION or m.group(2) not in STATUSES:
        return None
    try:
        doc = json.loads(lines[1])
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("status") != m.group(2):
        return None
    out_key = None if m.group(4) == "-" else m.group(4)
    if (m.group(2) in ("patched", "partial")) != (out_key is not None):
        return None
    try:
        return Record(key=str(doc["key"]), mode=str(doc["mode"]), status=m.group(2), size=int(doc.get("size", 0)),
                      target=doc.get("target"), kernels=list(doc.get("kernels") or []),
                      reason=str(doc.get("reason") or ""), out_size=int(m.group(3)), out_key=out_key,
                      kpatch_version=str(doc.get("kpatch_version", "")), created=str(doc.get("created", "")),
                      path=path)
    except (KeyError, TypeError, ValueError):
        return None


def read_record(directory: str, key: str, mode: str, *, verify: bool = True) -> Record | None:
    """The entry for (key, mode), or None when it is missing, unreadable or
    corrupt (a bad record, or - with ``verify`` - a .co whose size or key is
    not what the record says)."""
    rec_path, co_path = entry_paths(directory, key, mode)
    try:
        with open(rec_path, encoding="ascii", errors="strict") as f:
            text = f.read(1 << 20)
    except (OSError, UnicodeDecodeError):
        return None
    rec = _parse(text, rec_path)
    if rec is None or rec.key != key or rec.mode != mode:
        return None
    if verify and rec.out_key is not None:
        try:
            with open(co_path, "rb") as f:
                data = f.read(rec.out_size + 1)
        except OSError:
            return None
        if len(data) != rec.out_size or _object_key(data) != rec.out_key:
            return None
    return rec


def _kernels(kernels: Iterable[KernelOutcome]) -> list[dict]:
    return [{"name": k.name, "outcome": k.status, "reasons": [k.reason] if k.reason else [],
             "rules": list(k.rules)} for k in kernels]


def processor_of(data: bytes) -> str | None:
    """The processor the code object ``data`` is for (``gfx1030``), or None
    when it is not a readable code object or names none."""
    try:
        return processor_or_error(data)
    except KpatchError:
        return None


def processor_or_error(data: bytes) -> str | None:
    """:func:`processor_of`, but a code object that cannot be read raises
    its KpatchError (None: it names no processor)."""
    from kpatch.codeobject import CodeObject

    target = CodeObject.from_bytes(data).target
    return target.processor if target is not None else None


def store(directory: str, rec: Record, patched: bytes | None = None) -> Record:
    """Write ``rec`` (and its patched object) atomically: the .co first, the
    .rec last.  Returns ``rec`` with its path and .co fields set."""
    rec_path, co_path = entry_paths(directory, rec.key, rec.mode)
    os.makedirs(os.path.dirname(rec_path), mode=0o700, exist_ok=True)
    if patched is not None:
        rec.out_size, rec.out_key = len(patched), _object_key(patched)
        write_atomic(co_path, patched)
    else:
        rec.out_size, rec.out_key = 0, None
    rec.path = rec_path
    write_atomic(rec_path, rec.text().encode("ascii"))
    try:  # make the renames durable
        fd = os.open(os.path.dirname(rec_path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
    return rec


#: what HIP reads from the metadata it parsed before the hook saw the code
#: object (its own copy): a load-time patch must leave these as they were
SEGMENT_SIZES = (".group_segment_fixed_size", ".private_segment_fixed_size", ".kernarg_segment_size")


def segment_changes(original: bytes, patched: bytes) -> list[str]:
    """Where ``patched`` differs from ``original`` in a kernel's group (LDS),
    private (scratch) or kernarg segment size, in the metadata or the kernel
    descriptor, or in the set of kernels ('' list: nowhere)."""
    def sizes(data: bytes) -> dict[str, tuple]:
        co = CodeObject.from_bytes(data)
        out = {}
        for k in co.kernels:
            md = k.metadata or {}
            d = k.descriptor
            out[k.name] = (tuple(md.get(f) for f in SEGMENT_SIZES),
                           (d.group_segment_fixed_size, d.private_segment_fixed_size, d.kernarg_size))
        return out

    old, new = sizes(original), sizes(patched)
    if set(old) != set(new):
        return [f"the kernels differ ({', '.join(sorted(set(old) ^ set(new)))})"]
    return [f"{name}: metadata {old[name][0]} -> {new[name][0]}, descriptor {old[name][1]} -> {new[name][1]} "
            f"(group, private, kernarg)" for name in sorted(old) if old[name] != new[name]]


def patch_into_cache(data: bytes, mode: str, directory: str) -> Record:
    """Patch one bare code object exactly as ``kpatch apply FILE -o OUT
    --mode MODE`` does (:func:`kpatch.apply.blob.patch_blob` with the
    mode's default rule sets) and store the entry.  Every outcome is stored,
    a refusal or a failure too (status ``refused`` / ``error`` with the
    reason), so the hook does not retry it on every load.  OSError if the
    cache cannot be written."""
    data = bytes(data)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    rec = Record(key=_object_key(data), mode=mode, status="error", size=len(data), created=now)
    patched = None
    try:
        if mode not in HOOK_MODES:
            raise KpatchError(f"mode {mode!r}: the hook patches in {' or '.join(HOOK_MODES)} mode")
        if blob_kind(data) != "code-object":
            raise KpatchError("not an AMDGPU code object")
        rec.target = processor_of(data)
        if rec.target != SOURCE_PROCESSOR[mode]:
            raise KpatchError(f"code for {rec.target or 'an unknown target'}; --mode {mode} takes "
                              f"{SOURCE_PROCESSOR[mode]} code")
        r = patch_blob(data, mode=mode, rule_sets=list(DEFAULT_RULE_SETS[mode]), patch_fn=default_patch_fn(mode),
                       is_patched=default_provenance_fn())
    except KpatchError as e:
        rec.reason = e.reason
    except Exception as e:  # a bug in kpatch: recorded like any failure, the original passes
        rec.reason = internal_reason(e)
    else:
        refused = [k for k in r.kernels if k.status == "refused"]
        rec.kernels = _kernels(r.kernels)
        changed = segment_changes(data, r.data) if r.data is not None else []
        if changed:  # HIP would size the dispatch from the unpatched metadata: pass the original
            rec.reason = ("the patch changed what HIP takes from its own copy of the unpatched metadata: "
                          + "; ".join(changed))
        elif r.data is not None:
            rec.status, patched = ("partial" if refused else "patched"), r.data
            rec.reason = r.note if refused else ""
        elif refused:
            rec.status = "refused"
            rec.reason = "; ".join(f"{k.name}: {k.reason}" for k in refused)
        else:
            rec.status = "safe"
    return store(directory, rec, patched)


def entries(directory: str) -> Iterator[Record]:
    """Every readable, intact entry of the cache (corrupt ones are skipped;
    :func:`prune` removes them)."""
    root = os.path.join(directory, "objects")
    try:
        subdirs = sorted(os.listdir(root))
    except OSError:
        return
    for sub in subdirs:
        try:
            names = sorted(os.listdir(os.path.join(root, sub)))
        except OSError:
            continue
        for name in names:
            m = _REC_NAME.match(name)
            if m:
                rec = read_record(directory, m.group(1), m.group(2))
                if rec is not None:
                    yield rec


#: temp and hand-over files younger than this may belong to a patcher still running
STALE_SECONDS = 3600.0


def _prune_locks(locks: str) -> None:
    """Remove the lock files in ``locks`` that no process holds.

    Each is unlinked while this process holds its lock (taken without
    waiting; a held one is skipped).  The hook re-checks after locking that
    the file it holds is still the one at the path, so one that locked the
    file just unlinked opens the path again instead of patching beside a
    second holder."""
    import fcntl

    try:
        names = os.listdir(locks)
    except OSError:
        return
    for name in names:
        if not name.endswith(".lock"):
            continue
        path = os.path.join(locks, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            remove_quietly(path)  # while this process holds its lock
        except OSError:
            pass  # a hook is patching this object now
        finally:
            os.close(fd)


def prune(directory: str, *, statuses: Iterable[str] | None = None, older_than: float | None = None,
          everything: bool = False) -> int:
    """Remove entries: all (``everything``), those with a status in
    ``statuses``, or those created more than ``older_than`` seconds ago
    (record file time); always corrupt entries, patched objects without a
    record and leftover temp files older than :data:`STALE_SECONDS`
    (with ``everything``: at once) and the lock files no process holds.
    Returns the number of entries (records) removed."""
    wanted = set(statuses or ())
    now = time.time()
    removed = 0
    root = os.path.join(directory, "objects")
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            try:
                age = now - os.stat(path).st_mtime
            except OSError:
                continue
            m = _REC_NAME.match(name)
            if m:
                rec = read_record(directory, m.group(1), m.group(2))
                drop = (everything or rec is None or rec.status in wanted
                        or (older_than is not None and age > older_than))
                if drop:
                    remove_quietly(path, path[: -len(".rec")] + ".co")
                    removed += 1
            elif name.endswith(".co"):
                if not os.path.exists(path[: -len(".co")] + ".rec") and (everything or age > STALE_SECONDS):
                    remove_quietly(path)
            elif name.startswith(".kpatch-") and (everything or age > STALE_SECONDS):
                remove_quietly(path)
    _prune_locks(os.path.join(directory, "locks"))
    d = os.path.join(directory, "tmp")
    try:
        names = os.listdir(d)
    except OSError:
        names = []
    if names:
        for name in names:
            path = os.path.join(d, name)
            try:
                if everything or now - os.stat(path).st_mtime > STALE_SECONDS:
                    remove_quietly(path)
            except OSError:
                pass
    return removed


