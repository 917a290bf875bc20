"""`kpatch apply --db`: patch the kernels of MIOpen kernel DBs into a user DB.

For every entry of every source DB (system ``.kdb``, ``.kdb.bz2``, or a
``.ukdb``, possibly the output itself):

1. the output key: ``kernel_args`` must end with the ``-mcpu=`` token of the
   mode's input processor; in ``native`` / ``relabel`` mode that token is
   replaced by the output processor's (:func:`output_args`).  Entries with
   other keys are ``skipped`` (MIOpen would never look them up in this DB);
2. the blob is patched (:func:`kpatch.apply.blob.patch_blob`);
3. only a blob that changed, and differs from what the output DB already
   holds under the output key, is staged.

Then the staged rows are written into the output DB in one write
transaction, beside MIOpen if it is running, with a backup first
(:mod:`kpatch.apply.userdb`).  A row another process wrote under the same
key while kpatch was patching is kept, and that entry is reported
``unchanged`` with the reason.

One bad entry never stops the others: a row that cannot be read, a blob
that does not decode, a code object that does not parse, even a bug in
kpatch met on one entry, makes that entry's report an ``error`` with the
reason, and the other entries are patched and written as usual.

Step 2 (decompressing and patching a blob) depends on the blob alone, so
with kpatch's own patch functions and a DB of more than a few entries it
runs in worker processes, one per CPU (:func:`jobs_for`), which also
bzip2-compress each changed blob for the DB (unless the output DB already
holds it); everything else (order, reports, staging, errors) stays in the
calling process, in entry order, exactly as when run serially.  The workers
ignore SIGINT: Ctrl-C reaches the whole process group, and the calling
process alone handles it: it hands out no more entries, lets the workers
finish the few they hold, and shuts the pool down.  A second
run finds nothing to change: patched blobs carry a provenance record (or,
for relabelled code, a gfx1030 label) and identical bytes are not written
again.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from kpatch.containers.kdb import EncodedCode, KernelDB, md5_hex
from kpatch.containers.uri import Uri
from kpatch.errors import KpatchError, internal_reason
from kpatch.apply.blob import patch_blob
from kpatch.miopen.paths import check_output_dir
from kpatch.apply.modes import RESULT_PROCESSOR, SOURCE_PROCESSOR
from kpatch.rewrite.outcome import KernelOutcome, PatchFn, ProvenanceFn
from kpatch.apply.userdb import StagedRows, commit_rows, refuse_links

ENTRY_STATUSES = ("changed", "unchanged", "skipped", "error")

#: Called with (label, original code object, patched code object).
ChangeFn = Callable[[str, bytes, bytes], None]

#: Sources with fewer rows than this are patched in the calling process.
MIN_PARALLEL_ENTRIES = 8
#: Blobs handed out per worker ahead of the one being reported.
AHEAD_PER_WORKER = 4


def output_args(kernel_args: str, mode: str) -> str | None:
    """The ``kernel_args`` of the output entry, or None when the key is not
    one the mode handles.  The trailing ``-mcpu=<input>`` token (at the
    start or after whitespace, and last: not even a newline after it) is
    replaced by ``-mcpu=<output>``, nothing else changes."""
    src, dst = SOURCE_PROCESSOR[mode], RESULT_PROCESSOR[mode]
    m = re.search(r"(^|\s)-mcpu=" + re.escape(src) + r"\Z", kernel_args)
    if not m:
        return None
    return kernel_args[: m.end() - len(src)] + dst


def is_system_db(path: str) -> bool:
    """A source that is not a user DB (``.ukdb``) is treated as a system DB."""
    return not path.endswith(".ukdb")


@dataclass
class EntryReport:
    """What happened to one source entry."""

    uri: str
    kernel_name: str
    kernel_args: str
    output_args: str | None
    status: str  # changed | unchanged | refused (patched, not written: PatchResult.withheld) | skipped | error
    reason: str = ""
    kernels: list[KernelOutcome] = field(default_factory=list)
    note: str = ""

    def to_json(self) -> dict:
        return {"uri": self.uri, "kernel_name": self.kernel_name, "kernel_args": self.kernel_args,
                "output_args": self.output_args, "status": self.status, "reason": self.reason,
                "note": self.note, "kernels": [k.to_json() for k in self.kernels]}


@dataclass
class DbApplyResult:
    """The outcome of :func:`apply_to_db`."""

    output: str
    entries: list[EntryReport] = field(default_factory=list)
    source_errors: list[tuple[str, str]] = field(default_factory=list)
    written: int = 0
    backup: str | None = None
    created: bool = False
    dry_run: bool = False
    #: EntryReports of rows not written because another process wrote the key meanwhile.
    conflicts: list[EntryReport] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in ENTRY_STATUSES}  # "refused" only when some entry is
        for e in self.entries:
            out[e.status] = out.get(e.status, 0) + 1
        for e in self.entries:
            for k in e.kernels:
                out[f"kernels_{k.status}"] = out.get(f"kernels_{k.status}", 0) + 1
        for s in ("patched", "refused", "untouched"):
            out.setdefault(f"kernels_{s}", 0)
        return out


def _stored_hash(db: KernelDB | None, name: str, args: str | None) -> str | None:
    """The ``kernel_hash`` of the row ``db`` holds under the key, or None."""
    if db is None or args is None:
        return None
    try:
        row = db.get(name, args)
        return row.kernel_hash if row is not None else None
    except KpatchError:
        return None


def _existing(db: KernelDB | None, name: str, args: str) -> tuple[str | None, bytes | None]:
    """(kernel_hash, code) of the row ``db`` holds under the key: (None,
    None) when there is none; code None when it cannot be decoded (it will
    be replaced, if it is still the same row when kpatch writes)."""
    if db is None:
        return None, None
    try:
        row = db.get(name, args)
    except KpatchError:
        return None, None
    if row is None:
        return None, None
    try:
        return row.kernel_hash, row.code()
    except KpatchError:
        return row.kernel_hash, None


@contextmanager
def open_output(path: str, *, dry_run: bool) -> Iterator[KernelDB | None]:
    """The existing output DB for reading, opened so that no ``-wal`` /
    ``-shm`` files are left behind: read-write (SQLite removes them when the
    last connection closes; nothing is written) or, in a dry run, a private
    copy when the file alone holds the whole DB."""
    if not os.path.exists(path):
        yield None
        return
    wal = path + "-wal"
    if not dry_run:
        db = KernelDB.open(path, writable=True)
    elif os.path.exists(wal) and os.path.getsize(wal) > 0:
        db = KernelDB.open(path)  # the WAL holds rows; SQLite's side files exist already
    else:
        with tempfile.TemporaryDirectory(prefix="kpatch-") as tmp:
            copy = os.path.join(tmp, os.path.basename(path))
            shutil.copyfile(path, copy)
            db = KernelDB.open(copy)
            try:
                yield db
            finally:
                db.close()
        return
    try:
        yield db
    finally:
        db.close()


def apply_to_db(sources: Iterable[str], output_db: str, *, mode: str, rule_sets: list[str], patch_fn: PatchFn,
                is_patched: ProvenanceFn, dry_run: bool = False,
                on_entry: Callable[[EntryReport], None] | None = None,
                on_change: ChangeFn | None = None, jobs: int | None = None) -> DbApplyResult:
    """Patch every entry of ``sources`` into the user DB ``output_db`` (see
    the module doc).  UsageError (before anything is read) if the output
    location is not allowed; per-entry and per-source problems are recorded
    in the result and the rest goes on.  ``on_entry`` is called with each
    entry's report, ``on_change`` with (label, original code object, patched
    code object) for each code object that changed (e.g. for a diff report).
    ``jobs``: worker processes for patching (None: :func:`jobs_for`; 1: none)."""
    sources = list(sources)
    output_db = os.path.abspath(output_db)
    check_output_dir(os.path.dirname(output_db), [s for s in sources if is_system_db(s)], create=not dry_run)
    refuse_links(output_db)
    result = DbApplyResult(output_db, dry_run=dry_run)
    staged = None if dry_run else StagedRows(os.path.dirname(output_db), os.path.basename(output_db))
    staged_keys: set[tuple[str, str]] = set()
    try:
        with open_output(output_db, dry_run=dry_run) as existing:
            for src in sources:
                _apply_source(src, result, existing, staged, staged_keys, mode=mode, rule_sets=rule_sets,
                              patch_fn=patch_fn, is_patched=is_patched, on_entry=on_entry, on_change=on_change,
                              jobs=jobs)
        if staged is not None and len(staged):
            done = commit_rows(output_db, staged)
            result.written = done.written
            result.backup = done.backup.path if done.backup else None
            result.created = done.created
            _mark_conflicts(result, {(name, args): why for name, args, why in done.conflicts})
    finally:
        if staged is not None:
            staged.close()
    return result


def _mark_conflicts(result: DbApplyResult, conflicts: dict[tuple[str, str], str]) -> None:
    """Entries whose rows were not written (another process wrote the key
    meanwhile) become ``unchanged``, with the reason; their kernels were not
    delivered."""
    for e in result.entries:
        why = conflicts.get((e.kernel_name, e.output_args)) if e.status == "changed" else None
        if why is None:
            continue
        e.status, e.reason = "unchanged", why
        e.kernels = [KernelOutcome(k.name, "untouched", "not written: " + why, k.rules)
                     if k.status == "patched" else k for k in e.kernels]
        result.conflicts.append(e)


def jobs_for(patch_fn: PatchFn, is_patched: ProvenanceFn) -> int:
    """How many worker processes patch blobs by default: one per CPU this
    process may use, when ``fork`` is available and both functions are
    kpatch's own (pure functions of the blob; a caller's function may keep
    state in this process, so it runs here)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    for fn in (patch_fn, is_patched):
        if not (getattr(fn, "__module__", None) or "").startswith("kpatch."):
            return 1
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, n)


