"""Make one gfx1030 code object safe for gfx1010: rules -> edits -> rewrite -> verify.

``patch_code_object(data, mode=..., rule_sets=...)``:

1. an object that carries kpatch's provenance note is left alone (a second
   apply changes nothing);
2. ``kpatch.analysis.analyse(co, "gfx1010")`` finds what is unsafe, in every
   kernel and every device function;
3. every finding is matched to a rule of the chosen rule sets
   (``match.finding``); a finding no chosen rule fixes, or that no exact
   fix exists for, refuses its kernel or device function with the reason;
   device functions are patched as units of their own (fixes that need
   spare registers are refused there: a device function's registers are its
   callers');
4. instruction-pattern rules (``match.mnemonic``, e.g. cache-policy
   presets) add field edits;
5. a kernel that can reach (through calls, tail calls, branches or taken
   addresses, :func:`reachable_units`) a refused device function, or code
   no symbol names, is refused too;
6. the rewriter applies the edits of the units that were not refused,
   relocating what moves, or refuses kernels it cannot relocate;
7. header actions of the rules used (:data:`kpatch.rewrite.headers.HEADER_ACTIONS`):
   a rule that handled a finding with a kernel action (cu-mode's
   ``wgp_mode = false``) changes those kernels; a rule for the code object
   (``match.header = true``, retarget-gfx1010's gfx1010 label) changes it;
8. a provenance note records what was done;
9. the result is analysed again: any finding left in a kernel or device
   function that was not refused makes the whole object refused (nothing is
   written) - kpatch ships no patch it could not verify.

All or nothing: in ``native`` mode the object is labelled gfx1010 and
replaces the code MIOpen would otherwise compile for gfx1010, so one refused
kernel or device function refuses the whole object (nothing is written for
it).  In ``override`` mode an object may be written with refused kernels:
their code is the original's (what the runtime would have used anyway), and
the result says which (:attr:`PatchResult.unchanged`).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from functools import lru_cache

from kpatch.analysis import analyse
from kpatch.analysis.engine import function_ranges
from kpatch.analysis.flow import COND, END, FALL, JUMP, TRAP, kind as flow_kind
from kpatch.isa.decodememo import decode_memo, expect_starts, forget as forget_decodes
from kpatch.isa.decoder import no_gc
from kpatch.codeobject import CodeObject
from kpatch.errors import KpatchError, UsageError
from kpatch.isa import decode, encode
from kpatch.rewrite import headers, residency
from kpatch.rewrite.edits import CannotFix, Edit, Refusal
from kpatch.rewrite.outcome import KernelOutcome, PatchResult
from kpatch.rewrite.fixes import APPROX_FOR, FIXES, FixContext, InstructionMatch
from kpatch.analysis.codescan import TextScan, scan_text
from kpatch.rewrite.provenance import provenance_record, provenance_section, read_provenance
from kpatch.rewrite.relocate import apply_edits
from kpatch.rewrite.textlayout import instruction_ends
from kpatch.rewrite.rules import Rule, RuleSet, load_all

MADE_SAFE_FOR = "gfx1010"
KEEPS = ("keep-legacy-mad",)  # approximation fixes that leave the instruction as it is
SOURCE_ISA = "gfx1030"
DEFAULT_RULE_SETS = {
    "override": ("gfx1010-hazards", "gfx1010-isa", "cu-mode", "vsharp-llc-noalloc"),
    "native": ("gfx1010-hazards", "gfx1010-isa", "cu-mode", "vsharp-llc-noalloc", "retarget-gfx1010"),
    # gfx1010-labelled code (e.g. MIOpen's hand-written assembly, assembled
    # unchanged for gfx1010): the same hardware fixes, and the label stays
    "harden": ("gfx1010-hazards", "gfx1010-isa", "cu-mode", "vsharp-llc-noalloc"),
}
#: Objects from this size on have the garbage of their first analysis
#: collected before the patched object is verified (for a small object it
#: would cost more than it frees).
_COLLECT_FROM = 4 << 20
#: The modes the rules engine patches for: one per default rule set.
MODES = tuple(DEFAULT_RULE_SETS)
#: Modes whose output replaces what the runtime builds for gfx1010 itself: an
#: object is written whole or not at all.
ALL_OR_NOTHING = ("native", "harden")
# in override mode the object keeps its gfx1030 label, which the loader reads
# as "no XNACK"; the hardware's XNACK mode is the driver's (amdgpu.noretry)
OVERRIDE_ACCEPTS = ("Xnack",)


@dataclass(frozen=True)
class DeviceFunction:
    """A device function as the unit its fixes work on.  It has no kernel
    descriptor: its registers belong to its callers (the calling convention),
    so fixes that need spare VGPRs are refused in it."""

    name: str
    entry: int
    code_size: int
    descriptor: None = None

    @property
    def symbol(self) -> str:
        return self.name


def select_rule_sets(mode: str, rule_sets=None, extra_rule_files=()) -> list[RuleSet]:
    """The rule sets to apply: the named ones, or the mode's defaults."""
    if mode not in MODES:
        raise UsageError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    sets = load_all(list(extra_rule_files))
    names = list(rule_sets) if rule_sets else list(DEFAULT_RULE_SETS[mode])
    unknown = [n for n in names if n not in sets]
    if unknown:
        raise UsageError(f"unknown rule set(s) {', '.join(unknown)} (known: {', '.join(sets)})")
    chosen = [sets[n] for n in names]
    labels = [s.id for s in chosen if any(dict(r.header).get("mach") for r in s.rules if r.on_object)]
    if mode == "override" and labels:
        raise UsageError(f"{labels[0]} labels code {MADE_SAFE_FOR}, which the override mode's loader rejects; "
                         "use --mode native")
    if mode == "harden" and labels:
        raise UsageError(f"{labels[0]} changes the label; harden mode keeps the {MADE_SAFE_FOR} label as it is")
    if mode == "native" and not labels:
        raise UsageError(f"native mode writes code labelled {MADE_SAFE_FOR}: the rule sets need one that "
                         f"labels it (mach = \"{MADE_SAFE_FOR}\", e.g. retarget-gfx1010)")
    return chosen


