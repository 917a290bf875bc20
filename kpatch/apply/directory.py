"""`kpatch apply DIR -o OUTDIR`: a rocBLAS/Tensile library directory as one unit.

rocBLAS loads its GEMM kernels from one directory (``rocblas/library/``
beside the library, or ``ROCBLAS_TENSILE_LIBPATH``): Tensile catalogues
(``TensileLibrary_lazy_<gfx>.dat`` / ``.yaml``) name code object files
(``TensileLibrary_*_<gfx>.co``, ``*_fallback_<gfx>.hsaco``,
``Kernels.so-000-<gfx>.hsaco``) that it loads by file name.  OUTDIR is a copy
of DIR that rocBLAS can be pointed at with ``ROCBLAS_TENSILE_LIBPATH=OUTDIR``:

- every file that holds code of the mode's input processor (gfx1030; decided
  by the bytes: an AMDGPU ELF's ``e_flags``, or a bundle / CCOB with such an
  entry, whatever the file is called) goes through
  :func:`kpatch.apply.file.apply_to_file`, exactly as ``kpatch apply
  FILE -o OUT`` patches it; when that writes nothing (every kernel clean or
  already patched, or refused: override mode writes an object whose refused
  kernels keep their original code, native mode writes an object whole or
  not at all) the file is copied unchanged and the refusals are reported;
- a file that cannot be read as what it claims to be is an error, reported
  with its reason, and copied unchanged (the code rocBLAS would run without
  kpatch); a file that cannot be read at all is an error and missing;
- everything else (catalogues, other GPUs' code, anything unknown) is copied
  byte for byte, with its mode and times;
- a symbolic link that stays inside DIR is made again as a relative link (it
  then points at the copy); one that leaves DIR is followed and its file
  handled as the link's own (OUTDIR needs nothing outside it); one that
  dangles, or leads to a directory outside DIR, is an error.

The copy is built in a temporary directory beside OUTDIR and renamed into
place only when complete (Ctrl-C, a full disk or a bug remove it; nothing
half-written is left).  An existing OUTDIR that is not empty is refused
unless ``force``, and even then only when it is one kpatch wrote (it holds
:data:`MANIFEST`): the new directory takes its place in one exchange of
names, then the old one is removed.  OUTDIR, or a directory it is in, must
not be a system directory; OUTDIR itself must not be a symbolic link, nor
be inside DIR or contain it.

Patching files depends on each file alone, so with kpatch's own patch
functions and more than one such file it runs in worker processes, as
``apply --db`` does (:func:`kpatch.apply.db.jobs_for`); the workers
write the patched files into the temporary directory, everything else
(order, reports, copies) stays in the calling process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import multiprocessing
import os
import shutil
import stat
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterator

from kpatch import __version__
from kpatch.containers.discover import sniff
from kpatch.errors import FormatError, KpatchError, UsageError, disk_full_reason, internal_reason
from kpatch.apply import db as apply_db
from kpatch.apply.db import ChangeFn, jobs_for
from kpatch.apply.file import FileApplyResult, PartReport, apply_to_file
from kpatch.atomicfile import new_file_mode
from kpatch.miopen.paths import check_output_dir
from kpatch.apply.modes import SOURCE_PROCESSOR
from kpatch.rewrite.outcome import PatchFn, ProvenanceFn

#: What became of one file of DIR in OUTDIR.
FILE_STATUSES = ("patched", "unchanged", "refused", "copied", "error")

#: The record kpatch leaves in OUTDIR: what it was made from and what became
#: of each file (also what lets ``--force`` replace the directory).
MANIFEST = ".kpatch-libdir.json"

#: Modes a library directory can be patched in.  rocBLAS picks a code object
#: file by the GPU name in the file name, so relabelled gfx1010 code (which
#: stays in a ``*_gfx1010*`` file) would never be loaded under the override.
DIR_MODES = ("override", "native")


@dataclass
class DirFileReport:
    """One file (or symbolic link) of DIR and what became of it in OUTDIR."""

    path: str  # relative to DIR
    status: str  # patched | unchanged | refused | copied | error
    reason: str = ""  # for errors: why; for copies: what the file is
    kind: str = ""  # hsaco, bundle, ccob, hostelf, link, other (sniffed from the bytes)
    parts: list[PartReport] = field(default_factory=list)
    written: str = ""  # patched | copied | link | "" (nothing in OUTDIR)

    def kernels(self):
        return [k for p in self.parts for k in p.kernels]

    def to_json(self) -> dict:
        return {"path": self.path, "status": self.status, "reason": self.reason, "kind": self.kind,
                "written": self.written or None, "parts": [p.to_json() for p in self.parts]}


@dataclass
class DirApplyResult:
    """The outcome of :func:`apply_to_dir`."""

    source: str
    output: str
    dry_run: bool = False
    files: list[DirFileReport] = field(default_factory=list)
    written: bool = False
    replaced: bool = False  # an existing OUTDIR (kpatch's) was replaced

    @property
    def parts(self) -> list[PartReport]:
        return [p for f in self.files for p in f.parts]

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in FILE_STATUSES}
        for f in self.files:
            out[f.status] += 1
        for s in ("patched", "refused", "untouched"):
            out[f"kernels_{s}"] = sum(1 for f in self.files for k in f.kernels() if k.status == s)
        return out


# --- where OUTDIR goes ---------------------------------------------------------------


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_dirs(src: str, out: str, *, force: bool, create: bool = False) -> tuple[str, str, bool]:
    """(real path of DIR, path OUTDIR will have, whether an OUTDIR is to be
    replaced); UsageError when kpatch must not write there (see the module
    doc).  With ``create``, a missing parent directory of OUTDIR is made."""
    if not os.path.isdir(src):
        raise UsageError("not a directory", src)
    src_real = os.path.realpath(src)
    out = os.path.abspath(out)  # also without a trailing slash, which would follow a link
    if os.path.islink(out):
        raise UsageError("is a symbolic link: kpatch never writes through one; give the directory itself", out)
    parent = check_output_dir(os.path.dirname(os.path.abspath(out)))
    out_real = os.path.join(parent, os.path.basename(os.path.abspath(out)))
    check_output_dir(out_real)
    if _under(out_real, src_real) or _under(src_real, out_real):
        raise UsageError(f"the output directory {out_real} and the library directory {src_real} overlap", out)
    replace = False
    if os.path.lexists(out_real):
        if not os.path.isdir(out_real):
            raise UsageError("exists and is not a directory", out)
        if os.listdir(out_real):
            if not force:
                raise UsageError("exists and is not empty; --force replaces a directory kpatch wrote", out)
            if not os.path.isfile(os.path.join(out_real, MANIFEST)):
                raise UsageError(f"exists and was not written by kpatch (no {MANIFEST} in it): --force replaces "
                                 "only kpatch's own output; remove it yourself or choose another -o", out)
            replace = True
    if create:  # all checks passed: make the parent directory if it is missing
        check_output_dir(parent, create=True)
    return src_real, out_real, replace


# --- the files of DIR ----------------------------------------------------------------


@dataclass
class _Item:
    """One thing found in DIR: a directory, a file, or a link to make again."""

    rel: str
    what: str  # dir | file | link | error
    path: str = ""  # the file to read (for a link followed out of DIR: its target)
    link: str = ""  # the relative link to make (what == "link")
    reason: str = ""  # what == "error"; for a followed link: a note


def _walk(root: str) -> Iterator[_Item]:
    """Everything under ``root`` (a real path), each directory's entries
    (sorted by name) before what is inside its subdirectories."""
    errors: list[OSError] = []
    for here, dirs, files in os.walk(root, onerror=errors.append, followlinks=False):
        while errors:
            e = errors.pop(0)
            yield _Item(os.path.relpath(e.filename, root) if e.filename else ".", "error",
                        reason=f"cannot list the directory: {e.strerror}")
        dirs.sort()
        rel_here = os.path.relpath(here, root)
        for name in sorted(dirs + files):
            if name == MANIFEST and here == root:
                continue  # DIR is an earlier output: its record is written anew
            path = os.path.join(here, name)
            rel = os.path.normpath(os.path.join(rel_here, name))
            try:
                st = os.lstat(path)
            except OSError as e:
                yield _Item(rel, "error", reason=f"cannot read: {e.strerror}")
                continue
            if stat.S_ISLNK(st.st_mode):  # os.walk lists a link to a directory among dirs, but never enters it
                yield _link_item(root, path, rel)
            elif stat.S_ISDIR(st.st_mode):
                yield _Item(rel, "dir", path)
            elif stat.S_ISREG(st.st_mode):
                yield _Item(rel, "file", path)
            else:
                yield _Item(rel, "error", reason="not a regular file, directory or symbolic link: not copied")
    for e in errors:
        yield _Item(os.path.relpath(e.filename, root) if e.filename else ".", "error",
                    reason=f"cannot list the directory: {e.strerror}")


def _link_item(root: str, path: str, rel: str) -> _Item:
    target = os.path.realpath(path)
    if not os.path.exists(target):
        return _Item(rel, "error", reason=f"symbolic link to {os.readlink(path)}, which does not exist: not copied")
    if _under(target, root) and target != root:
        inside = os.path.relpath(target, root)
        return _Item(rel, "link", link=os.path.relpath(inside, os.path.dirname(rel) or "."))
    if os.path.isfile(target):
        return _Item(rel, "file", target, reason=f"symbolic link to {target} outside the directory: its file copied")
    return _Item(rel, "error", reason=f"symbolic link to {target}, not a file inside the directory: not copied")


# --- one file ------------------------------------------------------------------------


def _elf_processor(head: bytes) -> str | None:
    """The processor an AMDGPU ELF header names (None if ``e_flags`` cannot
    be read: patching will say why)."""
    from kpatch.codeobject.target import code_object_version_for_abi, target_from_e_flags

    if len(head) < 52:
        return None
    try:
        version = code_object_version_for_abi(head[8])
        return target_from_e_flags(int.from_bytes(head[48:52], "little"), version).processor
    except (FormatError, ValueError):
        return None


def _classify(path: str, mode: str) -> tuple[str, str]:
    """(kind, why not patched) of a file: why is '' for a file to patch."""
    with open(path, "rb") as f:
        head = f.read(64)
    kind = sniff(head, path) or "other"
    want = SOURCE_PROCESSOR[mode]
    if kind == "hsaco":
        proc = _elf_processor(head)
        if proc is not None and proc != want:
            return kind, f"code object for {proc}"
        return kind, ""
    if kind in ("bundle", "ccob", "hostelf"):
        return kind, ""
    return kind, {"kdb": "an SQLite file", "kdb.bz2": "a bzip2 file", "zip": "a zip file"}.get(kind, "not code")


def _patch_file(path: str, out: str, kw: dict, keep_pairs: bool) -> tuple[object, list]:
    """Patch one file as ``kpatch apply FILE -o OUT`` does.  Returns
    (FileApplyResult, or ("error", reason), and the changed pairs); never
    raises for the file's own problems (nor for a bug met on it)."""
    pairs: list = []
    on_change = (lambda label, old, new: pairs.append((label, old, new))) if keep_pairs else None
    try:
        return apply_to_file(path, out, on_change=on_change, **kw), pairs
    except UsageError as e:  # e.g. a host ELF file without bundles: nothing of it to patch
        return ("copy", e.reason), []
    except KpatchError as e:
        return ("error", e.reason), []
    except OSError as e:
        if disk_full_reason(e) is not None:
            raise
        return ("error", f"cannot read: {e.strerror or e}"), []
    except Exception as e:  # a bug met on this file: the others still go on
        return ("error", internal_reason(e)), []