def _apply_source(src: str, result: DbApplyResult, existing: KernelDB | None, staged: StagedRows | None,
                  staged_keys: set[tuple[str, str]], *, mode: str, rule_sets: list[str], patch_fn: PatchFn,
                  is_patched: ProvenanceFn, on_entry: Callable[[EntryReport], None] | None,
                  on_change: ChangeFn | None, jobs: int | None = None) -> None:
    try:
        db = KernelDB.open(src)
    except KpatchError as e:
        result.source_errors.append((src, e.reason))
        return
    base = Uri("kdb", os.path.abspath(src))
    kw = dict(mode=mode, rule_sets=rule_sets, patch_fn=patch_fn, is_patched=is_patched)
    try:
        n = jobs if jobs is not None else jobs_for(patch_fn, is_patched)
        if n > 1 and db.count() < MIN_PARALLEL_ENTRIES:
            n = 1
        outcomes = _patched(db.entries(), kw, n, keep_pairs=on_change is not None, existing=existing)
        try:
            for entry, outcome in outcomes:
                report = _entry_report(entry, outcome, base, existing, staged, staged_keys, on_change, mode)
                result.entries.append(report)
                if on_entry:
                    on_entry(report)
        finally:
            outcomes.close()  # shuts the pool down now if this loop was left early (Ctrl-C, a full disk)
    except KpatchError as e:  # the DB itself broke while being read
        result.source_errors.append((src, e.reason))
    finally:
        db.close()


