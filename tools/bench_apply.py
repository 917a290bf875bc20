#!/usr/bin/env python3
"""Benchmark `kpatch apply` against its floor, the bz2 codec, fairly (not a test).

    python tools/bench_apply.py [--db kdb_cache/corpus_gfx1030.kdb] [--reps 2]

--reps times, in the same run, each in one process (1 against 1), each
twice per repetition in the order apply, floor, floor, apply
(bench_common.abba: the machine's speed drifts within minutes; the second
apply writes a user DB of its own):
1. kpatch: `apply_to_db` end to end (read, analyse, patch, verify, write the
   user DB) into a temporary directory, mode override, with no worker
   processes (jobs=1);
2. floor: bz2-decompress every blob of the DB and bz2-compress (level 9) the
   blobs apply changed (the patched bytes apply wrote, taken out of its user
   DB by a process of their own before the floor runs, not measured: the
   floor's process does no work but the floor's, Python's start-up and
   reading its inputs).
Prints wall and CPU time (user+sys of each process) with the load average
per repetition, and the goal: apply's CPU <= 1.5x the floor's.  Build the DB
with tools/build_corpus_kdb.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from bench_common import abba, goal, line, loadavg, worker_cmd  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default=os.path.join(ROOT, "kdb_cache", "corpus_gfx1030.kdb"))
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    if not os.path.exists(a.db):
        sys.exit(f"{a.db} is missing: run tools/build_corpus_kdb.py")
    print(f"db: {a.db} ({os.path.getsize(a.db) / 1e6:.1f} MB); compared: kpatch apply (mode override, one "
          f"process, jobs=1) against the bz2 floor (decompress every blob, compress the changed ones, whose "
          f"bytes an unmeasured process took out of apply's output beforehand; one process); CPU = user+sys "
          f"of each process")
    ratios = []
    for rep in range(a.reps):
        print(f"rep {rep + 1}: {loadavg()}")
        with tempfile.TemporaryDirectory(prefix="kpatch-bench-") as tmp:
            out, again = (os.path.join(tmp, d, "gfx1030_18.ukdb") for d in ("one", "two"))
            os.mkdir(os.path.dirname(out))
            os.mkdir(os.path.dirname(again))
            raw = os.path.join(tmp, "changed.raw")
            app, floor = abba([worker_cmd("apply", [a.db, out])], [worker_cmd("bz2", [a.db, raw])],
                              first_again=[worker_cmd("apply", [a.db, again])],
                              between=[worker_cmd("bz2-prep", [out, raw])])
        print(line("bz2 floor, twice", floor))
        print(line("kpatch apply --db (jobs=1), twice", app, floor))
        print(f"  measured parts: apply {app.inner():.2f} s CPU, floor {floor.inner():.2f} s CPU: ratio "
              f"{app.inner() / floor.inner():.3f} (Python start-up and imports left out on both sides)")
        own = app.cpu - floor.cpu
        print(f"  kpatch's own work (apply's CPU beyond the floor's): {own:.2f} s = {own / floor.cpu:.3f} of the "
              f"floor's CPU; the goal leaves it {0.5 * floor.cpu:.2f} s (0.5 of the floor's)")
        ratios.append(app.cpu / floor.cpu)
        print(f"  {loadavg()} after rep {rep + 1}")
    print(goal("apply cpu vs bz2 floor", max(ratios), 1.5)
          + f"  (reps: {', '.join(f'{x:.3f}' for x in ratios)}; worst shown)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