def _patch_in_worker(path: str, out: str) -> tuple[object, list]:
    kw = dict(apply_db._WORKER_KW)
    keep = kw.pop("keep_pairs")
    return _patch_file(path, out, kw, keep)


def _file_report(item: _Item, kind: str, outcome) -> DirFileReport:
    rep = DirFileReport(item.rel, "copied", item.reason, kind)
    if isinstance(outcome, tuple):
        how, why = outcome
        if how == "copy":
            rep.reason = why
        else:
            rep.status, rep.reason = "error", why
        return rep
    r: FileApplyResult = outcome
    rep.parts = r.parts
    kernels = rep.kernels()
    bad = [p for p in r.parts if p.status == "error"]
    if bad:
        rep.status, rep.reason = "error", "; ".join(p.reason for p in bad)
    elif r.written or (r.dry_run and any(p.status == "changed" for p in r.parts)):
        rep.status = "patched"
    elif any(k.status == "refused" for k in kernels) or any(p.status == "refused" for p in r.parts):
        rep.status = "refused"
    elif kernels:
        rep.status = "unchanged"
    else:
        rep.reason = "; ".join(p.note or p.reason for p in r.parts if p.note or p.reason) or rep.reason
    return rep


# --- the whole directory -------------------------------------------------------------


def apply_to_dir(src: str, out: str, *, mode: str, rule_sets: list[str], patch_fn: PatchFn,
                 is_patched: ProvenanceFn, dry_run: bool = False, force: bool = False,
                 on_file: Callable[[DirFileReport], None] | None = None, on_change: ChangeFn | None = None,
                 jobs: int | None = None, total: Callable[[int], None] | None = None) -> DirApplyResult:
    """Patch the library directory ``src`` into ``out`` (see the module doc).
    ``on_file`` is called with each file's report, in order; ``total`` once
    with the number of files first; ``on_change`` with (label, original,
    patched) for each changed code object.  UsageError (nothing written) when
    ``out`` may not be written."""
    if mode not in DIR_MODES:
        raise UsageError(f"--mode {mode} does not apply to a library directory: rocBLAS loads a code object "
                         f"by the GPU name in its file name ({', '.join(DIR_MODES)} only)", src)
    src_real, out_real, replace = check_dirs(src, out, force=force, create=not dry_run)
    items = list(_walk(src_real))
    result = DirApplyResult(src_real, out_real, dry_run=dry_run)
    if total:
        total(sum(1 for i in items if i.what != "dir"))
    kw = dict(mode=mode, rule_sets=rule_sets, patch_fn=patch_fn, is_patched=is_patched, dry_run=dry_run)
    work = out_real if dry_run else tempfile.mkdtemp(prefix=f".{os.path.basename(out_real)}.kpatch-",
                                                     dir=os.path.dirname(out_real))
    try:
        if not dry_run:
            _make_dirs(items, work)
        n = jobs if jobs is not None else jobs_for(patch_fn, is_patched)
        for rep, pairs in _reports(items, work, kw, n, keep_pairs=on_change is not None, mode=mode):
            if on_change is not None and rep.written == "patched":
                for label, old, new in pairs:
                    on_change(label, old, new)
            result.files.append(rep)
            if on_file:
                on_file(rep)
        if dry_run:
            return result
        _dir_modes(items, work, src_real)
        _write_manifest(work, result, mode, rule_sets)
        result.replaced = _put_in_place(work, out_real, replace)
        result.written = True
        work = ""
        return result
    finally:
        if work and not dry_run:
            shutil.rmtree(work, ignore_errors=True)


