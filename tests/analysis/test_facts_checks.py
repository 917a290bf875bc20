"""Encoding checks run per opcode (issue 14): a check registered with
``may_find`` (:func:`kpatch.analysis.facts.register_encoding_check`) runs
only for the opcodes that say it may find something; the facts are the
same as with every check run on every encoding (:func:`facts_by_registers`,
the definition).  Encodings from llvm-mc-16 -mcpu=gfx1030 -show-encoding."""

from __future__ import annotations

import kpatch.analysis.detectors  # noqa: F401  (registers the encoding checks)
import kpatch.analysis.detectors.encoding as enc_mod
import kpatch.analysis.detectors.isa as isa_mod
import kpatch.analysis.facts as facts_mod
from kpatch.analysis.facts import Facts, facts_by_registers
from kpatch.analysis.flow import COND, JUMP
from kpatch.isa import decode_one

from tests.analysis.test_facts_plans import _fresh, _sample_insts, mismatches

#: (llvm-mc-16's text, its gfx1030 encoding, the class gfx1010's reading finds or None)
CASES = [
    ("v_dot4_i32_i8 v0, v1, v2, v3", "00 40 16 cc 01 05 0e 1c", "UnsupportedInstruction"),
    ("scratch_load_dword v0, off, off", "00 40 30 dc 00 00 7f 00", "UnsupportedInstruction"),
    ("s_getreg_b32 s0, hwreg(HW_REG_SHADER_CYCLES)", "1d f8 00 b9", "UnsupportedInstruction"),
    ("v_fmac_legacy_f32_e32 v0, v1, v2", "01 05 00 0c", "OpcodeReuse"),
    ("s_mov_b32 s0, s1", "01 03 80 be", None),
    ("v_add_nc_u32_e32 v0, v1, v2", "01 05 00 4a", None),
    ("global_load_dword v0, v[2:3], off", "00 80 30 dc 02 00 7d 00", None),
]


def _inst(hexbytes: str):
    return decode_one(bytes.fromhex(hexbytes), "gfx1030")


def _local_classes(f) -> set:
    return {r[0] for r in f.local}


def test_findings_as_by_every_check(monkeypatch):
    monkeypatch.setattr(facts_mod, "_OP_FACTS", {})
    for text, hexbytes, cls in CASES:
        inst = _inst(hexbytes)
        ref = Facts.__new__(Facts)
        facts_by_registers(ref, _fresh(inst))
        assert (cls in _local_classes(ref)) if cls else not ref.local, text
        assert mismatches([inst])[0] == [], text


def test_checks_decided_per_opcode(monkeypatch):
    """gfx1010's reading is not run for an opcode gfx1010 reads alike
    (s_mov_b32, v_add_nc_u32), is for one it does not (v_dot4) and for the
    FLAT and hwreg opcodes whatever gfx1010 reads (decided by their
    fields); the check of s_inst_prefetch and unknown words only for them."""
    monkeypatch.setattr(facts_mod, "_OP_FACTS", {})
    checks = {}
    for text, hexbytes, _ in CASES:
        inst = _inst(hexbytes)
        Facts(inst)
        checks[text.split()[0]] = facts_mod._OP_FACTS[(id(inst.d.info), inst.d.kind)].checks
    for mn in ("v_dot4_i32_i8", "scratch_load_dword", "s_getreg_b32", "v_fmac_legacy_f32_e32",
               "global_load_dword"):
        assert isa_mod._gfx1010_reading in checks[mn], mn
    for mn in ("s_mov_b32", "v_add_nc_u32_e32"):
        assert isa_mod._gfx1010_reading not in checks[mn], mn
    assert all(isa_mod._own_target not in c for c in checks.values())
    prefetch = _inst("01 00 a0 bf")
    Facts(prefetch)
    assert isa_mod._own_target in facts_mod._OP_FACTS[(id(prefetch.d.info), prefetch.d.kind)].checks
    # gfx1010 code: gfx1010's reading of it is never asked for
    g = decode_one(bytes.fromhex("01 05 00 0c"), "gfx1010")
    Facts(g)
    assert isa_mod._gfx1010_reading not in facts_mod._OP_FACTS[(id(g.d.info), g.d.kind)].checks


