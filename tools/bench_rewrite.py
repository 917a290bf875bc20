#!/usr/bin/env python3
"""Time kpatch's rewriter on real gfx1030 code objects (not a test).

    python tools/bench_rewrite.py [--every N] [--limit K] [--reps 2] PATH...

PATH: a code object (.hsaco), or a host library with a .hip_fatbin section
(every gfx1030 entry of every bundle is used), e.g. the corpus
kdb_cache/root/usr/lib/x86_64-linux-gnu/librocsparse.so.0.1.
Compared, in this one process, on the same objects: the rewriter with no
edits (the identity path), the scan of ``.text`` it starts from, and the
rewriter with an ``s_nop 0`` before every N-th instruction (moving almost
all code).  Per object and in total: wall and CPU (user+sys of this
process) of each, instructions, relocation counts and refusals; --reps
times, each repetition with the load average before and after (the
repetitions after the first find the decoder's caches filled).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bench_common import loadavg  # noqa: E402

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
    ap.add_argument("--reps", type=int, default=2, help="repetitions (each over every object)")
    args = ap.parse_args()
    nop = build.s_nop(0)
    print(f"compared: apply_edits with no edits (identity), scan_text, apply_edits with an s_nop before every "
          f"{args.every}th instruction; one process (repetitions after the first find the decoder's caches filled); "
          f"wall and CPU = user+sys of this process")
    for rep in range(args.reps):
        print(f"rep {rep + 1}: {loadavg()}")
        run(args, nop, quiet=rep > 0)
        print(f"  {loadavg()} after rep {rep + 1}")
    return 0


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def run(args, nop, quiet: bool) -> None:
    """One repetition over every object (per-object lines in the first only)."""
    totals = {"objects": 0, "insts": 0, "refused": 0, "whole_refused": 0}
    times = {"identity": [0.0, 0.0], "scan": [0.0, 0.0], "rewrite": [0.0, 0.0]}
    for path in args.paths:
        for name, data in objects(path):
            c0 = _clock()
            apply_edits(data, "gfx1030", [])
            c1 = _clock()
            scan = scan_text(CodeObject.from_bytes(data), "gfx1030")
            c2 = _clock()
            edits = [Edit(i.address, "insert_before", nop, "bench")
                     for k, i in enumerate(scan.insts) if k % args.every == 0]
            try:
                r = apply_edits(data, "gfx1030", edits)
                refused, rel = len(r.refused), r.relocations
            except Refusal as e:
                refused, rel = -1, {"error": e.reason}
                totals["whole_refused"] += 1
            c3 = _clock()
            part = {"identity": (c0, c1), "scan": (c1, c2), "rewrite": (c2, c3)}
            for k, (a, b) in part.items():
                times[k][0] += b[0] - a[0]
                times[k][1] += b[1] - a[1]
            totals["objects"] += 1
            totals["insts"] += len(scan.insts)
            totals["refused"] += max(refused, 0)
            if not quiet:
                print(f"  {name:40s} {len(data):>10,d} B {len(scan.insts):>8,d} insts  " + "  ".join(
                    f"{k} {b[0] - a[0]:6.3f}s wall {b[1] - a[1]:6.3f}s cpu" for k, (a, b) in part.items())
                    + f"  refused {refused}  branches {rel.get('branches_retargeted', '-')}  "
                    f"getpc {rel.get('getpc_literals_fixed', '-')}  kd {rel.get('descriptors_fixed', '-')}",
                    flush=True)
            if args.limit and totals["objects"] >= args.limit:
                break
    print("  total: " + "  ".join(f"{k} {w:.3f} s wall {c:.3f} s cpu" for k, (w, c) in times.items())
          + f"  (rewrite cpu / scan cpu {times['rewrite'][1] / max(times['scan'][1], 1e-9):.2f}); {totals}")


if __name__ == "__main__":
    sys.exit(main())
