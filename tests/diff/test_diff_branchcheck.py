"""check_branches: the independent control-flow check of a patched object.

Patched variants are assembled by clang-15 from branchy.s (so their
branches are right by construction) or broken on purpose in place, at
addresses read from llvm-objdump-16's listing.
"""

from __future__ import annotations

from kpatch.codeobject import CodeObject
from kpatch.isa import build, decode_one, encode
from kpatch.diff.branchcheck import (
    ADDED_BRANCH, CHANGED_BRANCH, ENTRY, WRONG_TARGET, check_branches)

from .conftest import objdump, read, text_file_offset


def co(path_or_bytes) -> CodeObject:
    data = read(path_or_bytes) if isinstance(path_or_bytes, str) else path_or_bytes
    return CodeObject.from_bytes(data)


def addresses_of(listing, mnemonic: str) -> list[int]:
    return [a for a, t in listing if t.split(" ", 1)[0] == mnemonic]


def patched_word(path: str, address: int, new_bytes: bytes) -> bytes:
    """The file with the instruction at ``address`` replaced by ``new_bytes``."""
    data = bytearray(read(path))
    off = text_file_offset(path) + address
    data[off:off + len(new_bytes)] = new_bytes
    return bytes(data)


def with_simm16(path: str, address: int, simm16: int) -> bytes:
    off = text_file_offset(path) + address
    inst = decode_one(read(path)[off:off + 4], "gfx1030", address)
    return patched_word(path, address, encode(inst, simm16=simm16 & 0xFFFF))


def test_assembled_variants_keep_control_flow(branchy):
    original = co(branchy[0])
    assert check_branches(original, original) == []
    assert check_branches(original, co(branchy[1])) == []  # s_waitcnt_depctr inside the loop
    assert check_branches(original, co(branchy[2])) == []  # s_nop in front of a branch target


def test_branch_one_dword_short_is_reported(branchy):
    listing = objdump(branchy[1])
    loop_branch = addresses_of(listing, "s_cbranch_scc1")[1]  # the backward one
    simm = int(dict(listing)[loop_branch].split()[1])
    broken = with_simm16(branchy[1], loop_branch, simm - 1)
    problems = check_branches(co(branchy[0]), co(broken))
    assert len(problems) == 1
    p = problems[0]
    assert (p.kind, p.unit, p.new_address) == (WRONG_TARGET, "k_branchy", loop_branch)
    old_loop_branch = addresses_of(objdump(branchy[0]), "s_cbranch_scc1")[1]
    assert p.old_address == old_loop_branch


def test_forward_branch_may_reach_the_mitigation_or_the_target_but_nothing_else(branchy):
    # variant 2: the forward branch reaches the s_nop placed in front of s_endpgm
    listing = objdump(branchy[2])
    fwd = addresses_of(listing, "s_cbranch_scc1")[0]
    simm = int(dict(listing)[fwd].split()[1])
    nop = [a for a, t in listing if t == "s_nop 0"][0]
    assert fwd + 4 + 4 * simm == nop
    # past the mitigation, to s_endpgm itself: still the same instruction
    assert check_branches(co(branchy[0]), co(with_simm16(branchy[2], fwd, simm + 1))) == []
    # one further: into the next function
    problems = check_branches(co(branchy[0]), co(with_simm16(branchy[2], fwd, simm + 2)))
    assert [(p.kind, p.new_address) for p in problems] == [(WRONG_TARGET, fwd)]
    # one short: s_call_b64, not the target
    problems = check_branches(co(branchy[0]), co(with_simm16(branchy[2], fwd, simm - 1)))
    assert [(p.kind, p.new_address) for p in problems] == [(WRONG_TARGET, fwd)]


def test_call_offset_is_checked_too(branchy):
    listing = objdump(branchy[2])
    call = addresses_of(listing, "s_call_b64")[0]
    good = check_branches(co(branchy[0]), co(branchy[2]))
    assert good == []
    simm = int(dict(listing)[call].split(", ")[1])
    problems = check_branches(co(branchy[0]), co(with_simm16(branchy[2], call, simm + 1)))
    assert [(p.kind, p.new_address) for p in problems] == [(WRONG_TARGET, call)]


def test_branch_turned_into_something_else(branchy):
    listing = objdump(branchy[0])
    other_branch = addresses_of(listing, "s_branch")[0]
    broken = patched_word(branchy[0], other_branch, build.s_nop(0, "gfx1030"))
    problems = check_branches(co(branchy[0]), co(broken))
    assert [(p.kind, p.unit, p.old_address) for p in problems] == [(CHANGED_BRANCH, "k_other", other_branch)]


def test_added_branch(branchy):
    listing = objdump(branchy[0])
    v_mov = [a for a, t in listing if t.startswith("v_mov_b32_e32 v0")][0]
    broken = patched_word(branchy[0], v_mov, build.sopp("s_branch", 0, "gfx1030"))
    problems = check_branches(co(branchy[0]), co(broken))
    assert [(p.kind, p.unit, p.new_address) for p in problems] == [(ADDED_BRANCH, "k_other", v_mov)]


def test_kernel_entry_is_checked(branchy):
    c = co(branchy[1])
    k = c.kernel("k_branchy")
    kd = k.descriptor.copy()
    kd.kernel_code_entry_byte_offset = kd.kernel_code_entry_byte_offset + 8
    data = bytearray(read(branchy[1]))
    data[k.descriptor_offset:k.descriptor_offset + 64] = kd.to_bytes()
    problems = check_branches(co(branchy[0]), co(bytes(data)))
    assert [(p.kind, p.unit, p.new_address) for p in problems] == [(ENTRY, "k_branchy", k.entry + 8)]
