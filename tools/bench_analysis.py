#!/usr/bin/env python3
"""Benchmark the gfx1010 analysis against decoding (not a test).

For each gfx1030 code object of the corpus (librocrand's by default; with
--all also librocsparse's 111, needs tools/fetch_corpus.sh --all) it times
  * decode: decoding every kernel and function (exactly the instructions the
    analysis decodes),
  * decode + analyse: kpatch.analysis.analyse(code object), which decodes
    them itself and then analyses,
each the best of --reps runs with warm caches, and prints both totals and
the analysis overhead as a fraction of decode time (the goal is <= 0.5).
Usage: python3 tools/bench_analysis.py [--all] [--limit N] [--reps 2]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from isa_corpus import gfx1030_objects  # noqa: E402

from kpatch.analysis import analyse  # noqa: E402
from kpatch.analysis.engine import build_unit, function_ranges  # noqa: E402
from kpatch.codeobject import CodeObject  # noqa: E402


def best_of(reps: int, fn) -> float:
    best = float("inf")
    for _ in range(reps):
        gc.collect()
        was = gc.isenabled()
        gc.disable()  # the decoder and the analysis both run with the collector paused
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
        if was:
            gc.enable()
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="also librocsparse (111 code objects)")
    ap.add_argument("--limit", type=int, default=0, help="stop after N code objects")
    ap.add_argument("--reps", type=int, default=2, help="runs per measurement (best is kept)")
    args = ap.parse_args()
    libs = ("librocrand.so.1.1", "librocsparse.so.0.1") if args.all else ("librocrand.so.1.1",)
    t_dec = t_all = 0.0
    n_obj = n_inst = n_find = 0
    for name, blob in gfx1030_objects(libs):
        if args.limit and n_obj >= args.limit:
            break
        co = CodeObject.from_bytes(blob, name=name)
        ranges = [r for r in function_ranges(co) if r[3] >= 0]
        insts, _ = build_unit(co, "gfx1030", ranges)  # warm the decoder's caches
        rep = analyse(co)
        d = best_of(args.reps, lambda: build_unit(co, "gfx1030", ranges))
        a = best_of(args.reps, lambda: analyse(co))
        t_dec += d
        t_all += a
        n_obj += 1
        n_inst += len(insts)
        n_find += len(rep.findings())
        print(f"{name:32s} {len(insts):8d} instructions  decode {d * 1e3:8.1f} ms  decode+analyse "
              f"{a * 1e3:8.1f} ms  overhead {(a - d) / d if d else 0:5.2f}", flush=True)
    if not n_obj:
        sys.exit("no code objects (run tools/fetch_corpus.sh)")
    print(f"\n{n_obj} code objects, {n_inst} instructions, {n_find} findings")
    print(f"decode          : {t_dec:8.2f} s")
    print(f"decode + analyse: {t_all:8.2f} s")
    print(f"analysis adds   : {t_all - t_dec:8.2f} s = {(t_all - t_dec) / t_dec:.2f} of decode time (goal <= 0.5)")


if __name__ == "__main__":
    main()
