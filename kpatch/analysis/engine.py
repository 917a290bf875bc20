"""``analyse(code_object, target)``: every kernel's findings and verdict.

For each kernel (and each other function symbol in ``.text``, since
kernels may call them): take its bytes where
:meth:`~kpatch.codeobject.CodeObject.function_extents` says it lies
(without the ``s_code_end`` padding that follows the last function) and
decode them as the code object's own ISA (gfx1010 for gfx101x objects,
gfx1030 for gfx103x).  The functions go, a batch of them at a time
(:data:`BATCH_BYTES`), into one control-flow graph (no
edge crosses a function boundary: a function with a branch that leaves it,
or lands inside an instruction, is unpatchable, since the code it reaches
that way is not analysed on its path), every detector runs once over it,
and each finding goes to the function holding its address.  A code object
without ``.text`` has no kernel that could be seen: each is unpatchable.  A kernel
that calls or jumps through computed addresses also takes the verdicts of
the code object's device functions (kpatch does not resolve call targets).
Code objects for other processors cannot run on gfx1010 at all.
"""

from __future__ import annotations

import bisect
from itertools import accumulate
from operator import attrgetter

import numpy as np

from kpatch.analysis.cfg import build_cfg
from kpatch.analysis.codescan import TextScan, scan_text
from kpatch.analysis.detectors import DETECTORS, Context
from kpatch.analysis.detectors.context import FunctionSpan
from kpatch.isa.columnlist import addresses_of, join
from kpatch.isa.decodememo import decode_memo, decode_ranges
from kpatch.analysis.facts import FACTS, FactsView, KnownIds, known_ids, known_unit
from kpatch.analysis.findings import CLASS_BY_NAME
from kpatch.analysis.report import FunctionReport, Report
from kpatch.analysis.targets import SUPPORTED_TARGETS
from kpatch.analysis.verdict import PATCHABLE, UNPATCHABLE, Verdict, combine, verdict_of
from kpatch.errors import UsageError
from kpatch.isa.decoder import no_gc
from kpatch.isa.tables import table_for

_ADDRESS = attrgetter("address")
_CLASS = attrgetter("cls")
S_CODE_END = bytes.fromhex("00009fbf")  # 0xBF9F0000


def decode_family(processor: str) -> str | None:
    """The ISA table the analysis decodes a processor's code with (None: not
    GFX10): :func:`kpatch.isa.tables.table_for`'s family rule."""
    return table_for(processor, family=True)


def _strip_code_end(code: bytes) -> bytes:
    n = len(code) - len(code) % 4
    while n >= 4 and code[n - 4:n] == S_CODE_END:
        n -= 4
    return code[:n]


def function_ranges(co) -> list[tuple[str, str, object, int, int]]:
    """(name, kind, kernel or None, start index in .text, end index) of every
    kernel and device function whose code lies in ``.text``, as
    :meth:`~kpatch.codeobject.CodeObject.function_extents` bounds it; a kernel
    whose code is not there has the range (-1, -1)."""
    base = co.text_vaddr or 0
    extents = co.function_extents()
    seen = {e.name: e for e in extents if e.kind == "kernel"}
    has_text = bool(co.text)  # (a copy of the section: once)
    out = []
    for k in co.kernels:  # no code at all, or not in .text: unseen, never "ok"
        e = seen.get(k.name)
        out.append((k.name, "kernel", k, e.start - base, e.end - base) if e is not None and has_text
                   else (k.name, "kernel", k, -1, -1))
    return out + [(e.name, "function", None, e.start - base, e.end - base) for e in extents if e.kind == "function"]


def _not_analysable(name: str, kind: str, address, size: int, reason: str) -> FunctionReport:
    return FunctionReport(name, kind, address, size, verdict=Verdict(UNPATCHABLE, (), (reason,)), unseen=(reason,))


def build_unit(co, source: str, ranges, parts: list | None = None) -> tuple[list, list[FunctionSpan]]:
    """Decode every function range (sorted by address; all in one go, see
    :func:`decode_ranges`) into one instruction list; return it and the
    functions' spans (``parts``, if given, receives the list of each span's
    instructions as :func:`decode_ranges` gave it)."""
    text = co.text
    base = co.text_vaddr or 0
    ordered = sorted(ranges, key=lambda r: (r[3], r[1] != "kernel"))
    bounds = [(a, a + len(_strip_code_end(text[a:b]))) for _, _, _, a, b in ordered]
    spans: list[FunctionSpan] = []
    decoded = decode_ranges(text, source, base, bounds)
    n = 0
    for (name, kind, kernel, a, _), (_, b), got in zip(ordered, bounds, decoded):
        if parts is not None:
            parts.append(got)
        spans.append(FunctionSpan(name, kind, kernel, n, n + len(got), base + a, b - a))
        n += len(got)
    return join(decoded), spans


