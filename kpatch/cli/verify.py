"""`kpatch verify --emulate ORIG PATCHED`: prove a patch computes the same,
by running both code objects' kernels in kpatch's GFX10 emulator."""

from __future__ import annotations

import json
import sys

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
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the synthesised inputs.")
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
    arguments from a small grid, 1-3 workgroups), and every byte they write
    is compared.

    \b
    Per kernel:
      equal         every run of both finished and wrote the same bytes
      within ulp    only f32 words differ, by at most the bound: the sum of the
                    max_ulp of the approximation rule sets (`kpatch rules NAME`)
                    the patched object's provenance names, or --max-ulp N
      DIFFERENT     some run wrote other bytes, or only one side faulted
      not verified  something was not emulated (named), arguments could not
                    be synthesised, or both sides stopped: nothing proven

    \b
    Exit status: 0 when every kernel is equal; 1 when some kernel is
    different or not verified, or an input cannot be read; 2 on usage
    errors; 3 on an internal error.
    """
    if not emulate:
        raise click.UsageError("only --emulate is implemented: say `kpatch verify --emulate ORIG PATCHED`")
    from kpatch.emulate.errors import EmulationError
    from kpatch.emulate.verify import EQUAL, WITHIN, verify

    pairs, problems = _pairs(orig, patched)
    verdicts = []
    bounds = set()
    for label, a, b in pairs:
        bound, source = (max_ulp, "--max-ulp") if max_ulp is not None else approximation_bound(b)
        if bound is not None:
            bounds.add(f"{bound} ulp ({source})")
        try:
            vs = verify(a, b, kernel=kernel, runs=runs, seed=seed, orig_target=mcpu_orig,
                        patched_target=mcpu_patched, limit=limit, max_ulp=bound)
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
    counts = {s: sum(v.status == s for v in verdicts) for s in ("equal", "within ulp", "different", "not verified")}
    if as_json:
        json.dump({"kernels": [v.to_json() for v in verdicts], "summary": counts, "bounds": sorted(bounds),
                   "wave_instructions": sum(total), "seconds": round(secs, 3)}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for v in verdicts:
            label = {"equal": "equal", "within ulp": "within ulp", "different": "DIFFERENT",
                     "not verified": "not verified"}[v.status]
            extra = f" ({v.runs} runs, {v.instructions[0]:,}/{v.instructions[1]:,} wave-instructions)" \
                if v.status == "equal" else f": {v.detail}"
            out_console.print(f"{label:<13} {v.name}{extra}", markup=False, highlight=False, crop=False)
        rate = sum(total) / secs if secs else 0.0
        within = f"{counts['within ulp']} within {', '.join(sorted(bounds))}, " if bounds else ""
        out_console.print(f"{len(verdicts)} kernels: {counts['equal']} equal, {within}{counts['different']} different, "
                          f"{counts['not verified']} not verified; {sum(total):,} wave-instructions emulated "
                          f"in {secs:.1f} s ({rate:,.0f}/s)", markup=False, highlight=False, crop=False)
    flush_stdout()
    passed = (EQUAL, WITHIN)
    for v in verdicts:
        if v.status not in passed:
            error_line(v.name, f"{v.status}: {v.detail}")
    for item, reason in problems:
        error_line(item, reason)
    ok = verdicts and not problems and all(v.status in passed for v in verdicts)
    sys.exit(EXIT_OK if ok else EXIT_SOME_FAILED)
