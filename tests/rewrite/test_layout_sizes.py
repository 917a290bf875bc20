"""Columns of the code layout worked out at once (issue 14).  The
instruction sizes (textlayout._end_array) from the analysis' encoding ids:
one size per encoding, gathered with numpy, not read from each
instruction; they must be each instruction's own size, and ids that do not
describe the scan's instructions are not used.  The branches' new offsets
written all at once must give the text written branch by branch."""

from __future__ import annotations

import numpy as np

from conftest import gfx1030_code_objects
from rw_common import built_layouts
from kpatch.analysis.codescan import scan_text
from kpatch.analysis.engine import analyse
from kpatch.isa.decodememo import decode_memo
from kpatch.rewrite import textlayout


def _scan(co):
    scan = scan_text(co, "gfx1030", keep_ids=True)
    analyse(co, "gfx1010", scan=scan)
    return scan


def _own_sizes(scan) -> list[int]:
    return [i.size for i in scan.insts]


def test_sizes_by_encoding_are_each_instructions_own(librocrand):
    for co in gfx1030_code_objects(librocrand):
        with decode_memo():
            scan = _scan(co)
            assert scan.known is not None
            sizes = textlayout._sizes(scan)
            assert sizes.tolist() == _own_sizes(scan)
            assert len(set(sizes.tolist())) > 1
            textlayout.instruction_ends(scan)
            ends = textlayout._end_array(scan)
            assert ends.tolist() == [i.address + i.size for i in scan.insts]


def test_ids_that_are_not_these_instructions_are_not_used(librocrand):
    from kpatch.analysis.facts import FACTS
    co = gfx1030_code_objects(librocrand)[0]
    with decode_memo():
        scan = _scan(co)
        own = _own_sizes(scan)
        known = scan.known
        assert textlayout._sizes(scan).tolist() == own
        # ids of other instructions (shifted by one) for a copy of the address column: not taken
        scan.known = type(known)(known.target, known.addresses.copy(), known.sizes, np.roll(known.eids, 1))
        assert textlayout._sizes(scan).tolist() == own
        scan.known = known
        # the facts cache emptied since: the ids mean nothing now
        FACTS.clear()
        assert textlayout._sizes(scan).tolist() == own
        scan.known = None
        assert textlayout._sizes(scan).tolist() == own


def test_branches_retargeted_at_once_as_one_by_one(monkeypatch, librocrand):
    """The new .text with every branch's simm16 written at once (numpy) is
    the one written branch by branch with _with_simm16 (forced here by a
    branch table that marks no branch SOPP), on a patched librocrand object
    (hundreds of retargeted branches)."""
    from kpatch.rewrite import textlayout
    data = gfx1030_code_objects(librocrand)[0].data
    lay, fast = built_layouts(data, monkeypatch)[0]
    real = textlayout.TextLayout._build
    assert len(lay.new_simm) > 100
    table = textlayout._branch_table(lay.scan)
    monkeypatch.setattr(textlayout, "_branch_table", lambda scan: (*table[:3], np.zeros(len(table[0]), bool)))
    slow = []
    monkeypatch.setattr(textlayout, "_with_simm16", lambda ins, simm, _w=textlayout._with_simm16: (
        slow.append(1), _w(ins, simm))[1])
    lay._built = None
    assert bytes(real(lay)[0]) == fast
    assert len(slow) == len(lay.new_simm)