def analyse(co, target: str = "gfx1010", only=None, scan: TextScan | None = None) -> Report:
    """Analyse every kernel of ``co`` (a :class:`kpatch.codeobject.CodeObject`)
    for running on ``target``.

    ``only`` (a set of kernel and device-function names): analyse only those
    and report only them.  Each function has its own graph, so their findings
    and ``unseen`` are exactly those of a whole analysis; their verdicts are
    not (a kernel that calls takes the verdicts of the functions reported).

    ``scan``: ``scan_text(co, ISA, keep_ids=True)`` made by the caller (the
    rewriter reads the same scan afterwards), used when ``ISA`` is the one
    the analysis decodes ``co`` with (:func:`decode_family`); it is not changed.

    Threads: the decode memo is per thread, but the decoder's caches
    (:func:`kpatch.isa.decoder.cache_for`) and the ELF symbol memo are shared
    by the process and not locked; call this from one thread at a time (kpatch
    runs parallel work in processes)."""
    with no_gc(), decode_memo():  # (the scan of .text and the functions decode the same code)
        return _analyse(co, target, only, scan)


def _analyse(co, target: str, only=None, given: TextScan | None = None) -> Report:
    if target not in SUPPORTED_TARGETS:
        raise UsageError(f"kpatch analyses code for {', '.join(SUPPORTED_TARGETS)}, not {target!r}")
    processor = co.target.processor if co.target is not None else ""
    source = decode_family(processor)
    report = Report(target, co.target_id, source)
    if source is None:
        why = (f"{co.target_id or 'unknown target'} code is not GFX10: kpatch only converts gfx103x "
               f"(and checks gfx101x) code")
        for k in co.kernels:
            report.kernels.append(_not_analysable(k.name, "kernel", k.entry, k.code_size or 0, why))
        return report
    ranges = function_ranges(co)
    scan = given if given is not None and given.target == source else scan_text(co, source, keep_ids=True)
    jumps = bounded_jumps(scan)
    known = scan.known if scan is not None else None
    if only is not None:
        ranges, jumps = _only(co, ranges, jumps, only)
    scan = _without_instructions(scan)  # (the context holds them while the detectors run)
    for batch in _batches([r for r in ranges if r[3] >= 0]):
        ctx = unit_context(co, source, processor, batch, jumps=_jumps_from(co, batch, jumps), known=known)
        _function_reports(report, ctx, run_detectors(ctx))
    ctx = None
    if scan is not None:
        _relocation_verdicts(report, scan)
    why = "kernel code not found in .text" if co.text else "the code object has no .text section (no code)"
    for name, kind, kernel, _, _ in (r for r in ranges if r[3] < 0):
        report.kernels.append(_not_analysable(name, kind, kernel.entry, 0, kernel.entry_problem or why))
    device = combine(f.verdict for f in report.functions) if report.functions else None
    for k in report.kernels:
        if k.calls and device is not None and device.status != "ok":
            k.notes.append("calls functions kpatch does not resolve: the code object's device functions count")
            k.verdict = combine([k.verdict, device])
    order = {k.name: i for i, k in enumerate(co.kernels)}
    report.kernels.sort(key=lambda k: order.get(k.name, 0))
    return report


#: Functions are analysed in batches of about this many bytes of code, in
#: address order: each function has its own graph, so a batch's findings are
#: those of the whole analysis, and the working memory (facts, graph,
#: dataflow) is a batch's, not the whole object's (a Tensile library's
#: ``.text`` is up to 18 MB).
BATCH_BYTES = 1 << 20


def _batches(ranges):
    """``ranges`` (as :func:`function_ranges` gives them) in address order, in
    runs of at most :data:`BATCH_BYTES` bytes of code (a larger function is a
    batch of its own)."""
    batch, size = [], 0
    for r in sorted(ranges, key=lambda r: (r[3], r[1] != "kernel")):
        if batch and size + r[4] - r[3] > BATCH_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(r)
        size += r[4] - r[3]
    if batch:
        yield batch


def _only(co, ranges, jumps, only):
    """The ranges named in ``only``, and the jumps whose source lies in one of them."""
    ranges = [r for r in ranges if r[0] in only]
    return ranges, _jumps_from(co, ranges, jumps)


