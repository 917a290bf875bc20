"""Control-flow graphs of assembled snippets: block starts are the labels
llvm-mc-16 placed (read from its symbol table), edges follow the SOPP
branch rule (address + 4 + simm16 * 4) and fall-through."""

from __future__ import annotations

import pytest

from kpatch.analysis.cfg import build_cfg, sopp_target
from kpatch.analysis.facts import facts_of
from kpatch.isa import decode
from tests.analysis.asm import assemble

pytestmark = pytest.mark.llvm

PROGRAM = """
entry:
  s_mov_b32 s0, 0
loop:
  v_add_f32 v0, v0, v1
  s_add_u32 s0, s0, 1
  s_cmp_lt_u32 s0, 10
  s_cbranch_scc1 loop
after:
  s_cbranch_execz skip
load:
  global_load_dword v2, v[0:1], off
skip:
  s_swappc_b64 s[30:31], s[4:5]
  s_branch end
dead:
  s_nop 0
end:
  s_endpgm
"""
BASE = 0x1000


def _cfg(source: str, func_labels=("entry",)):
    code, labels = assemble(source)
    insts = decode(code, "gfx1030", BASE)
    facts = facts_of(insts, "gfx1030")
    starts = [next(k for k, i in enumerate(insts) if i.address == BASE + labels[n]) for n in func_labels]
    return build_cfg(insts, facts, starts), labels, insts


def _block_of_label(cfg, labels, name):
    a = BASE + labels[name]
    k = next(k for k, i in enumerate(cfg.insts) if i.address == a)
    assert cfg.block_start[cfg.block_at(k)] == k, f"{name} does not start a block"
    return cfg.block_at(k)


def test_blocks_start_at_labels():
    cfg, labels, insts = _cfg(PROGRAM)
    starts = sorted(insts[k].address - BASE for k in cfg.block_start.tolist())
    assert starts == sorted(labels[n] for n in ("entry", "loop", "after", "load", "skip", "dead", "end"))


def test_edges_and_back_edges():
    cfg, labels, _ = _cfg(PROGRAM)
    b = {n: _block_of_label(cfg, labels, n) for n in ("entry", "loop", "after", "load", "skip", "dead", "end")}
    succ = {n: sorted(cfg.succs(i)) for n, i in b.items()}
    assert succ == {
        "entry": [b["loop"]],
        "loop": sorted([b["after"], b["loop"]]),  # fall-through and the branch back
        "after": sorted([b["load"], b["skip"]]),
        "load": [b["skip"]],
        "skip": [b["end"]],  # the call returns; s_branch goes to end only
        "dead": [b["end"]],
        "end": [],
    }
    assert cfg.back_edges() == {(b["loop"], b["loop"])}
    assert cfg.backward_edge_count(0) == 1
    assert cfg.preds[b["end"]] == sorted([b["skip"], b["dead"]])


def test_calls_and_branch_targets():
    cfg, labels, insts = _cfg(PROGRAM)
    assert [insts[k].address for k in cfg.calls] == [BASE + labels["skip"]]
    assert cfg.indirect == [] and cfg.bad_targets == []
    # every branch's target (address + 4 + simm16 * 4) is the label it names
    targets = {i.address: sopp_target(i.address, i.fields["simm16"]) for i in insts
               if i.mnemonic in ("s_cbranch_scc1", "s_cbranch_execz", "s_branch")}
    assert sorted(targets.values()) == sorted(BASE + labels[n] for n in ("loop", "skip", "end"))


def test_no_edge_between_functions():
    src = """
f0:
  s_cbranch_scc0 f1
  s_nop 0
  s_setpc_b64 s[30:31]
f1:
  s_nop 0
  s_endpgm
"""
    cfg, labels, insts = _cfg(src, ("f0", "f1"))
    f1 = _block_of_label(cfg, labels, "f1")
    assert all(f1 not in cfg.succs(b) for b in range(cfg.nblocks))  # neither the branch nor a fall-through
    assert [(insts[k].address, t) for k, t in cfg.bad_targets] == [(BASE, BASE + labels["f1"])]
    assert [insts[k].address for k in cfg.indirect] == [BASE + 8]
    assert list(cfg.function_blocks(1)) == [f1]


def test_branch_into_the_middle_of_an_instruction():
    """A target that is not an instruction boundary gets no edge."""
    # s_branch 1 -> address + 8: the literal of the s_mov_b32 after it
    code, _ = assemble("s_branch 1\ns_mov_b32 s0, 0x12345678\ns_endpgm\n")
    insts = decode(code, "gfx1030", BASE)
    assert [i.mnemonic for i in insts] == ["s_branch", "s_mov_b32", "s_endpgm"]
    cfg = build_cfg(insts, facts_of(insts, "gfx1030"))
    assert cfg.bad_targets == [(0, BASE + 8)]
    assert cfg.succs(0) == []
