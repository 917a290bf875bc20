"""`kpatch verify --emulate ORIG PATCHED`: prove a patch computes the same,
by running both code objects' kernels in kpatch's GFX10 emulator."""

from __future__ import annotations

import json
import sys

import click

from kpatch.cli.common import EXIT_OK, EXIT_SOME_FAILED, error_line, flush_stdout, out_console
from kpatch.containers.discover import resolve
from kpatch.containers.uri import parse_uri
from kpatch.errors import FormatError, KpatchError, UsageError
from kpatch.isa import TARGETS


def _read(uri: str) -> bytes:
    try:
        return resolve(parse_uri(uri))
    except UsageError as e:
        raise KpatchError(e.reason, e.item or uri) from None


@click.command("verify")
@click.argument("orig", metavar="ORIG")
@click.argument("patched", metavar="PATCHED")
@click.option("--emulate", is_flag=True, help="Run both in kpatch's GFX10 emulator and compare what they write.")
@click.option("--kernel", "kernel", metavar="NAME", help="Only this kernel.")
@click.option("--runs", type=click.IntRange(1, 100), default=3, show_default=True,
              help="Runs per kernel (each with other inputs and grid size).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the synthesised inputs.")
@click.option("--mcpu-orig", type=click.Choice(sorted(TARGETS)), help="Decode ORIG as this target (default: its own).")
@click.option("--mcpu-patched", type=click.Choice(sorted(TARGETS)), default="gfx1010", show_default=True,
              help="Decode PATCHED as this target (the hardware the patch is for).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def verify_cmd(orig: str, patched: str, emulate: bool, kernel: str | None, runs: int, seed: int,
               mcpu_orig: str | None, mcpu_patched: str, as_json: bool) -> None:
    """Check that PATCHED computes what ORIG computes.

    ORIG and PATCHED are code objects (paths or URIs as `kpatch scan`
    prints them).  With --emulate, each kernel of ORIG and the kernel of the
    same name in PATCHED run in kpatch's functional GFX10 emulator on the
    same synthesised inputs (random buffers with guard zones, integer
    arguments from a small grid, 1-3 workgroups), and every byte they write
    is compared.

    \b
    Per kernel:
      equal         every run of both finished and wrote the same bytes
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
    from kpatch.emulate.verify import EQUAL, verify

    a, b = _read(orig), _read(patched)
    try:
        verdicts = verify(a, b, kernel=kernel, runs=runs, seed=seed, orig_target=mcpu_orig,
                          patched_target=mcpu_patched)
    except FormatError as e:
        raise KpatchError(e.reason, e.item or orig) from None
    except EmulationError as e:
        raise KpatchError(e.reason, kernel or orig) from None
    total = [0, 0]
    secs = 0.0
    for v in verdicts:
        total[0] += v.instructions[0]
        total[1] += v.instructions[1]
        secs += v.seconds
    counts = {s: sum(v.status == s for v in verdicts) for s in ("equal", "different", "not verified")}
    if as_json:
        json.dump({"kernels": [v.to_json() for v in verdicts], "summary": counts,
                   "wave_instructions": sum(total), "seconds": round(secs, 3)}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for v in verdicts:
            label = {"equal": "equal", "different": "DIFFERENT", "not verified": "not verified"}[v.status]
            extra = f" ({v.runs} runs, {v.instructions[0]:,}/{v.instructions[1]:,} wave-instructions)" \
                if v.status == "equal" else f": {v.detail}"
            out_console.print(f"{label:<13} {v.name}{extra}", markup=False, highlight=False, crop=False)
        rate = sum(total) / secs if secs else 0.0
        out_console.print(f"{len(verdicts)} kernels: {counts['equal']} equal, {counts['different']} different, "
                          f"{counts['not verified']} not verified; {sum(total):,} wave-instructions emulated "
                          f"in {secs:.1f} s ({rate:,.0f}/s)", markup=False, highlight=False, crop=False)
    flush_stdout()
    for v in verdicts:
        if v.status != EQUAL:
            error_line(v.name, f"{v.status}: {v.detail}")
    sys.exit(EXIT_OK if verdicts and all(v.status == EQUAL for v in verdicts) else EXIT_SOME_FAILED)
