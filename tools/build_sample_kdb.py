#!/usr/bin/env python3
"""Build kpatch/data/sample.kdb: a MIOpen-shaped system kernel DB.

Made from the gfx1030 fixtures in tests/fixtures/bin/ (kernels written for
this project, compiled by Debian's toolchain via tools/build_fixtures.sh),
stored under MIOpen-style keys: ``<source>.cl.o`` / ``.s.o`` / ``.cpp.o`` with
compile options ending `` -mcpu=gfx1030``.  One ``.cpp.o`` entry is a clang
offload bundle (host + gfx1030) made by Debian's clang-offload-bundler, as
HIP entries in shipped DBs can be.  Blobs are written by kpatch's kdb writer
(bz2 level 9, MD5 of the uncompressed blob, raw when bz2 does not shrink).

Usage: tools/build_sample_kdb.py [--out PATH]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "tests", "fixtures", "bin")
BUNDLER = "/usr/lib/llvm-15/bin/clang-offload-bundler"

# (kernel_name, kernel_args, fixture file, wrap in an offload bundle?)
ENTRIES = [
    ("miopen_like.cl.o", " -DMLO_FILTER_SIZE0=3 -DMLO_GRP_SZ0=64 -cl-fast-relaxed-math -mcpu=gfx1030",
     "miopen_like.cl.gfx1030.v4.hsaco", False),
    ("miopen_like.cl.o", " -DMLO_FILTER_SIZE0=3 -DMLO_GRP_SZ0=64 -mcode-object-version=5 -mcpu=gfx1030",
     "miopen_like.cl.gfx1030.v5.hsaco", False),
    ("asm_kernels.s.o", "-Wa,-defsym,ROCM_METADATA_VERSION=4 -mcumode -mwavefrontsize64 -mcpu=gfx1030",
     "asm_kernels.s.gfx1030.v4.hsaco", False),
    ("asm_kernels.s.o", "-Wa,-defsym,ROCM_METADATA_VERSION=5 -mcumode -mwavefrontsize64 -mcpu=gfx1030",
     "asm_kernels.s.gfx1030.v5.hsaco", False),
    ("vecops.cpp.o", " -std=c++17 -O3 -mcpu=gfx1030", "vecops.hip.gfx1030.v4.hsaco", True),
    ("mathops.cpp.o", " -std=c++17 -O3 -DUSE_DOT2=1 -mcpu=gfx1030", "mathops.hip.gfx1030.v5.hsaco", False),
]


def bundle_of(hsaco: str, tmp: str) -> bytes:
    out = os.path.join(tmp, os.path.basename(hsaco) + ".bundle")
    subprocess.run(
        [BUNDLER, "--type=o",
         "--targets=host-x86_64-unknown-linux,hipv4-amdgcn-amd-amdhsa--gfx1030",
         "--input=/dev/null", f"--input={hsaco}", f"--output={out}"],
        check=True,
    )
    with open(out, "rb") as f:
        return f.read()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "kpatch", "data", "sample.kdb"))
    a = ap.parse_args()
    sys.path.insert(0, ROOT)
    from kpatch.containers.kdb import write_kdb

    items = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, args, fixture, bundled in ENTRIES:
            path = os.path.join(BIN, fixture)
            if bundled:
                data = bundle_of(path, tmp)
            else:
                with open(path, "rb") as f:
                    data = f.read()
            items.append((name, args, data))
    if os.path.exists(a.out):
        os.unlink(a.out)
    write_kdb(a.out, items, user=False)
    print(f"wrote {a.out}: {len(items)} entries, {os.path.getsize(a.out):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
