#!/usr/bin/env python3
"""Benchmark kpatch's disassembler against llvm-objdump-16 (not a test).

Extracts the gfx1030 code objects of librocsparse and librocrand (needs
tools/fetch_corpus.sh --all), then in the same run times
  * llvm-objdump-16 -d --mcpu=gfx1030 on every object (output discarded),
  * kpatch decode + text (the --format lines output) on every object,
  * kpatch decode without text,
with kpatch using both cores (one process per object, 2 workers), and
prints wall times, ratios and kpatch's peak memory.
Usage: python3 tools/bench_disasm.py [--limit N] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from isa_corpus import gfx1030_objects, text_of  # noqa: E402


def kpatch_lines(path: str) -> int:
    from kpatch.isa.lines import disassemble, format_lines
    data, addr, syms = text_of(path)
    insts = disassemble(data, "gfx1030", addr, syms)
    out = "\n".join(format_lines(insts))
    with open(os.devnull, "w") as fh:
        fh.write(out)
    return len(insts), _peak()


def kpatch_decode(path: str) -> int:
    from kpatch.isa.lines import disassemble
    data, addr, syms = text_of(path)
    return len(disassemble(data, "gfx1030", addr, syms, text=False)), _peak()


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def timed_pool(fn, paths, jobs):
    t = time.perf_counter()
    n = peak = 0
    with ProcessPoolExecutor(max_workers=jobs) as ex:
        for k, p in ex.map(fn, paths, chunksize=1):
            n += k
            peak = max(peak, p)
    return time.perf_counter() - t, n, peak


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as td:
        paths = []
        for k, (name, blob) in enumerate(gfx1030_objects()):
            if args.limit and k >= args.limit:
                break
            p = os.path.join(td, f"{k:03d}.co")
            with open(p, "wb") as fh:
                fh.write(blob)
            paths.append(p)
        # largest first so the two workers stay busy
        paths.sort(key=os.path.getsize, reverse=True)
        print(f"{len(paths)} gfx1030 code objects, {sum(map(os.path.getsize, paths)) / 1e6:.1f} MB")

        t = time.perf_counter()
        for p in paths:
            subprocess.run(["llvm-objdump-16", "-d", "--mcpu=gfx1030", p],
                           stdout=subprocess.DEVNULL, check=True)
        t_obj = time.perf_counter() - t
        print(f"llvm-objdump-16 -d           : {t_obj:8.2f} s")

        t_lines, n, p1 = timed_pool(kpatch_lines, paths, args.jobs)
        print(f"kpatch decode + text         : {t_lines:8.2f} s  ratio {t_lines / t_obj:.3f}  ({n} instructions)")
        t_dec, n2, p2 = timed_pool(kpatch_decode, paths, args.jobs)
        print(f"kpatch decode without text   : {t_dec:8.2f} s  ratio {t_dec / t_obj:.3f}")
        print(f"kpatch peak memory per worker: {max(p1, p2) / 1024:.0f} MiB "
              f"(x{args.jobs} workers)")


if __name__ == "__main__":
    main()
