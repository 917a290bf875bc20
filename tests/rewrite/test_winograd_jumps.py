"""MIOpen's gfx10 Winograd assembly: internal subroutines (``s_call_b64 s[36:37]``
... ``s_setpc_b64 s[36:37]``) and getpc jump tables (several ``s_getpc_b64
s[80:81]; s_add_u32; s_addc_u32`` on different branches, merging, then
``s_setpc_b64 s[80:81]``).

Expected values come from llvm-objdump-16 (instruction addresses and text;
call, branch and getpc targets computed from its text), from difflib's
alignment of the two llvm-objdump listings and from llvm-mc-16 (the bytes of
a deliberately broken variant), never from kpatch's own output.
"""

from __future__ import annotations

import difflib
import re
import subprocess

import pytest

from kpatch.analysis import analyse
from kpatch.analysis.codescan import scan_text
from kpatch.analysis.engine import bounded_jumps
from kpatch.codeobject import CodeObject
from kpatch.diff.branchcheck import check_branches
from kpatch.rewrite.patcher import patch_code_object
from tests.conftest import need_tool
from tests.test_miopen_corpus import entries

FP32 = re.compile(r"^Conv_Winograd_v30_3_1_fp32_.*\.s\.o$")
_LINE = re.compile(r"^\t(.*?)\s*// ([0-9A-F]+):")


@pytest.fixture(scope="module")
def winograd() -> dict[str, bytes]:
    got = {name: code for name, args, code in entries("gfx1030") if FP32.match(name)}
    assert len(got) == 6
    return got


def objdump(data: bytes, tmp_path, tag: str) -> list[tuple[int, str]]:
    """(address, text) of every instruction llvm-objdump-16 shows (gfx1030)."""
    need_tool("llvm-objdump-16")
    p = tmp_path / f"{tag}.co"
    p.write_bytes(data)
    out = subprocess.run(["llvm-objdump-16", "-d", "--mcpu=gfx1030", str(p)], capture_output=True,
                         text=True, check=True).stdout
    return [(int(m.group(2), 16), m.group(1)) for line in out.splitlines() if (m := _LINE.match(line))]


def _signed16(v: int) -> int:
    return v - 0x10000 if v & 0x8000 else v


def pc_targets(listing: list[tuple[int, str]]) -> dict[str, list[tuple[int, int]]]:
    """From llvm-objdump's text alone: (source address, target address) of
    every s_call_b64, every return site (the instruction after an s_call_b64)
    and every getpc sequence (s_getpc_b64; s_add_u32 LO; s_addc_u32 HI)."""
    out = {"call": [], "return": [], "getpc": []}
    for k, (a, t) in enumerate(listing):
        m = re.match(r"s_call_b64 s\[\d+:\d+\], (\d+)$", t)
        if m:
            out["call"].append((a, a + 4 + 4 * _signed16(int(m.group(1)))))
            out["return"].append((a, listing[k + 1][0]))
        if t.startswith("s_getpc_b64"):
            lo = re.match(r"s_add_u32 s\d+, s\d+, (0x[0-9a-f]+|\d+)$", listing[k + 1][1])
            hi = re.match(r"s_addc_u32 s\d+, s\d+, (0x[0-9a-f]+|-?\d+)$", listing[k + 2][1])
            delta = (int(hi.group(1), 0) & 0xFFFFFFFF) << 32 | int(lo.group(1), 0)
            out["getpc"].append((a, listing[k + 1][0] + delta))
    return out


def _key(text: str) -> str:
    """What stays the same when code moves: PC-relative operands dropped."""
    m = text.split(" ", 1)[0]
    if m.startswith(("s_branch", "s_cbranch")):
        return m
    if m in ("s_call_b64", "s_add_u32", "s_addc_u32"):
        return m + " " + text.split(" ", 1)[-1].split(",")[0]
    return text


def landing_ok(old, new, old_to_new: dict[int, int], t_old: int, t_new: int) -> bool:
    """Does ``t_new`` (patched) reach what ``t_old`` (original) did: the same
    instruction, or code inserted directly in front of it?"""
    old_i = {a: i for i, (a, _) in enumerate(old)}
    new_i = {a: i for i, (a, _) in enumerate(new)}
    want = old_to_new[old_i[t_old]]
    got = new_i.get(t_new)
    if got is None or got > want:
        return False
    matched = set(old_to_new.values())
    return all(k not in matched for k in range(got, want))


