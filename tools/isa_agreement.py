#!/usr/bin/env python3
"""Compare kpatch's disassembly with llvm-objdump-16 on every gfx1030 code
object of librocrand and librocsparse (~6.8 million instructions; needs
tools/fetch_corpus.sh --all).  Not part of CI: takes a few minutes on 2 cores.

Prints, per library and in total, the share of instructions whose
boundaries, mnemonics and full text agree, and the most frequent
differences.  Usage: python3 tools/isa_agreement.py [--limit N] [--lib NAME]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from isa_corpus import LIBS, gfx1030_objects, text_of  # noqa: E402
from isa_probe import objdump_file  # noqa: E402
from kpatch.isa.lines import disassemble  # noqa: E402


def compare_one(args):
    name, blob = args
    with tempfile.NamedTemporaryFile(suffix=".co") as tf:
        tf.write(blob)
        tf.flush()
        ref = objdump_file(tf.name, "gfx1030")
        data, addr, syms = text_of(tf.name)
    mine = {i.address: i for i in disassemble(data, "gfx1030", addr, syms)}
    n = len(ref)
    bounds = mn = txt = 0
    diffs = collections.Counter()
    examples = {}
    for a, text, size in ref:
        i = mine.get(a)
        if i is None or i.size != size:
            key = ("boundary", text.split(" ", 1)[0])
        else:
            bounds += 1
            if i.mnemonic != text.split(" ", 1)[0]:
                key = ("mnemonic", text.split(" ", 1)[0])
            else:
                mn += 1
                if i.text() == text:
                    txt += 1
                    continue
                key = ("text", text.split(" ", 1)[0])
        diffs[key] += 1
        examples.setdefault(key, (hex(a), text, i.text() if i else None))
    extra = len(mine) - n
    return name, n, bounds, mn, txt, extra, diffs, examples


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=0, help="only the first N code objects")
    ap.add_argument("--lib", action="append", help="library file name(s)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    libs = tuple(args.lib) if args.lib else LIBS

    def items():
        for k, it in enumerate(gfx1030_objects(libs)):
            if args.limit and k >= args.limit:
                return
            yield it

    per_lib = collections.defaultdict(lambda: [0, 0, 0, 0, 0, 0])
    diffs = collections.Counter()
    examples = {}
    with ProcessPoolExecutor(max_workers=args.jobs) as ex:
        for name, n, b, m, t, extra, d, e in ex.map(compare_one, items()):
            lib = name.split("#")[0]
            acc = per_lib[lib]
            for k, v in enumerate((1, n, b, m, t, extra)):
                acc[k] += v
            diffs.update(d)
            for k, v in e.items():
                examples.setdefault(k, (name,) + v)
    tot = [0] * 6
    for lib, acc in per_lib.items():
        tot = [x + y for x, y in zip(tot, acc)]
        _report(lib, acc)
    _report("total", tot)
    for k, c in diffs.most_common(30):
        print(f"{c:8d}  {k[0]:9s} {k[1]:28s} e.g. {examples[k]}")


def _report(label, acc):
    objs, n, b, m, t, extra = acc
    n = max(n, 1)
    print(f"{label}: {objs} code objects, {acc[1]} instructions: boundaries {100 * b / n:.4f}%, "
          f"mnemonics {100 * m / n:.4f}%, text {100 * t / n:.4f}%"
          + (f", {extra} extra kpatch instructions" if extra else ""))


if __name__ == "__main__":
    main()
