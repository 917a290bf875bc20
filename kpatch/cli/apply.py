"""`kpatch apply`: patch MIOpen kernel DBs into the user kernel DB, or one file."""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from typing import Any, Callable

import click

from kpatch.cli.common import EXIT_OK, EXIT_SOME_FAILED, err_console, error_line, out_console, show_progress
from kpatch.containers.kdb import KernelDB
from kpatch.containers.uri import Uri, parse_uri
from kpatch.data import expand
from kpatch.errors import KpatchError, UsageError, disk_full_reason
from kpatch.apply.db import EntryReport, apply_to_db
from kpatch.apply.directory import DirFileReport, apply_to_dir
from kpatch.apply.file import apply_to_file
from kpatch.apply.blob import written_with_unchanged
from kpatch.miopen.device import Choice, detect_cu, detect_mode, read_gpu_nodes
from kpatch.miopen.paths import DEFAULT_ROCM_ROOTS, check_output_dir, resolve_cache_dir, user_db_name
from kpatch.rewrite.rules import load_all
from kpatch.apply.modes import DEFAULT_RULE_SETS, MODES, RESULT_PROCESSOR, default_patch_fn, default_provenance_fn
from kpatch.rewrite.outcome import KernelOutcome

#: Test hooks (environment): a fake sysfs root and the places to look for MIOpen's version.h.
SYSFS_ENV = "KPATCH_SYSFS_ROOT"
ROCM_ROOTS_ENV = "KPATCH_ROCM_ROOTS"


def sysfs_root() -> str:
    return os.environ.get(SYSFS_ENV) or "/sys"


def rocm_roots() -> tuple[str, ...]:
    value = os.environ.get(ROCM_ROOTS_ENV)
    return tuple(p for p in value.split(os.pathsep) if p) if value is not None else DEFAULT_ROCM_ROOTS


def choose_mode(mode: str | None) -> Choice:
    if mode:
        return Choice(mode, "--mode")
    return detect_mode(os.environ, read_gpu_nodes(sysfs_root()))


def _names(items: tuple[str, ...]) -> list[str]:
    return [r.strip() for item in items for r in item.split(",") if r.strip()]


def choose_rule_sets(mode: str, rules: tuple[str, ...], approx: tuple[str, ...] = ()) -> list[str]:
    """The rule sets of ``--rules`` (else the mode's defaults) plus the
    approximation sets of ``--allow-approx``, checked against the rule files."""
    names, allowed = _names(rules), _names(approx)
    if mode == "relabel" and (names or allowed):
        raise UsageError("--mode relabel changes no code: --rules and --allow-approx do not apply")
    sets = load_all()
    for n in names:
        if n in sets and sets[n].approximation:
            raise UsageError(f"{n} is an approximation: opt in with --allow-approx {n}")
    for n in allowed:
        if n not in sets or not sets[n].approximation:
            known = ", ".join(s.id for s in sets.values() if s.approximation)
            raise UsageError(f"--allow-approx {n}: no such approximation (known: {known})")
    chosen = list(dict.fromkeys((names or list(DEFAULT_RULE_SETS[mode])) + allowed))
    if mode != "relabel":  # the engine's own check (labels per mode), once, before any input is read
        from kpatch.rewrite.patcher import select_rule_sets

        select_rule_sets(mode, chosen)
    return chosen


# --- printing -----------------------------------------------------------------------


def kernel_line(uri: str, k: KernelOutcome) -> str:
    line = f"{k.status:<9} {uri} {k.name}"
    if k.rules:
        line += f" [{', '.join(k.rules)}]"
    if k.reason and (k.status != "patched" or k.verified is not None):
        line += f": {k.reason}"
    return line


def print_item(uri: str, status: str, reason: str, note: str, kernels: list[KernelOutcome]) -> None:
    """Per kernel: patched / refused (reason) / untouched; errors on stderr."""
    if status == "error":
        error_line(uri, reason)
        return
    if status in ("skipped", "refused") or not kernels:
        out_console.print(f"{status:<9} {uri}: {reason or note or 'no kernels'}", markup=False)
    elif status == "changed" and (partial := written_with_unchanged(kernels)):  # some keep their original code
        out_console.print(f"{'partial':<9} {uri}: {partial}", markup=False)
    for k in kernels:
        out_console.print(kernel_line(uri, k), markup=False)


