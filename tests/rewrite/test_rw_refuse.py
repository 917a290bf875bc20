"""What the rewriter refuses, with which named reason, and what it still does."""

from __future__ import annotations

import os
import subprocess

import pytest

from rw_common import (CALLS, DATA, IMMOVABLE, MARK_BEFORE, NOP0, NOP7, RELOC, function_lines,
                       getpc_sequences, need, read, write_tmp)
from rw_oracle import check_rewrite, objdump, sections
from kpatch.errors import UsageError
from kpatch.rewrite.edits import Edit, Refusal
from kpatch.rewrite.relocate import apply_edits



def _s_add_u32_s40_1() -> bytes:
    # s_add_u32 s40, s40, 1: SOP2 op 0, sdst 40, ssrc0 40, ssrc1 inline 1 (0x81); writes SCC
    word = (0b10 << 30) | (0 << 23) | (40 << 16) | (0x81 << 8) | 40
    return word.to_bytes(4, "little")


def _kinds(r) -> dict[str, str]:
    return {x.kernel: x.kind for x in r.refused}


def _code_bytes(path: str, func: str) -> bytes:
    lines = function_lines(path)[func]
    return b"".join(w.to_bytes(4, "little") for x in lines for w in x.words)


def test_unrecognised_getpc_use_pins_all_code():
    """immovable: k_odd's s_getpc_b64 is not a getpc/add/addc sequence; no code may move,
    so k_ok's insertion is refused ('immovable'), while same-size edits still apply."""
    data = read(IMMOVABLE)
    ok = function_lines(IMMOVABLE)["k_ok"]
    prefetch = next(x for x in ok if x.mnemonic == "s_inst_prefetch")
    r = apply_edits(data, "gfx1030", [Edit(ok[0].addr, "insert_before", NOP7, "ins"),
                                      Edit(prefetch.addr, "replace", NOP0, "prefetch")])
    assert _kinds(r) == {"k_ok": "immovable"}
    assert "0x1708" in r.refused[0].reason and "s_getpc_b64" in r.refused[0].reason
    assert r.data == data  # the prefetch replacement belonged to the refused kernel too
    r = apply_edits(data, "gfx1030", [Edit(prefetch.addr, "replace", NOP0, "prefetch")])
    assert r.refused == []
    s = sections(IMMOVABLE)[".text"]
    at = s.offset + prefetch.addr - s.addr
    assert r.data == data[:at] + NOP0 + data[at + 4:]


def test_computed_jump_refuses_its_kernel_only(tmp_path):
    """reloc_cases: k_indirect calls an address loaded from memory; when code moves it is
    refused ('computed-jump') and keeps its code; k_plain is patched."""
    f = function_lines(RELOC)
    edits = [Edit(f["k_indirect"][1].addr, "insert_before", NOP7, "a"),
             Edit(f["k_plain"][2].addr, "insert_before", NOP7, "b")]
    r = apply_edits(read(RELOC), "gfx1030", edits)
    assert _kinds(r) == {"k_indirect": "computed-jump"}
    assert "s_swappc_b64" in r.refused[0].reason and "s[2:3]" in r.refused[0].reason
    new = write_tmp(tmp_path, "new.hsaco", r.data)
    assert check_rewrite(RELOC, new, {MARK_BEFORE}).problems == []
    g = function_lines(new)
    assert [x.text for x in g["k_indirect"]] == [x.text for x in f["k_indirect"]]
    assert sum(x.text == MARK_BEFORE for x in g["k_plain"]) == 1


def test_jump_to_a_loaded_address_is_refused():
    """k_setpc: s_setpc_b64 of a register pair loaded from memory."""
    f = function_lines(RELOC)
    r = apply_edits(read(RELOC), "gfx1030", [Edit(f["k_setpc"][0].addr, "insert_before", NOP7, "a")])
    assert _kinds(r) == {"k_setpc": "computed-jump"}
    assert "s_setpc_b64 at" in r.refused[0].reason and r.refused[0].address == f["k_setpc"][-1].addr
    assert r.data == read(RELOC)


def test_computed_jump_is_harmless_when_nothing_moves():
    f = function_lines(RELOC)
    w = f["k_indirect"][1]  # s_waitcnt: replace by s_nop 0, same size
    r = apply_edits(read(RELOC), "gfx1030", [Edit(w.addr, "replace", NOP0, "same")])
    assert r.refused == []
    assert r.relocations["edits_applied"] == 1


def test_shared_function_refuses_every_kernel_reaching_it(tmp_path):
    """helper is called by k_main and by k_indirect (refused): an edit in helper makes
    both refused ('computed-jump', 'shared-code'); k_plain is still patched."""
    f = function_lines(RELOC)
    edits = [Edit(f["helper"][0].addr, "insert_before", NOP7, "h"),
             Edit(f["k_plain"][0].addr, "insert_before", NOP7, "p")]
    r = apply_edits(read(RELOC), "gfx1030", edits)
    assert _kinds(r) == {"k_indirect": "computed-jump", "k_main": "shared-code"}
    assert "helper" in next(x for x in r.refused if x.kernel == "k_main").reason
    new = write_tmp(tmp_path, "new.hsaco", r.data)
    assert check_rewrite(RELOC, new, {MARK_BEFORE}).problems == []


