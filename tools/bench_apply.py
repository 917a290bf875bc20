#!/usr/bin/env python3
"""Benchmark `kpatch apply` against its floor, the bz2 codec, in the same run.

    python tools/bench_apply.py [--db kdb_cache/corpus_gfx1030.kdb] [--mode override]

1. floor: bz2-decompress every blob of the DB and bz2-compress (level 9) the
   blobs apply changes (measured on the patched bytes apply produced);
2. kpatch: `apply_to_db` end to end (read, analyse, patch, verify, write the
   user DB) into a temporary directory, with --jobs worker processes
   (default: apply's own choice, one per CPU).
Prints both wall times and their ratio (goal: apply <= 2x the floor),
patched/refused counts, and the CPU split of apply: the calling process
(reading and writing the rows) and the workers (bz2-decompressing,
analysing, patching, verifying, bz2-compressing the changed rows).  Build
the DB with tools/build_corpus_kdb.py.
"""

from __future__ import annotations

import argparse
import bz2
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from kpatch.containers.kdb import KernelDB  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default=os.path.join(ROOT, "kdb_cache", "corpus_gfx1030.kdb"))
    ap.add_argument("--mode", default="override", choices=["override", "native"])
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (1: none)")
    a = ap.parse_args()
    if not os.path.exists(a.db):
        sys.exit(f"{a.db} is missing: run tools/build_corpus_kdb.py")
    from kpatch.apply.db import apply_to_db, jobs_for
    from kpatch.apply.modes import default_patch_fn, default_provenance_fn

    with tempfile.TemporaryDirectory(prefix="kpatch-bench-") as tmp:
        out = os.path.join(tmp, "gfx1030_18.ukdb")
        c0 = os.times()
        t0 = time.perf_counter()
        res = apply_to_db([a.db], out, mode=a.mode, rule_sets=[], patch_fn=default_patch_fn(a.mode),
                          is_patched=default_provenance_fn(), dry_run=False, jobs=a.jobs)
        t_apply = time.perf_counter() - t0
        c1 = os.times()
        with KernelDB.open(out) as db:
            changed = [e.code() for e in db.entries()]
    t0 = time.perf_counter()
    with KernelDB.open(a.db) as db:
        for e in db.entries():
            if e.uncompressed_size:
                bz2.decompress(e.kernel_blob)
    t_dec = time.perf_counter() - t0
    t0 = time.perf_counter()
    for code in changed:
        bz2.compress(code, 9)
    t_comp = time.perf_counter() - t0
    floor = t_dec + t_comp
    print(f"db: {a.db}")
    print(f"apply result: {res.counts() if hasattr(res, 'counts') else res}")
    print(f"floor (bz2 decompress all + compress {len(changed)} changed): {floor:.2f} s "
          f"({t_dec:.2f} + {t_comp:.2f})")
    print(f"kpatch apply: {t_apply:.2f} s (jobs {a.jobs or jobs_for(default_patch_fn(a.mode), default_provenance_fn())})")
    parent = (c1.user - c0.user) + (c1.system - c0.system)
    workers = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    print(f"  CPU: calling process {parent:.2f} s (read, write), workers {workers:.2f} s "
          f"(decompress, analyse, patch, verify, compress)")
    print(f"ratio apply / floor: {t_apply / floor:.2f} (goal <= 2.0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
