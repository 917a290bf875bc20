"""diff_objects / diff_inputs on real code objects and patched variants made
without the rewriter; expected values from llvm-objdump-16, llvm-readelf-16
and the construction."""

from __future__ import annotations

import json
import os
from urllib.parse import unquote

import pytest

from kpatch.codeobject import CodeObject
from kpatch.containers.kdb import write_kdb
from kpatch.isa import decode_one, encode
from kpatch.diff.align import CHANGED, EQUAL, INSERTED, REMOVED, FieldChange
from kpatch.diff.compare import DiffReport, build_report, diff_inputs, diff_objects, report_json

from .conftest import (
    ASM_V4, ASM_V5, objdump, objdump_kd, read, readelf_flags, readelf_symbols, text_file_offset, write)


def rows_of(d, kind=None):
    return [r for u in d.units for r in u.rows if kind is None or r.kind == kind]


def unit(d, name):
    return next(u for u in d.units if u.name == name)


def flip_glc(path: str) -> tuple[bytes, list[int]]:
    """The object with glc cleared on every load llvm-objdump shows with glc."""
    data = bytearray(read(path))
    off = text_file_offset(path)
    done = []
    for addr, text in objdump(path):
        mnem = text.split(" ", 1)[0]
        if "_load_" in mnem and " glc" in f" {text} ":
            inst = decode_one(bytes(data[off + addr:off + addr + 16]), "gfx1030", addr)
            new = encode(inst, glc=0)
            data[off + addr:off + addr + len(new)] = new
            done.append(addr)
    return bytes(data), done


def test_flipped_cache_bits_show_as_exactly_those_field_changes(tmp_path):
    patched, addrs = flip_glc(ASM_V4)
    assert len(addrs) == 2  # global_load_dword ... glc slc dlc, buffer_load_dword ... glc
    out = write(str(tmp_path / "glc.co"), patched)
    after = dict(objdump(out))
    d = diff_objects(read(ASM_V4), patched)
    assert d.error is None and not d.identical
    changed = rows_of(d, CHANGED)
    assert sorted(r.old.address for r in changed) == addrs
    for r in changed:
        assert r.changes == [FieldChange("glc", 1, 0)]
        assert r.new.text() == after[r.new.address]
    assert not rows_of(d, INSERTED) and not rows_of(d, REMOVED)
    assert d.header == d.layout == d.symbols == d.metadata == d.notes == []
    assert all(u.descriptor == [] for u in d.units)
    assert d.problems == []
    assert d.relocation["instructions changed"] == 2
    assert unit(d, "asm_lds_swap").status == "identical"


def test_relabelled_e_flags_show_in_the_header_and_in_the_decoding(tmp_path):
    data = bytearray(read(ASM_V4))
    data[48:52] = (0x233).to_bytes(4, "little")  # EF_AMDGPU_MACH gfx1010, xnack off (V4)
    out = write(str(tmp_path / "relabel.co"), bytes(data))
    old_flags, new_flags = readelf_flags(ASM_V4), readelf_flags(out)
    d = diff_objects(read(ASM_V4), bytes(data))
    assert FieldChange("e_flags", old_flags, new_flags) in d.header
    assert FieldChange("target", "gfx1030", "gfx1010:xnack-") in d.header
    assert (d.old_decode, d.new_decode) == ("gfx1030", "gfx1010")
    # code: exactly where llvm-objdump's two decodings of the same bytes differ
    as1030 = dict(objdump(ASM_V4, "gfx1030"))
    as1010 = dict(objdump(out, "gfx1010"))
    differ = sorted(a for a in as1030 if as1030[a] != as1010[a])
    assert differ  # v_fmac_legacy_f32 (gfx1030) is v_mac_legacy_f32 on gfx1010
    changed = rows_of(d, CHANGED)
    assert sorted(r.old.address for r in changed) == differ
    for r in changed:
        assert r.old.raw == r.new.raw
        assert (r.old.text(), r.new.text()) == (as1030[r.old.address], as1010[r.new.address])
        assert FieldChange("same bytes, decoded as", "gfx1030", "gfx1010") in r.changes
    # decoded with the same table, the code is the same
    same = diff_objects(read(ASM_V4), bytes(data), new_target="gfx1030")
    assert rows_of(same, CHANGED) == [] and same.header == d.header