#: What patching one entry gave: None (its key is not one the mode handles),
#: ("error", reason) or ("ok", BlobResult).
Outcome = tuple[str, object] | None


def _patch_entry(entry, kw: dict, keep_pairs: bool = True) -> Outcome:
    """Step 2 for one entry (in a worker or here).  Never raises for the
    entry's own problems: they, and any bug they trigger, are its error."""
    if entry.error:
        return "error", entry.error
    if output_args(entry.kernel_args, kw["mode"]) is None:
        return None
    try:
        r = patch_blob(entry.code(), **kw)
    except KpatchError as e:
        return "error", e.reason
    except Exception as e:  # a bug met on this entry: the others still go on
        return "error", internal_reason(e)
    if not keep_pairs:
        r.pairs = []  # not needed: spare sending the code objects back
    return "ok", r


_WORKER_KW: dict = {}


#: How often a worker looks whether the process that started it is still there (seconds).
PARENT_POLL = 0.2


def _init_worker(kw: dict, keep_pairs: bool) -> None:
    """Set up a worker: it ignores SIGINT (forked with SIGINT blocked by
    :func:`_sigint_held`, so none arrives before this), leaving Ctrl-C to the
    calling process, which shuts the pool down; and it ends by itself when
    that process is gone (:func:`_end_with_parent`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _WORKER_KW.update(kw, keep_pairs=keep_pairs)
    threading.Thread(target=_end_with_parent, args=(os.getppid(),), daemon=True,
                     name="kpatch-parent-watch").start()


def _end_with_parent(parent: int) -> None:
    """End this worker as soon as its parent ``parent`` is gone.  A worker
    ignores Ctrl-C; if the parent ends without shutting the pool down (it
    exits 130 at once on a Ctrl-C that lands where no clean-up runs), the
    orphaned workers would otherwise wait for each other forever on the
    pool's pipes (each holds the other's end open), holding the terminal's
    stderr.  Nothing a worker does is wanted once its parent is gone: it
    only computes what the parent would have written."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL)
    os._exit(1)


