"""`kpatch verify --emulate ORIG PATCHED`: prove a patch computes the same,
by running both code objects' kernels in kpatch's GFX10 emulator."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import click

from kpatch.cli.common import EXIT_OK, EXIT_SOME_FAILED, error_line, flush_stdout, out_console
from kpatch.errors import FormatError
from kpatch.isa import TARGETS


def _pairs(orig: str, patched: str):
    """(label, original bytes, patched bytes) of each pair of code objects, and
    the problems met (items that could not be read, unpaired objects)."""
    from kpatch.diff.compare import _label, collect_side, pair_items

    fa, pa = collect_side(orig)
    fb, pb = collect_side(patched)
    pairs, only_a, only_b = pair_items(fa, fb)
    problems = [(p.uri, p.error) for p in pa + pb]
    problems += [(_label(f), "only in PATCHED: nothing to compare it with") for f in only_b]
    single = len(pairs) == 1
    return [("" if single else _label(y), x.data, y.data) for x, y in pairs], problems


def approximation_bound(patched: bytes) -> tuple[int | None, str]:
    """(allowed f32 ulps, which approximations) for a patched code object:
    the sum of the ``max_ulp`` bounds of the approximation rule sets whose
    rules its provenance record says were applied (errors of several
    approximations can add up); (None, "") when none was (then only equal
    passes) or a rule it names is not known here."""
    from kpatch.rewrite.provenance import read_provenance
    from kpatch.rewrite.rules import load_all
    try:
        rec = read_provenance(patched)
    except FormatError:
        return None, ""
    applied = set((rec or {}).get("rules") or [])
    sets = load_all()
    owner = {r.id: s for s in sets.values() for r in s.rules}
    if not applied or applied - set(owner):
        return None, ""
    approx = sorted({owner[r].id: owner[r] for r in applied if owner[r].approximation}.values(), key=lambda s: s.id)
    if not approx:
        return None, ""
    return sum(a.max_ulp or 0 for a in approx), " + ".join(a.id for a in approx)


#: How apply --verify-emulate marks a kernel's outcome: ``VERDICT_PREFIX STATUS[: detail]``.
VERDICT_PREFIX = "verify --emulate: "


class EmulateChecked:
    """A patch function (see :mod:`kpatch.rewrite.outcome`) that runs
    ``patch_fn`` and then proves what it wrote by emulation (`apply
    --verify-emulate`): every kernel of the original and of the patched
    object is compared as `kpatch verify --emulate` compares them (the
    bound of the approximations applied, gfx1010 for the patched side).
    Each kernel's outcome gets its verdict (:data:`VERDICT_PREFIX`); when
    some kernel is DIFFERENT the object is not written: every kernel the
    patch changed is refused with the difference as the reason.  Not
    verified kernels are written and reported as such.  A pure function of
    the bytes (defined in kpatch, so apply may run it in its workers)."""

    emulates = True  # apply reports emulation_counts() for a patch function with this

    def __init__(self, patch_fn, *, runs: int = 1, limit: int = 150_000, seed: int = 0):
        self.patch_fn, self.runs, self.limit, self.seed = patch_fn, runs, limit, seed

    def __call__(self, data: bytes, **kw):
        from kpatch.rewrite.outcome import KernelOutcome, PatchResult
        from kpatch.emulate.errors import EmulationError
        from kpatch.emulate.verify import DIFFERENT, NOT_VERIFIED, KernelVerdict, verify

        res = self.patch_fn(data, **kw)
        if res.data is None or res.data == data:  # nothing written (apply counts equal bytes as unchanged)
            return res
        try:
            verdicts = {v.name: v for v in verify(data, res.data, runs=self.runs, seed=self.seed,
                                                  patched_target="gfx1010", limit=self.limit,
                                                  max_ulp=approximation_bound(res.data)[0])}
        except (FormatError, EmulationError) as e:
            verdicts = {k.name: KernelVerdict(k.name, NOT_VERIFIED, e.reason) for k in res.kernels}
        different = [v for v in verdicts.values() if v.status == DIFFERENT]

        def mark(k):
            v = verdicts.get(k.name)
            if v is None:
                return KernelOutcome(k.name, k.status, k.reason, k.rules)
            text = VERDICT_PREFIX + v.status + (f": {v.detail}" if v.detail else "")
            if different and k.status == "patched":
                first = v if v.status == DIFFERENT else different[0]
                why = (f"{VERDICT_PREFIX}{DIFFERENT}: {first.detail}" if first is v else
                       f"not written: kernel {first.name} of this object is {DIFFERENT} ({first.detail}); {text}")
                return KernelOutcome(k.name, "refused", why, k.rules, v.status)
            return KernelOutcome(k.name, k.status, text if not k.reason else f"{k.reason}; {text}", k.rules,
                                 v.status)
        kernels = tuple(mark(k) for k in res.kernels)
        if different:
            first = different[0]
            return replace(res, data=None, kernels=kernels,
                           withheld=f"{VERDICT_PREFIX}kernel {first.name} is {DIFFERENT} ({first.detail})")
        return replace(res, kernels=kernels)


def emulation_counts(kernels) -> dict[str, int]:
    """Per verdict, how many of ``kernels`` (KernelOutcomes marked by
    :class:`EmulateChecked`: their ``verified`` field) had it."""
    counts = {"equal": 0, "within ulp": 0, "different": 0, "not verified": 0}
    for k in kernels:
        if k.verified is not None:
            counts[k.verified] += 1
    return counts


def emulation_line(counts: dict[str, int]) -> str:
    """apply --verify-emulate's summary line."""
    return (f"verify --emulate: kernels {counts['equal']} equal, {counts['within ulp']} within ulp, "
            f"{counts['different']} different (their objects not written), {counts['not verified']} not verified")


