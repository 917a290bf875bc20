"""What `kpatch scan` reports: one record per code object, as data and as a table.

Records are plain dicts (the ``--json`` document is exactly these), built
from :class:`kpatch.containers.discover.Found` items through the code-object
model.  The table is rendered with rich.
"""

from __future__ import annotations

from kpatch.codeobject import CodeObject
from kpatch.containers.discover import Found


def kernel_record(k) -> dict:
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
    return rec


def code_object_record(found: Found, co: CodeObject) -> dict:
    return {
        "uri": str(found.uri),
        "container": found.container,
        "target": co.target_id,
        "code_object_version": co.code_object_version,
        "legacy": co.is_legacy,
        "size": len(found.data),
        "e_flags": f"0x{co.e_flags:x}",
        **{k: v for k, v in found.origin.items()},
        "kernels": [kernel_record(k) for k in co.kernels],
    }


def render_table(console, records: list[dict], errors: list[dict]) -> None:
    from rich.table import Table

    table = Table(show_lines=False, header_style="bold")
    for col, kw in (
        ("container", {}),
        ("URI", {"overflow": "fold", "no_wrap": not console.is_terminal}),
        ("target", {}),
        ("v", {"justify": "right"}),
        ("kernels", {"justify": "right"}),
        ("size", {"justify": "right"}),
    ):
        table.add_column(col, **kw)
    for r in records:
        table.add_row(
            r["container"],
            r["uri"],
            r["target"] + (" (legacy)" if r["legacy"] else ""),
            str(r["code_object_version"]),
            str(len(r["kernels"])),
            f"{r['size']:,}",
        )
    if records:
        console.print(table)
    kernels = sum(len(r["kernels"]) for r in records)
    console.print(f"{len(records)} code objects, {kernels} kernels, {len(errors)} errors")