def summary_text(counts: dict[str, int], unit: str) -> str:
    names = {"error": "errors"}
    items = [f"{counts[s]} {names.get(s, s)}" for s in ("changed", "unchanged", "skipped", "refused", "error")
             if s in counts]
    n = sum(counts[s] for s in ("changed", "unchanged", "skipped", "refused", "error") if s in counts)
    return (f"{n} {unit}: {', '.join(items)}; kernels: {counts['kernels_patched']} patched, "
            f"{counts['kernels_refused']} refused, {counts['kernels_untouched']} untouched")


@contextmanager
def entry_progress(total: int | None):
    """A progress bar on stderr (terminal only); yields ``advance()``."""
    if not show_progress():
        yield lambda: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]applying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console.real, transient=True) as p:
        task = p.add_task("apply", total=total)
        yield lambda: p.advance(task)


@contextmanager
def disk_full_is_an_error(item: str, what: str):
    """A full disk (or quota) met meanwhile becomes one ``ITEM: no space
    left on device; WHAT`` error (exit status 1) instead of an internal
    error; the writers have already removed what they had half-written."""
    try:
        yield
    except Exception as e:
        reason = disk_full_reason(e)
        if reason is None:
            raise
        raise KpatchError(f"{reason}; {what}", item) from None


def _count_entries(paths: list[str]) -> int | None:
    total = 0
    for p in paths:
        if p.endswith(".bz2"):
            return None  # counting would decompress the whole DB once more
        try:
            with KernelDB.open(p) as db:
                total += db.count()
        except KpatchError:
            pass
    return total


# --- the two forms -------------------------------------------------------------------


#: Kernel reasons that mean "an earlier run already patched this" (kpatch.apply.db, blobpatch).
ALREADY_PATCHED = "already patched"


def _already_patched(item) -> bool:
    return any(k.reason.startswith(ALREADY_PATCHED) for k in item.kernels)


def _renamed_entry(entry: str | None, old: bytes, new: bytes) -> str | None:
    """The bundle entry id the patched code object sits under: the id with
    its target id replaced when the label changed (as blobpatch renames it)."""
    if not entry:
        return entry
    from kpatch.codeobject import CodeObject

    try:
        a, b = CodeObject.from_bytes(old).target_id, CodeObject.from_bytes(new).target_id
    except KpatchError:
        return entry
    return entry[: len(entry) - len(a)] + b if a and b and a != b and entry.endswith(a) else entry