def _make_dirs(items: list[_Item], work: str) -> None:
    for i in items:
        if i.what == "dir":
            os.mkdir(os.path.join(work, i.rel), 0o700)


def _dir_modes(items: list[_Item], work: str, src_real: str) -> None:
    """The directories get their source's mode (always writable by their
    owner, so that the tree can be replaced later) and times, deepest first."""
    for i in sorted((i for i in items if i.what == "dir"), key=lambda i: i.rel.count(os.sep), reverse=True):
        _copy_dir_stat(i.path, os.path.join(work, i.rel))
    _copy_dir_stat(src_real, work)


def _copy_dir_stat(src: str, dst: str) -> None:
    st = os.stat(src)
    os.chmod(dst, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))


def _todo(items: list[_Item], mode: str) -> list[tuple[_Item, str, str]]:
    """(item, kind, why it is not patched: '' for a file to patch) for every
    item but directories, in order."""
    todo = []
    for i in items:
        if i.what == "dir":
            continue
        if i.what != "file":
            todo.append((i, i.what, ""))
            continue
        try:
            kind, why = _classify(i.path, mode)
        except OSError as e:
            todo.append((_Item(i.rel, "error", reason=f"cannot read: {e.strerror or e}"), "error", ""))
            continue
        todo.append((i, kind, why))
    return todo