def alignment(old, new) -> dict[int, int]:
    """Original instruction index -> patched index, by difflib over the two
    listings; an instruction rewritten in place (a replace of as many
    instructions) maps to its replacement, the last ones of a longer
    replacement (code inserted in front of it) to its last ones."""
    sm = difflib.SequenceMatcher(None, [_key(t) for _, t in old], [_key(t) for _, t in new], autojunk=False)
    out = {}
    for op, a0, a1, b0, b1 in sm.get_opcodes():
        if op in ("equal", "replace") and b1 - b0 >= a1 - a0:
            shift = (b1 - b0) - (a1 - a0)
            for k in range(a1 - a0):
                out[a0 + k] = b0 + shift + k
    return out


def test_scan_bounds_calls_and_jump_tables(winograd, tmp_path):
    """Every s_setpc_b64 of the fp32 Winograd kernels has a bounded set of targets:
    the one through s[36:37] goes to every return site (llvm-objdump: the
    instruction after each s_call_b64), the others to getpc targets."""
    for name, data in winograd.items():
        listing = objdump(data, tmp_path, "w")
        pcs = pc_targets(listing)
        scan = scan_text(CodeObject.from_bytes(data), "gfx1030")
        assert scan.problems == [], name
        insts = scan.insts
        jumps = {insts[i].address: {insts[j].address for j in js} for i, js in scan.jumps.items()}
        setpcs = [a for a, t in listing if t.startswith("s_setpc_b64")]
        assert sorted(jumps) == setpcs, name
        returns = {t for _, t in pcs["return"]}
        getpc_targets = {t for _, t in pcs["getpc"]}
        for a, t in listing:
            if t == "s_setpc_b64 s[36:37]":
                assert jumps[a] == returns, (name, hex(a))
            elif t.startswith("s_setpc_b64"):
                assert jumps[a] and jumps[a] <= getpc_targets, (name, hex(a))


def test_fp32_winograd_patches_clean(winograd, tmp_path):
    """The 6 fp32 kernels patch (override) with no finding left, kpatch diff's
    control-flow check passes, and by llvm-objdump every s_call target, return
    site and getpc target still reaches the same instruction (or the
    mitigation in front of it)."""
    for name, data in winograd.items():
        r = patch_code_object(data, mode="override")
        assert [k.status for k in r.kernels] == ["patched"], (name, [k.reason for k in r.kernels])
        new_co = CodeObject.from_bytes(r.data)
        rep = analyse(new_co, "gfx1010")
        assert [k.verdict.status for k in rep.kernels] == ["ok"], (name, [f.cls for k in rep.kernels
                                                                         for f in k.findings])
        assert check_branches(CodeObject.from_bytes(data), new_co) == [], name
        old, new = objdump(data, tmp_path, "old"), objdump(r.data, tmp_path, "new")
        assert len(new) > len(old)  # mitigations were inserted, so code moved
        o2n = alignment(old, new)
        po, pn = pc_targets(old), pc_targets(new)
        for kind in ("call", "return", "getpc"):
            assert len(po[kind]) == len(pn[kind]) > 0, (name, kind)
            for (_, t_old), (_, t_new) in zip(po[kind], pn[kind]):
                assert landing_ok(old, new, o2n, t_old, t_new), (name, kind, hex(t_old), hex(t_new))


def _assemble(text: str) -> bytes:
    need_tool("llvm-mc-16")
    out = subprocess.run(["llvm-mc-16", "-triple=amdgcn", "-mcpu=gfx1030", "-show-encoding"], input=text,
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"encoding: \[(.*)\]", out)
    return bytes(int(x, 16) for x in m.group(1).split(","))


def _loaded_return_address(data: bytes, tmp_path) -> tuple[bytes, int]:
    """The object with the two 4-byte instructions right before ``s_setpc_b64
    s[36:37]`` replaced by ``s_load_dwordx2 s[36:37], s[84:85], 0x58``: the
    pair may now hold a loaded address.  Returns it and the setpc's address."""
    listing = objdump(data, tmp_path, "b")
    k = next(i for i, (_, t) in enumerate(listing) if t == "s_setpc_b64 s[36:37]")
    a = listing[k - 2][0]
    assert listing[k][0] - a == 8
    load = _assemble("s_load_dwordx2 s[36:37], s[84:85], 0x58")
    assert len(load) == 8
    co = CodeObject.from_bytes(data)
    text = co.section(".text")
    off = text.offset + (a - text.addr)
    return data[:off] + load + data[off + 8:], listing[k][0]


