"""The instruction-stream alignment behind `kpatch diff` and the control-flow check."""

from __future__ import annotations

import re
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kpatch.isa import decode
from kpatch.diff import align as A
from kpatch.diff.align import CHANGED, EQUAL, INSERTED, REMOVED, FieldChange, align, align_keys

from .conftest import tool


def lcs_length(a, b) -> int:
    """Textbook LCS length (the test's own, independent of kpatch)."""
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def check_cover(ops, a, b) -> None:
    """Every index of both sides appears once, in order; equal ops pair equal keys."""
    olds = [o.old for o in ops if o.old is not None]
    news = [o.new for o in ops if o.new is not None]
    assert olds == list(range(len(a)))
    assert news == list(range(len(b)))
    for o in ops:
        assert o.kind in (EQUAL, INSERTED, REMOVED)
        if o.kind == EQUAL:
            assert a[o.old] == b[o.new]
        assert (o.old is None) == (o.kind == INSERTED)
        assert (o.new is None) == (o.kind == REMOVED)


keys = st.lists(st.integers(0, 4), max_size=40)


@settings(max_examples=300, deadline=None)
@given(keys, keys)
def test_align_keys_is_a_longest_common_subsequence(a, b):
    ops = align_keys(a, b)
    check_cover(ops, a, b)
    assert sum(o.kind == EQUAL for o in ops) == lcs_length(a, b)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys, keys)
def test_fallback_without_budget_is_still_a_valid_alignment(monkeypatch_budget, a, b):
    # the fixture only sets module constants: sharing it between examples is fine
    ops = align_keys(a, b)
    check_cover(ops, a, b)


@pytest.fixture
def monkeypatch_budget(monkeypatch):
    """No work budget: every piece goes through the patience-anchor fallback."""
    monkeypatch.setattr(A, "_BUDGET_MIN", 0)
    monkeypatch.setattr(A, "_BUDGET_PER_ITEM", 0)


def test_fallback_finds_insertions_around_unique_anchors(monkeypatch_budget):
    a = list(range(100))
    b = a[:10] + ["x"] + a[10:60] + ["y", "z"] + a[60:]
    ops = align_keys(a, b)
    check_cover(ops, a, b)
    assert [b[o.new] for o in ops if o.kind == INSERTED] == ["x", "y", "z"]
    assert sum(o.kind == EQUAL for o in ops) == 100


def mc(lines: list[str], mcpu: str = "gfx1030") -> bytes:
    """Bytes of assembly lines, from llvm-mc-16 -show-encoding."""
    out = subprocess.run([tool("llvm-mc-16"), "-triple=amdgcn-amd-amdhsa", f"-mcpu={mcpu}", "-show-encoding"],
                         input="\n".join(lines) + "\n", capture_output=True, text=True, check=True).stdout
    data = b""
    for m in re.finditer(r"encoding: \[([^\]]*)\]", out):
        data += bytes(int(x, 16) for x in m.group(1).split(","))
    return data


def test_inserted_and_changed_instructions_from_llvm_mc():
    old_src = ["s_load_dword s7, s[4:5], 0x0", "global_load_dword v3, v2, s[0:1] glc slc",
               "v_add_f32 v1, v1, v2", "s_inst_prefetch 0x3", "s_endpgm"]
    new_src = ["s_load_dword s7, s[4:5], 0x0", "s_waitcnt_depctr 0xffe3",
               "global_load_dword v3, v2, s[0:1] slc", "v_add_f32 v1, v1, v2", "s_nop 0", "s_endpgm"]
    old = decode(mc(old_src), "gfx1030")
    new = decode(mc(new_src), "gfx1030")
    ops = align(old, new)
    assert [(o.kind, o.old, o.new) for o in ops] == [
        (EQUAL, 0, 0), (INSERTED, None, 1), (CHANGED, 1, 2), (EQUAL, 2, 3), (CHANGED, 3, 4), (EQUAL, 4, 5)]
    assert ops[2].changes == [FieldChange("glc", 1, 0)]
    # s_inst_prefetch 0x3 (SOPP op 0x20) -> s_nop 0 (SOPP op 0): llvm-mc's bytes say so
    assert ops[4].changes[0] == FieldChange("mnemonic", "s_inst_prefetch", "s_nop")
    assert {c.name: (c.old, c.new) for c in ops[4].changes[1:]} == {"simm16": (3, 0), "op": (0x20, 0)}


def test_replacing_by_a_sequence_keeps_the_same_mnemonic_paired():
    old = decode(mc(["v_mov_b32 v0, 0", "buffer_load_dword v4, v2, s[8:11], 0 offen glc", "s_endpgm"]), "gfx1030")
    new = decode(mc(["v_mov_b32 v0, 0", "s_nop 0", "s_nop 1",
                     "buffer_load_dword v4, v2, s[8:11], 0 offen glc dlc", "s_endpgm"]), "gfx1030")
    ops = align(old, new)
    kinds = [(o.kind, o.old, o.new) for o in ops]
    assert kinds == [(EQUAL, 0, 0), (INSERTED, None, 1), (INSERTED, None, 2), (CHANGED, 1, 3), (EQUAL, 2, 4)]
    assert ops[3].changes == [FieldChange("dlc", 0, 1)]


def test_branches_align_by_target_label_not_offset():
    # the same loop, with one instruction more inside it: the backward
    # branch's offset differs but it still closes the same loop
    old = decode(mc(["s_nop 0", "v_add_f32 v1, v1, v2", "s_cbranch_scc1 65534", "s_endpgm"]), "gfx1030")
    new = decode(mc(["s_nop 0", "v_add_f32 v1, v1, v2", "s_nop 1", "s_cbranch_scc1 65533", "s_endpgm"]),
                 "gfx1030")
    ops = align(old, new)
    assert [(o.kind, o.old, o.new) for o in ops] == [
        (EQUAL, 0, 0), (EQUAL, 1, 1), (INSERTED, None, 2), (CHANGED, 2, 3), (EQUAL, 3, 4)]
    assert ops[3].changes == [FieldChange("simm16", 0xFFFE, 0xFFFD)]


def test_same_bytes_decoded_for_another_target_are_changed():
    # v_fmac_legacy_f32 (gfx1030) and v_mac_legacy_f32 (gfx1010) share an encoding
    data = mc(["v_fmac_legacy_f32 v4, 0.5, v3"], "gfx1030")
    assert data == mc(["v_mac_legacy_f32 v4, 0.5, v3"], "gfx1010")
    ops = align(decode(data, "gfx1030"), decode(data, "gfx1010"))
    assert [o.kind for o in ops] == [CHANGED]
    names = [c.name for c in ops[0].changes]
    assert names == ["mnemonic", "same bytes, decoded as"]
    assert ops[0].changes[1] == FieldChange("same bytes, decoded as", "gfx1030", "gfx1010")


def test_field_change_text():
    assert FieldChange("glc", 1, 0).text() == "glc 1->0"
    assert FieldChange("simm16", 0x3F, 0x40).text() == "simm16 0x3f->0x40"
    assert FieldChange("x", None, 5).text() == "x (none)->5"
