"""``kpatch diff`` in the terminal: a :class:`~kpatch.diff.compare.DiffReport`
as lines of :class:`rich.text.Text` (coloured on a terminal, plain text
when piped).

Per pair of code objects: header, layout, note, symbol and metadata
differences, provenance, the relocation summary and control-flow problems;
then per changed function its descriptor and metadata differences and a
side-by-side listing.  The marker column says what a row is:

====  ==========================================================
``' '``  equal
``~``    changed (the field changes follow on the right)
``+``    inserted (only in the new object)
``-``    removed (only in the old object)
``>``    a branch whose offset changed but which reaches the same instruction
``!``    a row where the control-flow check found a problem
====  ==========================================================
"""

from __future__ import annotations

from rich.text import Text

from kpatch.diff.align import CHANGED, EQUAL, INSERTED, REMOVED, FieldChange
from kpatch.diff.compare import (
    IDENTICAL, ObjectDiff, DiffReport, Row, UnitDiff, flat_items, relocation_items, with_context)

MARK = {EQUAL: " ", CHANGED: "~", INSERTED: "+", REMOVED: "-"}
STYLE = {EQUAL: "", CHANGED: "yellow", INSERTED: "green", REMOVED: "red", "relocated": "cyan"}
MAX_COLUMN = 56
#: Symbol / layout differences listed before "... and N more".
MAX_LISTED = 24


def _changes(title: str, cs: list[FieldChange], indent: str) -> list[Text]:
    if not cs:
        return []
    out = [Text(f"{indent}{title}:", style="bold")]
    shown = cs if len(cs) <= MAX_LISTED else cs[:MAX_LISTED]
    for c in shown:
        t = Text(f"{indent}  ")
        t.append(c.name, style="bold")
        t.append(f"  {c.text()[len(c.name) + 1:]}")
        out.append(t)
    if len(cs) > len(shown):
        out.append(Text(f"{indent}  ... and {len(cs) - len(shown)} more"))
    return out


def _inst_cell(inst, width: int) -> str:
    if inst is None:
        return " " * (width + 8)
    text = inst.text()
    if len(text) > width:
        text = text[: width - 1] + "…"
    return f"{inst.address:6x}  {text.ljust(width)}"


def _row(r: Row, width: int, indent: str) -> Text:
    kind = "relocated" if r.relocated else r.kind
    mark = "!" if r.problem else (">" if r.relocated else MARK[r.kind])
    t = Text(f"{indent}{mark} ", style="bold red" if r.problem else STYLE[kind])
    t.append(_inst_cell(r.old, width), style=STYLE[REMOVED] if r.kind == REMOVED else STYLE[kind])
    t.append(" │ ")
    right = _inst_cell(r.new, width)
    t.append(right if r.changes else right.rstrip(), style=STYLE[INSERTED] if r.kind == INSERTED else STYLE[kind])
    if r.changes:
        t.append("  ")
        t.append(", ".join(c.text() for c in r.changes), style="bold " + STYLE[kind])
        if r.relocated:
            t.append(" (relocated, same target)", style=STYLE["relocated"])
    if r.problem:
        t.append("  ! control flow changed", style="bold red")
    return t


def _range(rng) -> str:
    return f"{rng[0]:#x}-{rng[1]:#x}" if rng else "-"


def unit_lines(u: UnitDiff, context: int | None, indent: str = "   ") -> list[Text]:
    """Lines for one changed function."""
    c = u.counts
    what = ", ".join(f"{c[k]} {k}" for k in (CHANGED, INSERTED, REMOVED) if c[k])
    if c["relocated"]:
        what += (", " if what else "") + f"{c['relocated']} relocated"
    head = Text(f"{indent}-- {u.kind} ", style="bold")
    head.append(u.name, style="bold magenta")
    head.append(f"  [{_range(u.old_range)} -> {_range(u.new_range)}]  {u.status}"
                + (f": {what}" if what else ""))
    out = [head]
    out += _changes("descriptor", u.descriptor, indent + "   ")
    out += _changes("metadata", u.metadata, indent + "   ")
    if not u.code_changed and context is not None:
        if u.instructions:
            out.append(Text(f"{indent}   code unchanged ({u.instructions} instructions)", style="dim"))
        return out
    shown = u.shown(context)
    rows = [r for r in shown if isinstance(r, Row)]
    width = min(MAX_COLUMN, max([len(i.text()) for r in rows for i in (r.old, r.new) if i is not None] or [8]))
    for r in shown:
        if isinstance(r, int):
            out.append(Text(f"{indent}     ... {r} identical instruction{'s' if r != 1 else ''} ...",
                            style="dim"))
        else:
            out.append(_row(r, width, indent + "   "))
    return out


