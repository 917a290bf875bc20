"""``kpatch diff --html``: a :class:`~kpatch.diff.compare.DiffReport` as one
self-contained HTML file.

The page has its CSS inline, loads nothing, runs no script and escapes
every piece of text that comes from the inputs.  It holds a summary, then
per pair of code objects the header / layout / notes / symbols / metadata
differences, the provenance record, the relocation summary, control-flow
problems, and per changed function its descriptor and metadata
differences and a side-by-side listing.  Rows carry their kind as a class
and a ``data-op`` attribute (``equal``, ``changed``, ``inserted``,
``removed``; relocated branches also have the class ``relocated``), so the
page can be checked mechanically.

The report of ``kpatch apply --report`` (a DiffReport with ``apply`` set)
starts with the source(s) and the output, then every refused kernel with
its reason (``section#refusals``, also for code objects that were not
written), then errors; each kernel section says what apply decided
(``data-outcome``: a refused kernel is shown as refused, not as changed).
"""

from __future__ import annotations

import re
from html import escape

from kpatch import __version__
from kpatch.diff.align import CHANGED, EQUAL, INSERTED, REMOVED, FieldChange, lcs_pairs, fmt_value
from kpatch.diff.compare import (
    IDENTICAL, ApplyInfo, ObjectDiff, DiffReport, Row, UnitDiff, flat_items, relocation_items, with_context)
from kpatch.atomicfile import write_atomic

CSS = """
:root { --ins: #dafbe1; --del: #ffebe9; --chg: #fff8c5; --rel: #ddf4ff; --line: #d0d7de;
        --dim: #57606a; --insd: #1a7f37; --deld: #cf222e; --chgd: #9a6700; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
       padding: 16px 24px 48px; max-width: 1600px; color: #1f2328; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line);
     word-break: break-all; }
h3 { font-size: 15px; margin: 18px 0 6px; }
h4 { font-size: 14px; margin: 12px 0 4px; }
code, .mono, table.code td { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace;
                             font-size: 12.5px; }
.files .old { color: var(--deld); } .files .new { color: var(--insd); }
.dim { color: var(--dim); }
table { border-collapse: collapse; margin: 4px 0 8px; }
th, td { border: 1px solid var(--line); padding: 2px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; }
table.kv th { width: 14em; }
td.old-value { background: var(--del); } td.new-value { background: var(--ins); }
td.absent { color: var(--dim); font-style: italic; }
table.code { width: 100%; table-layout: fixed; }
table.code col.mark { width: 2.2em; } table.code col.addr { width: 5.5em; }
table.code col.fields { width: 22%; }
table.code td { border-width: 0 1px 0 0; white-space: pre-wrap; word-break: break-all; padding: 0 6px; }
table.code tr.skip td { background: #f6f8fa; color: var(--dim); text-align: center; font-style: italic;
                        border: 1px solid var(--line); }
tr.changed { background: var(--chg); } tr.inserted { background: var(--ins); }
tr.removed { background: var(--del); } tr.relocated { background: var(--rel); }
tr.inserted td.old, tr.inserted td.old-addr, tr.removed td.new, tr.removed td.new-addr { background: #f6f8fa; }
td.mark { text-align: center; font-weight: 700; }
tr.changed td.mark { color: var(--chgd); } tr.inserted td.mark { color: var(--insd); }
tr.removed td.mark { color: var(--deld); } tr.relocated td.mark { color: #0969da; }
td.addr { color: var(--dim); text-align: right; }
del.tok { background: #ffcecb; text-decoration: line-through; }
ins.tok { background: #aceebb; text-decoration: none; }
span.field { display: inline-block; margin-right: 8px; font-weight: 600; }
ul.problems li { color: var(--deld); }
tr.problem td { box-shadow: inset 0 1px 0 var(--deld), inset 0 -1px 0 var(--deld); }
tr.problem td.mark { color: #fff; background: var(--deld); }
span.problem { color: var(--deld); font-weight: 600; }
p.ok { color: var(--insd); }
.badge { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 12px; margin-left: 6px;
         border: 1px solid var(--line); background: #f6f8fa; }
.badge.changed { background: var(--chg); } .badge.inserted { background: var(--ins); }
.badge.removed { background: var(--del); } .badge.relocated { background: var(--rel); }
.badge.problem, .badge.refused { background: var(--deld); color: #fff; }
table.refusals td.reason { color: var(--deld); }
p.outcome.refused { margin: 2px 0; }
p.nothing-changed { font-weight: 600; }
section.function { margin-left: 8px; }
footer { margin-top: 40px; color: var(--dim); font-size: 12px; }
"""

