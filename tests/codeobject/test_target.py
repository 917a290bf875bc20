"""The EF_AMDGPU_MACH table and e_flags <-> TargetId, checked against LLVM.

Oracle: tests/codeobject/data/readelf_mach_oracle.json, written by
tools/gen_mach_oracle.py from llvm-readobj-16 / llvm-readelf-19 on crafted
ELF headers and llvm-mc-16 / llvm-mc-19 on every processor they know; plus
the amdhsa.target string clang writes into real objects.
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kpatch.codeobject import CodeObject
from kpatch.codeobject.target import (
    MACH_BY_NAME, MACH_BY_VALUE, MACHS, TargetId, code_object_version_for_abi, e_flags_for,
    target_from_e_flags)
from kpatch.errors import FormatError, UsageError

from .conftest import CLANG15, DATA, compile_cl, read, run, tool

with open(os.path.join(DATA, "readelf_mach_oracle.json")) as _f:
    ORACLE = json.load(_f)
HEADERS = [dict(zip(ORACLE["header_fields"], row)) for row in ORACLE["headers"]]


def _readelf19(text: str) -> tuple[str | None, dict[str, str]]:
    """``0x73F, gfx90a, xnack+, sramecc`` -> ('gfx90a', {'xnack': '+', 'sramecc': 'any'})."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) < 2:
        return None, {}
    feats = {}
    for p in parts[2:]:
        if p.startswith("generic_v"):
            feats["generic"] = p[len("generic_v"):]
        elif p[-1] in "+-":
            feats[p[:-1]] = p[-1]
        else:
            feats[p] = "any"
    return parts[1], feats


def test_table_is_consistent():
    assert len(MACH_BY_VALUE) == len(MACHS) and len(MACH_BY_NAME) == len(MACHS)
    assert all(m.value & 0xFF == m.value and m.value for m in MACHS)
    assert MACH_BY_NAME["gfx1010"].value == 0x033 and MACH_BY_NAME["gfx1030"].value == 0x036
    assert MACH_BY_NAME["gfx10-1-generic"].value == 0x052


def test_every_mach_llvm_tools_know_is_in_the_table_with_their_names():
    known = set()
    for h in HEADERS:
        mach = h["e_flags"] & 0xFF
        enums = [n for n in h["readobj16"] if n.startswith("EF_AMDGPU_MACH_")]
        name19, _ = _readelf19(h["readelf19"])
        if not enums and not name19:
            continue
        known.add(mach)
        entry = MACH_BY_VALUE.get(mach)
        assert entry is not None, f"LLVM knows mach {mach:#x} ({enums} {name19})"
        if enums:
            assert enums == [entry.enum]
        if name19:
            assert name19 == entry.name
    # Values 1..0x10 (r600) and the AMDGCN ones up to gfx1201/gfx12-generic.
    assert len(known) >= 66
    # Values LLVM 16/19 do not know must come from newer LLVM (not reserved gaps).
    newer = {m.name for m in MACHS if m.value not in known}
    assert "gfx1030" not in newer and "gfx10-1-generic" not in newer


def test_generations_and_descriptor_layouts():
    major = {m.name: m.gfx_major for m in MACHS}
    assert (major["gfx600"], major["gfx90a"], major["gfx90c"], major["gfx1030"],
            major["gfx10-1-generic"], major["gfx1201"], major["r600"]) == (6, 9, 9, 10, 10, 12, None)
    assert all(6 <= v <= 13 for k, v in major.items() if k.startswith("gfx"))
    layout = {m.name: m.descriptor_layout for m in MACHS}
    assert layout["gfx803"] == layout["gfx908"] == layout["gfx90c"] == "gfx6"
    assert layout["gfx90a"] == layout["gfx942"] == layout["gfx9-4-generic"] == "gfx90a"
    assert layout["gfx1010"] == layout["gfx1030"] == layout["gfx10-3-generic"] == "gfx10"
    assert layout["gfx1100"] == "gfx11" and layout["gfx1201"] == "gfx12"


def test_unknown_mach_values_are_format_errors():
    assert 0x27 not in MACH_BY_VALUE and 0x4D not in MACH_BY_VALUE
    with pytest.raises(FormatError, match="EF_AMDGPU_MACH"):
        target_from_e_flags(0x27, 4)
    with pytest.raises(FormatError):
        target_from_e_flags(0x00, 4)


def test_feature_support_matches_llvm_mc_for_every_processor():
    """llvm-mc writes 'any' (V4) / 'on' (V3) for each supported feature."""
    checked = 0
    for tag, procs in ORACLE["processors"].items():
        for cpu, flags in procs.items():
            entry = MACH_BY_NAME[cpu]
            for key, value in flags.items():
                if value is None:
                    continue
                version = int(key[1:])
                gv = 1 if entry.generic and version >= 6 else None
                assert e_flags_for(TargetId(cpu, generic_version=gv), version) == value, (tag, cpu, key)
                t = target_from_e_flags(value, version)
                assert t.processor == cpu and t.generic_version == gv
                checked += 1
    assert checked > 150


def test_v4_plus_features_agree_with_readelf19():
    cases = [h for h in HEADERS if h["abi_version"] >= 2 and "," in h["readelf19"]]
    assert len(cases) > 1500
    for h in cases:
        _check_v4_plus(h)