def _reports(items: list[_Item], work: str, kw: dict, jobs: int, *, keep_pairs: bool, mode: str):
    """(report, changed pairs) of every item but directories, in order, each
    put into ``work`` (see :func:`_finish`).  With ``jobs`` > 1 every file to
    patch is handed to the worker processes at once, largest first (one big
    Tensile library takes as long as hundreds of small objects), and the
    files that are only copied are copied meanwhile; the reports still come
    in order."""
    todo = _todo(items, mode)
    dry_run = kw["dry_run"]
    patch = [n for n, (i, _k, why) in enumerate(todo) if i.what == "file" and not why]
    if len(patch) < 2:
        jobs = 1
    if jobs <= 1:
        for item, kind, why in todo:
            got = _patch_file(item.path, os.path.join(work, item.rel), kw, keep_pairs) \
                if item.what == "file" and not why else (("copy", why), [])
            yield _finish(item, kind, got[0], work, dry_run), got[1]
        return
    # fork: the workers inherit kw (functions included) instead of pickling it
    pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"),
                               initializer=apply_db._init_worker, initargs=(kw, keep_pairs))
    try:
        futures = {}
        with apply_db._sigint_held():  # the first submit forks the workers
            for n in sorted(patch, key=lambda n: -_size(todo[n][0].path)):
                item = todo[n][0]
                futures[n] = pool.submit(_patch_in_worker, item.path, os.path.join(work, item.rel))
        done = {n: _finish(item, kind, ("copy", why), work, dry_run)
                for n, (item, kind, why) in enumerate(todo) if n not in futures}
        for n, (item, kind, _why) in enumerate(todo):
            if n not in futures:
                yield done.pop(n), []
                continue
            try:
                outcome, pairs = futures.pop(n).result()
            except Exception as e:  # e.g. the result could not be sent back
                if disk_full_reason(e) is not None:
                    raise
                outcome, pairs = ("error", internal_reason(e)), []
            yield _finish(item, kind, outcome, work, dry_run), pairs
    finally:
        # Ctrl-C, an error or an early stop: the files being patched are let finish (they write into the
        # temporary directory, which the caller removes after this), the others are not started
        pool.shutdown(wait=True, cancel_futures=True)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _finish(item: _Item, kind: str, outcome, work: str, dry_run: bool) -> DirFileReport:
    """The item's report, after putting what it became into ``work``."""
    dst = os.path.join(work, item.rel)
    if item.what == "error":
        return DirFileReport(item.rel, "error", item.reason, "")
    if item.what == "link":
        if not dry_run:
            os.symlink(item.link, dst)
        return DirFileReport(item.rel, "copied", f"symbolic link to {item.link}", "link", written="link")
    rep = _file_report(item, kind, outcome)
    if isinstance(outcome, FileApplyResult) and outcome.written:
        os.chmod(dst, stat.S_IMODE(os.stat(item.path).st_mode))
        rep.written = "patched"
        return rep
    if dry_run and isinstance(outcome, FileApplyResult) and rep.status == "patched":
        rep.written = "patched"
        return rep
    try:
        if not dry_run:
            shutil.copy2(item.path, dst)
        rep.written = "copied"
    except OSError as e:
        if disk_full_reason(e) is not None:
            raise
        rep.status, rep.reason, rep.written = "error", f"cannot copy: {e.strerror or e}", ""
    return rep