@click.command("verify")
@click.argument("orig", metavar="ORIG")
@click.argument("patched", metavar="PATCHED")
@click.option("--emulate", is_flag=True, help="Run both in kpatch's GFX10 emulator and compare what they write.")
@click.option("--kernel", "kernel", metavar="NAME", help="Only this kernel.")
@click.option("--runs", type=click.IntRange(1, 100), default=3, show_default=True,
              help="Runs per kernel (each with other inputs and grid size).")
@click.option("--limit", type=click.IntRange(1000), default=1_000_000, show_default=True,
              help="Wave-instructions one run of one kernel may take (each side) before it is stopped.")
@click.option("--max-ulp", type=click.IntRange(0), default=None,
              help="Accept results that differ only in f32 words by at most this many ulps, instead of "
                   "the bound (max_ulp) of the approximations PATCHED's provenance names; the largest "
                   "difference is reported.")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True, help="Seed of the synthesised inputs.")
@click.option("--mcpu-orig", type=click.Choice(sorted(TARGETS)), help="Decode ORIG as this target (default: its own).")
@click.option("--mcpu-patched", type=click.Choice(sorted(TARGETS)), default="gfx1010", show_default=True,
              help="Decode PATCHED as this target (the hardware the patch is for).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def verify_cmd(orig: str, patched: str, emulate: bool, kernel: str | None, runs: int, limit: int, max_ulp: int | None, seed: int,
               mcpu_orig: str | None, mcpu_patched: str, as_json: bool) -> None:
    """Check that PATCHED computes what ORIG computes.

    ORIG and PATCHED are anything `kpatch scan` reads (code objects,
    bundles, kernel DBs, URIs); their code objects are paired as `kpatch
    diff` pairs them (`kpatch verify --emulate SYSTEM.kdb OUT.ukdb` checks
    what `kpatch apply` wrote; code objects of ORIG that apply left alone
    are not in OUT.ukdb and not listed).  With --emulate, each kernel of an
    original and the kernel of the same name in its patched counterpart run in kpatch's functional GFX10 emulator on the
    same synthesised inputs (random buffers with guard zones, integer
    arguments from a small grid, 1-3 workgroups; for the kernel families
    kpatch.emulate.recipes names - rocPRIM's look-back scan, sort, merge and
    reduce-by-key kernels, rocRAND's discrete distributions, MIOpen's naive
    convolutions, rocBLAS's
    Tensile GEMM kernels - consistent inputs that recipe builds), and every
    byte they write is compared.

    \b
    Per kernel:
      equal         every run of both finished and wrote the same bytes, and
                    some run wrote into an argument's buffer
      within ulp    only f32 words differ, by at most the bound: the sum of the
                    max_ulp of the approximation rule sets (`kpatch rules NAME`)
                    the patched object's provenance names, or --max-ulp N
      DIFFERENT     some run wrote other bytes, or only one side faulted
      not verified  something was not emulated (named), arguments could not
                    be synthesised, both sides stopped, or no run of either
                    side wrote a byte (wrote nothing): nothing proven
      untouched     the same code bytes at the same address and the same
                    descriptor in both, reaching no other code or pc-relative
                    data: not a verification target (not run)

    \b
    Exit status: 0 when every kernel is equal, within ulp or untouched; 1 when some kernel is
    different or not verified, or an input cannot be read; 2 on usage
    errors; 3 on an internal error.
    """
    if not emulate:
        raise click.UsageError("only --emulate is implemented: say `kpatch verify --emulate ORIG PATCHED`")
    from kpatch.emulate.errors import EmulationError
    from kpatch.emulate.verify import EQUAL, UNTOUCHED, WITHIN, verify

    pairs, problems = _pairs(orig, patched)
    verdicts = []
    bounds = set()
    for label, a, b in pairs:
        bound, source = (max_ulp, "--max-ulp") if max_ulp is not None else approximation_bound(b)
        if bound is not None:
            bounds.add(f"{bound} ulp ({source})")
        try:
            vs = verify(a, b, kernel=kernel, runs=runs, seed=seed, orig_target=mcpu_orig,
                        patched_target=mcpu_patched, limit=limit, max_ulp=bound, skip_untouched=True)
        except (FormatError, EmulationError) as e:
            if kernel is not None and len(pairs) > 1 and "no kernel" in e.reason:
                continue  # the kernel is in another pair
            problems.append((label or orig, e.reason))
            continue
        for v in vs:
            if label:
                v.name = f"{label}: {v.name}"
        verdicts.extend(vs)
    if kernel is not None and not verdicts and not problems:
        problems.append((orig, f"no kernel {kernel}"))
    total = [0, 0]
    secs = 0.0
    for v in verdicts:
        total[0] += v.instructions[0]
        total[1] += v.instructions[1]
        secs += v.seconds
    counts = {s: sum(v.status == s for v in verdicts)
              for s in ("equal", "within ulp", "different", "not verified", UNTOUCHED)}
    if as_json:
        json.dump({"kernels": [v.to_json() for v in verdicts], "summary": counts, "bounds": sorted(bounds),
                   "wave_instructions": sum(total), "seconds": round(secs, 3)}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for v in verdicts:
            label = {"equal": "equal", "within ulp": "within ulp", "different": "DIFFERENT",
                     "not verified": "not verified", UNTOUCHED: UNTOUCHED}[v.status]
            recipe = f"; inputs by recipe {v.recipe}" if v.recipe else ""
            extra = (f" ({v.runs} runs, {v.instructions[0]:,}/{v.instructions[1]:,} wave-instructions, "
                     f"{v.written[0]:,}/{v.written[1]:,} bytes written{recipe})") \
                if v.status == "equal" else f": {v.detail}"
            out_console.print(f"{label:<13} {v.name}{extra}", markup=False, highlight=False, crop=False)
        rate = sum(total) / secs if secs else 0.0
        within = f"{counts['within ulp']} within {', '.join(sorted(bounds))}, " if bounds else ""
        out_console.print(f"{len(verdicts)} kernels: {counts['equal']} equal, {within}{counts['different']} different, "
                          f"{counts['not verified']} not verified, {counts[UNTOUCHED]} untouched; "
                          f"{sum(total):,} wave-instructions emulated "
                          f"in {secs:.1f} s ({rate:,.0f}/s)", markup=False, highlight=False, crop=False)
    flush_stdout()
    passed = (EQUAL, WITHIN, UNTOUCHED)
    for v in verdicts:
        if v.status not in passed:
            error_line(v.name, f"{v.status}: {v.detail}")
    for item, reason in problems:
        error_line(item, reason)
    ok = verdicts and not problems and all(v.status in passed for v in verdicts)
    sys.exit(EXIT_OK if ok else EXIT_SOME_FAILED)
