#!/usr/bin/env python3
"""Build a MIOpen-shaped kernel DB from the real gfx1030 corpus (for tools/bench_apply.py).

    python tools/build_corpus_kdb.py [--out kdb_cache/corpus_gfx1030.kdb] [--limit N]

Takes every gfx1030 code object of Debian's librocrand.so.1.1 and
librocsparse.so.0.1 (fetched by `tools/fetch_corpus.sh --all` into kdb_cache/;
112 objects, built by a real ROCm compiler, not by us) and stores each under
a MIOpen-style key (`<lib>_<n>.cpp.o`, args ending ` -mcpu=gfx1030`) with
kpatch's writer (bz2 level 9, MD5, raw when bz2 does not shrink).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from kpatch.containers.bundle import open_bundle_bytes  # noqa: E402
from kpatch.containers.hostelf import find_fatbin_bundles  # noqa: E402
from kpatch.containers.kdb import write_kdb  # noqa: E402

LIBS = ["librocrand.so.1.1", "librocsparse.so.0.1"]
LIBDIR = os.path.join(ROOT, "kdb_cache", "root", "usr", "lib", "x86_64-linux-gnu")


def corpus_objects(limit: int = 0):
    """(key name, code object bytes) of every gfx1030 object in the corpus libraries."""
    n = 0
    for lib in LIBS:
        path = os.path.join(LIBDIR, lib)
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: run tools/fetch_corpus.sh --all")
        with open(path, "rb") as f:
            for i, b in enumerate(find_fatbin_bundles(path)):
                _, bundle, entries = open_bundle_bytes(os.pread(f.fileno(), b.size, b.offset))
                for e in entries:
                    if e.target_id == "gfx1030":
                        yield f"{lib.split('.')[0]}_{i}.cpp.o", bytes(e.data(bundle))
                        n += 1
                        if limit and n >= limit:
                            return


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "kdb_cache", "corpus_gfx1030.kdb"))
    ap.add_argument("--limit", type=int, default=0)
    a = ap.parse_args()
    t = time.perf_counter()
    items = [(name, " -O3 -mcpu=gfx1030", data) for name, data in corpus_objects(a.limit)]
    if os.path.exists(a.out):
        os.unlink(a.out)
    write_kdb(a.out, items, user=False)
    print(f"wrote {a.out}: {len(items)} entries, {sum(len(d) for _, _, d in items):,} bytes of code, "
          f"{os.path.getsize(a.out):,} bytes on disk, {time.perf_counter() - t:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
