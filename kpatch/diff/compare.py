"""What differs between two code objects, or between the code objects of
two containers (kernel DBs, bundles, host libraries).

:func:`diff_objects` compares one original and one patched code object:
ELF header, sections, segments, notes and symbols; metadata (kernel by
kernel); kernel descriptors field by field; and the code, function by
function, as aligned instruction streams (:mod:`kpatch.diff.align`)
whose branches are checked (:mod:`kpatch.diff.branchcheck`).  A
relocation summary counts what moved, and the provenance note the rewriter
writes is shown when it can be read.

:func:`diff_inputs` pairs the code objects of two inputs (by kernel DB key
``(kernel_name, kernel_args)``, tolerating ``-mcpu=gfx1030`` against
``-mcpu=gfx1010``, then by bundle entry, then in order) and returns a
:class:`DiffReport`; the renderers are :mod:`kpatch.diff.text` and
:mod:`kpatch.diff.html`, :func:`report_json` gives the JSON form.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from kpatch.codeobject import CodeObject
from kpatch.elf.reader import EHDR
from kpatch.containers.discover import Found, Problem, discover
from kpatch.containers.uri import Uri
from kpatch.data import expand
from kpatch.errors import FormatError, KpatchError
from kpatch.isa import decode
from kpatch.diff.align import CHANGED, EQUAL, INSERTED, OP_KINDS, REMOVED, FieldChange, Op, align, fmt_value
from kpatch.diff.branchcheck import BranchChecker, BranchProblem, added_unit_problems
from kpatch.diff.functions import DiffUnit, decode_target, units

IDENTICAL, DIFFERENT, ADDED, MISSING = "identical", "changed", "added", "removed"

#: ELF header fields worth reporting (offsets of tables follow from layout).
_HEADER_FIELDS = [name for name, _ in EHDR.fields if name not in ("ei_magic", "ei_pad")]
_SECTION_FIELDS = ("type", "flags", "addr", "offset", "size", "addralign", "entsize")
_SEGMENT_FIELDS = ("type", "flags", "offset", "vaddr", "filesz", "memsz", "align")


@dataclass(slots=True)
class Row:
    """One line of a side-by-side listing: an :class:`~kpatch.diff.align.Op`
    with its instructions.  ``relocated``: a branch whose offset alone
    changed while it still reaches the same instruction."""

    kind: str
    old: object | None
    new: object | None
    changes: Sequence[FieldChange] = ()
    relocated: bool = False
    problem: str | None = None  # the control-flow problem found at this row


@dataclass
class UnitDiff:
    """One function (kernel or device function) compared."""

    name: str
    kind: str  # "kernel", "function" or "section"
    status: str  # identical / changed / added / removed
    old_range: tuple[int, int] | None
    new_range: tuple[int, int] | None
    rows: list[Row] = field(default_factory=list)
    descriptor: list[FieldChange] = field(default_factory=list)
    metadata: list[FieldChange] = field(default_factory=list)
    equal_dropped: int = 0  # equal rows not kept (unchanged functions, or outside the hunks)
    branches: int = 0  # original branches with a counterpart, checked
    #: the rows a listing with ``hunks`` equal rows of context shows (a
    #: hidden run of equal rows is its length), when only those were kept
    listing: list | None = None
    hunks: int | None = None
    #: what `kpatch apply` decided for this kernel, when the report comes from it:
    #: (patched | refused | untouched, reason)
    outcome: tuple[str, str] | None = None

    @property
    def counts(self) -> dict[str, int]:
        c = {k: 0 for k in OP_KINDS}
        c[EQUAL] = self.equal_dropped
        c["relocated"] = 0
        for r in self.rows:
            c["relocated" if r.relocated else r.kind] += 1
        return c

    @property
    def code_changed(self) -> bool:
        return any(r.kind != EQUAL for r in self.rows)

    @property
    def instructions(self) -> int:
        """Rows compared (kept or not)."""
        return len(self.rows) + self.equal_dropped

    def shown(self, context: int | None) -> list:
        """The rows a listing with ``context`` equal rows around each
        difference shows (:func:`with_context`)."""
        if self.listing is None:
            return with_context(self.rows, context)
        if context != self.hunks:
            raise ValueError(f"{self.name}: only the rows of a {self.hunks}-row context were kept")
        return self.listing


@dataclass
class ObjectDiff:
    """Two code objects compared.  ``error`` is set (and the rest mostly
    empty) when one side could not be read."""

    label: str
    old_uri: str
    new_uri: str
    old_target: str = ""
    new_target: str = ""
    old_decode: str | None = None
    new_decode: str | None = None
    old_size: int = 0
    new_size: int = 0
    identical: bool = False
    header: list[FieldChange] = field(default_factory=list)
    layout: list[FieldChange] = field(default_factory=list)  # sections, segments
    notes: list[FieldChange] = field(default_factory=list)
    symbols: list[FieldChange] = field(default_factory=list)
    metadata: list[FieldChange] = field(default_factory=list)
    units: list[UnitDiff] = field(default_factory=list)
    problems: list[BranchProblem] = field(default_factory=list)
    relocation: dict[str, object] = field(default_factory=dict)
    provenance: dict | None = None
    error: str | None = None

    @property
    def changed_units(self) -> list[UnitDiff]:
        return [u for u in self.units if u.status != IDENTICAL]


@dataclass
class DiffReport:
    """The result of ``kpatch diff A B``: every pair compared, and what could
    not be paired or read."""

    old_name: str
    new_name: str
    objects: list[ObjectDiff] = field(default_factory=list)
    only_old: list[str] = field(default_factory=list)
    only_new: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # unreadable inputs, one line each
    apply: "ApplyInfo | None" = None  # set when the report is `kpatch apply --report`'s

    @property
    def summary(self) -> dict[str, int]:
        objs = self.objects
        return {
            "pairs": len(objs),
            "identical": sum(1 for o in objs if o.identical),
            "changed": sum(1 for o in objs if not o.identical and o.error is None),
            "errors": sum(1 for o in objs if o.error is not None) + len(self.problems),
            "only_old": len(self.only_old),
            "only_new": len(self.only_new),
            "functions_changed": sum(len(o.changed_units) for o in objs),
            "inserted": sum(u.counts[INSERTED] for o in objs for u in o.units),
            "removed": sum(u.counts[REMOVED] for o in objs for u in o.units),
            "changed_instructions": sum(u.counts[CHANGED] for o in objs for u in o.units),
            "branches_relocated": sum(u.counts["relocated"] for o in objs for u in o.units),
            "control_flow_problems": sum(len(o.problems) for o in objs),
        }


@dataclass(frozen=True)
class Refusal:
    """A kernel `kpatch apply` refused (``kernel`` None: a whole item it
    could not patch), the reason, and what became of its code object:
    ``written`` (with this kernel left as it was), ``already in output``
    (an earlier run wrote it) or ``not written`` (MIOpen keeps using its own
    entry)."""

    uri: str
    kernel: str | None
    reason: str
    object_state: str


@dataclass
class ApplyInfo:
    """What `kpatch apply` decided, for the report it writes: where the code
    came from and went, every refusal and error, its own counts (``unit``:
    what they count, e.g. ``entries``), and how many items the output
    already held patched."""

    sources: list[str]
    output: str
    unit: str = "entries"
    dry_run: bool = False
    refusals: list[Refusal] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    already_patched: int = 0


@dataclass
class ChangedPair:
    """One code object `kpatch apply` changed: its source URI (``label``),
    both byte strings, where the patched one went, and per kernel what
    apply decided ``(status, reason)``."""

    label: str
    old: bytes
    new: bytes
    new_uri: str = ""
    outcomes: dict[str, tuple[str, str]] = field(default_factory=dict)


# -- small comparisons ----------------------------------------------------------------------

def header_changes(a: CodeObject, b: CodeObject) -> list[FieldChange]:
    """ELF header fields that differ, and the target id they mean."""
    ha, hb = a.elf.header, b.elf.header
    out = []
    for name in _HEADER_FIELDS:
        va, vb = getattr(ha, name), getattr(hb, name)
        if va != vb:
            out.append(FieldChange(name, va, vb))
    if a.target_id != b.target_id:
        out.append(FieldChange("target", a.target_id or None, b.target_id or None))
    return out


def layout_changes(a: CodeObject, b: CodeObject) -> list[FieldChange]:
    """Sections (by name) and segments (by index) that were added, removed
    or moved / resized."""
    out: list[FieldChange] = []
    sa, sb = a.sections, b.sections
    for name in list(sa) + [n for n in sb if n not in sa]:
        _record_changes(out, f"section {name}", "", sa.get(name), sb.get(name), _SECTION_FIELDS)
    pa, pb = a.elf.segments, b.elf.segments
    for i in range(max(len(pa), len(pb))):
        _record_changes(out, f"segment {i}", "p_", pa[i] if i < len(pa) else None, pb[i] if i < len(pb) else None,
                        _SEGMENT_FIELDS)
    return out


def _record_changes(out: list[FieldChange], what: str, prefix: str, x, y, fields: Sequence[str]) -> None:
    """Add to ``out`` that ``what`` is on one side only, or each of its
    ``fields`` that differs (named ``what prefix+field``)."""
    if x is None or y is None:
        out.append(FieldChange(what, "present" if x else None, "present" if y else None))
        return
    for f in fields:
        if getattr(x, f) != getattr(y, f):
            out.append(FieldChange(f"{what} {prefix}{f}", getattr(x, f), getattr(y, f)))


def note_changes(a: CodeObject, b: CodeObject) -> list[FieldChange]:
    """Notes (owner, type, n-th of that kind) added, removed or resized."""
    def index(co: CodeObject) -> dict[tuple[str, int, int], int]:
        seen: dict[tuple[str, int], int] = {}
        out = {}
        for n in co.elf.notes:
            k = (n.owner, n.type)
            seen[k] = seen.get(k, 0) + 1
            out[(n.owner, n.type, seen[k])] = len(n.desc)
        return out
    na, nb = index(a), index(b)
    out = []
    for k in list(na) + [k for k in nb if k not in na]:
        if na.get(k) != nb.get(k):
            name = f"note {k[0]} type {k[1]}" + (f" #{k[2]}" if k[2] > 1 else "") + " size"
            out.append(FieldChange(name, na.get(k), nb.get(k)))
    return out


def symbol_changes(a: CodeObject, b: CodeObject) -> list[FieldChange]:
    """Symbol values and sizes that differ, and symbols only on one side
    (by table and name)."""
    def index(co: CodeObject) -> dict[tuple[str, str], tuple[int, int]]:
        out = {}
        for s in co.symbols():
            if s.name:
                out.setdefault((s.table, s.name), (s.value, s.size))
        return out
    ia, ib = index(a), index(b)
    out = []
    for k in list(ia) + [k for k in ib if k not in ia]:
        x, y = ia.get(k), ib.get(k)
        name = f"{k[0]} {k[1]}"
        if x is None or y is None:
            out.append(FieldChange(name, "present" if x else None, "present" if y else None))
            continue
        if x[0] != y[0]:
            out.append(FieldChange(f"{name} value", x[0], y[0]))
        if x[1] != y[1]:
            out.append(FieldChange(f"{name} size", x[1], y[1]))
    return out


def descriptor_changes(a, b) -> list[FieldChange]:
    """Kernel descriptor fields that differ: bit fields, and the words that
    are not made of bit fields (sizes, entry offset, reserved bytes)."""
    fa, fb = a.fields(), b.fields()
    packed = {f.word for f in a.bit_fields.values()} | {f.word for f in b.bit_fields.values()}
    out = []
    for name in list(fa) + [n for n in fb if n not in fa]:
        if name in packed:
            continue
        if fa.get(name) != fb.get(name):
            out.append(FieldChange(name, fa.get(name), fb.get(name)))
    return out


def _plain(v):
    if isinstance(v, bytes):
        return v.hex()
    return v


def tree_changes(a, b, path: str = "") -> list[FieldChange]:
    """Differences between two plain-Python trees (metadata): maps by key,
    lists of maps with unique ``.name`` by name, other lists by index."""
    out: list[FieldChange] = []
    _tree(a, b, path, out)
    return out


def _named(items) -> dict | None:
    if not isinstance(items, list) or not all(isinstance(x, dict) and isinstance(x.get(".name"), str) for x in items):
        return None
    names = [x[".name"] for x in items]
    return dict(zip(names, items)) if len(set(names)) == len(names) else None


def _tree(a, b, path: str, out: list[FieldChange]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            sub = f"{path}.{k}" if path and not str(k).startswith(".") else f"{path}{k}"
            if k not in a:
                out.append(FieldChange(sub, None, _plain(b[k])))
            elif k not in b:
                out.append(FieldChange(sub, _plain(a[k]), None))
            else:
                _tree(a[k], b[k], sub, out)
        return
    if isinstance(a, list) and isinstance(b, list):
        na, nb = _named(a), _named(b)
        if na is not None and nb is not None and (a or b):
            for k in list(na) + [k for k in nb if k not in na]:
                sub = f"{path}[{k}]"
                if k not in na:
                    out.append(FieldChange(sub, None, "present"))
                elif k not in nb:
                    out.append(FieldChange(sub, "present", None))
                else:
                    _tree(na[k], nb[k], sub, out)
            return
        if len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b)):
                _tree(x, y, f"{path}[{i}]", out)
            return
    if type(a) is not type(b) or a != b:
        out.append(FieldChange(path, _plain(a), _plain(b)))


# -- code ------------------------------------------------------------------------------------

def _rows(old: DiffUnit, new: DiffUnit, ops: Sequence[Op]) -> list[Row]:
    return [Row(op.kind, old.insts[op.old] if op.old is not None else None,
                new.insts[op.new] if op.new is not None else None, op.changes)
            for op in ops]


def _rows_for(us: DiffUnit, kind: str) -> list[Row]:
    if kind == ADDED:
        return [Row(INSERTED, None, i) for i in us.insts]
    return [Row(REMOVED, i, None) for i in us.insts]


def _read_provenance(data: bytes) -> dict | None:
    from kpatch.rewrite.provenance import read_provenance  # written by the rewriter
    try:
        return read_provenance(data)
    except KpatchError as e:
        return {"error": e.reason}


def diff_objects(old: bytes, new: bytes, *, label: str = "", old_uri: str = "", new_uri: str = "",
                 old_target: str | None = None, new_target: str | None = None,
                 keep_identical_rows: bool = False, hunks: int | None = None,
                 on_unit: Callable[[UnitDiff, list[Row]], None] | None = None) -> ObjectDiff:
    """Compare an original code object ``old`` with ``new``.

    ``old_target``/``new_target`` choose the ISA table to decode each side
    with (default: each object's own processor).  Unchanged functions keep
    no rows unless ``keep_identical_rows``.  ``hunks`` N: a changed
    function keeps only the rows a listing with N equal rows of context
    shows (:attr:`UnitDiff.listing`; the others are counted in
    ``equal_dropped``), so that two whole libraries can be compared in
    bounded memory; None keeps every row.  ``on_unit(unit, rows)`` is
    called with every row of each function once its control-flow check is
    complete (streaming).  A side that is not a readable code object gives
    an :class:`ObjectDiff` with ``error`` set.
    """
    d = ObjectDiff(label or new_uri or old_uri, old_uri, new_uri, old_size=len(old), new_size=len(new))
    try:
        a = CodeObject.from_bytes(old, name=old_uri or "old", lossless=False)  # (read only)
        b = CodeObject.from_bytes(new, name=new_uri or "new", lossless=False)
        d.old_target, d.new_target = a.target_id, b.target_id
        d.old_decode, d.new_decode = decode_target(a, old_target), decode_target(b, new_target)
        if old == new and d.old_decode == d.new_decode:
            d.identical = True
            return d
        _compare_into(d, a, b, _Keep(keep_identical_rows, hunks, on_unit))
    except FormatError as e:
        d.error = str(e)
    d.provenance = _read_provenance(new) if d.error is None else None
    return d


@dataclass
class _Keep:
    """What :func:`diff_objects` keeps of each function's rows."""

    identical: bool
    hunks: int | None
    on_unit: Callable | None


def _compare_into(d: ObjectDiff, a: CodeObject, b: CodeObject, keep: _Keep) -> None:
    """Compare ``a`` with ``b`` into ``d``: headers, metadata, then function
    by function (with the control-flow check), then the relocation summary."""
    d.header = header_changes(a, b)
    d.layout = layout_changes(a, b)
    d.notes = note_changes(a, b)
    d.symbols = symbol_changes(a, b)
    ka, kb = _metadata_changes(d, a, b)
    decode = d.old_decode is not None and d.new_decode is not None
    _code(d, a, b, ka, kb, decode, keep)
    d.identical = a.data == b.data and not any(u.code_changed for u in d.units)
    d.relocation = _relocation(d, a, b, decode)


def _metadata_changes(d: ObjectDiff, a: CodeObject, b: CodeObject) -> tuple[dict, dict]:
    """Put the changes of the metadata outside the kernels' maps in ``d``;
    return each side's kernel maps by name."""
    ma = a.metadata.to_python() if a.metadata is not None else None
    mb = b.metadata.to_python() if b.metadata is not None else None
    ka = {k.get(".name"): k for k in (ma or {}).get("amdhsa.kernels", []) if isinstance(k, dict)}
    kb = {k.get(".name"): k for k in (mb or {}).get("amdhsa.kernels", []) if isinstance(k, dict)}
    if isinstance(ma, dict) and isinstance(mb, dict):
        top_a = {k: v for k, v in ma.items() if k != "amdhsa.kernels"}
        top_b = {k: v for k, v in mb.items() if k != "amdhsa.kernels"}
        d.metadata = tree_changes(top_a, top_b)
        for name in [n for n in ka if n not in kb]:
            d.metadata.append(FieldChange(f"amdhsa.kernels[{name}]", "present", None))
        for name in [n for n in kb if n not in ka]:
            d.metadata.append(FieldChange(f"amdhsa.kernels[{name}]", None, "present"))
    elif (ma is None) != (mb is None):
        d.metadata = [FieldChange("metadata note", "present" if ma is not None else None,
                                  "present" if mb is not None else None)]
    return ka, kb


def _text_at(co: CodeObject, target: str, address: int) -> str:
    """The text of the instruction of ``co`` that starts at ``address``."""
    off = address - co.section(".text").addr
    return decode(co.text[off:off + 16], target, address)[0].text()


def _code(d: ObjectDiff, a: CodeObject, b: CodeObject, ka: dict, kb: dict, decode_: bool, keep: _Keep) -> None:
    """Match the functions of ``a`` and ``b`` by name into ``d.units``, one
    function at a time: its instructions are made, aligned, checked
    (:class:`~kpatch.diff.branchcheck.BranchChecker`), marked and cut to
    what ``keep`` keeps before the next function's are made.  A function
    whose check needs a later function waits for the end."""
    ua = units(a, d.old_decode if decode_ else None, columns=True)
    ub = units(b, d.new_decode if decode_ else None, columns=True)
    by_b = {u.name: u for u in ub}
    names_a = {u.name for u in ua}
    kern_a = {k.name: k for k in a.kernels}
    kern_b = {k.name: k for k in b.kernels}
    checker = BranchChecker(lambda addr: _text_at(a, d.old_decode, addr)) if decode_ else None
    waiting: list[tuple[UnitDiff, list[Row], list[BranchProblem]]] = []
    checked: set[str] = set()

    def done(ud: UnitDiff, rows: list[Row], problems: list[BranchProblem]) -> None:
        d.problems.extend(problems)
        if checker is not None and checker.waiting(ud.name):
            waiting.append((ud, rows, problems))
        else:
            _finish_unit(ud, rows, problems, keep)

    for u in ua:
        v = by_b.get(u.name)
        problems: list[BranchProblem] = []
        if v is None:
            rows = _rows_for(u, MISSING)
            ud = UnitDiff(u.name, u.kind, MISSING, (u.start, u.end), None)
            if checker is not None:
                problems = checker.add_pair(u, None, None)
        else:
            ops = align(u.load(), v.load()) if decode_ else []
            rows = _rows(u, v, ops)
            ud = UnitDiff(u.name, u.kind if u.kind != "function" else v.kind, IDENTICAL,
                          (u.start, u.end), (v.start, v.end))
            if checker is not None:
                problems = checker.add_pair(u, v, ops)
                if u.name in kern_a and u.name in kern_b:
                    checked.add(u.name)
                    problems += checker.entry(u.name, kern_a[u.name].entry, kern_b[u.name].entry)
            del ops
            v.unload()
        u.unload()
        _unit_fields(ud, kern_a, kern_b, ka, kb)
        d.units.append(ud)
        done(ud, rows, problems)
    for v in ub:
        if v.name in names_a:
            continue
        rows = _rows_for(v, ADDED)
        problems = added_unit_problems(v) if checker is not None else []
        v.unload()
        ud = UnitDiff(v.name, v.kind, ADDED, None, (v.start, v.end))
        _unit_fields(ud, kern_a, kern_b, ka, kb)
        d.units.append(ud)
        done(ud, rows, problems)
    if checker is not None:
        late = checker.finish([(n, k.entry, kern_b[n].entry) for n, k in kern_a.items()
                               if n in kern_b and n not in checked])
        d.problems.extend(late)
        for ud, rows, problems in waiting:
            _finish_unit(ud, rows, problems + [p for p in late if p.unit == ud.name], keep)
    for name in [n for n in kern_a if n in kern_b and n not in {u.name for u in d.units}]:
        ud = UnitDiff(name, "kernel", IDENTICAL, None, None)
        _unit_fields(ud, kern_a, kern_b, ka, kb)
        _finish_unit(ud, [], [], keep)
        d.units.append(ud)


def _unit_fields(ud: UnitDiff, kern_a: dict, kern_b: dict, ka: dict, kb: dict) -> None:
    """A kernel's descriptor and metadata changes, on its unit."""
    ka_, kb_ = kern_a.get(ud.name), kern_b.get(ud.name)
    if ka_ is not None and kb_ is not None:
        ud.descriptor = descriptor_changes(ka_.descriptor, kb_.descriptor)
    mka, mkb = ka.get(ud.name), kb.get(ud.name)
    if mka is not None and mkb is not None:
        ud.metadata = tree_changes(mka, mkb)


def _finish_unit(ud: UnitDiff, rows: list[Row], problems: list[BranchProblem], keep: _Keep) -> None:
    """Put each control-flow problem of the unit on its row, mark branches
    that only moved with their target as relocated, mark the unit changed
    or not, count its checked branches, hand its rows to ``keep.on_unit``
    and keep what ``keep`` says."""
    bad = {p.old_address for p in problems if p.unit == ud.name}
    bad_new = {p.new_address: p.message for p in problems if p.unit == ud.name and p.new_address is not None}
    bad_old = {p.old_address: p.message for p in problems if p.unit == ud.name and p.old_address is not None}
    branches = 0
    changed = False
    for r in rows:
        o = r.old
        if r.new is not None and r.new.address in bad_new:
            r.problem = bad_new[r.new.address]
        elif r.new is None and o is not None and o.address in bad_old:
            r.problem = bad_old[o.address]
        if r.kind != EQUAL:
            changed = True
            if (r.kind == CHANGED and o is not None and r.changes and all(c.name == "simm16" for c in r.changes)
                    and o.branch_target is not None and o.address not in bad):
                r.relocated = True
        if o is not None and r.new is not None and o.branch_target is not None:
            branches += 1
    ud.branches = branches
    ud.rows = rows
    if ud.status == IDENTICAL and (changed or ud.descriptor or ud.metadata
                                   or (ud.old_range and ud.new_range
                                       and ud.old_range[1] - ud.old_range[0] != ud.new_range[1] - ud.new_range[0])):
        ud.status = DIFFERENT
    if keep.on_unit is not None:
        keep.on_unit(ud, rows)
    if ud.status == IDENTICAL and not keep.identical:
        ud.equal_dropped, ud.rows = len(rows), []
    elif keep.hunks is not None:
        listing = with_context(rows, keep.hunks)
        ud.rows = [r for r in listing if isinstance(r, Row)]
        ud.equal_dropped = len(rows) - len(ud.rows)
        ud.listing, ud.hunks = listing, keep.hunks


def _relocation(d: ObjectDiff, a: CodeObject, b: CodeObject, decoded: bool) -> dict[str, object]:
    """What moved: sizes, instruction counts, branches and literals fixed up,
    symbols and kernel entries moved, and the control-flow check result."""
    rows = [r for u in d.units for r in u.rows]
    rel: dict[str, object] = {
        ".text size": (len(a.text), len(b.text)),
        "file size": (len(a.data), len(b.data)),
    }
    if decoded:
        rel.update({
            "instructions inserted": sum(1 for r in rows if r.kind == INSERTED),
            "instructions removed": sum(1 for r in rows if r.kind == REMOVED),
            "instructions changed": sum(1 for r in rows if r.kind == CHANGED and not r.relocated),
            "branches relocated": sum(1 for r in rows if r.relocated),
            "literals changed": sum(1 for r in rows if r.kind == CHANGED and r.changes
                                    and all(c.name == "literal" for c in r.changes)),
            "branches checked": sum(u.branches for u in d.units),
            "control-flow problems": len(d.problems),
        })
    else:
        rel["code"] = f"not decoded (targets {d.old_target or '?'} / {d.new_target or '?'})"
    rel["symbols moved"] = sum(1 for c in d.symbols if c.name.endswith(" value"))
    rel["symbols resized"] = sum(1 for c in d.symbols if c.name.endswith(" size"))
    rel["kernel entries moved"] = sum(1 for u in d.units for c in u.descriptor
                                      if c.name == "KERNEL_CODE_ENTRY_BYTE_OFFSET")
    return rel


# -- pairing the code objects of two inputs --------------------------------------------------

_MCPU = re.compile(r"\s*-mcpu=\S+")


def _norm_args(args: str | None) -> str | None:
    return None if args is None else _MCPU.sub("", args)


def _norm_entry(entry: str | None) -> str | None:
    return None if entry is None else entry.split("--", 1)[0]


def _label(f: Found) -> str:
    o = f.origin
    if "kernel_name" in o:
        s = f"{o['kernel_name']} [{o.get('kernel_args', '').strip()}]"
        return s + (f" {o['bundle_entry']}" if "bundle_entry" in o else "")
    return str(f.uri)


def collect(path: str) -> tuple[list[Found], list[Problem]]:
    """Every code object in ``path`` (file, directory or URI), and what could not be read."""
    found, problems = [], []
    for item in discover([path]):
        (found if isinstance(item, Found) else problems).append(item)
    return found, problems


def collect_side(path: str) -> tuple[list[Found], list[Problem]]:
    """:func:`collect` for one side of a comparison, which must hold at least
    one code object: KpatchError naming ``path`` (as given) when it does not
    exist, when nothing in it could be read, or when it holds no gfx code
    object -- comparing against nothing would list everything on the other
    side as added or removed."""
    target = expand(path)
    if "://" not in target and not os.path.lexists(target):
        raise KpatchError("no such file", path)
    found, problems = collect(path)
    if found:
        return found, problems
    if len(problems) == 1 and problems[0].uri in (path, target, str(Uri("file", os.path.abspath(target)))):
        raise KpatchError(problems[0].error, path)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise KpatchError(f"no readable code object: {problems[0].uri}: {problems[0].error}{more}", path)
    raise KpatchError("no gfx code object in it", path)


def pair_items(a: Sequence[Found], b: Sequence[Found]) -> tuple[list[tuple[Found, Found]], list[Found], list[Found]]:
    """Pair the code objects of two inputs: one each -> each other; else by
    exact key (kernel name, args, bundle entry), then by the key without
    ``-mcpu=`` and bundle target, then in order among equal loose keys.
    Returns (pairs in ``b``'s order, only in ``a``, only in ``b``)."""
    if len(a) == 1 and len(b) == 1:
        return [(a[0], b[0])], [], []

    def exact(f: Found):
        o = f.origin
        return (o.get("kernel_name"), o.get("kernel_args"), o.get("bundle_entry"))

    def loose(f: Found):
        o = f.origin
        return (o.get("kernel_name"), _norm_args(o.get("kernel_args")), _norm_entry(o.get("bundle_entry")))

    left = list(range(len(a)))
    match: dict[int, int] = {}
    for keyf in (exact, loose):
        pool: dict[tuple, list[int]] = {}
        for i in left:
            pool.setdefault(keyf(a[i]), []).append(i)
        for j in range(len(b)):
            if j in match:
                continue
            cands = pool.get(keyf(b[j]))
            if cands:
                match[j] = cands.pop(0)
        used = set(match.values())
        left = [i for i in left if i not in used]
    pairs = [(a[match[j]], b[j]) for j in range(len(b)) if j in match]
    used = set(match.values())
    return pairs, [a[i] for i in range(len(a)) if i not in used], [b[j] for j in range(len(b)) if j not in match]


def diff_inputs(old: str, new: str, *, old_target: str | None = None, new_target: str | None = None,
                on_pair=None, hunks: int | None = None, on_unit=None, on_object=None) -> DiffReport:
    """Compare every code object of ``old`` with its counterpart in ``new``
    (files, directories or URIs: code objects, bundles, kernel DBs, host
    libraries).  ``on_pair(label)`` is called before each pair (progress);
    ``hunks``: what each function keeps (:func:`diff_objects`);
    ``on_unit(label, unit, rows)``: every row of each function, as it is
    compared; ``on_object(object_diff)``: each pair once compared.
    KpatchError when either input is missing or holds no readable code
    object (:func:`collect_side`); items that cannot be read beside readable
    ones are listed in ``problems``."""
    fa, pa = collect_side(old)
    fb, pb = collect_side(new)
    rep = DiffReport(old, new, problems=[f"{p.uri}: {p.error}" for p in pa + pb])
    pairs, only_a, only_b = pair_items(fa, fb)
    rep.only_old = [_label(f) for f in only_a]
    rep.only_new = [_label(f) for f in only_b]
    for x, y in pairs:
        label = _label(y)
        if on_pair is not None:
            on_pair(label)
        each = None if on_unit is None else (lambda u, rows, label=label: on_unit(label, u, rows))
        d = diff_objects(x.data, y.data, label=label, old_uri=str(x.uri), new_uri=str(y.uri),
                         old_target=old_target, new_target=new_target, hunks=hunks, on_unit=each)
        rep.objects.append(d)
        if on_object is not None:
            on_object(d)
    return rep


def build_report(pairs: Iterable[ChangedPair | tuple[str, bytes, bytes]], *, old_name: str = "original",
                 new_name: str = "patched", old_target: str | None = None,
                 new_target: str | None = None, apply: ApplyInfo | None = None) -> DiffReport:
    """A :class:`DiffReport` from the code objects `kpatch apply` changed
    (:class:`ChangedPair`, or ``(label, original bytes, patched bytes)``).
    Each pair is compared exactly as ``kpatch diff`` compares it (same
    decoding targets unless given), so the counts agree with ``kpatch diff
    SOURCE OUTPUT``; each kernel carries apply's decision
    (:attr:`UnitDiff.outcome`)."""
    rep = DiffReport(old_name, new_name, apply=apply)
    for item in pairs:
        if not isinstance(item, ChangedPair):
            item = ChangedPair(*item)
        d = diff_objects(item.old, item.new, label=item.label, old_uri=item.label,
                         new_uri=item.new_uri or item.label, old_target=old_target, new_target=new_target)
        for u in d.units:
            u.outcome = item.outcomes.get(u.name)
        rep.objects.append(d)
    return rep


def with_context(rows: Sequence[Row], context: int | None) -> list[Row | int]:
    """The rows a listing shows: every non-equal row and up to ``context``
    equal rows on each side of one; each run of hidden equal rows becomes
    its length (an int).  ``context`` None shows everything."""
    if context is None:
        return list(rows)
    keep = [False] * len(rows)
    for n, r in enumerate(rows):
        if r.kind != EQUAL:
            for m in range(max(0, n - context), min(len(rows), n + context + 1)):
                keep[m] = True
    out: list[Row | int] = []
    hidden = 0
    for n, r in enumerate(rows):
        if keep[n]:
            if hidden:
                out.append(hidden)
                hidden = 0
            out.append(r)
        else:
            hidden += 1
    if hidden:
        out.append(hidden)
    return out


def relocation_items(d: ObjectDiff) -> list[tuple[str, str]]:
    """The relocation summary as (name, text) pairs for display."""
    out = []
    for k, v in d.relocation.items():
        if isinstance(v, tuple) and len(v) == 2 and k.endswith("size"):
            text = f"{v[0]} bytes" if v[0] == v[1] else f"{v[0]} -> {v[1]} bytes ({v[1] - v[0]:+d})"
        elif isinstance(v, tuple) and len(v) == 2:
            text = fmt_value(v[0]) if v[0] == v[1] else f"{fmt_value(v[0])} -> {fmt_value(v[1])}"
        else:
            text = str(v)  # counts, in decimal
        out.append((k, text))
    return out


def flat_items(tree, prefix: str = "") -> list[tuple[str, str]]:
    """A nested dict/list (provenance) as (dotted key, value text) pairs."""
    out: list[tuple[str, str]] = []
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.extend(flat_items(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(tree, list) and any(isinstance(x, (dict, list)) for x in tree):
        for i, v in enumerate(tree):
            out.extend(flat_items(v, f"{prefix}[{i}]"))
    elif isinstance(tree, list):
        out.append((prefix, ", ".join(fmt_value(_plain(x)) for x in tree)))
    else:
        out.append((prefix, fmt_value(_plain(tree))))
    return out


# -- JSON -----------------------------------------------------------------------------------

def _jv(v):
    if isinstance(v, tuple):
        return [_jv(x) for x in v]
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    if isinstance(v, list):
        return [_jv(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jv(x) for k, x in v.items()}
    return str(v)


def _changes_json(cs: list[FieldChange]) -> list[dict]:
    return [{"name": c.name, "old": _jv(c.old), "new": _jv(c.new)} for c in cs]


def _inst_json(i) -> dict | None:
    if i is None:
        return None
    return {"address": i.address, "text": i.text(), "encoding": i.raw.hex()}


def row_json(r: Row) -> dict:
    """The JSON form of one :class:`Row`."""
    return {"kind": r.kind, "old": _inst_json(r.old), "new": _inst_json(r.new),
            "changes": _changes_json(r.changes), "relocated": r.relocated, "problem": r.problem}


def listing_json(u: UnitDiff, context: int | None) -> list[dict]:
    """What ``kpatch diff`` lists of a function's code with ``context``
    equal rows around each difference: rows, and ``{"identical": N}`` for
    each run of N equal rows not shown (nothing when its code is unchanged)."""
    if not u.code_changed:
        return []
    return [{"identical": r} if isinstance(r, int) else row_json(r) for r in u.shown(context)]


def object_json(d: ObjectDiff, *, rows: bool = True, context: int | None = 3,
                functions: bool = True) -> dict:
    """The JSON form of one :class:`ObjectDiff`: with ``rows``, every row
    of each function kept (``rows``); else what the text output lists
    (``listing``: :func:`listing_json` with ``context``).  ``functions``
    False leaves the functions out."""
    out = {
        "label": d.label, "old": d.old_uri, "new": d.new_uri,
        "old_target": d.old_target, "new_target": d.new_target,
        "decoded_as": [d.old_decode, d.new_decode],
        "identical": d.identical, "error": d.error,
        "header": _changes_json(d.header), "layout": _changes_json(d.layout),
        "notes": _changes_json(d.notes), "symbols": _changes_json(d.symbols),
        "metadata": _changes_json(d.metadata),
        "relocation": _jv(d.relocation), "provenance": _jv(d.provenance),
        "control_flow_problems": [p.to_json() for p in d.problems],
        "functions": [],
    }
    for u in d.units if functions else ():
        uj = {
            "name": u.name, "kind": u.kind, "status": u.status,
            "old_range": _jv(u.old_range), "new_range": _jv(u.new_range),
            "counts": u.counts, "descriptor": _changes_json(u.descriptor),
            "metadata": _changes_json(u.metadata),
        }
        if u.outcome is not None:
            uj["apply"] = {"status": u.outcome[0], "reason": u.outcome[1]}
        if rows:
            uj["rows"] = [row_json(r) for r in u.rows]
        elif u.status != IDENTICAL:
            uj["listing"] = listing_json(u, context)
        out["functions"].append(uj)
    return out


def report_json(rep: DiffReport, *, rows: bool = True, context: int | None = 3) -> dict:
    """The JSON form of a :class:`DiffReport` (``rows``: every instruction row
    kept; else each changed function's listing with ``context``, as the
    text output shows it)."""
    return {
        "old": rep.old_name, "new": rep.new_name, "summary": rep.summary,
        "objects": [object_json(o, rows=rows, context=context) for o in rep.objects],
        "only_old": rep.only_old, "only_new": rep.only_new, "problems": rep.problems,
    }


__all__ = ["Row", "UnitDiff", "ObjectDiff", "DiffReport", "Refusal", "ApplyInfo", "ChangedPair", "diff_objects",
           "diff_inputs", "build_report", "collect_side",
           "pair_items", "collect", "report_json", "object_json", "row_json", "listing_json", "header_changes", "layout_changes",
           "note_changes", "symbol_changes", "descriptor_changes", "tree_changes", "fmt_value",
           "with_context", "relocation_items", "flat_items"]