def _code_ranges(co: CodeObject) -> dict[str, tuple[int, int]]:
    """[start, end) of every kernel and device function, by name
    (:meth:`CodeObject.function_extents`)."""
    return {e.name: (e.start, e.end) for e in co.function_extents()}


def reachable_units(co: CodeObject, scan: TextScan | None = None) -> dict[str, set[str]]:
    """For each kernel, the names of the other units of ``.text`` it can reach
    (device functions, other kernels, and ``<code@ADDR>`` runs no symbol
    names), following the rewriter's call edges (:mod:`kpatch.analysis.codescan`:
    calls, tail calls, branches into other units, addresses taken by getpc
    patterns).  A kernel that reaches a computed jump kpatch cannot bound
    reaches every unit.  ``scan``: ``co``'s scan as SOURCE_ISA code, when made already."""
    if scan is None or scan.target != SOURCE_ISA:
        scan = scan_text(co, SOURCE_ISA)
    if scan is None:
        return {}
    every = {u.name for u in scan.units}
    unbounded = {p.ui for p in scan.problems if p.cls == "B"}
    out: dict[str, set[str]] = {}
    for ui, u in enumerate(scan.units):
        if u.kind != "kernel":
            continue
        seen = scan.reach(ui)
        out[u.name] = (every if seen & unbounded else {scan.units[v].name for v in seen}) - {u.name}
    return out


def _unreachable_refusal(name: str, reach: set[str], outcomes: dict, fn_outcomes: dict) -> str | None:
    """Why kernel ``name`` must be refused for what it reaches, or None."""
    for other in sorted(reach):
        if other.startswith("<code@"):
            return (f"reaches code at {other[6:-1]} that no symbol names: kpatch does not analyse it, "
                    f"so it cannot say the kernel is safe")
        o = fn_outcomes.get(other) or outcomes.get(other)
        if o is None:  # e.g. a function symbol without a size: the analysis did not see it
            return f"reaches {other}, which kpatch did not analyse, so it cannot say the kernel is safe"
        if o.status == "refused":
            what = "device function" if other in fn_outcomes else "kernel"
            return f"calls {what} {other}, which kpatch cannot make safe: {o.reason}"
    return None


def _finding_rules(sets: list[RuleSet]) -> dict[str, Rule]:
    out: dict[str, Rule] = {}
    for s in sets:
        for r in s.rules:
            if r.match_kind == "finding" and not s.approximation:
                out.setdefault(r.finding, r)
    return out


def _approx_rules(sets: list[RuleSet]) -> list[Rule]:
    """Finding rules of the approximation sets the user opted in to."""
    return [r for s in sets if s.approximation for r in s.rules if r.match_kind == "finding"]


def _no_exact_fix(f) -> str:
    """Why ``f`` refuses its kernel, naming the approximation that exists, if any."""
    why = (f.blocker or "no exact gfx1010 fix").removeprefix(f"{f.cls}: ")
    reason = f"{f.cls} at {f.address:#x}: {why}"
    hint = next((a for m, a in APPROX_FOR.items() if m in f.detail), None)
    return reason + (f" (approximation: --allow-approx {hint})" if hint else "")


def _edits_for_finding(ctx: FixContext, rule: Rule, finding) -> list[Edit]:
    """The edits ``rule`` asks for at ``finding``; CannotFix when it cannot be done exactly."""
    if rule.fix is not None:  # the loader accepts only fixes of the registry
        return FIXES[rule.fix](ctx, finding, rule.id)
    if not (rule.set_fields or rule.replace is not None or rule.insert_before or rule.insert_after):
        return []  # header actions only
    if finding.address is None:
        raise CannotFix(f"{finding.cls}: rule {rule.id} changes the instruction of the finding, and this "
                             f"finding is about the whole kernel or object (no instruction)")
    return _instruction_edits(ctx, rule, finding.address, None)


