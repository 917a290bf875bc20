"""Insertions that move code, checked against LLVM's tools by an independent aligner."""

from __future__ import annotations

import os

import pytest

from rw_common import (CALLS, FIXTURES, ISA_DIFFERENCES, MARK_AFTER, MARK_BEFORE, NOP6, NOP7, RELOC,
                       ROCPRIM, fixture_objects, function_lines, need, read, readelf_notes,
                       spread_edits, write_tmp)
from rw_oracle import branch_target, check_rewrite, load_with_pyelftools, objdump, readelf
from kpatch.rewrite.edits import Edit
from kpatch.rewrite.relocate import apply_edits

#: kernels each object must refuse when code moves (see tests/rewrite/data/*.s / .hip)
EXPECTED_REFUSED = {
    "calls.hip.gfx1030.hsaco": {"k_fptr"},  # call through a pointer loaded from memory
    # k_main shares helper with k_indirect; k_setpc jumps to a loaded address
    "reloc_cases.gfx1030.hsaco": {"k_indirect", "k_main", "k_setpc"},
}


def _check(old: str, new: str, result, markers=frozenset({MARK_BEFORE}), landing=None):
    al = check_rewrite(old, new, markers, landing)
    assert al.problems == [], al.problems[:10]
    # kpatch's own address map agrees with the aligner's
    wrong = {a: (n, result.address_map.get(a)) for a, n in al.map.items()
             if result.address_map.get(a) != n}
    assert not wrong, list(wrong.items())[:5]
    out, err = readelf(new, "-a", "--wide")
    assert err == "" and "warning" not in out.lower()
    assert load_with_pyelftools(new) > 0
    assert readelf_notes(new) == readelf_notes(old)
    return al


@pytest.mark.parametrize("path", fixture_objects(), ids=os.path.basename)
def test_insert_before_every_third_instruction_targets_and_getpc(path, tmp_path):
    need("llvm-objdump-16")
    edits = spread_edits(path, 3)
    r = apply_edits(read(path), "gfx1030", edits)
    new = write_tmp(tmp_path, "new.hsaco", r.data)
    al = _check(path, new, r)
    refused = {x.kernel for x in r.refused}
    assert refused == EXPECTED_REFUSED.get(os.path.basename(path), set())
    # every edit of a kernel that was not refused is in the output, once
    markers = sum(1 for x in objdump(new) if x.text == MARK_BEFORE)
    assert markers == len(r.applied) == len(r.inserted)
    assert r.relocations["text_growth"] >= 0 and len(al.map) > 0
    # refused kernels keep their code (aligned with no marker inside)
    funcs = function_lines(new)
    for k in refused:
        assert all(x.text != MARK_BEFORE for x in funcs[k])


@pytest.mark.parametrize("path", [RELOC, CALLS, os.path.join(FIXTURES, "miopen_like.cl.gfx1030.v5.hsaco")],
                         ids=os.path.basename)
def test_insert_after_does_not_catch_branches(path, tmp_path):
    """Code inserted after X runs after X; a branch to the next instruction skips it."""
    lines = [x for ls in function_lines(path).values() for x in ls]
    edits = [Edit(x.addr, "insert_after", NOP6, "after") for x in lines[::4]]
    edits += [Edit(x.addr, "insert_after", NOP6 + NOP6, "after") for x in lines
              if branch_target(x) is not None]
    edits += [Edit(x.addr, "insert_before", NOP7, "before") for x in lines[2::5]]
    r = apply_edits(read(path), "gfx1030", edits)
    new = write_tmp(tmp_path, "new.hsaco", r.data)
    _check(path, new, r, {MARK_BEFORE, MARK_AFTER}, {MARK_BEFORE})


def test_growth_past_the_page_moves_data_and_keeps_references(tmp_path):
    """8 KiB more code: .dynamic and .data move to new addresses; the getpc
    references into .data, the symbols, DT_* entries and segments follow."""
    lines = function_lines(RELOC)["k_plain"]
    edits = [Edit(lines[6].addr, "insert_before", NOP7 * 2048, "big")]
    r = apply_edits(read(RELOC), "gfx1030", edits)
    new = write_tmp(tmp_path, "new.hsaco", r.data)
    _check(RELOC, new, r)
    from rw_oracle import sections
    old_s, new_s = sections(RELOC), sections(new)
    assert new_s[".data"].addr > old_s[".data"].addr
    assert new_s[".dynamic"].addr > old_s[".dynamic"].addr
    assert new_s[".rodata"].addr == old_s[".rodata"].addr
    assert r.relocations["getpc_literals_fixed"] >= 1
    out, _ = readelf(new, "-d", "-l", "--wide")
    dt = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].startswith("0x") and parts[1].startswith("("):
            dt[parts[1].strip("()")] = parts[2]
    assert int(dt["SYMTAB"], 16) == new_s[".dynsym"].addr
    assert int(dt["STRTAB"], 16) == new_s[".dynstr"].addr
    assert int(dt["HASH"], 16) == new_s[".hash"].addr
    assert int(dt["GNU_HASH"], 16) == new_s[".gnu.hash"].addr
    for line in out.splitlines():
        p = line.split()
        if p and p[0] == "LOAD":
            off, vaddr, align = int(p[1], 16), int(p[2], 16), int(p[-1], 16)
            assert off % align == vaddr % align
    # segment -> section mapping unchanged
    def mapping(p):
        text = readelf(p, "-l", "--wide")[0].split("Section to Segment mapping:")[1]
        return [line.split() for line in text.splitlines() if line.strip()]
    assert mapping(new) == mapping(RELOC)


