"""rocBLAS 4.4.1 (Debian unstable's librocblas4): the code behind every
``nn.Linear`` and MIOpen's GEMM convolutions, read and patched.

tools/fetch_sid.sh (run by tools/test.sh) unpacks its gfx1010 and gfx1030
files into kdb_cache/; without them these tests are skipped.  Expected values
come from LLVM's tools: the kernels of an object are its ``.kd`` symbols as
llvm-readelf-16 lists them, and where a long branch goes is read from
llvm-objdump-16's disassembly of the original and the patched object.
"""

from __future__ import annotations

import bisect
import glob
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROCBLAS_LIBRARY
from kpatch.codeobject import CodeObject

LIBRARY = ROCBLAS_LIBRARY


def files(pattern: str) -> list[str]:
    found = sorted(glob.glob(os.path.join(LIBRARY, pattern)))
    if not found:
        pytest.skip(f"rocBLAS library not fetched ({LIBRARY}: run tools/fetch_sid.sh)")
    return found


def kd_symbols(path: str) -> list[str]:
    out = subprocess.run(["llvm-readelf-16", "--syms", "--wide", path], capture_output=True, text=True,
                         check=True).stdout
    return sorted({line.split()[-1] for line in out.splitlines() if line.split() and line.split()[-1].endswith(".kd")
                   and "UND" not in line.split()})


def kpatch(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, KPATCH_NO_PROGRESS="1")
    return subprocess.run([sys.executable, "-m", "kpatch", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_every_gfx1030_object_is_read():
    """Every gfx1030 code object (all the gfx1030 files but the .dat
    catalogues): Tensile's linked .co (one metadata note per linked object)
    and the compiled fallbacks; every kernel has its metadata."""
    paths = [p for p in files("*gfx1030*") if not p.endswith(".dat")]
    assert len(paths) == len(files("*gfx1030*.co")) + len(files("*gfx1030*.hsaco")) >= 60
    notes = 0
    for p in paths:
        co = CodeObject.from_bytes(open(p, "rb").read(), name=p)
        assert co.target_id.startswith("gfx1030"), p
        kernels = sorted(k.symbol for k in co.kernels)
        assert kernels == kd_symbols(p), p
        md = co.metadata
        assert sorted(k[".symbol"] for k in md.kernels) == kernels, p
        notes += len(co.metadata_notes)
    assert notes > len(paths)  # the Tensile libraries carry hundreds of notes each


def test_the_gfx1010_builds_have_no_finding():
    """What the compiler built for gfx1010 is safe on gfx1010 by construction:
    a finding there would be a false positive."""
    paths = files("*gfx1010*.hsaco")
    p = kpatch("scan", "--json", "--target", "gfx1010", *paths)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    objects = doc["code_objects"]
    assert len(objects) == len(paths)
    flagged = [(o["uri"], k["name"], k.get("verdict")) for o in objects for k in o["kernels"]
               if k.get("findings")]
    assert flagged == []
    # the same reading of the same scan sees findings where there are some: the gfx1030 build of one of them
    twin = paths[0].replace("gfx1010", "gfx1030")
    p = kpatch("scan", "--json", "--target", "gfx1010", twin)
    assert any(k.get("findings") for o in json.loads(p.stdout)["code_objects"] for k in o["kernels"])


LONG_BRANCH = re.compile(r"s_getpc_b64 (s\[\d+:\d+\])\s+//[^\n]*\n\s*s_add_i32 (s\d+), (0x[0-9a-f]+|\d+), (\d+)\s+"
                         r"// ([0-9A-F]+):")
LABEL = re.compile(r"^([0-9a-f]+) <([^>]+)>:", re.M)
INSTRUCTION = re.compile(r"^\s+(\S+)[^\n]*// ([0-9A-F]+):", re.M)
#: What kpatch's gfx1010 rules put in front of an instruction (as llvm-objdump-16 prints them).
MITIGATIONS = {"s_nop", "v_nop", "s_waitcnt_depctr", "s_waitcnt", "s_waitcnt_vscnt", "s_waitcnt_lgkmcnt",
               "s_waitcnt_vmcnt", "s_inst_prefetch"}


def long_branches(path: str) -> tuple[list[int], dict[int, tuple[str, int]], dict[int, str]]:
    """(target of each long branch in order, label at each address, mnemonic
    at each address).  A label is (name, how many labels of that name come
    before it): every Tensile kernel repeats the same label names."""
    text = subprocess.run(["llvm-objdump-16", "-d", "--mcpu=gfx1030", path], capture_output=True, text=True,
                          check=True).stdout
    targets = [int(m.group(5), 16) + int(m.group(3), 0) + int(m.group(4)) for m in LONG_BRANCH.finditer(text)]
    seen: dict[str, int] = {}
    labels = {}
    for a, n in LABEL.findall(text):
        labels[int(a, 16)] = (n, seen.get(n, 0))
        seen[n] = seen.get(n, 0) + 1
    mnemonics = {int(a, 16): m for m, a in INSTRUCTION.findall(text)}
    return targets, labels, mnemonics


def test_a_tensile_library_patches_with_nothing_left(tmp_path):
    """A Tensile .co (half precision, 148 kernels; the smallest without dot
    products, which have no exact gfx1010 replacement): every kernel patched,
    nothing left for gfx1010, no control-flow problem, and every long branch
    still lands on the label it landed on (or on mitigations kpatch put
    right in front of it)."""
    src = files("TensileLibrary_Type_HH_Contraction_l_Ailk_Bjlk_Cijk_Dijk_gfx1030.co")[0]
    out = str(tmp_path / "patched.co")
    p = kpatch("apply", "--mode", "override", src, "-o", out)
    assert p.returncode == 0, p.stderr
    assert re.search(r"kernels: (\d+) patched, 0 refused", p.stdout), p.stdout[-2000:]
    scan = kpatch("scan", "--target", "gfx1010", out)
    assert re.search(r"kernels (\d+) ok, 0 patchable, 0 unpatchable", scan.stdout), scan.stdout[-2000:]
    diff = kpatch("diff", src, out)
    assert diff.returncode == 0 and "0 control-flow problems" in diff.stdout, diff.stdout[-2000:]
    before, labels0, _ = long_branches(src)
    after, labels1, mnemonics1 = long_branches(out)
    assert before and len(after) == len(before)
    where = {n: a for a, n in labels1.items()}
    addresses = sorted(mnemonics1)
    for t0, t1 in zip(before, after):
        name = labels0[t0]  # Tensile's long branches go to labels
        at = where[name]
        assert t1 <= at, (name, hex(t0), hex(t1), hex(at))
        k = bisect.bisect_left(addresses, t1)
        assert addresses[k] == t1  # it lands on an instruction
        while addresses[k] < at:  # only mitigations between where the branch lands and the label
            assert mnemonics1[addresses[k]] in MITIGATIONS, (name, hex(addresses[k]), mnemonics1[addresses[k]])
            k += 1
