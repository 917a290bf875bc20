"""Facts from per-opcode plans (issue 14): :class:`Facts` works out an
encoding's facts from what its opcode decides once (:class:`_OpFacts`, the
:class:`~kpatch.isa.regs.ScalarPlan` of its scalar registers) and must give,
attribute for attribute, what :func:`facts_by_registers` (the definition:
:class:`~kpatch.isa.regs.Reg` lists of ``registers()``) gives -- for every
distinct encoding of librocrand's gfx1030 code object and of the sample
kernel DB, and for random encodings; and the comparison catches plans that
are deliberately wrong."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kpatch.analysis.detectors  # noqa: F401  (registers the encoding checks: Facts.local)
import kpatch.analysis.facts as facts_mod
import kpatch.isa.regs as regs_mod
from kpatch.analysis.facts import Facts, facts_by_registers
from kpatch.isa import decode, decode_one
from kpatch.isa.instruction import Decoded, Instruction

from tests.conftest import LIBROCRAND, gfx1030_code_objects

COMPARED = tuple(s for s in Facts.__slots__ if s not in ("inst", "hz"))


def _fresh(inst) -> Instruction:
    """``inst`` with a Decoded of its own (nothing worked out yet)."""
    d = inst.d
    return Instruction(inst.address, Decoded(d.raw, d.fmt, d.info, d.kind, d.target))


def mismatches(insts) -> tuple[list, int]:
    """([(text, attribute, by plan, by registers)] where the two ways
    differ, how many encodings had a plan (did not fall back))."""
    out = []
    planned = 0
    for inst in insts:
        fast = Facts(_fresh(inst))
        ref = Facts.__new__(Facts)
        facts_by_registers(ref, _fresh(inst))
        o = facts_mod._OP_FACTS[(id(inst.d.info), inst.d.kind)]
        if o.plan is not None:
            planned += 1
        for name in COMPARED:
            a, b = getattr(fast, name), getattr(ref, name)
            if a != b or type(a) is not type(b):
                out.append((inst.text(), name, a, b))
    return out, planned


def _distinct(insts) -> list:
    seen = {}
    for i in insts:
        seen.setdefault((i.d.target, i.raw), i)
    return list(seen.values())


def _sample_insts() -> list:
    from kpatch.codeobject import CodeObject
    from kpatch.containers.discover import Found, discover
    from kpatch.data import expand
    out = []
    for item in discover([expand("@sample")]):
        if isinstance(item, Found):
            co = CodeObject.from_bytes(item.data)
            target = "gfx1010" if "gfx1010" in str(co.target) else "gfx1030"
            out.extend(decode(co.text, target, co.text_vaddr or 0))
    return _distinct(out)


def _rocrand_insts() -> list:
    if not os.path.exists(LIBROCRAND):
        pytest.skip("corpus not fetched (tools/fetch_corpus.sh)")
    out = []
    for co in gfx1030_code_objects(LIBROCRAND):
        out.extend(decode(co.text, "gfx1030", co.text_vaddr or 0))
    assert out, "no gfx1030 code in librocrand"
    return _distinct(out)


def test_sample_kdb_every_encoding():
    insts = _sample_insts()
    assert len(insts) > 300
    bad, planned = mismatches(insts)
    assert bad == []
    assert planned == len(insts)  # every opcode of the sample has a plan: the fast way was compared


def test_librocrand_every_encoding():
    insts = _rocrand_insts()
    assert len(insts) > 3000
    bad, planned = mismatches(insts)
    assert bad[:5] == []
    assert planned == len(insts)


def _opcodes(target: str) -> list:
    from kpatch.isa.tables import load
    ops = load(target).ops
    return [(target, fmt, key) for fmt in sorted(ops) for key in sorted(ops[fmt])]


_OPCODES = _opcodes("gfx1030") + _opcodes("gfx1010")


def _extra(info, src0, rest: bytes) -> bytes:
    """``rest``, its first dword made a plausible SDWA dword after an SDWA
    src0 (selects in range, reserved bits and the bits LLVM rejects set 0:
    else most are invalid)."""
    from kpatch.isa.formats import EXTRA_FORMATS
    if src0 != 0xF9 or info.sdwa is None:
        return rest
    fmtname, mods = info.fmt.name, info.sdwa.mods
    bits = int.from_bytes(rest[:4], "little")
    x = 0
    for f in EXTRA_FORMATS["SDWA_VOPC" if fmtname == "VOPC" else "SDWA"]:
        v = (bits >> f.lo) & f.mask
        if f.name.startswith("rsvd") or (f.width == 1 and mods.get(f"{f.name}=1") == "z"):
            v = 0
        elif f.name.endswith("_sel"):
            v %= 7
        elif f.name == "dst_unused":
            v %= 3
        x |= v << f.lo
    return x.to_bytes(4, "little") + rest[4:]


@settings(max_examples=4000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_OPCODES), st.integers(0, 2**64 - 1), st.sampled_from([None, 0xF9, 0xFA, 0xE9, 0xFF]),
       st.binary(min_size=16, max_size=16), st.integers(-1, 5))
def test_random_encodings(opcode, bits, src0, rest, cut):
    """Every opcode of both targets' tables with random field values (its
    zero fields 0, sometimes an SDWA/DPP/literal src0), followed by random
    dwords, cut at random: whatever the decoder reads there (unknown words
    and cut encodings too)."""
    from kpatch.isa.encoder import encode_fields
    from kpatch.isa.tables import load
    target, fmtname, key = opcode
    info = load(target).ops[fmtname][key]
    fields = {f.name: (bits >> f.lo) & f.mask for f in info.fmt.fields
              if f.name != "op" and not f.name.startswith("rsvd")}
    fields.update(info.form.zero)
    if src0 is not None and "src0" in fields:
        fields["src0"] = src0
    data = encode_fields(info.fmt, fields, opcode=key) + _extra(info, src0, rest)
    inst = decode_one(data[:info.fmt.size + 4 * cut] if cut >= 0 else data[:4], target)
    bad, _ = mismatches([inst])
    assert bad == []


# --- the comparison catches wrong plans -----------------------------------------


@pytest.fixture
def fresh_plans(monkeypatch):
    """Plans made anew (and dropped after the test)."""
    monkeypatch.setattr(facts_mod, "_OP_FACTS", {})


def _broken(monkeypatch, edit) -> None:
    real = regs_mod.scalar_plan

    def plan(d, writes=True):
        p = real(d, writes)
        return None if p is None else edit(p)
    monkeypatch.setattr(facts_mod, "scalar_plan", plan)


def _classes(bad) -> set:
    return {name for _, name, _, _ in bad}


def test_catches_missing_reads(monkeypatch, fresh_plans):
    # the fixed reads (EXEC of vector instructions, implicit M0/SCC/VCC) forgotten
    _broken(monkeypatch, lambda p: regs_mod.ScalarPlan(p.steps, 0, p.tail, p.size, p.extra))
    bad, _ = mismatches(_sample_insts())
    assert {"sreads", "reads_exec"} <= _classes(bad)


def test_catches_reads_taken_for_writes(monkeypatch, fresh_plans):
    # every field read taken as a write
    def edit(p):
        steps = tuple((regs_mod._W,) + s[1:] if s[0] == regs_mod._R else s for s in p.steps)
        return regs_mod.ScalarPlan(steps, p.reads, p.tail, p.size, p.extra)
    _broken(monkeypatch, edit)
    bad, _ = mismatches(_sample_insts())
    assert {"sreads", "sdefs"} <= _classes(bad)


def test_catches_implicit_writes_dropped(monkeypatch, fresh_plans):
    # the implicit writes (SCC of SALU, EXEC of v_cmpx, VCC) forgotten
    _broken(monkeypatch, lambda p: regs_mod.ScalarPlan(p.steps, p.reads, (), p.size, p.extra))
    bad, _ = mismatches(_sample_insts())
    assert "valu_sdst" in _classes(bad) or "writes_exec" in _classes(bad) or "sdefs" in _classes(bad)


def test_catches_wrong_register_table(monkeypatch, fresh_plans):
    # an SGPR pair's mask off by one register
    def edit(p):
        steps = tuple(s[:4] + ([None if e is None else (e[0] << 1, e[1]) for e in s[4]],) + s[5:]
                      if s[4] is not None else s for s in p.steps)
        return regs_mod.ScalarPlan(steps, p.reads, p.tail, p.size, p.extra)
    _broken(monkeypatch, edit)
    bad, _ = mismatches(_sample_insts())
    assert "sreads" in _classes(bad)


def test_catches_wrong_opcode_constant(monkeypatch, fresh_plans):
    # a per-opcode fact (SMEM expiry by an SALU) worked out wrong
    real = facts_mod._op_facts

    def op_facts(d):
        o = real(d)
        o.kill_smem = not o.kill_smem
        o.consts = facts_mod._consts(o)
        return o
    monkeypatch.setattr(facts_mod, "_op_facts", op_facts)
    bad, _ = mismatches(_sample_insts())
    assert "kill_smem" in _classes(bad)


def test_sdwa_compare_with_null_sdst():
    """``v_cmp_eq_u32_sdwa null, v1, v2`` (llvm-mc-16's encoding) writes no
    scalar register: its facts (and its register lists) name none -- they
    failed on a None among the writes before."""
    inst = decode_one(bytes([0xF9, 0x04, 0x84, 0x7D, 0x01, 0xFD, 0x06, 0x06]), "gfx1030")
    assert inst.mnemonic == "v_cmp_eq_u32_sdwa"
    assert None not in inst.writes and not any(r.file != "v" for r in inst.writes)
    f = Facts(inst)
    assert (f.valu_sdst, f.sdefs, f.valu_sgpr_def, f.writes_exec) == (0, 0, False, False)
    assert mismatches([inst]) == ([], 1)


def test_without_plans_the_definition(monkeypatch, fresh_plans):
    """Opcodes no plan describes get their facts from facts_by_registers."""
    monkeypatch.setattr(facts_mod, "scalar_plan", lambda d, writes=True: None)
    insts = _sample_insts()
    bad, planned = mismatches(insts)
    assert bad == [] and planned == 0