class ReportPairs:
    """``--report``: collects the (label, original, patched) code objects
    apply changed, then writes the HTML report (kpatch.diff.compare /
    diff_html) from what apply decided: source and output, every refused
    kernel with its reason first (also in code objects not written), then
    the changed objects, compared exactly as `kpatch diff SOURCE OUTPUT`
    compares them.  A run that changed nothing leaves an existing report as
    it is (it describes the output, which this run did not change); with no
    report yet, it writes one that says nothing changed."""

    def __init__(self, path: str | None):
        self.path = path
        self.pairs: list[tuple[str, bytes, bytes]] = []
        if path:  # (checked, and a missing directory made, before any work: not after the DB is written)
            check_output_dir(os.path.dirname(os.path.abspath(path)), create=True)

    @property
    def on_change(self) -> Callable | None:
        return self.add if self.path else None

    def add(self, label: str, old: bytes, new: bytes) -> None:
        self.pairs.append((label, old, new))

    def build(self, items: list, *, sources: list[str], output: str, unit: str, dry_run: bool,
              errors: list[tuple[str, str]], counts: dict[str, int], new_uri: Callable):
        """The :class:`~kpatch.diff.compare.DiffReport`: ``items`` are apply's
        EntryReports / PartReports, ``new_uri(item, label, old, new)`` names
        where a patched object went."""
        from kpatch.diff.compare import ApplyInfo, ChangedPair, Refusal, build_report

        by_uri = {it.uri: it for it in items}
        info = ApplyInfo(sources, output, unit, dry_run, errors=errors, counts=counts,
                         already_patched=sum(1 for it in items if it.status == "unchanged" and _already_patched(it)))
        for it in items:
            if it.status == "changed":
                state = "would be written" if dry_run else "written"
            else:
                state = "already in output" if _already_patched(it) else "not written"
            refused = [k for k in it.kernels if k.status == "refused"]
            info.refusals += [Refusal(it.uri, k.name, k.reason or it.reason, state) for k in refused]
            if it.status == "refused" and not refused:
                info.refusals.append(Refusal(it.uri, None, it.reason, state))
        changed = []
        for label, old, new in self.pairs:
            owner = by_uri.get(label) or by_uri.get(label.split("#", 1)[0]) or by_uri.get(label.rsplit("&entry=", 1)[0])
            if owner is not None and owner.status != "changed":
                continue  # not delivered after all (another process wrote its key meanwhile)
            outcomes = {k.name: (k.status, k.reason) for k in owner.kernels} if owner is not None else {}
            changed.append(ChangedPair(label, old, new, new_uri(owner, label, old, new) if owner else "", outcomes))
        return build_report(changed, old_name="source", new_name="output", apply=info)

    def write(self, items: list, *, as_json: bool, **kw) -> dict | None:
        """Write the report (see the class doc); returns its JSON record
        ``{"path", "written", "note"}`` (None without --report) and prints
        one line unless ``as_json``."""
        if not self.path:
            return None
        from kpatch.diff.html import write_html

        report = self.build(items, **kw)
        info = report.apply
        if not self.pairs and os.path.exists(self.path):
            note = (f"left as it was: nothing changed in this run ({info.already_patched} {info.unit} already "
                    f"patched in the output)")
            written = False
        else:
            try:
                write_html(report, self.path)
            except OSError as e:
                full = disk_full_reason(e)
                raise KpatchError(f"{full}; the HTML report was not written" if full else
                                  f"cannot write the HTML report: {e.strerror or e}", self.path) from None
            kernels = sum(1 for r in info.refusals if r.kernel is not None)
            note = (f"{len(self.pairs)} changed code objects, {kernels} kernels refused" if self.pairs else
                    f"nothing changed; {info.already_patched} {info.unit} already patched, {kernels} kernels refused")
            written = True
        if not as_json:
            out_console.print(f"report {self.path} {note}" if not written else f"report {self.path} ({note})",
                              markup=False)
        return {"path": os.path.abspath(self.path), "written": written, "note": note}


