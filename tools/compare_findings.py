#!/usr/bin/env python3
"""Record the gfx1010 analysis' findings over the corpus, or compare them
with a record (not a test): the check every analysis speed change must pass
(issue 14: findings identical before and after).

    python tools/compare_findings.py record FILE [--limit N]   # before the change
    python tools/compare_findings.py check FILE [--limit N]    # after it: exit 1 on any difference

The corpus: librocrand's (and librocsparse's, when fetched) gfx1030 code
objects (tools/bench_common.corpus)
and the sample kernel DB.  Per kernel and device function: verdict, rules,
reasons, unseen, and every finding (class, address, detail, addresses, fix,
blocker), one JSON line per code object.
"""

from __future__ import annotations

import argparse
import json
import re
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def findings_of(co) -> dict:
    from kpatch.analysis import analyse
    rep = analyse(co, "gfx1010")
    out = {}
    for fr in (*rep.kernels, *rep.functions):
        out[f"{fr.kind} {fr.name}"] = {
            "verdict": fr.verdict.status, "rules": list(fr.verdict.rules), "reasons": list(fr.verdict.reasons),
            "unseen": list(fr.unseen),
            "findings": [[f.cls, f.address, f.detail, list(f.addresses), f.fix, f.blocker] for f in fr.findings]}
    return out


def objects(limit: int):
    """(name, CodeObject) of the corpus."""
    from bench_common import corpus
    from kpatch.codeobject import CodeObject
    from kpatch.containers.discover import Found, discover
    from kpatch.data import expand
    with tempfile.TemporaryDirectory() as td:
        for p in corpus(td, limit, True):
            with open(p, "rb") as f:
                yield os.path.basename(p), CodeObject.from_bytes(f.read())
    for item in discover([expand("@sample")]):
        if isinstance(item, Found):
            yield portable(str(item.uri)), CodeObject.from_bytes(item.data)


def portable(name: str) -> str:
    """``name`` without the checkout's path: the sample DB's URIs hold its
    absolute path, so a record made in one worktree would name its objects
    differently from a check in another."""
    return re.sub(r"^([a-z]+://)[^?]*/kpatch/data/sample\.kdb", r"\1@sample", name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("record", "check"))
    ap.add_argument("file")
    ap.add_argument("--limit", type=int, default=0, help="stop after N corpus objects")
    args = ap.parse_args()
    got = {name: findings_of(co) for name, co in objects(args.limit)}
    if args.mode == "record":
        with open(args.file, "w") as f:
            for name, v in got.items():
                f.write(json.dumps({"object": name, "functions": v}) + "\n")
        print(f"recorded {len(got)} code objects, "
              f"{sum(len(fr['findings']) for v in got.values() for fr in v.values())} findings")
        return
    with open(args.file) as f:
        want = {portable(d["object"]): d["functions"] for d in map(json.loads, f)}
    bad = 0
    for name in sorted(set(want) | set(got)):
        a, b = want.get(name), got.get(name)
        if a == b:
            continue
        bad += 1
        if a is None or b is None:
            print(f"{name}: only {'now' if a is None else 'in the record'}")
            continue
        for fn in sorted(set(a) | set(b)):
            if a.get(fn) != b.get(fn):
                print(f"{name}: {fn}: differs")
    print(f"{len(got)} code objects compared, {bad} differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
