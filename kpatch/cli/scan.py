"""`kpatch scan`: list every code object under the given paths."""

from __future__ import annotations

import json
import sys

import click

from kpatch.cli.common import EXIT_OK, EXIT_SOME_FAILED, error_line, out_console, progress
from kpatch.analysis.targets import SUPPORTED_TARGETS
from kpatch.codeobject import CodeObject
from kpatch.containers.discover import Found, Problem, discover
from kpatch.data import sample_db_path
from kpatch.isa.decoder import no_gc
from kpatch.errors import KpatchError, internal_reason
from kpatch.cli.inventory import analysis_summary, code_object_record, render_table


def run_scan(paths: list[str], on_progress=None, target: str | None = None) -> tuple[list[dict], list[dict]]:
    """Scan ``paths``; return (code object records, error records).  With
    ``target`` every code object is also analysed for running on it.  A code
    object that cannot be read or analysed (even through a bug in kpatch)
    is one error record; the others are still scanned."""
    records: list[dict] = []
    errors: list[dict] = []
    analyse = None
    if target:  # (the engine and numpy load only then; before the loop, so a missing one is one line)
        from kpatch.analysis import analyse
    for item in discover(paths, on_file=lambda f: on_progress and on_progress(f)):
        if isinstance(item, Problem):
            errors.append({"uri": item.uri, "error": item.error})
            continue
        assert isinstance(item, Found)
        try:
            with no_gc():  # (reading one object makes millions of acyclic objects: metadata, symbols)
                co = CodeObject.from_bytes(item.data, name=str(item.uri), lossless=False)  # (read only)
                report = analyse(co, target) if analyse is not None else None
                record = code_object_record(item, co, report)
        except KpatchError as e:
            errors.append({"uri": str(item.uri), "error": e.reason})
            continue
        except Exception as e:  # a bug met on this code object: the others still go on
            errors.append({"uri": str(item.uri), "error": internal_reason(e)})
            continue
        records.append(record)
        if on_progress:
            on_progress(None, 1)
    return records, errors


#: Blocking findings named per reason on an `unpatchable` line before "and N more".
MAX_BLOCKERS = 3


def _blocker_text(reason: str, findings: list[dict]) -> str:
    """One reason, with the findings that carry it (class, address, what)."""
    hits = [f for f in findings if f.get("blocker") == reason]
    if not hits:
        return reason
    parts = []
    for f in hits[:MAX_BLOCKERS]:
        where = f" at {f['address']:#x}" if isinstance(f.get("address"), int) else ""
        parts.append(f"{f['class']}{where}: {f['detail']}")
    more = f" (and {len(hits) - MAX_BLOCKERS} more)" if len(hits) > MAX_BLOCKERS else ""
    why = reason.split(": ", 1)[1] if reason.startswith(f"{hits[0]['class']}: ") else reason
    if why.startswith(hits[0]["detail"]):  # the reason repeats what the finding says
        why = why[len(hits[0]["detail"]):].strip()
    return f"{'; '.join(parts)}{more}" + (f" ({why})" if why else "")


def unpatchable_lines(records: list[dict], target: str) -> list[str]:
    """One line per kernel (or code object) the analysis found unpatchable
    for ``target``: ``unpatchable URI KERNEL: REASON[; REASON...]``, each
    reason with the findings that block it."""
    out = []
    for r in records:
        named = False
        for k in r.get("kernels", ()):
            if k.get("verdict") != "unpatchable":
                continue
            named = True
            reasons = list(k.get("reasons") or []) or ["no reason recorded"]
            text = "; ".join(_blocker_text(x, k.get("findings") or []) for x in reasons)
            out.append(f"unpatchable {r['uri']} {k['name']}: {text}")
        a = r.get("analysis") or {}
        if a.get("verdict") == "unpatchable" and not named:
            out.append(f"unpatchable {r['uri']}: {'; '.join(a.get('reasons') or ['no reason recorded'])}")
    if out:
        out.insert(0, f"not patchable for {target} ({len(out)}): ")
        out[0] = out[0].rstrip(": ") + ":"
    return out


@click.command("scan")
@click.argument("paths", nargs=-1, metavar="PATH_OR_URI...")
@click.option("--sample", is_flag=True, help="Also scan the sample kernel DB shipped inside kpatch.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a table.")
@click.option("--target", type=click.Choice(SUPPORTED_TARGETS), default=None,
              help="Also analyse every kernel for running on this GPU: findings and a verdict "
                   "(see `kpatch explain`).")
def scan_cmd(paths: tuple[str, ...], sample: bool, as_json: bool, target: str | None) -> None:
    """List every AMD GPU code object found under PATH_OR_URI...

    A PATH may be a raw code object (.hsaco/.co), a clang offload bundle
    (plain or compressed CCOB), a host ELF file or shared library with a
    .hip_fatbin section, a MIOpen kernel DB (.kdb, .ukdb, .kdb.bz2), a wheel
    or zip, or a directory (searched recursively, e.g. /opt/rocm).  A URI
    printed by scan names one code object (see `kpatch extract --help`).

    \b
    Output: a table (container, URI, target id, code object version,
    kernels, size), or with --json one document:
      {"code_objects": [{"uri", "container", "target", "code_object_version",
                         "size", "kernels": [{"name", "symbol", ...}], ...}],
       "errors": [{"uri", "error"}]}

    \b
    With --target gfx1010 each kernel also gets
      "verdict" ("ok", "patchable" or "unpatchable"), "rules" (the rule
      sets that would fix it), "reasons" (why it cannot be fixed) and
      "findings": [{"class", "code", "address", "detail", "mitigation"}];
    each code object an "analysis" summary (verdict, counts per verdict and
    per finding class) and the document a "summary" over everything.  The
    table then shows verdicts and counts per finding class, followed by one
    line per unpatchable kernel: `unpatchable URI KERNEL: CLASS at ADDRESS:
    WHAT (WHY)`.  Addresses are
    virtual addresses as llvm-objdump prints them (null: the code object).

    \b
    Exit status: 0 when every input was read (unpatchable kernels are a
    finding, not an error), 1 when some could not be (each is listed under
    errors and on stderr; the rest is still reported), 2 for usage errors,
    3 on an internal error.
    """
    paths = tuple(paths) + ((sample_db_path(),) if sample else ())
    if not paths:
        raise click.UsageError("give at least one PATH_OR_URI (or --sample)")
    with progress("scanning") as update:

        def on_progress(f, advance=0):
            update(f"scanning {f}" if f else None, advance)

        records, errors = run_scan(list(paths), on_progress, target)
    for e in errors:
        error_line(e["uri"], e["error"])
    if as_json:
        doc = {"code_objects": records, "errors": errors}
        if target:
            doc["summary"] = analysis_summary(records, target)
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_table(out_console, records, errors, target)
        if target:
            for line in unpatchable_lines(records, target):
                out_console.print(line, markup=False, highlight=False, crop=False)
    sys.exit(EXIT_SOME_FAILED if errors else EXIT_OK)