def _print_outcome(as_json: bool, doc: Callable[[], dict], text: Callable[[], None], report: ReportPairs,
                   items, report_kw: dict, errors: list, failed: bool = False) -> int:
    """Print what apply did: the JSON document (``doc()``, the HTML report's
    record last) or the text lines (``text()``, then the report's line); the
    exit status says whether some item failed (``errors``, or ``failed``: apply
    --verify-emulate found a kernel different)."""
    if as_json:
        d = doc()
        d["report"] = report.write(items, as_json=True, **report_kw)
        json.dump(d, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        text()
        report.write(items, as_json=False, **report_kw)
    return EXIT_SOME_FAILED if errors or failed else EXIT_OK


def _emulated(patch_fn: Callable, items) -> dict | None:
    """apply --verify-emulate's verdict counts over ``items`` (None without it)."""
    if not getattr(patch_fn, "emulates", False):
        return None
    from kpatch.cli.verify import emulation_counts
    return emulation_counts(k for it in items for k in it.kernels)


def _print_emulated(patch_fn: Callable, items) -> None:
    counts = _emulated(patch_fn, items)
    if counts is not None:
        from kpatch.cli.verify import emulation_line
        out_console.print(emulation_line(counts), markup=False)


def _emulated_different(patch_fn: Callable, items) -> bool:
    counts = _emulated(patch_fn, items)
    return bool(counts and counts["different"])


def run_db(dbs: list[str], mode: Choice, cu: int | None, out_dir: str | None, rule_sets: list[str],
           dry_run: bool, as_json: bool, patch_fn: Callable, is_patched: Callable,
           report: ReportPairs | None = None) -> int:
    report = report or ReportPairs(None)
    cu_choice = detect_cu(cu, os.environ, read_gpu_nodes(sysfs_root()))
    if out_dir:
        out_choice = Choice(os.path.abspath(out_dir), "--out-dir")
    else:
        found = resolve_cache_dir(os.environ, rocm_roots=rocm_roots())
        out_choice = Choice(found.path, found.why)
    output = os.path.join(str(out_choice.value), user_db_name(RESULT_PROCESSOR[str(mode.value)], int(cu_choice.value)))
    if not as_json:
        out_console.print(f"mode {mode.value} ({mode.why}); CU {cu_choice.value} ({cu_choice.why})", markup=False)
        out_console.print(f"output {output} ({out_choice.why})", markup=False)
    total = _count_entries(dbs) if show_progress() else None
    with entry_progress(total) as advance:

        def on_entry(rep: EntryReport) -> None:
            advance()
            if not as_json:
                print_item(rep.uri, rep.status, rep.reason, rep.note, rep.kernels)

        with disk_full_is_an_error(output, "nothing was written: the user DB, if any, is as it was"):
            result = apply_to_db(dbs, output, mode=str(mode.value), rule_sets=rule_sets, patch_fn=patch_fn,
                                 is_patched=is_patched, dry_run=dry_run, on_entry=on_entry,
                                 on_change=report.on_change)
    errors = [{"uri": src, "error": why} for src, why in result.source_errors]
    errors += [{"uri": e.uri, "error": e.reason} for e in result.entries if e.status == "error"]
    counts = result.counts()
    for src, why in result.source_errors:
        error_line(src, why)

    def new_uri(entry: EntryReport, label: str, old: bytes, new: bytes) -> str:
        where = Uri("kdb", output).with_(name=entry.kernel_name, args=entry.output_args)
        frag = parse_uri(label).entry
        return str(where.with_(entry=_renamed_entry(frag, old, new)) if frag else where)

    report_kw = dict(sources=[os.path.abspath(d) for d in dbs], output=output, unit="entries", dry_run=dry_run,
                     errors=[(e["uri"], e["error"]) for e in errors], counts=counts, new_uri=new_uri)

    def doc() -> dict[str, Any]:
        return {
            "mode": mode.value, "mode_reason": mode.why, "cu": cu_choice.value, "cu_reason": cu_choice.why,
            "output": output, "output_reason": out_choice.why, "rule_sets": rule_sets, "dry_run": dry_run,
            "written": result.written, "created": result.created, "backup": result.backup,
            "conflicts": [{"uri": e.uri, "reason": e.reason} for e in result.conflicts],
            "entries": [e.to_json() for e in result.entries], "errors": errors, "summary": counts,
            "verify_emulate": _emulated(patch_fn, result.entries)}

    def text() -> None:
        for e in result.conflicts:
            out_console.print(f"not written {e.uri}: {e.reason}", markup=False)
        out_console.print(summary_text(counts, "entries"), markup=False)
        _print_emulated(patch_fn, result.entries)
        if dry_run:
            out_console.print(f"dry run: nothing written ({counts['changed']} entries would go to {output})",
                              markup=False)
        elif result.written:
            made = "created" if result.created else "updated"
            out_console.print(f"{made} {output}: {result.written} entries written", markup=False)
            if result.backup:
                out_console.print(f"backup {result.backup} (`kpatch revert {output}` restores it)", markup=False)
        else:
            out_console.print(f"nothing to write: {output} left as it was", markup=False)

    return _print_outcome(as_json, doc, text, report, result.entries, report_kw, errors,
                          _emulated_different(patch_fn, result.entries))


def _check_file_output(path: str, out: str, force: bool) -> None:
    """FILE -o OUT: never OUT = FILE (kpatch does not patch in place), and an
    OUT that exists already (a file, or a symbolic link, which is replaced,
    not written through) only with --force: nothing is replaced unasked."""
    try:
        same = os.path.exists(path) and os.path.exists(out) and os.path.samefile(path, out)
    except OSError:
        same = False
    if same:
        raise UsageError("is FILE itself: kpatch writes the patched copy to another file", out)
    if os.path.lexists(out) and not force:
        raise UsageError("already exists (--force replaces it)", out)


def run_file(path: str, out: str, mode: Choice, rule_sets: list[str], dry_run: bool, as_json: bool,
             patch_fn: Callable, is_patched: Callable, report: ReportPairs | None = None,
             drop_other_targets: bool = False) -> int:
    report = report or ReportPairs(None)
    with disk_full_is_an_error(out, "it was not written"):
        result = apply_to_file(path, out, mode=str(mode.value), rule_sets=rule_sets, patch_fn=patch_fn,
                               is_patched=is_patched, dry_run=dry_run, on_change=report.on_change,
                               drop_other_targets=drop_other_targets)
    counts = result.counts()
    errors = [{"uri": p.uri, "error": p.reason} for p in result.parts if p.status == "error"]
    unit = "bundles" if result.kind == "hostelf" else "files"

    def new_uri(part, label: str, old: bytes, new: bytes) -> str:
        where = parse_uri(label)
        return str(where.with_(path=result.output, entry=_renamed_entry(where.entry, old, new)))

    report_kw = dict(sources=[result.source], output=result.output, unit=unit, dry_run=dry_run,
                     errors=[(e["uri"], e["error"]) for e in errors], counts=counts, new_uri=new_uri)

    def doc() -> dict[str, Any]:
        return {"mode": mode.value, "mode_reason": mode.why, "source": result.source, "output": result.output,
                "kind": result.kind, "rule_sets": rule_sets, "dry_run": dry_run, "written": result.written,
                "parts": [p.to_json() for p in result.parts], "errors": errors, "summary": counts,
                "verify_emulate": _emulated(patch_fn, result.parts)}

    def text() -> None:
        out_console.print(f"mode {mode.value} ({mode.why})", markup=False)
        for p in result.parts:
            print_item(p.uri, p.status, p.reason, p.note, p.kernels)
        out_console.print(summary_text(counts, unit), markup=False)
        _print_emulated(patch_fn, result.parts)
        if dry_run:
            out_console.print(f"dry run: nothing written to {result.output}", markup=False)
        elif result.written:
            out_console.print(f"wrote {result.output}", markup=False)
        else:
            out_console.print(f"nothing changed: {result.output} not written", markup=False)

    return _print_outcome(as_json, doc, text, report, result.parts, report_kw, errors,
                          _emulated_different(patch_fn, result.parts))


def dir_summary_text(counts: dict[str, int]) -> str:
    n = sum(counts[s] for s in ("patched", "unchanged", "refused", "copied", "error"))
    return (f"{n} files: {counts['patched']} patched, {counts['unchanged']} gfx1030 code with nothing to change, "
            f"{counts['refused']} copied unchanged with refusals, {counts['copied']} copied as is, "
            f"{counts['error']} errors; kernels: {counts['kernels_patched']} patched, "
            f"{counts['kernels_refused']} refused, {counts['kernels_untouched']} untouched")


def print_dir_file(source: str, rep: DirFileReport, dry_run: bool = False) -> None:
    """A library directory's file: an error is one line on stderr; code
    kpatch read gets a file line and its kernels' lines; plain copies get
    none (the summary counts them, --json lists them)."""
    if rep.status == "error":
        what = {"copied": "; copied unchanged", "patched": "; its other parts patched"}.get(rep.written, "")
        what = what.replace("; ", "; would be ", 1) if dry_run and what else what
        error_line(os.path.join(source, rep.path), rep.reason + what)
        return
    if rep.status == "copied":
        return
    ks = rep.kernels()
    n_patched, n_refused = (sum(1 for k in ks if k.status == s) for s in ("patched", "refused"))
    if rep.status == "patched":
        what = f"{n_patched} kernels patched" + (f", {n_refused} refused keep their original code" if n_refused else "")
    elif rep.status == "refused":
        what = f"copied unchanged: {n_refused} of {len(ks)} kernels refused"
    else:
        what = "nothing to change: copied unchanged"
    out_console.print(f"{rep.status:<9} {rep.path}: {what}", markup=False)
    for p in rep.parts:
        print_item(p.uri, p.status, p.reason, p.note, p.kernels)


@contextmanager
def file_progress():
    """A progress bar on stderr (terminal only) of files done / total;
    yields ``(set_total, advance)``."""
    if not show_progress():
        yield (lambda n: None), (lambda: None)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]applying"), BarColumn(), MofNCompleteColumn(), TextColumn("files"),
                  TimeElapsedColumn(), console=err_console.real, transient=True) as p:
        task = p.add_task("apply", total=None)
        yield (lambda n: p.update(task, total=n)), (lambda: p.advance(task))