def _instruction_edits(ctx: FixContext, rule: Rule, address: int, inst) -> list[Edit]:
    """The edits of ``rule``'s instruction actions (set, replace, insert_before,
    insert_after) at the instruction at ``address`` (``inst``: it decoded,
    or None: looked up when ``set`` needs it)."""
    edits = []
    if rule.set_fields:
        if inst is None:
            inst = ctx.code.at(address)
            if inst is None or inst.is_unknown:
                raise CannotFix(f"rule {rule.id} sets fields of the instruction at {address:#x}, "
                                     f"where no instruction of {ctx.kernel.name} kpatch decodes starts")
        changes = {k: v for k, v in rule.set_fields if inst.fields.get(k) != v}
        if changes:
            try:
                edits.append(Edit(address, "replace", encode(inst, **changes), rule.id))
            except KpatchError as e:
                raise CannotFix(f"rule {rule.id} at {address:#x}: {inst.text()}: {e.reason}") from None
    sequences = rule.__dict__.get("_kp_sequence_edits")
    if sequences is None:
        sequences = rule.__dict__["_kp_sequence_edits"] = _sequence_edits(rule)
    for e in sequences:
        edits.append(e.at(address))
    return edits


def _sequence_edits(rule: Rule) -> tuple[Edit, ...]:
    """The edits of ``rule``'s instruction sequences (replace, insert_before,
    insert_after, in that order) at address 0, made once per rule (kept on
    the rule, which is never changed) and placed with :meth:`Edit.at`."""
    out = []
    if rule.replace is not None:
        out.append(Edit(0, "replace", _built(rule.replace), rule.id))
    if rule.insert_before:
        out.append(Edit(0, "insert_before", _built(rule.insert_before), rule.id))
    if rule.insert_after:
        out.append(Edit(0, "insert_after", _built(rule.insert_after), rule.id))
    return tuple(out)


def _matching(rules: list[Rule], finding, ctx: FixContext) -> Rule | None:
    """The first of ``rules`` that applies to ``finding`` (looking at its instruction)."""
    cand = [r for r in rules if r.finding == finding.cls] if rules else ()
    if not cand or ctx.kernel is None:
        return None
    inst = ctx.code.at(finding.address)
    return next((r for r in cand if r.matches_finding(finding, inst)), None)