def _broken(monkeypatch, may_find) -> None:
    monkeypatch.setattr(facts_mod, "_OP_FACTS", {})
    monkeypatch.setitem(facts_mod.MAY_FIND, isa_mod._gfx1010_reading, may_find)


def test_catches_a_filter_that_skips_fields(monkeypatch):
    # the FLAT / hwreg exception forgotten: scratch ST mode unseen (s_getreg's
    # hwreg names differ between the targets: not read alike, still checked)
    def may_find(o, d):
        return d.target != "gfx1010" and not o.cls & facts_mod.UNKNOWN and (
            isa_mod._read_alike(d.target).get(id(d.info)) is not d.info)
    _broken(monkeypatch, may_find)
    bad, _ = mismatches([_inst(h) for _, h, _ in CASES])
    assert {t.split()[0] for t, name, _, _ in bad if name == "local"} == {"scratch_load_dword"}


def test_catches_a_filter_that_skips_all(monkeypatch):
    _broken(monkeypatch, lambda o, d: False)
    bad, _ = mismatches(_sample_insts() + [_inst(h) for _, h, _ in CASES])
    assert "local" in {name for _, name, _, _ in bad}


#: The gfx101x bugs detectors/encoding.py finds by an encoding's fields (llvm-mc-16 -mcpu=gfx1030
#: -show-encoding), each with a neighbour it does not find it in.
ENCODING_CASES = [
    ("s_branch 63", "3f 00 82 bf", "Offset3fBug"),
    ("s_cbranch_scc0 63", "3f 00 84 bf", "Offset3fBug"),
    ("s_branch 64", "40 00 82 bf", None),
    ("flat_load_dword v0, v[2:3] offset:4", "04 00 30 dc 02 00 7d 00", "FlatSegmentOffsetBug"),
    ("scratch_load_dword v0, v1, off offset:-3", "fd 4f 30 dc 01 00 7d 00", "NegativeUnalignedScratchOffsetBug"),
    ("global_load_dword v0, v[2:3], off offset:8", "08 80 30 dc 02 00 7d 00", None),
]


def test_encoding_bugs_as_by_every_check(monkeypatch):
    """detectors/encoding.py's check, run only for branches and FLAT
    (its ``may_find``), finds what it finds run on every encoding."""
    monkeypatch.setattr(facts_mod, "_OP_FACTS", {})
    for text, hexbytes, cls in ENCODING_CASES:
        inst = _inst(hexbytes)
        ref = Facts.__new__(Facts)
        facts_by_registers(ref, _fresh(inst))
        assert (cls in _local_classes(ref)) if cls else not ref.local, text
        assert mismatches([inst])[0] == [], text
    # not run for the other opcodes
    inst = _inst("01 05 00 4a")  # v_add_nc_u32_e32 v0, v1, v2
    Facts(inst)
    assert enc_mod._check not in facts_mod._OP_FACTS[(id(inst.d.info), inst.d.kind)].checks


def test_encoding_filter_on_real_code(monkeypatch):
    """On every encoding of the sample kernel DB the filtered check gives
    the facts of the unfiltered one."""
    monkeypatch.setattr(facts_mod, "_OP_FACTS", {})
    bad, _ = mismatches(_sample_insts())
    assert bad == []


def _broken_encoding_filter(monkeypatch, may_find) -> set:
    monkeypatch.setattr(facts_mod, "_OP_FACTS", {})
    monkeypatch.setitem(facts_mod.MAY_FIND, enc_mod._check, may_find)
    bad, _ = mismatches([_inst(h) for _, h, _ in ENCODING_CASES])
    return {t for t, name, _, _ in bad if name == "local"}


def test_catches_an_encoding_filter_without_flat(monkeypatch):
    assert _broken_encoding_filter(monkeypatch, lambda o, d: o.flow in (JUMP, COND)) == {
        "flat_load_dword v0, v[2:3] offset:4", "scratch_load_dword v0, v1, off offset:-3"}


def test_catches_an_encoding_filter_without_conditional_branches(monkeypatch):
    assert _broken_encoding_filter(monkeypatch, lambda o, d: o.flow == JUMP or bool(o.cls & facts_mod.FLAT)) == {
        "s_cbranch_scc0 63"}