def run_dir(src: str, out: str, mode: Choice, rule_sets: list[str], dry_run: bool, as_json: bool, force: bool,
            patch_fn: Callable, is_patched: Callable, report: ReportPairs | None = None) -> int:
    report = report or ReportPairs(None)
    source = os.path.realpath(src)
    with file_progress() as (set_progress_total, advance):

        def set_total(n: int) -> None:  # the output directory passed its checks
            set_progress_total(n)
            if not as_json:
                out_console.print(f"mode {mode.value} ({mode.why}); {n} files in {source}", markup=False)

        def on_file(rep: DirFileReport) -> None:
            advance()
            if not as_json or rep.status == "error":
                print_dir_file(source, rep, dry_run)

        with disk_full_is_an_error(out, "nothing was written: the output directory, if any, is as it was"):
            result = apply_to_dir(src, out, mode=str(mode.value), rule_sets=rule_sets, patch_fn=patch_fn,
                                  is_patched=is_patched, dry_run=dry_run, force=force, on_file=on_file,
                                  on_change=report.on_change, total=set_total)
    counts = result.counts()
    errors = [{"uri": os.path.join(result.source, f.path), "error": f.reason} for f in result.files
              if f.status == "error"]

    def new_uri(part, label: str, old: bytes, new: bytes) -> str:
        where = parse_uri(label)
        rel = os.path.relpath(where.path, result.source)
        return str(where.with_(path=os.path.join(result.output, rel), entry=_renamed_entry(where.entry, old, new)))

    report_kw = dict(sources=[result.source], output=result.output, unit="files", dry_run=dry_run,
                     errors=[(e["uri"], e["error"]) for e in errors], counts=counts, new_uri=new_uri)
    parts = result.parts

    def doc() -> dict[str, Any]:
        return {"mode": mode.value, "mode_reason": mode.why, "source": result.source, "output": result.output,
                "kind": "directory", "rule_sets": rule_sets, "dry_run": dry_run, "written": result.written,
                "replaced": result.replaced, "files": [f.to_json() for f in result.files], "errors": errors,
                "summary": counts,
                "verify_emulate": _emulated(patch_fn, parts)}

    def text() -> None:
        out_console.print(dir_summary_text(counts), markup=False)
        _print_emulated(patch_fn, parts)
        if dry_run:
            out_console.print(f"dry run: nothing written to {result.output}", markup=False)
        else:
            made = "replaced" if result.replaced else "wrote"
            out_console.print(f"{made} {result.output} (point rocBLAS at it: "
                              f"ROCBLAS_TENSILE_LIBPATH={result.output})", markup=False)

    return _print_outcome(as_json, doc, text, report, parts, report_kw, errors,
                          _emulated_different(patch_fn, parts))


