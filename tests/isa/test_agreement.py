"""kpatch's disassembly agrees with llvm-objdump-16 on real code.

For every fixture code object (both targets) and for librocrand's gfx1030
code object: the instruction list (addresses, sizes) and mnemonics must be
identical to llvm-objdump-16's, and the full text must match for at least
99.9% of instructions, every remaining difference being listed with its
reason in known_differences.txt.
"""

from __future__ import annotations

import glob
import os

import pytest

from isa_helpers import (FIXTURES, ROCRAND, extract_bundle_entry, load_known_differences, objdump,
                     target_of, text_section)
from kpatch.isa.lines import disassemble

FIXTURE_OBJECTS = sorted(glob.glob(os.path.join(FIXTURES, "*.hsaco")))


def compare(path: str, cpu: str, name: str) -> None:
    ref = objdump(path, cpu)
    assert ref, "llvm-objdump printed no instructions"
    data, addr, syms = text_section(path)
    mine = disassemble(data, cpu, addr, syms)
    assert [(a, n) for a, _, n in ref] == [(i.address, i.size) for i in mine], "boundaries differ"
    known = load_known_differences()
    bad_mn, unexplained, diffs = [], [], 0
    for (a, text, _), inst in zip(ref, mine):
        if text.split(" ", 1)[0] != inst.mnemonic:
            bad_mn.append((hex(a), text, inst.text()))
        if text != inst.text():
            diffs += 1
            if (name, a) not in known:
                unexplained.append((hex(a), text, inst.text()))
    assert not bad_mn, bad_mn[:10]
    assert not unexplained, unexplained[:10]
    assert diffs <= len(ref) * 0.001


@pytest.mark.skipif(not FIXTURE_OBJECTS, reason="no fixture code objects built yet")
@pytest.mark.parametrize("path", FIXTURE_OBJECTS, ids=os.path.basename)
def test_fixture_agrees_with_llvm_objdump(path):
    compare(path, target_of(path), os.path.basename(path))


@pytest.mark.corpus
@pytest.mark.skipif(not os.path.exists(ROCRAND), reason="corpus not downloaded (tools/fetch_corpus.sh)")
def test_rocrand_gfx1030_agrees_with_llvm_objdump(tmp_path):
    co = str(tmp_path / "rocrand.gfx1030.co")
    extract_bundle_entry(ROCRAND, "gfx1030", co)
    compare(co, "gfx1030", "librocrand.so.1.1:gfx1030")