def _jumps_from(co, ranges, jumps):
    """The ``jumps`` whose source lies in one of ``ranges``."""
    if not jumps:
        return jumps
    base = co.text_vaddr or 0
    spans = sorted((base + a, base + b) for _, _, _, a, b in ranges if a >= 0)
    starts = [a for a, _ in spans]
    reach = list(accumulate((b for _, b in spans), max))  # (ranges may overlap)

    def inside(address: int) -> bool:
        i = bisect.bisect_right(starts, address) - 1
        return i >= 0 and address < reach[i]
    return [j for j in jumps if inside(j[0])]


#: Rule sets whose fixes change headers only (no code moves, so what pins the
#: code's addresses does not stop them).
HEADER_ONLY_RULE_SETS = frozenset({"cu-mode", "retarget-gfx1010"})


def bounded_jumps(scan: TextScan | None) -> list[tuple[int, int]]:
    """(source, target) addresses of the control flow :mod:`~kpatch.analysis.codescan`
    bounds inside a unit: every target of a bounded ``s_setpc_b64``, and the
    callee of an ``s_call_b64`` inside the caller's unit."""
    if scan is None:
        return []
    insts = scan.insts
    out = [(insts[i].address, insts[j].address) for i, js in scan.jumps.items() for j in sorted(js)]
    branches = scan.branches
    eids = scan.eids()
    if eids is not None and branches:  # (the calls, with numpy)
        at = np.fromiter(branches, dtype=np.int64, count=len(branches))
        is_call = FACTS.column(("is-call",), _is_call, dtype=np.bool_)[eids[at]]
        calls = [(i, branches[i]) for i in at[is_call].tolist()]
    else:
        calls = [(i, t) for i, t in branches.items() if insts[i].mnemonic == "s_call_b64"]
    for i, t in calls:
        j = scan.index_at.get(t)
        if j is not None and scan.unit_of[j] == scan.unit_of[i]:
            out.append((insts[i].address, t))
    return out


def _is_call(f) -> bool:
    return f.mnemonic == "s_call_b64"


def _without_instructions(scan: TextScan | None) -> TextScan | None:
    """``scan``'s units, gaps, call edges and relocation problems (what
    :func:`_relocation_verdicts` reads) without its per-instruction tables."""
    if scan is None:
        return None
    return TextScan(scan.section_index, scan.start, scan.end, scan.data, scan.target, scan.units, scan.gaps,
                    [], [], edges=scan.edges, problems=scan.problems)


def _relocation_verdicts(report: Report, scan: TextScan) -> None:
    """What apply would refuse for the relocation facts of ``scan``: a
    patchable kernel (or function) that reaches a computed jump kpatch cannot
    bound (class B), or whose fixes move code in an object where something
    pins every address (class A), is unpatchable with apply's reason."""
    start_of = {u.start: ui for ui, u in enumerate(scan.units)}
    class_a = scan.problems_of("A")
    class_b = scan.problems_of("B")
    if not class_a and not class_b:
        return
    for rep in report.kernels + report.functions:
        if rep.verdict.status != PATCHABLE:
            continue
        ui = start_of.get(rep.address)
        if ui is None:
            continue
        reach = scan.reach(ui)
        reasons = [p.reason for p in class_b if p.ui in reach]
        if class_a and set(rep.verdict.rules) - HEADER_ONLY_RULE_SETS:
            a = class_a[0]
            reasons.append(f"cannot relocate: {a.reason.removeprefix('cannot relocate: ')} (in {a.unit}); "
                           f"no code in this object can move")
        if reasons:
            rep.verdict = Verdict(UNPATCHABLE, rep.verdict.rules, tuple(dict.fromkeys(reasons)))


