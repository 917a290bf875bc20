"""`kpatch diff A B`: what differs between two code objects, two kernel DBs,
or an original and what `kpatch apply` made of it."""

from __future__ import annotations

import json
import sys

import click

from kpatch.cli.common import (
    EXIT_OK, EXIT_SOME_FAILED, err_console, error_line, flush_stdout, out_console, progress)
from kpatch.errors import KpatchError
from kpatch.isa import TARGETS
from kpatch.diff.compare import diff_inputs, object_json, report_json, row_json
from kpatch.diff.html import write_html
from kpatch.diff.text import render_text


@click.command("diff")
@click.argument("old", metavar="OLD")
@click.argument("new", metavar="NEW")
@click.option("--html", "html_path", metavar="FILE", help="Also write a self-contained HTML report to FILE.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON document instead of text: per function its counts and what the text "
                   "lists (changed rows with -U context).")
@click.option("--json-rows", "json_rows", is_flag=True,
              help="Print JSON lines instead of text, written as produced: every row of every function "
                   "compared, then each pair's document and a summary.")
@click.option("-U", "--context", type=click.IntRange(0), default=3, show_default=True,
              help="Equal instructions shown around each difference.")
@click.option("--full", is_flag=True, help="Show every instruction of changed functions (no context limit).")
@click.option("--all", "show_all", is_flag=True, help="Also show pairs that are identical.")
@click.option("--mcpu-old", type=click.Choice(sorted(TARGETS)), help="Decode OLD as this target (default: its own).")
@click.option("--mcpu-new", type=click.Choice(sorted(TARGETS)), help="Decode NEW as this target (default: its own).")
@click.option("--exit-code", is_flag=True, help="Exit with 1 when there are differences (like `git diff --exit-code`).")
def diff_cmd(old: str, new: str, html_path: str | None, as_json: bool, json_rows: bool, context: int, full: bool,
             show_all: bool, mcpu_old: str | None, mcpu_new: str | None, exit_code: bool) -> None:
    """Compare the code objects in OLD with those in NEW.

    OLD and NEW are anything `kpatch scan` reads: code objects, bundles, host
    libraries, kernel DBs (.kdb, .kdb.bz2, .ukdb) or URIs.  Two single code
    objects are compared with each other; otherwise code objects are paired
    by kernel DB key (kernel_name, kernel_args) -- a `-mcpu=gfx1030` key
    matches a `-mcpu=gfx1010` one -- then by bundle entry, then in order.
    `kpatch diff SYSTEM.kdb OUT.ukdb` shows what `kpatch apply` changed.

    \b
    For each pair: ELF header, sections, notes, symbols, metadata and kernel
    descriptor differences; the provenance note of a patched object; a
    relocation summary; a control-flow check (every original branch and
    kernel entry must reach the same instruction, or the mitigation placed
    in front of it); and per changed function a side-by-side listing:
      ~ changed (with the fields that changed, e.g. `glc 1->0`)
      + inserted   - removed   > branch relocated (same target)
      ! where the control-flow check found a problem

    --json prints the same as one document: per function its counts and
    its listing (the changed rows with -U rows of context, `{"identical":
    N}` for each run of equal rows not shown).  --json-rows streams every
    row instead, one JSON line each as its function is compared (`object`,
    `function`, `kind`, `old`, `new`, `changes`, `relocated`, `problem`),
    then a line per pair (`diff`: its document without rows) and a last
    `summary` line; a row whose check needs a later function comes when
    that one has been compared.

    OLD or NEW that does not exist, or holds no readable code object, is an
    error (one line, `error: OLD: no such file`, nothing compared).

    \b
    Exit status: 0 when the comparison was made; 1 when OLD or NEW is
    missing or unreadable, some code object in them could not be read,
    a control-flow problem was found, or (with --exit-code) the inputs
    differ; 2 on usage errors; 3 on an internal error.
    """
    ctx = None if full else context
    on_unit = on_object = None
    if json_rows:
        def on_unit(label, u, rows):
            for r in rows:
                sys.stdout.write(json.dumps({"object": label, "function": u.name, **row_json(r)}) + "\n")

        def on_object(d):
            sys.stdout.write(json.dumps({"object": d.label, "diff": object_json(d, rows=False, context=ctx)}) + "\n")
            sys.stdout.flush()
    with progress("comparing") as update:
        # each function keeps only the rows its listing shows (a whole library's every row does not fit)
        report = diff_inputs(old, new, old_target=mcpu_old, new_target=mcpu_new,
                             on_pair=lambda label: update(f"comparing {label}", advance=1),
                             hunks=ctx, on_unit=on_unit, on_object=on_object)
    if html_path:
        try:
            write_html(report, html_path, context=ctx, show_identical=show_all)
        except OSError as e:
            raise KpatchError(f"cannot write the HTML report: {e.strerror or e}", html_path) from None
    if json_rows:
        sys.stdout.write(json.dumps({"summary": report.summary, "only_old": report.only_old,
                                     "only_new": report.only_new, "problems": report.problems}) + "\n")
    elif as_json:
        json.dump(report_json(report, rows=False, context=ctx), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for line in render_text(report, context=ctx, show_identical=show_all, unreadable=False):
            out_console.print(line, markup=False, highlight=False, crop=False)
    flush_stdout()
    for p in report.problems:
        error_line(None, p)
    for o in report.objects:  # (a pair compared whose object could not be read: on stderr too, one line)
        if o.error is not None:
            error_line(None, o.error)
    if html_path:
        err_console.print(f"HTML report written to {html_path}", markup=False, highlight=False)
    s = report.summary
    failed = s["errors"] or s["control_flow_problems"]
    differs = s["changed"] or s["only_old"] or s["only_new"]
    sys.exit(EXIT_SOME_FAILED if failed or (exit_code and differs) else EXIT_OK)
