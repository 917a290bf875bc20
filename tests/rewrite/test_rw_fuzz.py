"""Random edit sets keep every invariant; random bytes give a result or a KpatchError."""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rw_common import (CALLS, FIXTURES, MARK_AFTER, MARK_BEFORE, NOP6, NOP7, RELOC, function_lines,
                       read, write_tmp)
from rw_oracle import check_rewrite, objdump, readelf
from kpatch.errors import KpatchError
from kpatch.rewrite.edits import Edit
from kpatch.rewrite.provenance import add_provenance
from kpatch.rewrite.headers import set_metadata
from kpatch.rewrite.relocate import apply_edits

OBJECTS = [RELOC, CALLS, os.path.join(FIXTURES, "miopen_like.cl.gfx1030.v5.hsaco")]
_LINES = {p: [x for ls in function_lines(p).values() for x in ls] for p in OBJECTS}
_DATA = {p: read(p) for p in OBJECTS}


@st.composite
def edit_sets(draw):
    path = draw(st.sampled_from(OBJECTS))
    lines = _LINES[path]
    picks = draw(st.lists(st.tuples(st.integers(0, len(lines) - 1),
                                    st.sampled_from(["insert_before", "insert_after"]),
                                    st.integers(1, 70)), max_size=25))
    edits = [Edit(lines[i].addr, action, (NOP7 if action == "insert_before" else NOP6) * n, "fuzz")
             for i, action, n in picks]
    return path, edits


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=edit_sets(), offset3f=st.booleans())
def test_random_edits_keep_every_invariant(case, offset3f, tmp_path):
    path, edits = case
    r = apply_edits(_DATA[path], "gfx1030", edits, offset3f=offset3f)
    new = write_tmp(tmp_path, "new.hsaco", r.data)
    al = check_rewrite(path, new, {MARK_BEFORE, MARK_AFTER}, {MARK_BEFORE})
    if not offset3f:  # relocation may then leave 0x3f branches: everything else must hold
        al.problems = [p for p in al.problems if "offset 0x3f" not in p]
    assert al.problems == []
    if edits:
        assert all(r.address_map[a] == n for a, n in al.map.items())
    else:  # no edits: nothing was decoded, nothing moved
        assert r.address_map == {} and all(a == n for a, n in al.map.items())
    lines = objdump(new)
    inserted_words = sum(x.text in (MARK_BEFORE, MARK_AFTER) for x in lines)
    assert inserted_words == sum(len(e.code) for e in r.applied) // 4
    refused = {x.kernel for x in r.refused}
    assert {e.address for e in r.applied} <= {e.address for e in edits}
    out, err = readelf(new, "-a", "--wide")
    assert err == "" and "warning" not in out.lower()
    assert not refused - {"k_fptr", "k_indirect", "k_main", "k_setpc"}


@settings(max_examples=150, deadline=None)
@given(base=st.sampled_from(OBJECTS),
       flips=st.lists(st.tuples(st.integers(0, 2**31), st.integers(0, 255)), min_size=1, max_size=6))
def test_damaged_objects_give_a_result_or_a_kpatch_error(base, flips):
    data = bytearray(_DATA[base])
    for at, value in flips:
        data[at % len(data)] = value
    edits = [Edit(x.addr, "insert_before", NOP7, "f") for x in _LINES[base][::7]]
    for op in (lambda b: apply_edits(b, "gfx1030", edits),
               lambda b: set_metadata(b, lambda md: md.__setitem__("amdhsa.target", "x" * 40)),
               lambda b: add_provenance(b, {"made_safe_for": "gfx1010"})):
        try:
            op(bytes(data))
        except KpatchError:
            pass


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=512))
def test_random_bytes_are_format_errors(blob):
    try:
        apply_edits(blob, "gfx1030", [])
    except KpatchError:
        return
    raise AssertionError("random bytes were accepted as a code object")


def test_text_beyond_2_63_is_a_format_error(tmp_path):
    """A damaged section header puts .text at 0x8000000000001d00 (the example hypothesis found: byte
    6119 of reloc_cases set to 0x80, the top byte of .text's sh_addr; llvm-readelf-16 shows the same
    address): the analysis and the rewriter refuse it with a FormatError naming .text, no OverflowError."""
    from kpatch.analysis import analyse
    from kpatch.codeobject import CodeObject
    from kpatch.errors import FormatError

    data = bytearray(_DATA[RELOC])
    data[25751 % len(data)] = 0x80  # (hypothesis reduces each position modulo the length)
    damaged = tmp_path / "damaged.hsaco"
    damaged.write_bytes(bytes(data))
    out, _ = readelf(str(damaged), "-S", "--wide")
    assert re.search(r"\.text\s+PROGBITS\s+8000000000001d00", out), out
    edits = [Edit(x.addr, "insert_before", NOP7, "f") for x in _LINES[RELOC][::7]]
    with pytest.raises(FormatError, match=r"\.text at 0x8000000000001d00"):
        apply_edits(bytes(data), "gfx1030", edits)
    with pytest.raises(FormatError, match=r"beyond address 2\^63"):
        analyse(CodeObject.from_bytes(bytes(data)), "gfx1010")
