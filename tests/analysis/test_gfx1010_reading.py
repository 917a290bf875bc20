"""The gfx1010 reading of an encoding (detectors/isa.py) is decoded again
only for the opcodes whose gfx1010 table entry differs from the source's
(issue 14: decoding each of ~70k encodings again cost a third of building
their facts).  Shown sound over every distinct encoding of the corpus: for
each one the shortcut skips, gfx1010's decoder gives the same instruction
(mnemonic, size, not unknown); and the shortcut is taken."""

from __future__ import annotations

import os
import sys

import pytest

import kpatch.analysis.detectors.isa as isa_mod
from conftest import FIXTURES, ROOT
from kpatch.analysis.codescan import scan_text
from kpatch.analysis.detectors.isa import _read_alike
from kpatch.analysis.facts import Facts
from kpatch.codeobject import CodeObject
from kpatch.isa import decode, decode_one
from kpatch.isa.decodememo import decode_memo
from tests.analysis.asm import assemble


def _corpus_libs():
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        from isa_corpus import LIBDIR, LIBS
    finally:
        sys.path.pop(0)
    return [lib for lib in LIBS if os.path.exists(os.path.join(LIBDIR, lib))]


def _corpus():
    with open(os.path.join(FIXTURES, "mathops.hip.gfx1030.v5.hsaco"), "rb") as fh:
        yield CodeObject.from_bytes(fh.read())
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        from isa_corpus import gfx1030_objects
        for _, blob in gfx1030_objects(_corpus_libs()):
            yield CodeObject.from_bytes(blob)
    finally:
        sys.path.pop(0)


@pytest.mark.corpus
def test_skipped_encodings_read_the_same_on_gfx1010():
    if not _corpus_libs():
        pytest.skip("no corpus (tools/fetch_corpus.sh)")
    alike = _read_alike("gfx1030")
    seen: set[bytes] = set()
    skipped = 0
    for co in _corpus():
        with decode_memo():
            scan = scan_text(co, "gfx1030")
            insts = scan.insts if scan is not None else []
            for ins in insts:
                raw = ins.raw
                if raw in seen:
                    continue
                seen.add(raw)
                if ins.is_unknown or alike.get(id(ins.d.info)) is not ins.d.info:
                    continue
                skipped += 1
                other = decode_one(raw, "gfx1010")
                assert (other.is_unknown, other.mnemonic, other.size) == (False, ins.mnemonic, ins.size), ins.text()
    assert skipped > 1000  # (the corpus was there)


def test_the_reading_of_an_alike_opcode_is_not_decoded_again(monkeypatch):
    code, _ = assemble("v_add_f32 v0, v1, v2\n  s_getreg_b32 s0, hwreg(HW_REG_MODE)\n  v_dot4_i32_i8 v0, v1, v2, v3")
    insts = decode(code, "gfx1030")
    calls = []
    monkeypatch.setattr(isa_mod, "decode_one", lambda raw, t: calls.append(raw) or decode_one(raw, t))
    facts = [Facts(i) for i in insts]
    # hwreg names differ between the targets; v_dot4_i32_i8 does not exist on gfx1010
    assert calls == [insts[1].raw, insts[2].raw]
    assert [r[0] for f in facts for r in f.local] == ["UnsupportedInstruction"]