def unit_context(co, source: str, processor: str, ranges, jumps=(), known: KnownIds | None = None) -> Context:
    """Decode the functions, identify their encodings, build the CFG
    (``jumps``: see :func:`bounded_jumps`; ``known``: the encoding ids the
    scan of ``.text`` gave, :attr:`TextScan.known`)."""
    parts: list[list] = []
    insts, spans = build_unit(co, source, ranges, parts)
    got = known_unit(known, parts, source)  # (the scan's columns, when it decoded the same lists)
    if got is not None:
        addresses, eids = got
    else:
        addresses = addresses_of(insts)
        ends = np.full(len(insts), -1, dtype=np.int64)
        for s in spans:
            if s.end > s.start:
                ends[s.end - 1] = s.address + s.size
        text = co.text
        eids = known_ids(known, insts, source, addresses, text[:len(text) // 4 * 4], co.text_vaddr or 0, ends)
    facts = FactsView(eids)
    cfg = build_cfg(insts, facts, [s.start for s in spans], addresses, jumps)
    ctx = Context(co, cfg, source, processor, spans)
    ctx.addresses = addresses
    return ctx


def run_detectors(ctx: Context) -> list[list]:
    """Every detector's findings, per function (in ``ctx.functions`` order),
    each function's in :func:`_order` (address, then class; all of them
    ordered at once, one argsort), its kernel-level findings
    (:meth:`Context.attach`) among them."""
    per_span: list[list] = [[] for _ in ctx.functions]
    if not ctx.cfg.n:
        return per_span
    found: list = []
    for _, detect in DETECTORS:
        found += detect(ctx)
    if found:
        n = len(found)
        addr = np.fromiter(map(_ADDRESS, found), dtype=np.int64, count=n)
        rank = np.fromiter(map(_CLASS_RANK.__getitem__, map(_CLASS, found)), dtype=np.int64, count=n)
        span = np.searchsorted(np.array(ctx.cfg.func_starts, dtype=np.int64),
                               np.searchsorted(ctx.addresses, addr), "right") - 1
        # by function, then address, then class (stable: among equals, detector order)
        order = np.lexsort((rank, addr, span))
        found = list(map(found.__getitem__, order.tolist()))
        span = span[order]
        bounds = np.searchsorted(span, np.arange(len(per_span) + 1)).tolist()
        for i in np.unique(span).tolist():
            per_span[i] = found[bounds[i]:bounds[i + 1]]
    index = {id(s): i for i, s in enumerate(ctx.functions)}
    for span_, f in ctx.attached:  # kernel-level findings: each after those it equals in the order
        bisect.insort(per_span[index[id(span_)]], f, key=_order)
    return per_span


def _function_reports(report: Report, ctx: Context, per_span: list[list]) -> None:
    cfg = ctx.cfg
    insts = cfg.insts
    nf = len(ctx.functions)
    fb = np.searchsorted(np.array(cfg.func_starts, dtype=np.int64), cfg.block_start, "right") - 1
    blocks = np.bincount(fb, minlength=nf).tolist() if nf else []
    back = np.zeros(nf, dtype=np.int64)
    idx = np.arange(cfg.nblocks)
    for succ in cfg.succ_arrays:
        m = (succ >= 0) & (succ <= idx)
        back += np.bincount(fb[m], minlength=nf)
    back = back.tolist()
    calls = sorted(k for k in cfg.calls + cfg.indirect if k not in cfg.resolved)
    bad = sorted(cfg.bad_targets)
    unmodelled = cfg.unmodelled  # (sorted)
    for i, (span, findings) in enumerate(zip(ctx.functions, per_span)):  # (findings in order: run_detectors)
        # control flow kpatch does not follow is unseen, so the function is not analysable
        # (the verdict's reasons say it: no separate note; most functions have none)
        unseen = ()
        lo, hi = bisect.bisect_left(bad, (span.start,)), bisect.bisect_left(bad, (span.end,))
        if hi > lo:
            unseen = tuple(f"branch at {insts[k].address:#x} leaves {span.name} (target {t:#x}): kpatch does not "
                           f"follow control flow across functions or into the middle of an instruction"
                           for k, t in bad[lo:hi])
        lo, hi = bisect.bisect_left(unmodelled, span.start), bisect.bisect_left(unmodelled, span.end)
        if hi > lo:
            unseen += tuple(f"{insts[k].mnemonic} at {insts[k].address:#x} changes the program counter in a way "
                            f"kpatch does not follow" for k in unmodelled[lo:hi])
        rep = FunctionReport(span.name, span.kind, span.address, span.size, findings, verdict_of(findings, unseen),
                             instructions=span.end - span.start, blocks=blocks[i], loops=back[i], unseen=unseen)
        lo, hi = bisect.bisect_left(calls, span.start), bisect.bisect_left(calls, span.end)
        if hi > lo:
            rep.calls = [insts[k].address for k in calls[lo:hi]]
        (report.kernels if span.kind == "kernel" else report.functions).append(rep)


#: each finding class's place in the order of their names
_CLASS_RANK = {name: r for r, name in enumerate(sorted(CLASS_BY_NAME))}


def _order(f) -> tuple:
    return (-1 if f.address is None else f.address, f.cls)
