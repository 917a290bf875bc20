"""Nothing to move: the output is the input, or differs exactly where the edit is."""

from __future__ import annotations

import os

import pytest

from rw_common import FIXTURES, IMMOVABLE, NOP0, fixture_objects, function_lines, read
from rw_oracle import sections
from kpatch.rewrite.edits import Edit
from kpatch.rewrite.relocate import apply_edits


@pytest.mark.parametrize("path", fixture_objects() + [IMMOVABLE], ids=os.path.basename)
@pytest.mark.parametrize("offset3f", [True, False])
def test_no_edits_gives_the_same_bytes(path, offset3f):
    data = read(path)
    r = apply_edits(data, "gfx1030", [], offset3f=offset3f)
    assert r.data == data
    assert r.refused == [] and r.inserted == []
    assert r.relocations["sections_moved"] == 0


@pytest.mark.parametrize("name", ["asm_kernels.s.gfx1030.v4.hsaco", "asm_kernels.s.gfx1030.v5.hsaco",
                                  "vecops.hip.gfx1030.v5.hsaco"])
def test_same_size_replacement_changes_only_those_bytes(name):
    """s_inst_prefetch -> s_nop 0 (the InstFwdPrefetchBug fix) is done in place."""
    path = os.path.join(FIXTURES, name)
    data = read(path)
    targets = [x for ls in function_lines(path).values() for x in ls
               if x.mnemonic == "s_inst_prefetch"]
    if not targets:  # replace every 5th instruction's first word with itself instead
        targets = [x for ls in function_lines(path).values() for x in ls[::5] if x.size == 4]
        code = {x.addr: x.words[0].to_bytes(4, "little") for x in targets}
    else:
        code = {x.addr: NOP0 for x in targets}
    r = apply_edits(data, "gfx1030", [Edit(a, "replace", c, "same") for a, c in code.items()])
    text = sections(path)[".text"]
    expect = bytearray(data)
    for a, c in code.items():
        at = text.offset + a - text.addr
        expect[at:at + 4] = c
    assert r.data == bytes(expect)
    assert r.address_map == {a: a for a in r.address_map}
    assert r.relocations["branches_retargeted"] == 0


def test_replacement_in_every_kernel_of_the_sample_shape():
    """miopen_like: replacing each s_waitcnt by itself leaves the file byte for byte."""
    path = os.path.join(FIXTURES, "miopen_like.cl.gfx1030.v4.hsaco")
    lines = [x for ls in function_lines(path).values() for x in ls if x.mnemonic == "s_waitcnt"]
    assert lines
    edits = [Edit(x.addr, "replace", x.words[0].to_bytes(4, "little"), "same") for x in lines]
    assert apply_edits(read(path), "gfx1030", edits).data == read(path)
