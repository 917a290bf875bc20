"""The rewriter looks the instructions of all its edits up at once
(relocate._slots_by_index, issue 14): each slot must land on the
instruction that starts at its address, as looking them up one by one
(index_at.get) gives, in the same order; an address where no instruction
starts is still refused by name."""

from __future__ import annotations

import pytest

from conftest import gfx1030_code_objects
from kpatch.analysis.codescan import scan_text
from kpatch.errors import UsageError
from kpatch.rewrite import relocate
from kpatch.rewrite.edits import Edit, group_edits

NOP0 = bytes.fromhex("000080bf")  # s_nop 0


def _one_by_one(scan, slots_by_addr):
    return {scan.index_at.get(a): s for a, s in slots_by_addr.items()}


def test_slots_at_once_as_one_by_one(librocrand):
    co = gfx1030_code_objects(librocrand)[0]
    scan = scan_text(co, "gfx1030")
    # every 7th instruction, in a shuffled order
    addrs = [i.address for i in scan.insts[::7]]
    addrs = addrs[1::2] + addrs[::2]
    slots_by_addr, _ = group_edits([Edit(a, "insert_before", NOP0, "t") for a in addrs])
    got = relocate._slots_by_index(scan, slots_by_addr)
    want = _one_by_one(scan, slots_by_addr)
    assert list(got.items()) == list(want.items()) and len(got) > 1000
    assert all(scan.insts[i].address == s.before[0].address for i, s in got.items())


def test_an_address_inside_an_instruction_is_refused(librocrand):
    co = gfx1030_code_objects(librocrand)[0]
    scan = scan_text(co, "gfx1030")
    wide = next(i for i in scan.insts if i.size > 4)
    slots_by_addr, _ = group_edits([Edit(scan.insts[0].address, "insert_before", NOP0, "t"),
                                    Edit(wide.address + 4, "insert_before", NOP0, "t")])
    with pytest.raises(UsageError, match=f"{wide.address + 4:#x} is not the start of an instruction"):
        relocate._slots_by_index(scan, slots_by_addr)
