#!/usr/bin/env python3
"""Benchmark kpatch's disassembler against llvm-objdump-16, fairly (not a test).

Extracts the gfx1030 code objects of librocrand (and librocsparse, when
tools/fetch_corpus.sh --all fetched it), then, --reps times, in the same run:
  * reference: llvm-objdump-16 -d --mcpu=gfx1030, one process per object,
    --jobs at a time (output discarded),
  * `kpatch disasm --format lines`, `kpatch disasm` (text, the default) and
    decode alone (no text), each as --jobs processes over equal shares of
    the objects (output discarded),
and prints wall and CPU time (user+sys of the child processes, Python
start-up included), the ratios to llvm-objdump-16's, the load average of
each repetition and the goals of issue 14.  kpatch runs with compiled
bytecode, as installed (:func:`bench_common.installed_env`).  --tensile adds
rocBLAS's gfx1030 Tensile objects (tools/fetch_sid.sh): code with many
more distinct encodings per instruction than the libraries'.
Usage: python3 tools/bench_disasm.py [--limit N] [--jobs 1] [--reps 2] [--no-sparse] [--tensile]
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import (KPATCH, TENSILE, describe_corpus, corpus, goal, installed_env, line,  # noqa: E402
                          loadavg, run_procs, shards, worker_cmd)

GOALS = {"disasm-lines": 0.3, "decode": 0.1, "disasm-text": 0.4}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="processes on each side (N against N)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--no-sparse", action="store_true", help="librocrand's object only")
    ap.add_argument("--tensile", action="store_true", help="add rocBLAS's gfx1030 Tensile objects (fetch_sid.sh)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as td:
        paths = corpus(td, args.limit, not args.no_sparse)
        if args.tensile:
            for k, src in enumerate(sorted(glob.glob(os.path.join(TENSILE, "*gfx1030*.hsaco")))):
                dst = os.path.join(td, f"tensile{k:03d}.co")
                shutil.copyfile(src, dst)
                paths.append(dst)
        parts = shards(paths, args.jobs)
        env = installed_env(os.path.join(td, "pyc"))
        for cmd in ([KPATCH, "disasm", "--format", "lines", paths[0]], worker_cmd("decode", paths[:1])):
            run_procs([cmd], stdout_devnull=True, env=env)  # fills the bytecode cache (untimed)
        print(f"{describe_corpus(paths)}; compared: llvm-objdump-16 -d (one process per object, {args.jobs} at "
              f"a time) against kpatch ({len(parts)} process(es) over equal shares, compiled bytecode), "
              f"CPU = user+sys of the child processes, output discarded")
        ratios: dict[str, list[float]] = {k: [] for k in GOALS}
        for rep in range(args.reps):
            print(f"rep {rep + 1}: {loadavg()}")
            ref = run_procs([["llvm-objdump-16", "-d", "--mcpu=gfx1030", p] for p in paths], args.jobs,
                            stdout_devnull=True)
            print(line("llvm-objdump-16 -d", ref))
            runs = {
                "disasm-lines": run_procs([[KPATCH, "disasm", "--format", "lines", *s] for s in parts], args.jobs,
                                          stdout_devnull=True, env=env),
                "disasm-text": run_procs([[KPATCH, "disasm", *s] for s in parts], args.jobs, stdout_devnull=True,
                                         env=env),
                "decode": run_procs([worker_cmd("decode", s) for s in parts], args.jobs, env=env),
            }
            labels = {"disasm-lines": "kpatch disasm --format lines", "disasm-text": "kpatch disasm (text)",
                      "decode": "kpatch decode only (no text)"}
            for k, r in runs.items():
                print(line(labels[k], r, ref))
                ratios[k].append(r.cpu / ref.cpu)
            print(f"  (decode only, measured part inside the worker: {runs['decode'].inner():.2f} s CPU = "
                  f"{runs['decode'].inner() / ref.cpu:.3f} of objdump's)")
            print(f"  {loadavg()} after rep {rep + 1}")
        for k, lim in GOALS.items():
            print(goal(f"{k} cpu vs llvm-objdump-16", max(ratios[k]), lim)
                  + f"  (reps: {', '.join(f'{x:.3f}' for x in ratios[k])}; worst shown)")


if __name__ == "__main__":
    main()
