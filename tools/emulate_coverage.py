#!/usr/bin/env python3
"""Which instructions of a corpus kpatch's emulator models.

Usage: tools/emulate_coverage.py [--mcpu gfx1030] [--json] [--missing N] PATH...

PATH is anything `kpatch scan` reads (code objects, bundles, host
libraries, kernel DBs, @sample).  Every kernel of every code object for the
processor is decoded; each distinct encoding is handed to the emulator's
compiler (kpatch.emulate.program.compile_instruction), which either builds
its semantics or says "cannot emulate MNEMONIC" (with the reason).  No
instruction is run.  Printed: distinct mnemonics modelled (fully: every
encoding seen; partly: some encodings refused, e.g. a modifier not
modelled), the share of instruction occurrences modelled, and the
mnemonics not modelled by occurrences.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kpatch.codeobject import CodeObject  # noqa: E402
from kpatch.containers.discover import Found, discover  # noqa: E402
from kpatch.emulate.errors import CannotEmulate  # noqa: E402
from kpatch.emulate.program import Ctx, compile_instruction  # noqa: E402
from kpatch.errors import KpatchError  # noqa: E402
from kpatch.isa import decode  # noqa: E402


def coverage(paths: list[str], mcpu: str) -> dict:
    occ = collections.Counter()  # mnemonic -> occurrences
    ok_occ = collections.Counter()  # mnemonic -> occurrences modelled
    reasons: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    seen: dict[tuple, bool] = {}
    objects = kernels = 0
    for item in discover(paths):
        if not isinstance(item, Found):
            continue
        try:
            co = CodeObject.from_bytes(item.data)
            if co.target is None or co.target_id.split(":")[0] != mcpu:
                continue
            ks = co.kernels
        except KpatchError:
            continue
        objects += 1
        for k in ks:
            if k.code_offset is None or not k.code_size:
                continue
            kernels += 1
            lanes = k.descriptor.wavefront_size
            ctx = Ctx(lanes)
            for inst in decode(co.data[k.code_offset:k.code_offset + k.code_size], mcpu, base_address=k.entry):
                m = inst.mnemonic
                key = (inst.raw, lanes)
                good = seen.get(key)
                if good is None:
                    try:
                        compile_instruction(inst, ctx)
                        good = True
                    except CannotEmulate as e:
                        good = False
                        why = e.reason.split(" (", 1)[1][:-1] if " (" in e.reason else "not modelled"
                        reasons[m][why] += 1
                    except Exception as e:  # a bug: count it as not modelled, say so
                        good = False
                        reasons[m][f"internal error: {type(e).__name__}: {e}"] += 1
                    seen[key] = good
                occ[m] += 1
                if good:
                    ok_occ[m] += 1
    full = sorted(m for m in occ if ok_occ[m] == occ[m])
    partly = sorted(m for m in occ if 0 < ok_occ[m] < occ[m])
    none = sorted(m for m in occ if ok_occ[m] == 0)
    total, modelled = sum(occ.values()), sum(ok_occ.values())
    return {
        "mcpu": mcpu, "code_objects": objects, "kernels": kernels,
        "mnemonics": len(occ), "fully_modelled": len(full), "partly_modelled": len(partly),
        "not_modelled": len(none), "instructions": total, "instructions_modelled": modelled,
        "missing": sorted(((m, occ[m] - ok_occ[m], dict(reasons[m])) for m in partly + none),
                          key=lambda x: -x[1]),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--mcpu", default="gfx1030", choices=("gfx1010", "gfx1030"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--missing", type=int, default=25, help="how many unmodelled mnemonics to list")
    a = ap.parse_args()
    r = coverage(a.paths, a.mcpu)
    if a.json:
        json.dump(r, sys.stdout, indent=1)
        print()
        return 0
    pct = lambda x, y: 100.0 * x / y if y else 0.0  # noqa: E731
    print(f"{r['code_objects']} {a.mcpu} code objects, {r['kernels']} kernels, {r['instructions']:,} instructions")
    print(f"mnemonics: {r['mnemonics']}; fully modelled {r['fully_modelled']} "
          f"({pct(r['fully_modelled'], r['mnemonics']):.1f}%), partly {r['partly_modelled']}, "
          f"not {r['not_modelled']}")
    print(f"instruction occurrences modelled: {r['instructions_modelled']:,} / {r['instructions']:,} "
          f"({pct(r['instructions_modelled'], r['instructions']):.2f}%)")
    for m, n, why in r["missing"][:a.missing]:
        print(f"  {n:>8,}  {m:<28} {'; '.join(f'{k} x{v}' for k, v in why.items())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
