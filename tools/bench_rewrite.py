#!/usr/bin/env python3
"""Time kpatch's rewriter on real gfx1030 code objects.

    python tools/bench_rewrite.py [--every N] [--limit K] PATH...

PATH: a code object (.hsaco), or a host library with a .hip_fatbin section
(every gfx1030 entry of every bundle is used), e.g. the corpus
kdb_cache/root/usr/lib/x86_64-linux-gnu/librocsparse.so.0.1.
For each object: apply no edits (the identity path), then an ``s_nop 0``
before every N-th instruction (moving almost all code); prints per-object
and total times, instructions, relocation counts and refusals.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kpatch.codeobject import CodeObject  # noqa: E402
from kpatch.containers.bundle import open_bundle_bytes  # noqa: E402
from kpatch.containers.hostelf import find_fatbin_bundles, has_fatbin  # noqa: E402
from kpatch.isa import build  # noqa: E402
from kpatch.analysis.codescan import scan_text  # noqa: E402
from kpatch.rewrite.edits import Edit, Refusal  # noqa: E402
from kpatch.rewrite.relocate import apply_edits  # noqa: E402


def objects(path: str):
    """(name, bytes) of every gfx1030 code object in ``path``."""
    if not has_fatbin(path):
        with open(path, "rb") as f:
            yield os.path.basename(path), f.read()
        return
    with open(path, "rb") as f:
        for n, b in enumerate(find_fatbin_bundles(path)):
            f.seek(b.offset)
            _, bundle, entries = open_bundle_bytes(f.read(b.size))
            for e in entries:
                if e.target_id == "gfx1030":
                    yield f"{os.path.basename(path)}#{n}", bytes(e.data(bundle))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--every", type=int, default=20, help="insert before every N-th instruction")
    ap.add_argument("--limit", type=int, default=0, help="stop after K objects")
    args = ap.parse_args()
    nop = build.s_nop(0)
    totals = {"objects": 0, "insts": 0, "identity_s": 0.0, "scan_s": 0.0, "rewrite_s": 0.0,
              "refused": 0, "whole_refused": 0}
    for path in args.paths:
        for name, data in objects(path):
            t0 = time.perf_counter()
            apply_edits(data, "gfx1030", [])
            t1 = time.perf_counter()
            scan = scan_text(CodeObject.from_bytes(data), "gfx1030")
            t2 = time.perf_counter()
            edits = [Edit(i.address, "insert_before", nop, "bench")
                     for k, i in enumerate(scan.insts) if k % args.every == 0]
            try:
                r = apply_edits(data, "gfx1030", edits)
                refused, rel = len(r.refused), r.relocations
            except Refusal as e:
                refused, rel = -1, {"error": e.reason}
                totals["whole_refused"] += 1
            t3 = time.perf_counter()
            totals["objects"] += 1
            totals["insts"] += len(scan.insts)
            totals["identity_s"] += t1 - t0
            totals["scan_s"] += t2 - t1
            totals["rewrite_s"] += t3 - t2
            totals["refused"] += max(refused, 0)
            print(f"{name:40s} {len(data):>10,d} B {len(scan.insts):>8,d} insts  identity "
                  f"{t1 - t0:6.3f}s  scan {t2 - t1:6.3f}s  rewrite {t3 - t2:6.3f}s  "
                  f"refused {refused}  branches {rel.get('branches_retargeted', '-')}  "
                  f"getpc {rel.get('getpc_literals_fixed', '-')}  kd {rel.get('descriptors_fixed', '-')}",
                  flush=True)
            if args.limit and totals["objects"] >= args.limit:
                break
    print("total:", {k: round(v, 3) if isinstance(v, float) else v for k, v in totals.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