def _check_v4_plus(h: dict) -> None:
    version = code_object_version_for_abi(h["abi_version"])
    name, feats = _readelf19(h["readelf19"])
    try:
        t = target_from_e_flags(h["e_flags"], version)
    except FormatError:
        entry = MACH_BY_VALUE[h["e_flags"] & 0xFF]
        # Only what kpatch rejects on purpose: a generic version on a specific
        # target, generic version 0, or bits 24..31 before V6.
        gv = h["e_flags"] >> 24
        assert (gv and not entry.generic) or (entry.generic and version == 6 and gv == 0) or \
            (gv and version < 6), h
        return
    assert t.processor == name
    for feat in ("xnack", "sramecc"):
        mine = getattr(t, feat)
        theirs = feats.get(feat)
        assert mine == (theirs if theirs in ("+", "-") else None), (feat, h)
    assert t.generic_version == (int(feats["generic"]) if "generic" in feats else None)
    # Every combination that round-trips in LLVM's encoding round-trips here.
    entry = MACH_BY_VALUE[h["e_flags"] & 0xFF]
    field_x = (h["e_flags"] >> 8) & 3
    field_s = (h["e_flags"] >> 10) & 3
    writable = (field_x != 0 if entry.xnack else field_x != 1) and \
        (field_s != 0 if entry.sramecc else field_s != 1)
    if writable:
        assert e_flags_for(t, version) == h["e_flags"]


def test_v2_v3_feature_bits_agree_with_readobj16():
    cases = [h for h in HEADERS if h["abi_version"] in (0, 1) and h["readobj16"]]
    assert len(cases) > 250
    for h in cases:
        _check_v2_v3(h)


def _check_v2_v3(h: dict) -> None:
    version = code_object_version_for_abi(h["abi_version"])
    entry = MACH_BY_VALUE[h["e_flags"] & 0xFF]
    if entry.generic:  # LLVM rejects generic targets before V4; so does kpatch
        with pytest.raises(FormatError, match="generic"):
            target_from_e_flags(h["e_flags"], version)
        return
    t = target_from_e_flags(h["e_flags"], version)
    names = set(h["readobj16"])
    xnack_on = "EF_AMDGPU_FEATURE_XNACK_V3" in names or "EF_AMDGPU_FEATURE_XNACK_V2" in names
    assert t.xnack == ("+" if xnack_on else ("-" if entry.xnack else None))
    sramecc_on = "EF_AMDGPU_FEATURE_SRAMECC_V3" in names
    assert t.sramecc == ("+" if sramecc_on else ("-" if entry.sramecc else None))


def test_target_id_strings():
    assert str(TargetId("gfx1030")) == "gfx1030"
    assert str(TargetId("gfx90a", xnack="+")) == "gfx90a:xnack+"
    assert str(TargetId("gfx908", xnack="-", sramecc="+")) == "gfx908:sramecc+:xnack-"
    assert TargetId.parse("gfx908:xnack-:sramecc+") == TargetId("gfx908", "-", "+")
    assert TargetId.parse("amdgcn-amd-amdhsa--gfx1010:xnack-") == TargetId("gfx1010", "-")
    assert TargetId("gfx1010", "-").hsa_target == "amdgcn-amd-amdhsa--gfx1010:xnack-"
    assert TargetId("gfx1030", "+").problems() == ["gfx1030 does not support xnack"]
    assert TargetId("gfx906", "+", "-").problems() == []
    for bad in ("gfx1030:", "gfx9999", "gfx1030:xnack", "gfx1010:xnack+:xnack-", "gfx1010:foo+",
                "x86_64-unknown-linux--gfx1030", ""):
        with pytest.raises(FormatError):
            TargetId.parse(bad)
    with pytest.raises(UsageError):
        TargetId("gfx1030", xnack="on")


def test_retarget_flags_for_gfx1010():
    """gfx1030 objects retargeted to gfx1010 get xnack off or any, as LLVM writes them."""
    assert e_flags_for(TargetId("gfx1010", xnack="-"), 4) == 0x233
    assert e_flags_for(TargetId("gfx1010"), 4) == 0x133
    assert e_flags_for(TargetId("gfx1030"), 5) == 0x036
    assert e_flags_for(TargetId("gfx10-1-generic", generic_version=1), 6) == 0x1000152
    with pytest.raises(UsageError):
        e_flags_for(TargetId("gfx10-1-generic"), 6)
    with pytest.raises(UsageError):
        e_flags_for(TargetId("gfx1030", generic_version=1), 6)
    with pytest.raises(UsageError):
        e_flags_for(TargetId("gfx1030"), 7)


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 0xFFFFFFFF), st.integers(2, 6))
def test_any_e_flags_give_a_target_or_format_error(flags, version):
    try:
        t = target_from_e_flags(flags, version)
    except FormatError:
        return
    assert t.mach.value == flags & 0xFF
    assert TargetId.parse(str(t)) == TargetId(t.processor, t.xnack, t.sramecc)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40) | st.sampled_from([m.name for m in MACHS]).flatmap(
    lambda p: st.lists(st.sampled_from(["xnack+", "xnack-", "sramecc+", "sramecc-", "foo", ""]),
                       max_size=3).map(lambda fs: ":".join([p, *fs]))))
def test_any_text_parses_or_is_a_format_error(text):
    try:
        t = TargetId.parse(text)
    except FormatError:
        return
    assert TargetId.parse(str(t)) == t


def test_llvm_feature_order_in_metadata(tmp_path):
    """clang writes amdhsa.target with sramecc before xnack; so does TargetId."""
    tool(CLANG15)
    path = compile_cl(tmp_path, "gfx906:xnack-:sramecc+", 4)
    co = CodeObject.from_bytes(read(path))
    assert co.metadata is not None
    assert co.metadata.target == "amdgcn-amd-amdhsa--gfx906:sramecc+:xnack-"
    assert co.target == TargetId("gfx906", "-", "+")
    assert co.target.hsa_target == co.metadata.target
    # And llvm-readelf-19 agrees on the flags.
    assert "gfx906, xnack-, sramecc+" in run(tool("llvm-readelf-19"), "-h", path)