@pytest.mark.parametrize("case", ["replace-branch", "insert-branch", "scc-in-getpc", "replace-add"])
def test_edits_on_pc_relative_code_are_refused(case):
    f = function_lines(RELOC)["k_main"]
    getpc, add, addc = getpc_sequences(f)[0]
    br = next(x for x in f if x.mnemonic == "s_cbranch_scc1")
    s_branch_0 = bytes.fromhex("000082bf")  # s_branch 0
    edit = {
        "replace-branch": Edit(br.addr, "replace", NOP0, "r"),
        "insert-branch": Edit(f[0].addr, "insert_before", s_branch_0, "r"),
        "scc-in-getpc": Edit(addc.addr, "insert_before", _s_add_u32_s40_1(), "r"),
        "replace-add": Edit(add.addr, "replace", add.words[0].to_bytes(4, "little") + b"\0" * 4, "r"),
    }[case]
    r = apply_edits(read(RELOC), "gfx1030", [edit])
    assert _kinds(r) == {"k_main": "edit-pc-relative"}
    assert r.data == read(RELOC)


def test_harmless_code_inside_a_getpc_sequence_is_allowed(tmp_path):
    f = function_lines(RELOC)["k_main"]
    edits = [Edit(x.addr, "insert_before", NOP7, "in") for g in getpc_sequences(f) for x in g[1:]]
    r = apply_edits(read(RELOC), "gfx1030", edits)
    assert r.refused == []
    new = write_tmp(tmp_path, "new.hsaco", r.data)
    assert check_rewrite(RELOC, new, {MARK_BEFORE}).problems == []
    # the first s_getpc_b64 (to .rodata) does not move; the other two do
    assert r.relocations["getpc_literals_fixed"] == 2


def test_conflicting_replacements_are_refused():
    f = function_lines(RELOC)["k_plain"]
    edits = [Edit(f[2].addr, "replace", NOP0, "one"), Edit(f[2].addr, "replace", NOP7, "two")]
    r = apply_edits(read(RELOC), "gfx1030", edits)
    assert _kinds(r) == {"k_plain": "edit-conflict"}
    assert "one" in r.refused[0].reason and "two" in r.refused[0].reason


def test_branch_out_of_range_is_refused():
    """128 KiB inserted inside k_plain's loop: its backward branch cannot reach."""
    f = function_lines(RELOC)["k_plain"]
    loop_body = next(x for x in f if x.text.startswith("v_add_f32"))
    r = apply_edits(read(RELOC), "gfx1030", [Edit(loop_body.addr, "insert_after", NOP7 * 32768, "big")])
    assert _kinds(r) == {"k_plain": "branch-range"}
    assert r.data == read(RELOC)


def test_bad_edits_are_usage_errors():
    f = function_lines(RELOC)["k_main"]
    eight = next(x for x in f if x.size == 8)
    with pytest.raises(UsageError):
        apply_edits(read(RELOC), "gfx1030", [Edit(eight.addr + 4, "insert_before", NOP7, "x")])
    with pytest.raises(UsageError):  # not instruction bytes on either target
        apply_edits(read(RELOC), "gfx1030", [Edit(f[0].addr, "insert_before", b"\xff" * 4, "x")])
    with pytest.raises(UsageError):
        Edit(f[0].addr, "insert_before", b"\0\0\0", "x")
    with pytest.raises(UsageError):
        Edit(f[0].addr, "move", NOP0, "x")


def test_relocatable_objects_are_refused(tmp_path):
    """An unlinked object (ET_REL) is refused for the whole object."""
    mc = need("llvm-mc-16")
    obj = os.path.join(str(tmp_path), "k.o")
    subprocess.run([mc, "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx1030", "-filetype=obj",
                    os.path.join(DATA, "reloc_cases.s"), "-o", obj], check=True,
                   capture_output=True)
    with pytest.raises(Refusal) as e:
        apply_edits(read(obj), "gfx1030", [])
    assert e.value.kernel is None and "relocatable" in e.value.reason


def test_calls_through_pointers_refuse_the_caller_only(tmp_path):
    """calls.hip: k_fptr loads a function pointer; k_calls' direct calls are followed."""
    f = function_lines(CALLS)
    edits = [Edit(f["k_fptr"][0].addr, "insert_before", NOP7, "a"),
             Edit(f["_Z6helperfi"][0].addr, "insert_before", NOP7, "b"),
             Edit(f["_Z3f_af"][0].addr, "insert_before", NOP7, "c")]
    r = apply_edits(read(CALLS), "gfx1030", edits)
    assert _kinds(r) == {"k_fptr": "computed-jump"}
    new = write_tmp(tmp_path, "new.hsaco", r.data)
    assert check_rewrite(CALLS, new, {MARK_BEFORE}).problems == []
    lines = objdump(new)
    assert sum(x.text == MARK_BEFORE for x in lines) == 2