def test_inserted_instruction_and_relocated_branches(branchy):
    old_list, new_list = objdump(branchy[0]), objdump(branchy[1])
    d = diff_objects(read(branchy[0]), read(branchy[1]))
    k = unit(d, "k_branchy")
    ins = [r for r in k.rows if r.kind == INSERTED]
    depctr = [(a, t) for a, t in new_list if t.startswith("s_waitcnt_depctr")]
    assert [(r.new.address, r.new.text()) for r in ins] == depctr
    assert rows_of(d, INSERTED) == ins and rows_of(d, REMOVED) == []
    # the branches around it: same target, new offsets (from llvm-objdump's text)
    old_br = [(a, t) for a, t in old_list if t.startswith("s_cbranch")]
    new_br = [(a, t) for a, t in new_list if t.startswith("s_cbranch")]
    expect = [(o[0], n[0], [FieldChange("simm16", int(o[1].split()[1]), int(n[1].split()[1]))])
              for o, n in zip(old_br, new_br) if o[1] != n[1]]
    assert len(expect) == 2
    changed = [r for r in k.rows if r.kind == CHANGED]
    assert [(r.old.address, r.new.address, r.changes) for r in changed] == expect
    assert all(r.relocated for r in changed)
    # every other row pairs identical text (objdump's)
    old_t, new_t = dict(old_list), dict(new_list)
    for r in k.rows:
        if r.kind == EQUAL:
            assert old_t[r.old.address] == new_t[r.new.address] == r.new.text()
    assert d.problems == []
    assert k.counts == {EQUAL: 8, CHANGED: 0, INSERTED: 1, REMOVED: 0, "relocated": 2}
    # symbols from llvm-readelf-16
    so, sn = readelf_symbols(branchy[0]), readelf_symbols(branchy[1])
    want = []
    for key in so:
        if key in sn and key[1] != "VARIANT":
            if so[key][0] != sn[key][0]:
                want.append((f"{key[0]} {key[1]} value", so[key][0], sn[key][0]))
            if so[key][1] != sn[key][1]:
                want.append((f"{key[0]} {key[1]} size", so[key][1], sn[key][1]))
    got = [(c.name, c.old, c.new) for c in d.symbols if "VARIANT" not in c.name]
    assert sorted(got) == sorted(want)
    assert ("helper" in " ".join(n for n, _, _ in got)) and unit(d, "helper").status == "identical"
    assert d.relocation["branches relocated"] == 2 and d.relocation["instructions inserted"] == 1
    n_branches = sum(1 for _, t in old_list if t.split(" ", 1)[0] in ("s_branch", "s_call_b64")
                     or t.startswith("s_cbranch_"))
    assert d.relocation["branches checked"] == n_branches == 4


def test_descriptor_bit_change_matches_llvm_objdump(tmp_path):
    c = CodeObject.from_bytes(read(ASM_V4))
    k = c.kernel("asm_lds_swap")
    kd = k.descriptor.copy()
    kd.set("WGP_MODE", 1 - kd.get("WGP_MODE"))
    data = bytearray(read(ASM_V4))
    data[k.descriptor_offset:k.descriptor_offset + 64] = kd.to_bytes()
    out = write(str(tmp_path / "cu.co"), bytes(data))
    before, after = objdump_kd(ASM_V4, "asm_lds_swap.kd"), objdump_kd(out, "asm_lds_swap.kd")
    assert {x: (before[x], after[x]) for x in before if before[x] != after[x]} == {
        ".amdhsa_workgroup_processor_mode": (before[".amdhsa_workgroup_processor_mode"],
                                             after[".amdhsa_workgroup_processor_mode"])}
    d = diff_objects(read(ASM_V4), bytes(data))
    u = unit(d, "asm_lds_swap")
    assert u.descriptor == [FieldChange("WGP_MODE", before[".amdhsa_workgroup_processor_mode"],
                                        after[".amdhsa_workgroup_processor_mode"])]
    assert u.status == "changed" and not u.code_changed
    assert unit(d, "asm_scale_loop").descriptor == []