def _write_manifest(work: str, result: DirApplyResult, mode: str, rule_sets: list[str]) -> None:
    doc = {"kpatch": __version__, "source": result.source, "mode": mode, "rule_sets": list(rule_sets),
           "summary": result.counts(),
           "files": {f.path: {"status": f.status, "reason": f.reason,
                              "refused": [{"kernel": k.name, "reason": k.reason} for k in f.kernels()
                                          if k.status == "refused"]}
                     for f in result.files}}
    path = os.path.join(work, MANIFEST)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.chmod(path, new_file_mode())


# --- renaming into place -------------------------------------------------------------


RENAME_EXCHANGE = 2
AT_FDCWD = -100


def _exchange(a: str, b: str) -> bool:
    """Swap the names ``a`` and ``b`` in one step (Linux ``renameat2``
    RENAME_EXCHANGE); False where the system cannot."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), b)


def _put_in_place(work: str, out: str, replace: bool) -> bool:
    """Rename the finished ``work`` to ``out``; with ``replace``, ``out``
    (kpatch's earlier output) is exchanged with it and then removed.
    Returns whether an old directory was replaced."""
    with apply_db._sigint_held():  # the names change whole or not at all
        if not replace:
            try:
                os.rename(work, out)  # replaces an empty directory; fails on anything else
            except OSError as e:
                if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                    raise UsageError("appeared meanwhile and is not empty; nothing was written", out) from None
                raise
            return False
        if os.path.islink(out) or not os.path.isfile(os.path.join(out, MANIFEST)):
            raise UsageError(f"changed meanwhile (no longer kpatch's output with {MANIFEST}); nothing was written",
                             out)
        if not _exchange(work, out):
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.kpatch-old-", dir=os.path.dirname(out))
            os.rename(out, os.path.join(old, "old"))
            os.rename(work, out)
            work = old
    shutil.rmtree(work, ignore_errors=True)  # the old directory, now under the temporary name
    return True