@click.command("apply")
@click.argument("file", required=False, metavar="[FILE|DIR]")
@click.option("-o", "--output", "out", type=click.Path(), help="Where FILE's patched copy (or DIR's) goes.")
@click.option("--db", "dbs", multiple=True, metavar="SRC",
              help="A MIOpen kernel DB to patch (.kdb, .kdb.bz2 or .ukdb); repeatable.")
@click.option("--mode", type=click.Choice(MODES), help="override, native, relabel or harden (default: from the machine; harden only when asked).")
@click.option("--cu", type=int, help="The CU count MIOpen uses in DB names (CUs / 2 on RDNA; default: detected).")
@click.option("--out-dir", type=click.Path(file_okay=False), help="Directory of the user kernel DB to write.")
@click.option("--rules", multiple=True, metavar="SETS",
              help="Rule sets to apply (comma-separated, repeatable; default: gfx1010-hazards, gfx1010-isa, "
                   "cu-mode, vsharp-llc-noalloc, plus retarget-gfx1010 in native mode; `kpatch rules` lists all).")
@click.option("--allow-approx", "approx", multiple=True, metavar="NAME",
              help="Also use this approximation (a rule set that changes results slightly, e.g. "
                   "legacy-fma-as-mad, dot2-fma-mix; `kpatch rules NAME` explains it). Repeatable.")