def test_relative64_relocations_follow_moved_functions_and_data(tmp_path):
    """calls.hip: the function-pointer table in .data holds R_AMDGPU_RELATIVE64
    relocations to f_a/f_b; growth moves .data and the functions."""
    lines = function_lines(CALLS)
    edits = [Edit(lines["k_calls"][3].addr, "insert_before", NOP7 * 1100, "big"),
             Edit(lines["_Z3f_af"][0].addr, "insert_before", NOP7, "entry")]
    r = apply_edits(read(CALLS), "gfx1030", edits)
    new = write_tmp(tmp_path, "new.hsaco", r.data)
    al = _check(CALLS, new, r)
    from rw_oracle import sections
    old_s, new_s = sections(CALLS), sections(new)

    def relocs(p):
        out, _ = readelf(p, "-r", "--wide")
        rows = [line.split() for line in out.splitlines() if "R_AMDGPU_RELATIVE64" in line]
        return [(int(x[0], 16), int(x[-1], 16)) for x in rows]

    old_r, new_r = relocs(CALLS), relocs(new)
    assert len(old_r) == len(new_r) == 2
    shift = new_s[".data"].addr - old_s[".data"].addr
    assert shift > 0
    for (o_off, o_add), (n_off, n_add) in zip(old_r, new_r):
        assert n_off == o_off + shift
        assert n_add == al.landing[o_add]
    assert r.relocations["relocations_fixed"] == 2


def test_growth_inside_the_page_keeps_later_addresses(tmp_path):
    """A few words: .text grows into its page; the file makes room, addresses after stay."""
    path = os.path.join(FIXTURES, "miopen_like.cl.gfx1030.v4.hsaco")
    lines = function_lines(path)["MIOpenSumSq"]
    r = apply_edits(read(path), "gfx1030", [Edit(lines[1].addr, "insert_before", NOP7 * 40, "t")])
    new = write_tmp(tmp_path, "new.hsaco", r.data)
    _check(path, new, r)
    from rw_oracle import sections
    old_s, new_s = sections(path), sections(new)
    assert new_s[".dynamic"].addr == old_s[".dynamic"].addr
    assert new_s[".dynamic"].offset > old_s[".dynamic"].offset
    assert new_s[".text"].size == old_s[".text"].size + 160


def test_oracle_detects_a_broken_branch(tmp_path):
    """The checker can fail: corrupt one retargeted branch of a correct rewrite."""
    edits = spread_edits(RELOC, 4)
    r = apply_edits(read(RELOC), "gfx1030", edits)
    new_lines = objdump(write_tmp(tmp_path, "ok.hsaco", r.data))
    br = next(x for x in new_lines if x.mnemonic == "s_cbranch_scc1")
    from rw_oracle import sections
    text = sections(os.path.join(str(tmp_path), "ok.hsaco"))[".text"]
    at = text.offset + br.addr - text.addr
    bad = bytearray(r.data)
    bad[at] = (bad[at] + 1) & 0xFF
    p = write_tmp(tmp_path, "bad.hsaco", bytes(bad))
    assert check_rewrite(RELOC, p, {MARK_BEFORE}).problems


LIBROCRAND = os.path.join(os.path.dirname(FIXTURES), "..", "..", "kdb_cache", "root", "usr", "lib",
                          "x86_64-linux-gnu", "librocrand.so.1.1")


def _rocrand_gfx1030(tmp_path) -> str:
    from kpatch.containers.bundle import open_bundle_bytes
    from kpatch.containers.hostelf import find_fatbin_bundles
    lib = os.path.normpath(LIBROCRAND)
    if not os.path.exists(lib):
        pytest.skip("corpus not fetched (tools/fetch_corpus.sh)")
    b = find_fatbin_bundles(lib)[0]
    with open(lib, "rb") as f:
        f.seek(b.offset)
        raw = f.read(b.size)
    _, bundle, entries = open_bundle_bytes(raw)
    e = next(e for e in entries if e.target_id == "gfx1030")
    return write_tmp(tmp_path, "rocrand.gfx1030.hsaco", bytes(e.data(bundle)))


