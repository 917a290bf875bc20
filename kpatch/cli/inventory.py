"""What `kpatch scan` reports: one record per code object, as data and as a table.

Records are plain dicts (the ``--json`` document is exactly these), built
from :class:`kpatch.containers.discover.Found` items through the code-object
model, and (``scan --target``) the analysis report of each code object.
The table is rendered with rich.
"""

from __future__ import annotations

from kpatch.codeobject import CodeObject
from kpatch.containers.discover import Found


def kernel_record(k, analysis=None) -> dict:
    """One kernel; with ``analysis`` (its FunctionReport) also its verdict and findings."""
    d = k.descriptor
    rec = {
        "name": k.name,
        "symbol": k.symbol,
        "entry": k.entry,
        "code_size": k.code_size,
        "group_segment_fixed_size": d.group_segment_fixed_size,
        "private_segment_fixed_size": d.private_segment_fixed_size,
        "kernarg_size": d.kernarg_size,
        "wavefront_size": d.wavefront_size,
    }
    if "WGP_MODE" in d.bit_fields:  # GFX10+ layouts only
        rec["wgp_mode"] = bool(d.wgp_mode)
    md = k.metadata or {}
    for key in (".sgpr_count", ".vgpr_count", ".max_flat_workgroup_size"):
        if key in md:
            rec[key[1:]] = md[key]
    if analysis is not None:
        rec.update(analysis.to_dict())
    return rec


def code_object_record(found: Found, co: CodeObject, report=None) -> dict:
    """One code object; with ``report`` (kpatch.analysis.Report) also the analysis."""
    by_name = {k.name: k for k in report.kernels} if report is not None else {}
    rec = {
        "uri": str(found.uri),
        "container": found.container,
        "target": co.target_id,
        "code_object_version": co.code_object_version,
        "legacy": co.is_legacy,
        "size": len(found.data),
        "e_flags": f"0x{co.e_flags:x}",
        **{k: v for k, v in found.origin.items()},
        "kernels": [kernel_record(k, by_name.get(k.name)) for k in co.kernels],
    }
    if report is not None:
        rec["analysis"] = report.summary()
    return rec


def analysis_summary(records: list[dict], target: str) -> dict:
    """Verdicts (of kernels and of code objects) and findings per class over
    every analysed code object."""
    kernels = {"ok": 0, "patchable": 0, "unpatchable": 0}
    objects = {"ok": 0, "patchable": 0, "unpatchable": 0}
    findings: dict[str, int] = {}
    for r in records:
        a = r.get("analysis")
        if a is None:
            continue
        objects[a["verdict"]] += 1
        for k, v in a["verdicts"].items():
            kernels[k] += v
        for k, v in a["findings"].items():
            findings[k] = findings.get(k, 0) + v
    status = ("unpatchable" if objects["unpatchable"] else "patchable" if objects["patchable"] else "ok")
    return {"target": target, "verdict": status, "code_objects": objects, "kernels": kernels,
            "findings": dict(sorted(findings.items()))}


def render_table(console, records: list[dict], errors: list[dict], target: str | None = None) -> None:
    from rich.table import Table

    table = Table(show_lines=False, header_style="bold")
    cols = [
        ("container", {}),
        ("URI", {"overflow": "fold", "no_wrap": not console.is_terminal}),
        ("target", {}),
        ("v", {"justify": "right"}),
        ("kernels", {"justify": "right"}),
        ("size", {"justify": "right"}),
    ]
    if target:
        cols += [("ok", {"justify": "right"}), ("patchable", {"justify": "right"}),
                 ("unpatchable", {"justify": "right"}), ("findings", {"justify": "right"})]
    for col, kw in cols:
        table.add_column(col, **kw)
    for r in records:
        row = [
            r["container"],
            r["uri"],
            r["target"] + (" (legacy)" if r["legacy"] else ""),
            str(r["code_object_version"]),
            str(len(r["kernels"])),
            f"{r['size']:,}",
        ]
        if target:
            a = r.get("analysis") or {"verdicts": {}, "findings": {}}
            row += [str(a["verdicts"].get(s, 0)) for s in ("ok", "patchable", "unpatchable")]
            row.append(str(sum(a["findings"].values())))
        table.add_row(*row)
    if records:
        console.print(table)
    kernels = sum(len(r["kernels"]) for r in records)
    console.print(f"{len(records)} code objects, {kernels} kernels, {len(errors)} errors")
    if target:
        _render_analysis(console, analysis_summary(records, target))


def _render_analysis(console, summary: dict) -> None:
    """Counts per finding class and per verdict (scan --target)."""
    from rich.table import Table

    from kpatch.analysis.findings import CLASSES

    if summary["findings"]:
        t = Table(header_style="bold", title=f"findings for {summary['target']}")
        t.add_column("code")
        t.add_column("class")
        t.add_column("count", justify="right")
        t.add_column("fixed by")
        for c in CLASSES:
            n = summary["findings"].get(c.name)
            if n:
                t.add_row(c.code, c.name, f"{n:,}", c.fixed_by)
        console.print(t)
    k = summary["kernels"]
    o = summary["code_objects"]
    console.print(f"{summary['target']}: kernels {k['ok']} ok, {k['patchable']} patchable, "
                  f"{k['unpatchable']} unpatchable; code objects {o['ok']} ok, {o['patchable']} patchable, "
                  f"{o['unpatchable']} unpatchable (`kpatch explain CLASS` says what a class means)")