def test_metadata_differences_v4_to_v5():
    # same source; V5 adds .uses_dynamic_stack and .workgroup_processor_mode
    # to each kernel and says amdhsa.version [1, 2] (asm_kernels.s)
    d = diff_objects(read(ASM_V4), read(ASM_V5))
    assert FieldChange("amdhsa.version[1]", 1, 2) in d.metadata
    for name in ("asm_scale_loop", "asm_lds_swap"):
        md = {c.name: (c.old, c.new) for c in unit(d, name).metadata}
        assert md == {".uses_dynamic_stack": (None, False), ".workgroup_processor_mode": (None, 1)}
    assert FieldChange("ei_abiversion", 2, 3) in d.header


def test_identical_objects():
    d = diff_objects(read(ASM_V4), read(ASM_V4))
    assert d.identical and d.error is None and d.units == []


def test_unreadable_side_is_an_error_not_an_exception():
    d = diff_objects(read(ASM_V4), b"\x7fELF" + bytes(60))
    assert d.error and not d.identical
    json.dumps(report_json(DiffReport("a", "b", [d])))


@pytest.fixture
def two_dbs(tmp_path):
    """A system DB with two entries keyed -mcpu=gfx1030, and a user DB
    holding one of them patched (glc cleared) under a -mcpu=gfx1010 key."""
    patched, _ = flip_glc(ASM_V4)
    src = str(tmp_path / "gfx1030_18.kdb")
    out = str(tmp_path / "gfx1010_18.ukdb")
    args = "-Wa,-defsym,ROCM_METADATA_VERSION=4 -mcumode -mwavefrontsize64 -mcpu=gfx1030"
    write_kdb(src, [("asm_kernels.s.o", args, read(ASM_V4)),
                    ("asm_kernels.s.o", args.replace("=4", "=5"), read(ASM_V5))], user=False)
    write_kdb(out, [("asm_kernels.s.o", args.replace("gfx1030", "gfx1010"), patched)], user=True)
    return src, out


def test_kernel_dbs_pair_by_key_across_mcpu(two_dbs):
    src, out = two_dbs
    rep = diff_inputs(src, out)
    assert len(rep.objects) == 1
    d = rep.objects[0]
    assert "ROCM_METADATA_VERSION=4" in unquote(d.old_uri) and unquote(d.old_uri).endswith("-mcpu=gfx1030")
    assert unquote(d.new_uri).endswith("-mcpu=gfx1010") and d.label.endswith("-mcpu=gfx1010]")
    assert len(rows_of(d, CHANGED)) == 2
    assert len(rep.only_old) == 1 and "ROCM_METADATA_VERSION=5" in rep.only_old[0]
    assert rep.only_new == [] and rep.problems == []
    assert rep.summary["changed"] == 1


def test_exact_keys_win_over_loose_ones(tmp_path):
    a = str(tmp_path / "a.kdb")
    b = str(tmp_path / "b.kdb")
    write_kdb(a, [("k.o", " -mcpu=gfx1030", read(ASM_V4)), ("k.o", " -mcpu=gfx1010", read(ASM_V5))], user=False)
    write_kdb(b, [("k.o", " -mcpu=gfx1010", read(ASM_V5)), ("k.o", " -mcpu=gfx1030", read(ASM_V4))], user=False)
    rep = diff_inputs(a, b)
    assert len(rep.objects) == 2 and all(o.identical for o in rep.objects)


def test_build_report_for_apply():
    patched, _ = flip_glc(ASM_V4)
    rep = build_report([("asm_kernels.s.o -mcpu=gfx1030", read(ASM_V4), patched)])
    assert rep.summary["changed_instructions"] == 2 and rep.objects[0].label.startswith("asm_kernels")
    doc = report_json(rep)
    assert json.loads(json.dumps(doc))["summary"]["changed_instructions"] == 2


def test_single_objects_and_uris(branchy):
    uri = "file://" + os.path.abspath(branchy[1])
    rep = diff_inputs(branchy[0], uri)
    assert len(rep.objects) == 1 and rep.objects[0].relocation["instructions inserted"] == 1