@contextmanager
def _sigint_held() -> Iterator[None]:
    """SIGINT blocked in this thread meanwhile and delivered right after:
    worker processes forked meanwhile start with it blocked (until
    :func:`_init_worker` ignores it), and the pool's own state is never left
    half-updated by a KeyboardInterrupt."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _patch_in_worker(entry, stored_hash: str | None) -> Outcome:
    """Step 2 in a worker; a changed blob comes back with its DB encoding
    made here, in parallel, unless it is the code the output DB holds
    (``stored_hash``: nothing will be written)."""
    kw = dict(_WORKER_KW)
    keep = kw.pop("keep_pairs")
    out = _patch_entry(entry, kw, keep)
    if out is not None and out[0] == "ok" and out[1].data is not None:
        try:
            digest = md5_hex(out[1].data)
            if digest != stored_hash:
                out[1].data = EncodedCode.of(out[1].data, digest)
        except Exception as e:
            return "error", internal_reason(e)
    return out


def _patched(entries: Iterator, kw: dict, jobs: int, *, keep_pairs: bool,
             existing: KernelDB | None = None) -> Iterator[tuple[object, Outcome]]:
    """(entry, outcome) of every entry, in order; with ``jobs`` > 1 the
    patching runs in that many forked worker processes, a few entries ahead
    of the one yielded (``existing``: the output DB, whose rows need not be
    encoded again)."""
    if jobs <= 1:
        for entry in entries:
            yield entry, _patch_entry(entry, kw, keep_pairs)
        return
    # fork: the workers inherit kw (functions included) instead of pickling it
    pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"),
                               initializer=_init_worker, initargs=(kw, keep_pairs))
    pending: deque = deque()
    broke: KpatchError | None = None  # reading the DB failed: raised after the entries read before
    try:
        it = iter(entries)
        done = False
        while True:
            while not done and len(pending) < jobs * AHEAD_PER_WORKER:
                try:
                    entry = next(it, None)
                except KpatchError as e:
                    entry, broke = None, e
                if entry is None:
                    done = True
                    break
                out_args = None if entry.error else output_args(entry.kernel_args, kw["mode"])
                if out_args is None:  # nothing to send: known here
                    pending.append((entry, _patch_entry(entry, kw, keep_pairs), None))
                else:
                    stored = _stored_hash(existing, entry.kernel_name, out_args)
                    with _sigint_held():  # the first submit forks the workers
                        fut = pool.submit(_patch_in_worker, entry, stored)
                    pending.append((entry, None, fut))
            if not pending:
                if broke is not None:
                    raise broke
                return
            entry, outcome, fut = pending.popleft()
            if fut is not None:
                try:
                    outcome = fut.result()
                except Exception as e:  # e.g. the result could not be sent back
                    outcome = "error", internal_reason(e)
            yield entry, outcome
    finally:
        # On Ctrl-C, an error or an early stop (this generator closed), entries not yet handed to a
        # worker are dropped and the few being patched are let finish: a worker killed half-way
        # through sending its result would leave the pool's pipe half-written and hang it.
        pool.shutdown(wait=True, cancel_futures=True)


def _entry_report(entry, outcome: Outcome, base: Uri, existing: KernelDB | None, staged: StagedRows | None,
                  staged_keys: set[tuple[str, str]], on_change: ChangeFn | None, mode: str) -> EntryReport:
    """Steps 1 and 3 for one entry, given what patching it gave."""
    where = entry.uri(base.path)
    uri = str(where)
    if entry.error:
        return EntryReport(uri, entry.kernel_name, entry.kernel_args, None, "error", entry.error)
    out_args = output_args(entry.kernel_args, mode)
    report = EntryReport(uri, entry.kernel_name, entry.kernel_args, out_args, "skipped")
    if out_args is None:
        report.reason = f"key does not end with -mcpu={SOURCE_PROCESSOR[mode]}"
        return report
    status, r = outcome
    if status == "error":
        report.status, report.reason = "error", r
        return report
    report.kernels, report.note = list(r.kernels), r.note
    if r.data is None:
        report.status = "refused" if r.withheld else "unchanged"
        report.reason = r.withheld or (r.note if not r.kernels else "")
        return report
    key = (entry.kernel_name, out_args)
    held, held_code = _existing(existing, *key)
    if held_code == r.data and key not in staged_keys:
        report.status, report.reason = "unchanged", "the user DB already holds the patched code"
        report.kernels = [KernelOutcome(k.name, "untouched", "already patched in the user DB", k.rules)
                          if k.status == "patched" else k for k in report.kernels]
        return report
    if staged is not None:
        staged.add(entry.kernel_name, out_args, r.data, expected_hash=held)
    staged_keys.add(key)
    if on_change is not None:
        for entry_id, old, new in r.pairs:
            on_change(str(where.with_(entry=entry_id)) if entry_id else uri, old, new)
    report.status = "changed"
    return report