def object_lines(d: ObjectDiff, context: int | None) -> list[Text]:
    """Lines for one pair of code objects."""
    head = Text("== ", style="bold")
    head.append(d.label, style="bold")
    out = [head]
    out.append(Text(f"   old: {d.old_uri}  ({d.old_target or '?'}, {d.old_size} bytes"
                    f"{', decoded as ' + d.old_decode if d.old_decode else ''})"))
    out.append(Text(f"   new: {d.new_uri}  ({d.new_target or '?'}, {d.new_size} bytes"
                    f"{', decoded as ' + d.new_decode if d.new_decode else ''})"))
    if d.error:
        out.append(Text(f"   error: {d.error}", style="red"))
        return out
    if d.identical:
        out.append(Text("   identical"))
        return out
    out += _changes("header", d.header, "   ")
    out += _changes("sections and segments", d.layout, "   ")
    out += _changes("notes", d.notes, "   ")
    out += _changes("symbols", d.symbols, "   ")
    out += _changes("metadata", d.metadata, "   ")
    if d.provenance:
        out.append(Text("   provenance:", style="bold"))
        out += [Text(f"     {k}: {v}") for k, v in flat_items(d.provenance)]
    out.append(Text("   relocation summary:", style="bold"))
    out.append(Text("     " + "; ".join(f"{k} {v}" for k, v in relocation_items(d))))
    if d.problems:
        out.append(Text(f"   control-flow problems ({len(d.problems)}):", style="bold red"))
        out += [Text(f"     ! {p}", style="red") for p in d.problems]
    elif d.old_decode and d.new_decode:
        out.append(Text("   control flow: every branch reaches the same instruction "
                        "(or the mitigation in front of it)", style="green"))
    same = []
    for u in d.units:
        if u.status == IDENTICAL:
            same.append(u.name)
        else:
            out += unit_lines(u, context)
    if same:
        out.append(Text(f"   unchanged functions ({len(same)}): {', '.join(same)}", style="dim"))
    return out


def render_text(rep: DiffReport, *, context: int | None = 3, show_identical: bool = False,
                unreadable: bool = True) -> list[Text]:
    """The whole report as lines: each pair that differs (and, with
    ``show_identical``, each identical pair), what could not be paired or
    read (``unreadable``: list the inputs that could not be read), and a
    summary line."""
    out = [Text(f"--- {rep.old_name}", style="red"), Text(f"+++ {rep.new_name}", style="green")]
    identical = 0
    for d in rep.objects:
        if d.identical and d.error is None and not show_identical:
            identical += 1
            continue
        out.append(Text(""))
        out += object_lines(d, context)
    if rep.only_old:
        out.append(Text(""))
        out.append(Text(f"only in {rep.old_name} ({len(rep.only_old)}):", style="bold"))
        out += [Text(f"   - {x}", style="red") for x in rep.only_old]
    if rep.only_new:
        out.append(Text(""))
        out.append(Text(f"only in {rep.new_name} ({len(rep.only_new)}):", style="bold"))
        out += [Text(f"   + {x}", style="green") for x in rep.only_new]
    if rep.problems and unreadable:
        out.append(Text(""))
        out += [Text(f"unreadable: {p}", style="red") for p in rep.problems]
    s = rep.summary
    out.append(Text(""))
    out.append(Text(
        f"summary: {s['pairs']} pair{'s' if s['pairs'] != 1 else ''} compared, {s['changed']} changed, "
        f"{s['identical']} identical{f' (not shown)' if identical else ''}, {s['errors']} unreadable; "
        f"{s['functions_changed']} function{'s' if s['functions_changed'] != 1 else ''} changed: "
        f"{s['changed_instructions']} instructions changed, {s['inserted']} inserted, {s['removed']} removed, "
        f"{s['branches_relocated']} branches relocated; "
        f"{s['control_flow_problems']} control-flow problem{'s' if s['control_flow_problems'] != 1 else ''}",
        style="bold"))
    return out


__all__ = ["render_text", "object_lines", "unit_lines", "MARK"]