def _vgpr_growth(data: bytes, contexts: dict[str, FixContext], outcomes: dict) -> bytes:
    """Grow the VGPR allocation (descriptor) and ``.vgpr_count`` (metadata) of
    the patched kernels whose fixes took spare VGPRs."""
    grown = {c.kernel.symbol: c.budget for n, c in contexts.items()
             if c.budget is not None and c.budget.used and outcomes[n].status == "patched"}
    for sym, b in grown.items():
        if b.new_allocation is not None:
            data = headers.set_descriptor_field(data, sym, "GRANULATED_WORKITEM_VGPR_COUNT",
                                                b.new_allocation // b.granule - 1)
    counts = {sym: b.next for sym, b in grown.items() if b.vgpr_count is not None and b.next > b.vgpr_count}
    if counts:
        def update(kmd):
            kmd[".vgpr_count"] = counts[kmd[".symbol"]]

        data = headers.set_kernel_metadata(data, set(counts), update)
    return data


@lru_cache(maxsize=1024)
def _built(specs) -> bytes:
    """The gfx1010 code of a rule's instruction sequence (a tuple of InstSpec;
    the same few sequences go in at many places)."""
    return b"".join(s.build(MADE_SAFE_FOR) for s in specs)


def _pattern_edits(ctx: FixContext, rules: list[Rule], start: int, end: int) -> tuple[list[Edit], list[str]]:
    """The edits of instruction-pattern rules (``match.mnemonic``) inside
    [start, end), and the ids of the rules they perform.  At each
    instruction the ``set`` fields of every matching set-only rule are merged
    into one re-encoding; a rule with other actions (replace, insert_before,
    insert_after, fix) must be the only one that changes the instruction.
    Whatever cannot be performed as the rules say refuses the kernel
    (CannotFix): two rules setting one field to different values, two
    rules that would each rewrite the instruction, a fix that cannot be done
    exactly."""
    if not rules:
        return [], []
    co = ctx.co
    text = co.section(".text")
    code = co.text[start - text.addr : end - text.addr]
    out: list[Edit] = []
    used: list[str] = []
    for inst in decode(code, SOURCE_ISA, start):
        matching = [r for r in rules if r.matches_instruction(inst)]
        if not matching:
            continue
        acts: list[tuple[list[str], list[Edit]]] = []  # (rule ids, edits) of each change
        merged: dict[str, tuple[int, str]] = {}
        for r in matching:
            if r.set_fields and r.fix is None and r.replace is None and not r.insert_before and not r.insert_after:
                for k, v in r.set_fields:
                    if k in merged and merged[k][0] != v:
                        raise CannotFix(f"rules {merged[k][1]} and {r.id} set {k} of {inst.text()} at "
                                             f"{inst.address:#x} to different values ({merged[k][0]}, {v})")
                    merged.setdefault(k, (v, r.id))
                continue
            if r.fix is not None:
                edits = FIXES[r.fix](ctx, InstructionMatch(f"rule {r.id}", inst.address), r.id)
            else:
                edits = _instruction_edits(ctx, r, inst.address, inst)
            if edits:
                acts.append(([r.id], edits))
        changes = {k: v for k, (v, _) in merged.items() if inst.fields.get(k) != v}
        if changes:
            ids = list(dict.fromkeys(rid for k, (_, rid) in merged.items() if k in changes))
            try:
                acts.append((ids, [Edit(inst.address, "replace", encode(inst, **changes), ids[0])]))
            except KpatchError as e:
                raise CannotFix(f"rules {', '.join(ids)} at {inst.address:#x}: {inst.text()}: "
                                     f"{e.reason}") from None
        if len(acts) > 1:
            names = ", ".join(i for ids, _ in acts for i in ids)
            raise CannotFix(f"rules {names} each change {inst.text()} at {inst.address:#x}; kpatch does "
                                 f"not combine their actions")
        for ids, edits in acts:
            out.extend(edits)
            used.extend(ids)
    return out, used


def _check_source(co: CodeObject, mode: str = "override") -> None:
    if co.is_legacy:
        raise Refusal("cannot patch: code object V2 (legacy) is not supported", kind="layout")
    want = MADE_SAFE_FOR if mode == "harden" else SOURCE_ISA
    if co.target is None or co.target.processor != want:
        what = ("harden mode patches hazards in gfx1010 code" if mode == "harden"
                else "kpatch makes gfx1030 code safe for gfx1010")
        raise Refusal(f"cannot patch: {what}; this object is {co.target_id or 'of an unknown target'}",
                      kind="unsupported")


def _same_on_both(co: CodeObject) -> None:
    """Harden mode: kpatch's fixes and rewriter read code as gfx1030 code, so
    every word of a gfx1010 object's .text must decode to the same
    instruction for both (the GFX10 encodings differ in a few opcodes, e.g.
    VOP2 0x06); Refusal naming the first that does not."""
    text = co.section(".text")
    if text is None or not co.text:
        return
    a = decode(co.text, MADE_SAFE_FOR, text.addr)
    b = decode(co.text, SOURCE_ISA, text.addr)
    for x, y in zip(a, b):
        if x.size != y.size or x.is_unknown != y.is_unknown or (not x.is_unknown and x.text() != y.text()):
            raise Refusal(f"cannot harden: the word at {x.address:#x} is {x.text()} on {MADE_SAFE_FOR} but "
                          f"{y.text()} on {SOURCE_ISA}, and kpatch's fixes read code as {SOURCE_ISA} code",
                          kind="unsupported", address=x.address)
    if len(a) != len(b):
        raise Refusal(f"cannot harden: .text does not decode alike for {MADE_SAFE_FOR} and {SOURCE_ISA}",
                      kind="unsupported")


def patch_code_object(data: bytes, *, mode: str, rule_sets=None, extra_rule_files=()) -> PatchResult:
    """Make the gfx1030 code object ``data`` safe for gfx1010 (see the module docstring)."""
    # the collector is paused (the work allocates many small acyclic objects
    # and collections would traverse the large decode caches for nothing),
    # and code decoded once is reused while this object is being patched
    with no_gc(), decode_memo():
        return _patch_code_object(data, mode=mode, rule_sets=rule_sets, extra_rule_files=extra_rule_files)


def _refused(names: list[str], reason: str, note: str | None = None, **extra) -> PatchResult:
    """The whole object refused: every kernel with ``reason``, nothing written."""
    return PatchResult(None, [KernelOutcome(n, "refused", reason) for n in names],
                       note=reason if note is None else note, **extra)


def _patch_code_object(data: bytes, *, mode: str, rule_sets=None, extra_rule_files=()) -> PatchResult:
    sets = select_rule_sets(mode, rule_sets, extra_rule_files)
    co = CodeObject.read_only(data)  # (its metadata is read, never written: headers.py writes)
    names = [k.name for k in co.kernels]
    prov = read_provenance(data)
    if prov is not None:
        return PatchResult(None, [KernelOutcome(n, "untouched", "already patched by kpatch") for n in names],
                           provenance=prov, note="already patched by kpatch")
    try:
        _check_source(co, mode)
    except Refusal as e:
        return _refused(names, e.reason)

    plan = _RulePlan(sets, mode)
    # one scan of .text for the analysis, the reach of kernels and the rewriter
    scan = scan_text(co, SOURCE_ISA, keep_ids=True)
    report = analyse(co, MADE_SAFE_FOR, scan=scan)
    if scan is not None:
        instruction_ends(scan)  # (the rewriter's sizes, by the analysis' encoding ids)
        scan.known = None  # (the analysis' encoding ids: the rewriter does not read them otherwise)
    if mode == "harden" and any(r.findings or r.unseen for r in (*report.kernels, *report.functions)):
        try:  # something to change: the code must read the same as gfx1030 code
            _same_on_both(co)
        except Refusal as e:
            return _refused(names, e.reason)
    kernel_objs = {k.name: k for k in co.kernels}
    ranges = _code_ranges(co)
    outcomes: dict[str, KernelOutcome] = {}
    fn_outcomes: dict[str, KernelOutcome] = {}
    contexts: dict[str, FixContext] = {}
    edits_by_kernel: dict[str, list[Edit]] = {}
    header_kernels: dict[str, tuple[Rule, list[str]]] = {}  # rule id -> (rule, kernels it changes)
    units = [(kr, kernel_objs.get(kr.name), outcomes) for kr in report.kernels]
    for fr in report.functions:
        units.append((fr, DeviceFunction(fr.name, fr.address, fr.size), fn_outcomes))
    for kr, unit, into in units:
        ctx = FixContext(co, unit)
        if into is outcomes:
            contexts[kr.name] = ctx
        try:
            edits, used, kernel_headers = plan.unit_edits(ctx, kr, ranges.get(kr.name),
                                                          device_function=into is fn_outcomes)
        except CannotFix as e:
            into[kr.name] = KernelOutcome(kr.name, "refused", e.reason)
            continue
        if into is outcomes:
            why = _cu_mode_refusal(kernel_headers, ctx, unit)
            if why:
                outcomes[kr.name] = KernelOutcome(kr.name, "refused", why)
                continue
        for rid, (r, _) in kernel_headers.items():
            header_kernels.setdefault(rid, (r, []))[1].append(kr.name)
        edits_by_kernel[kr.name] = edits
        rules = list(dict.fromkeys(used))
        into[kr.name] = KernelOutcome(kr.name, "patched" if rules else "untouched", "", rules)

    calls = bool(report.functions) or any(r.calls for r in report.kernels)
    clean = Unchanged.of(co, report, mode)
    # the analysis is not read again: release it (and, through its findings,
    # its context: every instruction's facts and control flow) before the
    # rewriter scans the code again; the loop's last unit holds it too
    report = units = kr = fr = unit = ctx = into = None
    # a kernel is only as safe as everything it can reach
    reach = reachable_units(co, scan) if calls else {}
    _spread_refusals(outcomes, fn_outcomes, reach, edits_by_kernel)
    if mode in ALL_OR_NOTHING:
        refused = _all_or_nothing(outcomes, fn_outcomes, mode)
        if refused is not None:
            return refused
    for name, o in fn_outcomes.items():
        if o.status == "refused":
            edits_by_kernel.pop(name, None)

    all_edits = [e for es in edits_by_kernel.values() for e in es]
    headers_and_note = _HeadersAndNote(data, co, mode, sets, outcomes, fn_outcomes, contexts, header_kernels,
                                       plan.object_headers)
    try:
        result = apply_edits(data, SOURCE_ISA, all_edits, offset3f=True, finalize=headers_and_note, scan=scan,
                             parsed=co)
    except Refusal as e:
        return _refused(names, e.reason)
    except CannotFix as e:
        return _refused(names, e.reason, note=e.reason if headers_and_note.note is None else headers_and_note.note)
    relocated, rec = headers_and_note.relocations, headers_and_note.record
    fns = [fn_outcomes[n] for n in fn_outcomes]
    if mode in ALL_OR_NOTHING:
        refused = _all_or_nothing(outcomes, fn_outcomes, mode)
        if refused is not None:
            return refused
    if rec is None:
        return PatchResult(None, [outcomes[n] for n in names], relocations=relocated, functions=fns)
    new = result.data
    # where the rewriter put every instruction, and which one it was: verify's
    # decode needs no walk, and checks the encodings of those copied unchanged
    # rather than looking them up (forget_decodes keeps the original's by address)
    starts = result.instruction_starts()
    was = result.instruction_origins() if starts is not None else None
    kept = [r for r in plan.approx if r.fix in KEEPS]
    # the original's decode and analysis are not needed any more: never hold
    # both objects' at once (a whole Tensile library's are half a GiB each)
    del contexts, edits_by_kernel, all_edits, headers_and_note, result, kernel_objs, co, plan, scan
    forget_decodes()
    if len(data) >= _COLLECT_FROM:
        # the collector is paused: the original's reference cycles (e.g. its
        # ELF reader) were all made in this call, so they are in the youngest
        # generation; a full collection would also traverse the decode caches
        # (a second or more in a long `apply --db`) for nothing
        gc.collect(0)
    expect_starts(starts, was)
    del starts, was
    problems = verify(new, {**fn_outcomes, **outcomes}, mode, kept=kept, before=clean)
    if problems:
        return _refused(names, "verification after patching failed: " + "; ".join(problems[:3]))
    return PatchResult(new, [outcomes[n] for n in names], relocations=relocated, provenance=rec,
                       functions=fns)


class _RulePlan:
    """The chosen rule sets, arranged for lookup: the rule that fixes each
    finding class, the approximation rules, the instruction-pattern rules
    and the object header actions."""

    def __init__(self, sets: list[RuleSet], mode: str):
        self.mode = mode
        self.by_finding = _finding_rules(sets)
        self.approx = _approx_rules(sets)
        self.pattern_rules = [r for s in sets for r in s.rules if r.match_kind == "mnemonic"]
        self.object_headers = tuple(a for s in sets for r in s.rules if r.on_object
                                    for a in r.header_actions("object"))
        #: rule id -> its kernel header actions (asked once per finding)
        self.kernel_actions = {r.id: r.header_actions("kernel") for s in sets for r in s.rules}

    def unit_edits(self, ctx: FixContext, kr, code_range: tuple[int, int] | None, *, device_function: bool
                   ) -> tuple[list[Edit], list[str], dict[str, tuple[Rule, str]]]:
        """(edits, ids of the rules used, kernel header rules: rule id -> (rule,
        the finding class it handles)) that make one kernel or device function
        (its report ``kr``) safe; CannotFix when one of its findings cannot be
        fixed exactly."""
        used: list[str] = []
        edits: list[Edit] = []
        kernel_headers: dict[str, tuple[Rule, str]] = {}
        if kr.unseen:  # its own code; what it calls is checked by the caller (reachable_units)
            raise CannotFix("; ".join(kr.unseen))
        for f in kr.findings:
            if self.mode == "override" and f.cls in OVERRIDE_ACCEPTS:
                continue
            a = _matching(self.approx, f, ctx) if self.approx else None
            if a is not None:
                edits.extend(_edits_for_finding(ctx, a, f))
                used.append(a.id)
                continue
            if f.fix is None:
                raise CannotFix(_no_exact_fix(f))
            rule = self.by_finding.get(f.cls)
            if rule is None:
                raise CannotFix(f"{_where(f)} needs rule set {f.fix}, which was not chosen")
            acts = self.kernel_actions[rule.id]
            if acts:
                if device_function:
                    raise CannotFix(f"{_where(f)} in a device function: rule {rule.id} sets "
                                    f"{', '.join(k for k, _ in acts)} of the kernel, a property of the "
                                    f"calling kernels, which kpatch does not set from a callee")
                kernel_headers.setdefault(rule.id, (rule, f.cls))
            edits.extend(_edits_for_finding(ctx, rule, f))
            used.append(rule.id)
        edits = _distinct(edits)  # e.g. one s_clause dropped for several findings
        if code_range is not None:
            pe, pe_rules = _pattern_edits(ctx, self.pattern_rules, *code_range)
            taken = {e.address: e.rule for e in edits if e.action == "replace"}
            clash = next((e for e in pe if e.action == "replace" and e.address in taken), None)
            if clash is not None:  # never drop what a rule says silently
                raise CannotFix(f"rule {clash.rule} and the fix of rule {taken[clash.address]} both "
                                f"rewrite the instruction at {clash.address:#x}; kpatch does not "
                                f"combine them")
            edits.extend(pe)
            used.extend(pe_rules)
        return edits, used, kernel_headers


def _distinct(edits: list[Edit]) -> list[Edit]:
    """``edits`` without repeats, the first of each kept: ``list(dict.fromkeys(edits))``.
    Equal edits name the same instruction, so when no two edits name the same
    address there is no repeat and ``edits`` is that list already; that is
    asked of the addresses (ints), not of every edit's hash (a dataclass's,
    computed in Python over all its fields: a kernel can have tens of
    thousands of edits)."""
    if len({e.address for e in edits}) == len(edits):
        return edits
    return list(dict.fromkeys(edits))


def _where(f) -> str:
    """A finding's class and address, for a refusal's reason."""
    return f.cls if f.address is None else f"{f.cls} at {f.address:#x}"


def _cu_mode_refusal(kernel_headers: dict[str, tuple[Rule, str]], ctx: FixContext, kernel) -> str | None:
    """Why a kernel whose fixes switch it to CU mode cannot run in it, or
    None.  CU mode halves the SIMDs a workgroup is spread over: it must still
    fit, with the allocation the kernel ends up with (grown by its fixes or
    not)."""
    cu = [cls for r, cls in kernel_headers.values() if ("wgp_mode", False) in r.header]
    if not cu:
        return None
    grown = ctx.budget.new_allocation if ctx.budget is not None else None
    why = residency.fits(kernel, cu_mode=True, vgprs=grown) if kernel is not None else "the kernel has no descriptor"
    return f"{cu[0]} needs CU mode, but {why}" if why else None


def _spread_refusals(outcomes: dict[str, KernelOutcome], fn_outcomes: dict[str, KernelOutcome],
                     reach: dict[str, set[str]], edits_by_kernel: dict[str, list[Edit]]) -> None:
    """Refuse every kernel that can reach refused code, until nothing
    changes (refusals spread through kernels that call kernels); a refused
    kernel's edits are dropped."""
    changed = True
    while changed:
        changed = False
        for name, o in list(outcomes.items()):
            why = None if o.status == "refused" else _unreachable_refusal(name, reach.get(name, set()),
                                                                           outcomes, fn_outcomes)
            if why:
                outcomes[name] = KernelOutcome(name, "refused", why)
                edits_by_kernel.pop(name, None)
                changed = True


class _HeadersAndNote:
    """The rewriter's ``finalize`` step: the header edits (on the original
    bytes: they do not depend on where code went) and the provenance note
    for the rewriter's result, laid out in the same pass as the code.  The
    rewriter may call it more than once; after the last call, ``record``,
    ``relocations`` and ``note`` say what it decided."""

    def __init__(self, data: bytes, co: CodeObject, mode: str, sets: list[RuleSet],
                 outcomes: dict[str, KernelOutcome], fn_outcomes: dict[str, KernelOutcome],
                 contexts: dict[str, FixContext], header_kernels: dict[str, tuple[Rule, list[str]]],
                 object_headers: tuple):
        self.data, self.co, self.mode, self.sets = data, co, mode, sets
        self.outcomes, self.fn_outcomes = outcomes, fn_outcomes
        self.decided, self.fn_decided = dict(outcomes), dict(fn_outcomes)  # before the rewriter's refusals
        self.contexts, self.header_kernels, self.object_headers = contexts, header_kernels, object_headers
        self.record: dict | None = None
        self.relocations: dict = {}
        self.note: str | None = None

    def __call__(self, result) -> tuple[bytes, dict] | None:
        """(new base bytes, {section: contents}) for ``result``; None when nothing changed."""
        outcomes, fn_outcomes = self.outcomes, self.fn_outcomes
        outcomes.update(self.decided)
        fn_outcomes.update(self.fn_decided)
        for r in result.refused:
            for into in (outcomes, fn_outcomes):
                if r.kernel in into:
                    into[r.kernel] = KernelOutcome(r.kernel, "refused", r.reason)
        self.record, self.note = None, None
        self.relocations = relocated = result.relocations or {}
        patched = [k for k in self.co.kernels if outcomes[k.name].status != "refused"]
        kernel_actions = [(r.header_actions("kernel"), [k for k in patched if k.name in ks])
                          for r, ks in self.header_kernels.values()]
        data = self.data
        try:
            base = _vgpr_growth(data, self.contexts, outcomes)
            base = headers.perform(base, kernel_actions, self.object_headers)
        except KpatchError as e:
            self.note = e.reason
            raise CannotFix(f"header rewrite failed: {e.reason}") from None
        if base == data and not any(o.status == "patched" for o in outcomes.values()) and result.written() == data:
            return None
        applied = sorted({r for o in outcomes.values() for r in o.rules})
        self.record = rec = provenance_record(
            data, rules=applied, made_safe_for=MADE_SAFE_FOR, mode=self.mode, rule_sets=[s.id for s in self.sets],
            refused=[o.name for o in (*outcomes.values(), *fn_outcomes.values()) if o.status == "refused"],
            relocations=relocated)
        try:
            return base, dict([provenance_section(base, rec)])
        except KpatchError as e:
            raise CannotFix(f"cannot record provenance: {e.reason}") from None


def _all_or_nothing(outcomes: dict[str, KernelOutcome], fn_outcomes: dict[str, KernelOutcome],
                    mode: str = "native") -> PatchResult | None:
    """Native and harden modes: the whole object refused when any kernel or device
    function is (None when none is).  The refused ones keep their reasons;
    the others say why they were not written."""
    bad = [o for o in (*outcomes.values(), *fn_outcomes.values()) if o.status == "refused"]
    if not bad:
        return None
    first = bad[0]
    why = (f"not written: {mode} mode writes a code object only when all of it is safe for gfx1010, and "
           f"{len(bad)} of its kernels and device functions {'was' if len(bad) == 1 else 'were'} refused "
           f"({first.name}: {first.reason})")
    kernels = [o if o.status == "refused" else KernelOutcome(o.name, "refused", why) for o in outcomes.values()]
    fns = [o if o.status == "refused" else KernelOutcome(o.name, "refused", why) for o in fn_outcomes.values()]
    return PatchResult(None, kernels, note=why, functions=fns)


def verify(new: bytes, outcomes: dict[str, KernelOutcome], mode: str, kept: list[Rule] = (),
           before: Unchanged | None = None) -> list[str]:
    """Findings left in the kernels and device functions that were not
    refused, which the chosen rule sets should have removed (``kept``:
    approximation rules that leave their instruction as it is).  A kernel or
    function the patched object has that ``outcomes`` does not name is a
    problem too: nothing unseen is called clean.

    Every kernel and device function is analysed again except the refused
    ones (their findings are not read) and those ``before`` shows were clean
    in the original and are exactly as they were (:meth:`Unchanged.same_in`):
    each function has its own control-flow graph, so the findings and
    unseen control flow of one depend only on its own code (and, for a
    kernel, its descriptor's WGP mode and the object's target), which is
    what ``same_in`` compares.  Verdicts are not read: they are not a
    function's own (a kernel that calls through computed addresses takes
    every device function's verdict, and one place that pins addresses
    makes every function that moves code unpatchable).  Inserted code moves
    every later function, whose branches and ``s_getpc`` literals relocation
    rewrites, so an untouched function's bytes can change: then it is
    analysed again."""
    co = CodeObject.from_bytes(new, lossless=False)
    skip = {n for n, o in outcomes.items() if o.status == "refused"}
    if before is not None:
        skip |= before.same_in(co)
    names = {r[0] for r in function_ranges(co)}
    report = analyse(co, MADE_SAFE_FOR, only=names - skip if skip & names else None)
    problems = []
    for kr in (*report.kernels, *report.functions):
        o = outcomes.get(kr.name)
        if o is None:
            problems.append(f"{kr.name}: not analysed before patching")
            continue
        if o.status == "refused":
            continue
        if kr.unseen:
            problems.append(f"{kr.name}: {'; '.join(kr.unseen)}")
        for f in kr.findings:
            if mode == "override" and f.cls in OVERRIDE_ACCEPTS:
                continue
            if kept and _kept(co, kept, f):
                continue
            problems.append(f"{kr.name}: {f.cls} at {f.address:#x}")
    return problems


#: The control-flow kinds (:mod:`kpatch.analysis.flow`) whose effect does not
#: depend on where the code lies: branch targets are relative to the branch.
_POSITION_FREE = frozenset({FALL, JUMP, COND, END, TRAP})


@dataclass
class Unchanged:
    """The kernels and device functions of an original object that its
    analysis found clean (what :func:`verify` would accept), with what their
    analysis depends on: the object's target, each one's address and bytes
    (:meth:`CodeObject.function_extents`), a kernel's descriptor WGP mode."""

    target_id: str | None
    units: dict[str, tuple[str, int, bytes, object]]  # name -> (kind, address, code, wgp_mode)

    @classmethod
    def of(cls, co: CodeObject, report, mode: str) -> Unchanged:
        """The clean units of ``co`` by its analysis ``report``."""
        text, base = co.text or b"", co.text_vaddr or 0
        extents = {e.name: e for e in co.function_extents()}
        units = {}
        for kr in (*report.kernels, *report.functions):
            e = extents.get(kr.name)
            if e is None or kr.unseen or any(not (mode == "override" and f.cls in OVERRIDE_ACCEPTS)
                                             for f in kr.findings):
                continue
            units[kr.name] = (e.kind, e.start, bytes(text[e.start - base:e.end - base]), _wgp_mode(co, e))
        return cls(co.target_id, units)

    def same_in(self, co: CodeObject) -> set[str]:
        """The names of the units that are in ``co`` exactly as they were: same
        target, same kind, same bytes, same WGP mode for a kernel, and at the
        same address or with only position-free instructions (no ``s_getpc_b64``,
        calls, ``s_setpc_b64`` or PC changes kpatch does not model: their
        effect depends on where the code lies)."""
        if co.target_id != self.target_id or not self.units:
            return set()
        text, base = co.text or b"", co.text_vaddr or 0
        out = set()
        for e in co.function_extents():
            was = self.units.get(e.name)
            if was is None or was[0] != e.kind or was[2] != text[e.start - base:e.end - base]:
                continue
            if was[3] != _wgp_mode(co, e):
                continue
            if was[1] != e.start and not _position_free(was[2], e.start):
                continue
            out.add(e.name)
        return out


def _wgp_mode(co: CodeObject, extent):
    """The WGP mode of the kernel ``extent`` names (None: a device function,
    or a descriptor without one)."""
    if extent.kind != "kernel":
        return None
    k = next((k for k in co.kernels if k.name == extent.name), None)
    try:
        return bool(k.descriptor.wgp_mode)
    except Exception:  # no descriptor, or a layout without WGP_MODE
        return None


def _position_free(code: bytes, address: int) -> bool:
    """Whether ``code`` (at ``address``) decodes whole into known instructions
    whose effect does not depend on where they lie."""
    try:
        insts = decode(code, SOURCE_ISA, address)
    except Exception:  # undecodable: not proven
        return False
    return (sum(i.size for i in insts) == len(code)
            and all(not i.is_unknown and flow_kind(i) in _POSITION_FREE and i.mnemonic != "s_getpc_b64"
                    for i in insts))


def _kept(co: CodeObject, kept: list[Rule], f) -> bool:
    """True when an approximation the user chose leaves ``f``'s instruction as it is."""
    text = co.section(".text")
    off = f.address - text.addr
    inst = decode(co.text[off:off + 16], SOURCE_ISA, f.address)[0]
    return any(r.matches_finding(f, inst) for r in kept)