@pytest.mark.corpus
def test_librocrand_gfx1030_object(tmp_path):
    """A large compiler-made object: 44k instructions, 77 kernels, getpc data references,
    debug sections; an insertion every 7th instruction plus at every branch target."""
    path = _rocrand_gfx1030(tmp_path)
    r = apply_edits(read(path), "gfx1030", spread_edits(path, 7))
    new = write_tmp(tmp_path, "new.hsaco", r.data)
    al = _check(path, new, r)
    assert r.refused == []
    assert r.relocations["descriptors_fixed"] > 50
    assert r.relocations["getpc_literals_fixed"] == 6
    assert r.relocations["debug_sections_stale"] == 7
    assert len(al.map) > 40000


def test_rocprim_build(tmp_path):
    """The rocPRIM gfx1030 build (165k instructions, 9k branches, 181 kernels)."""
    if not os.path.exists(ROCPRIM):
        pytest.skip("no rocPRIM gfx1030 fixture")
    r = apply_edits(read(ROCPRIM), "gfx1030", spread_edits(ROCPRIM, 11))
    new = write_tmp(tmp_path, "new.hsaco", r.data)
    _check(ROCPRIM, new, r)
    assert r.refused == []
    assert r.relocations["descriptors_fixed"] > 150


def test_object_with_a_word_kpatch_cannot_decode(tmp_path):
    """Code kpatch cannot decode pins the object: size-changing edits are refused
    ('immovable'), nothing else changes; and whatever is written is consistent."""
    if not os.path.exists(ISA_DIFFERENCES):
        pytest.skip("no hazard fixtures")
    r = apply_edits(read(ISA_DIFFERENCES), "gfx1030", spread_edits(ISA_DIFFERENCES, 3))
    assert {x.kind for x in r.refused} <= {"immovable"}
    new = write_tmp(tmp_path, "new.hsaco", r.data)
    _check(ISA_DIFFERENCES, new, r)


def test_moving_code_makes_no_whole_object_lists_and_the_address_map_on_request():
    """The layout's per-instruction tables stay numpy columns while the
    object is rewritten (a Python list or dict of every instruction costs
    ~40-100 bytes each: hundreds of MiB on a Tensile library); the old ->
    new address map is made only when asked for, and then agrees with the
    layout's columns."""
    import kpatch.rewrite.relocate as relocate
    from kpatch.rewrite import textlayout
    made = []
    real = textlayout.layout_text

    def spy(*a, **k):
        made.append(real(*a, **k))
        return made[-1]

    relocate.layout_text = spy
    try:
        r = apply_edits(read(RELOC), "gfx1030", spread_edits(RELOC, 3))
    finally:
        relocate.layout_text = real
    assert made and r.relocations["text_growth"] > 0
    for lay in made:
        assert lay._lists == {} and lay._amap is None
    assert not isinstance(r.__dict__["_address_map"], dict)
    lay = made[-1]
    want = dict(zip([i.address for i in lay.scan.insts], lay.new_addr_array.tolist()))
    assert r.address_map == want and r.address_map is r.address_map


def test_inserted_snippet_is_checked_once_not_per_place(monkeypatch):
    """Whether inserted code holds a PC-relative instruction is asked once per
    distinct snippet (issue 14: hundreds of thousands of insertions of a few
    snippets over the corpus DB), and the answer still refuses such code."""
    from kpatch.rewrite import relocate

    for cached in ("_pc_relative_in", "_decode_snippet"):  # (answers of earlier tests forgotten)
        if hasattr(relocate, cached):
            getattr(relocate, cached).cache_clear()
    edits = spread_edits(RELOC, 3)
    assert len(edits) > 20
    asked = []
    real = relocate.is_pc_relative
    monkeypatch.setattr(relocate, "is_pc_relative", lambda i: asked.append(i.address) or real(i))
    r = apply_edits(read(RELOC), "gfx1030", edits)
    assert r.data != read(RELOC)
    assert len([a for a in asked if a == 0]) <= 1  # the s_nop 7 snippet (decoded at 0), once
    # a branch in inserted code is still refused, at each place
    f = function_lines(RELOC)["k_plain"]
    branch = bytes.fromhex("000082bf")  # s_branch 0 (llvm-mc-16 -show-encoding: [0x00,0x00,0x82,0xbf])
    r = apply_edits(read(RELOC), "gfx1030", [Edit(f[1].addr, "insert_before", branch, "b")])
    assert [x.kind for x in r.refused] == ["edit-pc-relative"] and "s_branch" in r.refused[0].reason