def test_setpc_through_a_loaded_pair_is_refused_with_the_reason(winograd, tmp_path):
    """A deliberately broken variant: the return address may come from a load.
    apply refuses the kernel, naming the load; scan says the same."""
    data = winograd["Conv_Winograd_v30_3_1_fp32_f2x3_stride1.s.o"]
    bad, setpc = _loaded_return_address(data, tmp_path)
    scan = scan_text(CodeObject.from_bytes(bad), "gfx1030")
    [p] = scan.problems
    assert (p.cls, p.kind, p.address) == ("B", "computed-jump", setpc)
    assert "s_load_dwordx2 s[36:37], s[84:85], 0x58" in p.reason
    r = patch_code_object(bad, mode="override")
    [k] = r.kernels
    assert k.status == "refused" and f"s_setpc_b64 at {setpc:#x}" in k.reason
    assert "s_load_dwordx2" in k.reason
    [kr] = analyse(CodeObject.from_bytes(bad), "gfx1010").kernels
    assert kr.verdict.status == "unpatchable"
    assert any(f"s_setpc_b64 at {setpc:#x}" in why and "s_load_dwordx2" in why for why in kr.verdict.reasons)


def test_analysis_follows_calls_and_returns(winograd, tmp_path):
    """The hazard analysis' control flow has an edge from s_setpc_b64 s[36:37]
    to every return site and from each s_call_b64 to its callee (llvm-objdump's
    addresses); without them a hazard across the call is not seen."""
    data = winograd["Conv_Winograd_v30_3_1_fp32_f2x3_stride1.s.o"]
    listing = objdump(data, tmp_path, "c")
    pcs = pc_targets(listing)
    setpc = next(a for a, t in listing if t == "s_setpc_b64 s[36:37]")
    edges = set(bounded_jumps(scan_text(CodeObject.from_bytes(data), "gfx1030")))
    assert {(setpc, t) for _, t in pcs["return"]} <= edges
    assert set(pcs["call"]) <= edges
    from kpatch.analysis.engine import unit_context, function_ranges
    co = CodeObject.from_bytes(data)
    ctx = unit_context(co, "gfx1030", "gfx1030", [r for r in function_ranges(co) if r[3] >= 0],
                       jumps=sorted(edges))
    cfg = ctx.cfg
    at = {int(a): k for k, a in enumerate(ctx.addresses)}
    b = cfg.block_at(at[setpc])
    assert {cfg.block_at(at[t]) for _, t in pcs["return"]} <= set(cfg.succs(b))
    for a, t in pcs["call"]:
        assert cfg.block_at(at[t]) in cfg.succs(cfg.block_at(at[a]))


def test_scan_and_apply_agree_on_every_gfx1030_kernel():
    """A kernel `kpatch scan --target gfx1010` calls patchable patches; one it
    calls unpatchable is refused; an ok one is untouched (override mode)."""
    for name, args, code in entries("gfx1030"):
        co = CodeObject.from_bytes(code)
        verdicts = {k.name: k.verdict for k in analyse(co, "gfx1010").kernels}
        r = patch_code_object(code, mode="override")
        want = {"patchable": "patched", "unpatchable": "refused", "ok": "untouched"}
        for k in r.kernels:
            v = verdicts[k.name]
            assert k.status == want[v.status], (name, k.name, str(v), k.status, k.reason)


def test_harden_mode_patches_gfx1010_winograd_and_keeps_the_label(tmp_path):
    """--mode harden: in MIOpen's gfx1010 build only the Winograd assembly has
    findings; those objects patch with none left, and llvm-readelf-16 still
    reads them as gfx1010 (EF_AMDGPU_MACH_AMDGCN_GFX1010 = 0x33)."""
    need_tool("llvm-readelf-16")
    for name, args, code in entries("gfx1010"):
        co = CodeObject.from_bytes(code)
        has = any(k.findings for k in analyse(co, "gfx1010").kernels)
        assert has == name.startswith("Conv_Winograd_v30_3_1_fp32_"), name
        if not has:
            continue
        r = patch_code_object(code, mode="harden")
        assert [k.status for k in r.kernels] == ["patched"], (name, [k.reason for k in r.kernels])
        assert all(k.verdict.status == "ok" for k in analyse(CodeObject.from_bytes(r.data), "gfx1010").kernels)
        p = tmp_path / "h.co"
        p.write_bytes(r.data)
        out = subprocess.run(["llvm-readelf-16", "-h", str(p)], capture_output=True, text=True, check=True).stdout
        flags = int(re.search(r"Flags:\s+(0x[0-9a-f]+)", out).group(1), 16)
        assert flags & 0xFF == 0x33, (name, hex(flags))