@click.option("--drop-other-targets", is_flag=True,
              help="FILE is a host library: when a patched bundle no longer fits its place, keep only its "
                   "host, gfx1030 and gfx1010 entries (the copy then runs on no other GPU).")
@click.option("--force", is_flag=True,
              help="FILE: replace an existing OUT; DIR: replace an existing, non-empty OUTDIR that an earlier "
                   "`kpatch apply DIR` wrote.")
@click.option("--report", type=click.Path(dir_okay=False),
              help="Also write an HTML report: source and output, every refused kernel with its reason first, "
                   "then a diff of every changed code object (its counts are `kpatch diff SRC OUT`'s).  Written "
                   "even with --dry-run; a run that changes nothing leaves an existing report as it is.")
@click.option("--verify-emulate", is_flag=True,
              help="Prove each patched object by emulation (as `kpatch verify --emulate`, 1 run, 150,000 "
                   "wave-instructions): per kernel equal / within ulp / different / not verified; an object "
                   "with a DIFFERENT kernel is not written (its kernels refused) and the exit status is 1.")
@click.option("--dry-run", is_flag=True, help="Patch and report, but write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of lines.")
def apply_cmd(file: str | None, out: str | None, dbs: tuple[str, ...], mode: str | None, cu: int | None,
              out_dir: str | None, rules: tuple[str, ...], approx: tuple[str, ...], drop_other_targets: bool,
              force: bool, report: str | None, verify_emulate: bool, dry_run: bool, as_json: bool) -> None:
    """Make gfx1030 kernels safe on gfx1010 and put them where MIOpen loads them.

    \b
    kpatch apply --db SRC [--db SRC ...] [--mode M] [--cu N] [--out-dir DIR] [--rules R]
                 [--allow-approx NAME] [--report FILE.html] [--dry-run]
        patches every kernel of the MIOpen kernel DBs SRC (system .kdb or
        .kdb.bz2, or a user .ukdb, e.g. MIOpen's own run-time cache, which
        is then patched in place) into MIOpen's user kernel DB, which MIOpen
        consults before its system DB.
    kpatch apply FILE -o OUT [--drop-other-targets] [--force]
        the same for one code object, offload bundle or host library (whose
        bundles are patched in place; one that grows past the next bundle is
        refused unless --drop-other-targets makes room).  An existing OUT is
        refused unless --force; OUT is never FILE itself.
    kpatch apply DIR -o OUTDIR [--force]
        a rocBLAS/Tensile library directory (rocblas/library/, also
        torch/lib/rocblas/library/ in PyTorch) as one unit: every file of
        gfx1030 code (by its bytes) is patched as FILE would be, or copied
        unchanged with its refusals reported; everything else (.dat
        catalogues, other GPUs' code) is copied byte for byte.  OUTDIR is
        built beside itself and renamed into place when complete; an
        existing non-empty OUTDIR is refused unless --force (and it holds
        kpatch's record, .kpatch-libdir.json).  Then run rocBLAS with
        ROCBLAS_TENSILE_LIBPATH=OUTDIR.

    \b
    Modes (default: HSA_OVERRIDE_GFX_VERSION=10.3.0 -> override; a gfx1010
    GPU in /sys/class/kfd without override -> native):
      override  patched code keeps its gfx1030 label; writes gfx1030_<CU>.ukdb
                (keys end with -mcpu=gfx1030)
      native    patched code is labelled gfx1010; writes gfx1010_<CU>.ukdb with
                keys ending -mcpu=gfx1010
      relabel   code compiled for gfx1010 (keys ending -mcpu=gfx1010) is
                relabelled gfx1030, code unchanged, into gfx1030_<CU>.ukdb
      harden    code labelled gfx1010 (keys ending -mcpu=gfx1010, e.g. MIOpen's
                assembly kernels, assembled unchanged for gfx1010) gets the
                hazard fixes and keeps its label: gfx1010_<CU>.ukdb, same keys
                (all or nothing per object, as native)
    <CU> is what MIOpen uses: MIOPEN_DEVICE_CU, else CUs / 2 on RDNA (18 for an
    RX 5600 XT); `--cu N` sets it.

    \b
    The user DB directory is MIOPEN_CUSTOM_CACHE_DIR (with the MIOpen version
    appended from MIOpen 3.5 on), else ~/.cache/miopen/<version> of the newest
    MIOpen found, else give --out-dir; ~ is $HOME, or the temporary directory
    ($TMPDIR, $TMP, $TEMP, $TEMPDIR or /tmp) when HOME is unset, empty or /,
    and a networked home means the temporary directory itself, as in MIOpen.
    Only entries that changed are written;
    other entries of an existing user DB stay as they are.  The changed rows
    go into the DB in one SQLite transaction, after a backup of the rows they
    replace (each `kpatch revert` steps back one apply); MIOpen may keep
    running and writing the DB meanwhile: kpatch waits for its writes (up to
    60 s), never loses them, and keeps a row MIOpen wrote under a key while
    kpatch was patching it.  A second run changes nothing.  kpatch never
    writes into system directories, nor through a symbolic link.

    \b
    Output: per kernel `patched`, `refused` (with the reason) or `untouched`,
    then a summary; with --json one document {"entries"|"parts", "errors",
    "summary", ...}.

    \b
    Exit status: 0 when every input was read (refused kernels are results,
    not failures); 1 when some input could not be read (each named on
    stderr; the rest is still done), or the disk is full (nothing
    half-written is left, the user DB is as it was); 2 for usage errors
    (also: mode or CU count that cannot be detected, output in a system
    directory or a symbolic link, FILE's OUT already there without --force,
    user DB locked by MIOpen for over 60 s; nothing is written); 3 on an
    internal error; 130 on Ctrl-C (nothing half-written is left, the user
    DB is as it was).
    """
    if file and dbs:
        raise click.UsageError("give either FILE -o OUT or --db SRC, not both")
    if not file and not dbs:
        raise click.UsageError("give FILE -o OUT or at least one --db SRC")
    if file and not out:
        raise click.UsageError("FILE needs -o OUT")
    is_dir = bool(file) and os.path.isdir(file)
    if force and not file:
        raise click.UsageError("--force is for FILE -o OUT and DIR -o OUTDIR")
    if is_dir and drop_other_targets:
        raise click.UsageError("--drop-other-targets is for FILE (a host library), not DIR")
    if file and not is_dir and out and os.path.isdir(out):
        raise click.UsageError(f"-o {out}: is a directory (FILE -o OUT writes one file)")
    if file and (cu is not None or out_dir):
        raise click.UsageError("--cu and --out-dir are for --db")
    if dbs and drop_other_targets:
        raise click.UsageError("--drop-other-targets is for FILE (a host library), not --db")
    if file and not os.path.exists(file):  # (a dangling symbolic link too)
        raise KpatchError("no such file", file)  # an input that cannot be read: exit 1, as for --db
    if file and not is_dir and out and not dry_run:
        _check_file_output(file, out, force)
    chosen = choose_mode(mode)
    rule_sets = choose_rule_sets(str(chosen.value), rules, approx)
    patch_fn = default_patch_fn(str(chosen.value))
    if verify_emulate:
        from kpatch.cli.verify import EmulateChecked
        patch_fn = EmulateChecked(patch_fn)
    is_patched = default_provenance_fn()
    pairs = ReportPairs(report)
    if is_dir:
        code = run_dir(file, out, chosen, rule_sets, dry_run, as_json, force, patch_fn, is_patched, pairs)
    elif file:
        code = run_file(file, out, chosen, rule_sets, dry_run, as_json, patch_fn, is_patched, pairs,
                        drop_other_targets)
    else:
        code = run_db([expand(d) for d in dbs], chosen, cu, out_dir, rule_sets, dry_run, as_json, patch_fn, is_patched, pairs)
    sys.exit(code)
