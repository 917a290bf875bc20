#!/usr/bin/env python3
"""Benchmark the gfx1010 analysis against decoding, fairly (not a test).

Over the gfx1030 code objects of the corpus (librocrand's, and librocsparse's
when fetched), --reps times, in the same run, each in its own fresh
process(es) (--jobs against --jobs, caches cold as in `kpatch scan`), each
twice per repetition in the order decode, analyse, analyse, decode
(bench_common.abba: the machine's speed drifts within minutes):
  * decode: decoding every kernel and function (exactly the instructions the
    analysis decodes: kpatch.analysis.engine.build_unit),
  * decode + analyse: kpatch.analysis.analyse(code object), which decodes
    them itself and then analyses,
and prints wall and CPU time of the processes, the CPU of the measured part
(code objects already read), the load average per repetition, and the goal:
the analysis adds at most half the decode time.
--split: then once more (A B B A), in processes that have analysed the
corpus once and emptied the decoder's caches: decode against analyse with
every encoding's facts already known, which splits what the analysis adds
into its work per instruction and function and its work per new encoding
(the facts; the rest of what the first measurement found).  A diagnostic,
not a goal: the decoder's other caches (its opcode tables, operand texts)
stay filled, so that decode is somewhat faster than a cold one.
Usage: python3 tools/bench_analysis.py [--limit N] [--reps 2] [--jobs 1] [--no-sparse] [--split]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import abba, corpus, describe_corpus, goal, line, loadavg, shards, worker_cmd  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=0, help="stop after N code objects")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=1, help="processes on each side")
    ap.add_argument("--no-sparse", action="store_true", help="librocrand's object only")
    ap.add_argument("--split", action="store_true",
                    help="also measure with every encoding's facts known (work per instruction vs per encoding)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as td:
        paths = corpus(td, args.limit, not args.no_sparse)
        parts = shards(paths, args.jobs)
        print(f"{describe_corpus(paths)}; compared: decode of every function (build_unit) against "
              f"analyse(), {len(parts)} fresh process(es) each, CPU = user+sys of the child processes and of "
              f"the measured part inside them")
        overheads = []
        for rep in range(args.reps):
            print(f"rep {rep + 1}: {loadavg()}")
            dec, ana = abba([worker_cmd("unit", s) for s in parts], [worker_cmd("analyse", s) for s in parts],
                            args.jobs)
            print(line("decode (build_unit), twice", dec))
            print(line("decode + analyse, twice", ana, dec))
            d, a = dec.inner(), ana.inner()
            over = (a - d) / d
            overheads.append(over)
            print(f"  measured part: decode {d:.2f} s CPU, decode + analyse {a:.2f} s CPU: analysis adds "
                  f"{a - d:.2f} s = {over:.3f} of decode (whole processes: {(ana.cpu - dec.cpu) / dec.cpu:.3f})")
            print(f"  {loadavg()} after rep {rep + 1}")
        print(goal("analysis added to decode (cpu)", max(overheads), 0.5)
              + f"  (reps: {', '.join(f'{x:.3f}' for x in overheads)}; worst shown)")
        if args.split:
            print(f"split: {loadavg()}; each process analyses the corpus once, empties the decoder's caches, "
                  f"then measures (facts of every encoding known)")
            dec, ana = abba([worker_cmd("unit-warm", s) for s in parts],
                            [worker_cmd("analyse-warm", s) for s in parts], args.jobs)
            d, a = dec.inner(), ana.inner()
            print(f"  measured part: decode {d:.2f} s CPU, decode + analyse {a:.2f} s CPU: with every "
                  f"encoding's facts known the analysis adds {a - d:.2f} s = {(a - d) / d:.3f} of decode "
                  f"(its work per instruction and function; the rest of the goal's figure is per new encoding)")


if __name__ == "__main__":
    main()