_TOKEN = re.compile(r"\s+|[^\s,]+|,")


def _e(v: object) -> str:
    return escape(str(v), quote=True)


def _val_cell(v: object, cls: str) -> str:
    if v is None:
        return f'<td class="{cls} absent">absent</td>'
    return f'<td class="{cls} mono">{_e(fmt_value(v))}</td>'


def _changes_table(cs: list[FieldChange], cls: str) -> str:
    if not cs:
        return ""
    rows = "".join(f'<tr><td class="mono">{_e(c.name)}</td>{_val_cell(c.old, "old-value")}'
                   f'{_val_cell(c.new, "new-value")}</tr>' for c in cs)
    return (f'<table class="changes {cls}"><thead><tr><th>field</th><th>old</th><th>new</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>")


def _kv_table(items: list[tuple[str, str]], cls: str) -> str:
    rows = "".join(f'<tr><th>{_e(k)}</th><td class="mono">{_e(v)}</td></tr>' for k, v in items)
    return f'<table class="kv {cls}"><tbody>{rows}</tbody></table>'


def _token_diff(old: str, new: str) -> tuple[str, str]:
    """Both texts with the tokens the other lacks marked (<del>/<ins>)."""
    a, b = _TOKEN.findall(old), _TOKEN.findall(new)
    pairs = lcs_pairs(a, b) if len(a) * len(b) <= 40_000 else []
    ka = {i for i, _ in pairs}
    kb = {j for _, j in pairs}

    def mark(toks, keep, tag):
        return "".join(_e(t) if n in keep or not t.strip() else f'<{tag} class="tok">{_e(t)}</{tag}>'
                       for n, t in enumerate(toks))
    return mark(a, ka, "del"), mark(b, kb, "ins")


def _row(r: Row) -> str:
    cls = r.kind + (" relocated" if r.relocated else "") + (" problem" if r.problem else "")
    mark = {EQUAL: "", CHANGED: "~", INSERTED: "+", REMOVED: "-"}[r.kind]
    if r.relocated:
        mark = "&gt;"
    if r.problem:
        mark = "!"
    old_t = _e(r.old.text()) if r.old is not None else ""
    new_t = _e(r.new.text()) if r.new is not None else ""
    if r.kind == CHANGED and r.old is not None and r.new is not None and r.old.text() != r.new.text():
        old_t, new_t = _token_diff(r.old.text(), r.new.text())
    fields = "".join(f'<span class="field">{_e(c.text())}</span>' for c in r.changes)
    if r.relocated:
        fields += '<span class="dim">branch relocated, same target</span>'
    if r.problem:
        fields += f'<span class="problem">control flow changed: {_e(r.problem)}</span>'
    oa = f"{r.old.address:x}" if r.old is not None else ""
    na = f"{r.new.address:x}" if r.new is not None else ""
    return (f'<tr class="op {cls}" data-op="{r.kind}"><td class="mark">{mark}</td>'
            f'<td class="addr old-addr">{oa}</td><td class="old">{old_t}</td>'
            f'<td class="addr new-addr">{na}</td><td class="new">{new_t}</td>'
            f'<td class="fields">{fields}</td></tr>')


def _code_table(u: UnitDiff, context: int | None) -> str:
    parts = ['<table class="code"><colgroup><col class="mark"><col class="addr"><col class="old">'
             '<col class="addr"><col class="new"><col class="fields"></colgroup>'
             '<thead><tr><th></th><th>addr</th><th>old</th><th>addr</th><th>new</th><th>changes</th></tr>'
             '</thead><tbody>']
    for r in u.shown(context):
        if isinstance(r, int):
            parts.append(f'<tr class="skip"><td colspan="6">… {r} identical instruction'
                         f'{"s" if r != 1 else ""} …</td></tr>')
        else:
            parts.append(_row(r))
    parts.append("</tbody></table>")
    return "".join(parts)


def _badges(counts: dict[str, int]) -> str:
    out = []
    for k in (CHANGED, INSERTED, REMOVED, "relocated"):
        if counts.get(k):
            out.append(f'<span class="badge {k}">{counts[k]} {k}</span>')
    return "".join(out)


def _range(rng) -> str:
    return f"{rng[0]:#x}–{rng[1]:#x}" if rng else "—"


def _outcome(u: UnitDiff) -> str:
    """What `kpatch apply` decided for the kernel, above its differences."""
    if u.outcome is None:
        return ""
    status, reason = u.outcome
    if status == "refused":
        left = ("its instructions are left as they were" if not u.code_changed
                else "but its instructions differ: see below")
        return (f'<p class="outcome refused">Refused: <span class="reason">{_e(reason)}</span> '
                f'<span class="dim">({left})</span></p>')
    if status == "untouched":
        return f'<p class="outcome untouched dim">untouched{": " + _e(reason) if reason else ""}</p>'
    return ""


def _unit(u: UnitDiff, oid: str, n: int, context: int | None) -> str:
    c = u.counts
    outcome = u.outcome[0] if u.outcome else ""
    # a refused kernel is named as refused, never as "changed"
    shown = outcome if outcome in ("refused", "untouched") else (outcome or u.status)
    parts = [f'<section class="function" id="{oid}-f{n}" data-name="{_e(u.name)}" data-kind="{_e(u.kind)}" '
             f'data-status="{_e(u.status)}"' + (f' data-outcome="{_e(outcome)}"' if outcome else "") + ">",
             f'<h3>{_e(u.kind)} <code class="name">{_e(u.name)}</code> '
             f'<span class="badge status {_e(shown)}">{_e(shown)}</span>{_badges(c)}</h3>',
             _outcome(u),
             f'<p class="dim mono">{_range(u.old_range)} → {_range(u.new_range)}; '
             f'{c[EQUAL]} equal, {c[CHANGED]} changed, {c[INSERTED]} inserted, {c[REMOVED]} removed</p>']
    if u.descriptor:
        parts.append("<h4>Kernel descriptor</h4>" + _changes_table(u.descriptor, "descriptor"))
    if u.metadata:
        parts.append("<h4>Kernel metadata</h4>" + _changes_table(u.metadata, "kernel-metadata"))
    if u.instructions and (u.code_changed or context is None):
        parts.append("<h4>Code</h4>" + _code_table(u, context))
    elif u.instructions:
        parts.append(f'<p class="dim">Code unchanged ({u.instructions} instructions).</p>')
    parts.append("</section>")
    return "".join(parts)


def _object(d: ObjectDiff, n: int, context: int | None, applied: bool = False) -> str:
    oid = f"obj{n}"
    status = "error" if d.error else ("identical" if d.identical else "changed")
    names = ("source", "output") if applied else ("old", "new")
    parts = [f'<section class="object" id="{oid}" data-label="{_e(d.label)}" data-status="{status}">',
             f"<h2>{_e(d.label)}</h2>",
             _kv_table([(names[0], d.old_uri), (names[1], d.new_uri),
                        ("target", f"{d.old_target or '?'} → {d.new_target or '?'}"),
                        ("decoded as", f"{d.old_decode or 'not decoded'} → {d.new_decode or 'not decoded'}"),
                        ("size", f"{d.old_size} → {d.new_size} bytes")], "identity")]
    if d.error:
        parts.append(f'<p class="error">Error: {_e(d.error)}</p></section>')
        return "".join(parts)
    if d.identical:
        parts.append('<p class="ok">Identical.</p></section>')
        return "".join(parts)
    for title, cs, cls in (("ELF header", d.header, "header"), ("Sections and segments", d.layout, "layout"),
                           ("Notes", d.notes, "notes"), ("Symbols", d.symbols, "symbols"),
                           ("Metadata", d.metadata, "metadata")):
        if cs:
            parts.append(f"<h3>{title}</h3>" + _changes_table(cs, cls))
    if d.provenance:
        parts.append("<h3>Provenance</h3>" + _kv_table(flat_items(d.provenance), "provenance"))
    parts.append("<h3>Relocation summary</h3>" + _kv_table(relocation_items(d), "relocation"))
    parts.append("<h3>Control flow</h3>")
    if d.problems:
        items = "".join(f'<li class="problem" data-kind="{_e(p.kind)}"><code>{_e(p.unit)}</code>: '
                        f"{_e(p.message)}</li>" for p in d.problems)
        parts.append(f'<ul class="problems">{items}</ul>')
    elif d.old_decode and d.new_decode:
        parts.append('<p class="ok control-flow-ok">Every branch and kernel entry reaches the same '
                     "instruction, or the mitigation placed in front of it.</p>")
    else:
        parts.append('<p class="dim">Not checked: the code could not be decoded.</p>')
    same = []
    for k, u in enumerate(d.units):
        if u.status == IDENTICAL:
            same.append(u.name)
        else:
            parts.append(_unit(u, oid, k, context))
    if same:
        names = ", ".join(f"<code>{_e(x)}</code>" for x in same)
        parts.append(f'<p class="unchanged dim">Unchanged functions ({len(same)}): {names}</p>')
    parts.append("</section>")
    return "".join(parts)


_STATE_TEXT = {"written": "written, with this kernel left as it was",
               "already in output": "already in the output, with this kernel left as it was",
               "not written": "not written: MIOpen keeps using its own entry"}


def _apply_files(a: ApplyInfo) -> str:
    """Source(s) and output of `kpatch apply` (in the header)."""
    where = [("source", s) for s in a.sources] + [
        ("output", a.output + (" (dry run: nothing written)" if a.dry_run else ""))]
    return _kv_table(where, "files")


def _apply_head(a: ApplyInfo) -> str:
    """Every refusal with its reason (the first section of the report), then errors."""
    parts = []
    kernels = [r for r in a.refusals if r.kernel is not None]
    parts.append(f'<section id="refusals" data-count="{len(a.refusals)}"><h2>Refused ({len(kernels)} kernels'
                 + (f", {len(a.refusals) - len(kernels)} items" if len(kernels) != len(a.refusals) else "")
                 + ")</h2>")
    if a.refusals:
        rows = "".join(f'<tr class="refusal"><td class="mono uri">{_e(r.uri)}</td>'
                       f'<td class="mono kernel">{_e(r.kernel or "(all)")}</td>'
                       f'<td class="reason">{_e(r.reason)}</td>'
                       f'<td class="state" data-state="{_e(r.object_state)}">'
                       f"{_e(_STATE_TEXT.get(r.object_state, r.object_state))}</td></tr>"
                       for r in a.refusals)
        parts.append('<table class="refusals"><thead><tr><th>code object</th><th>kernel</th><th>reason</th>'
                     f"<th>its code object</th></tr></thead><tbody>{rows}</tbody></table>")
    else:
        parts.append('<p class="ok">No kernel was refused.</p>')
    parts.append("</section>")
    if a.errors:
        lis = "".join(f'<li class="mono">{_e(u)}: {_e(why)}</li>' for u, why in a.errors)
        parts.append(f'<section id="apply-errors"><h2>Errors ({len(a.errors)})</h2><ul>{lis}</ul></section>')
    return "".join(parts)


def _apply_counts(a: ApplyInfo) -> list[tuple[str, str]]:
    c = a.counts
    names = {"error": "with errors"}
    items = [(f"{a.unit} {names.get(s, s)}", str(c[s]))
             for s in ("changed", "unchanged", "skipped", "refused", "error") if s in c]
    items += [(f"kernels {s}", str(c.get(f"kernels_{s}", 0))) for s in ("patched", "refused", "untouched")]
    items.append((f"{a.unit} already patched in the output", str(a.already_patched)))
    return items


def render_html(rep: DiffReport, *, context: int | None = 3, show_identical: bool = False,
                title: str | None = None) -> str:
    """The report as one HTML document (a str).  Identical pairs are listed
    in the summary; their sections are only written with ``show_identical``.
    A report of `kpatch apply` (``rep.apply``) starts with its source and
    output and every refusal with its reason."""
    a = rep.apply
    title = title or (f"kpatch apply: {a.output}" if a else f"kpatch diff: {rep.old_name} → {rep.new_name}")
    s = rep.summary
    summary_items = [
        ("pairs compared", str(s["pairs"])), ("changed", str(s["changed"])),
        ("identical", str(s["identical"])), ("unreadable", str(s["errors"])),
        ("only in old", str(s["only_old"])), ("only in new", str(s["only_new"])),
        ("functions changed", str(s["functions_changed"])),
        ("instructions changed", str(s["changed_instructions"])),
        ("instructions inserted", str(s["inserted"])), ("instructions removed", str(s["removed"])),
        ("branches relocated", str(s["branches_relocated"])),
        ("control-flow problems", str(s["control_flow_problems"])),
    ]
    index_rows = []
    body = []
    for n, d in enumerate(rep.objects):
        status = "error" if d.error else ("identical" if d.identical else "changed")
        c = {k: sum(u.counts[k] for u in d.units) for k in (CHANGED, INSERTED, REMOVED, "relocated")}
        shown = show_identical or not d.identical or d.error
        name = f'<a href="#obj{n}">{_e(d.label)}</a>' if shown else _e(d.label)
        probs = f'<span class="badge problem">{len(d.problems)} control-flow</span>' if d.problems else ""
        refused = sum(1 for u in d.units if u.outcome and u.outcome[0] == "refused")
        if refused:
            probs += f'<span class="badge refused">{refused} kernel{"s" if refused != 1 else ""} refused</span>'
        index_rows.append(f'<tr data-status="{status}"><td class="mono">{name}</td><td>{status}</td>'
                          f"<td>{_badges(c)}{probs}</td></tr>")
        if shown:
            body.append(_object(d, n, context, applied=a is not None))
    extra = []
    for what, items in ((f"Only in {rep.old_name}", rep.only_old), (f"Only in {rep.new_name}", rep.only_new),
                        ("Unreadable", rep.problems)):
        if items:
            lis = "".join(f'<li class="mono">{_e(x)}</li>' for x in items)
            extra.append(f"<h3>{_e(what)} ({len(items)})</h3><ul>{lis}</ul>")
    if a is not None:
        files, first = _apply_files(a), _apply_head(a)
        summary_items = _apply_counts(a) + [(k, v) for k, v in summary_items
                                            if k not in ("only in old", "only in new")]
        if not rep.objects:
            nothing = (f"Nothing changed in this run; {a.already_patched} {a.unit} already patched in "
                       f"{a.output}.")
            extra.insert(0, f'<p class="nothing-changed">{_e(nothing)}</p>')
    else:
        first = ""
        files = (f'<p class="files mono"><span class="old">--- {_e(rep.old_name)}</span><br>'
                 f'<span class="new">+++ {_e(rep.new_name)}</span></p>')
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>"
        f"<header><h1>{_e(title)}</h1>{files}</header>{first}"
        '<section id="summary"><h2>Summary</h2>' + _kv_table(summary_items, "summary")
        + ('<table class="index"><thead><tr><th>code object</th><th>status</th><th>changes</th></tr></thead>'
           f"<tbody>{''.join(index_rows)}</tbody></table>" if index_rows else "")
        + "".join(extra) + "</section>"
        + "".join(body)
        + f"<footer>Written by kpatch {_e(__version__)}. Rows: ~ changed, + inserted, - removed, "
        "&gt; branch relocated (same target).</footer></body></html>\n"
    )


def write_html(rep: DiffReport, path: str, **kw) -> None:
    """Write :func:`render_html` to ``path`` atomically, with the mode a new
    file gets (:func:`kpatch.atomicfile.write_atomic`)."""
    write_atomic(path, render_html(rep, **kw).encode("utf-8"))


__all__ = ["render_html", "write_html", "CSS"]
