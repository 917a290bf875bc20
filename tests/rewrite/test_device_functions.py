"""Device functions and unseen code (issue 9, items 3 and 4).

* every function a kernel can reach is analysed, patched and verified as a
  unit of its own (``calls.hip``: ``_Z7helper2f`` has VMEM-to-scalar-write
  hazards of its own), or the kernels that reach a function kpatch cannot fix
  are refused (``calls_dot.hip``: a device function with ``v_dot2c_f32_f16``);
* a branch into another function, or a code object without ``.text``, is
  never "ok": the kernel is unpatchable with the reason, and apply refuses it.

Oracles: llvm-objdump-16 (the instruction text of each function before and
after), and the compiler's own sources (which function calls which)."""

from __future__ import annotations

import os

import pytest

from conftest import FIXTURES, need_tool, objdump_functions, kpatch_in_process
from kpatch.analysis import analyse
from kpatch.codeobject import CodeObject
from kpatch.rewrite.patcher import patch_code_object
from rewrite.test_fixes import _build

DATA = os.path.join(os.path.dirname(__file__), "data")
CALLS = os.path.join(DATA, "calls.hip.gfx1030.hsaco")
CALLS_DOT = os.path.join(DATA, "calls_dot.hip.gfx1030.hsaco")


def _mnemonics(lines: list[str]) -> list[str]:
    """Mnemonics, without the alignment padding objdump shows after a function's end."""
    out = [t.split()[0] for t in lines]
    while out and out[-1] in ("s_nop", "s_code_end"):
        out.pop()
    return out


@pytest.mark.llvm
@pytest.mark.parametrize("mode", ["override", "native"])
def test_device_functions_are_patched_and_verified(mode, tmp_path):
    need_tool("llvm-objdump-16")
    data = open(CALLS, "rb").read()
    before = analyse(CodeObject.from_bytes(data), "gfx1010")
    helper2 = next(f for f in before.functions if f.name == "_Z7helper2f")
    assert [f.cls for f in helper2.findings].count("VMEMtoScalarWriteHazard") >= 1  # what there is to fix
    res = patch_code_object(data, mode=mode)
    assert res.data is not None
    assert {k.name: k.status for k in res.kernels}["k_calls"] == "patched"
    after = analyse(CodeObject.from_bytes(res.data), "gfx1010")
    for fr in (*after.kernels, *after.functions):
        left = [f.cls for f in fr.findings if not (mode == "override" and f.cls == "Xnack")]
        assert left == [], (fr.name, left)
    # LLVM's view of helper2: the same instructions, with mitigations in front of the SGPR writes
    old, new = objdump_functions(data, tmp_path)["_Z7helper2f"], objdump_functions(res.data, tmp_path)["_Z7helper2f"]
    inserted = [t for t in new if t.startswith("s_waitcnt_depctr")]
    assert len(inserted) >= 1 and not [t for t in old if t.startswith("s_waitcnt_depctr")]
    assert _mnemonics([t for t in new if not t.startswith("s_waitcnt_depctr")]) == _mnemonics(old)
    # the CLI says the output is clean
    out = tmp_path / "p.hsaco"
    out.write_bytes(res.data)
    r = kpatch_in_process("scan", "--target", "gfx1010", "--json", str(out))
    import json
    a = json.loads(r.stdout)["code_objects"][0]["analysis"]
    assert a["verdict"] == "ok" and a["findings"] == {}
    assert all(f["verdict"] == "ok" for f in a.get("functions", []))


@pytest.mark.llvm
def test_a_kernel_reaching_an_unfixable_function_is_refused(tmp_path):
    need_tool("llvm-objdump-16")
    data = open(CALLS_DOT, "rb").read()
    res = patch_code_object(data, mode="override")
    by = {k.name: k for k in res.kernels}
    fn = "_Z4dotfDv2_DF16_S_f"
    assert by["k_dot"].status == "refused" and fn in by["k_dot"].reason and "UnsupportedInstruction" in by["k_dot"].reason
    assert by["k_plain"].status == "patched"
    assert {f.name: f.status for f in res.functions}[fn] == "refused"
    # what is written keeps k_dot and its callee exactly as they were
    old, new = objdump_functions(data, tmp_path), objdump_functions(res.data, tmp_path)
    assert new[fn] == old[fn] and _mnemonics(new["k_dot"]) == _mnemonics(old["k_dot"])
    # native mode writes nothing for this object
    nat = patch_code_object(data, mode="native")
    assert nat.data is None and all(k.status == "refused" for k in nat.kernels)


def test_verification_covers_device_functions(monkeypatch):
    # a broken fix that leaves a device function's hazard in place must be caught by verify
    import kpatch.rewrite.patcher as patcher
    data = open(CALLS, "rb").read()
    real = patcher._edits_for_finding

    def drop_function_fixes(ctx, rule, finding):
        if isinstance(ctx.kernel, patcher.DeviceFunction):
            return []
        return real(ctx, rule, finding)

    monkeypatch.setattr(patcher, "_edits_for_finding", drop_function_fixes)
    res = patch_code_object(data, mode="override")
    assert res.data is None
    assert all(k.status == "refused" and "verification after patching failed" in k.reason for k in res.kernels)
    assert "_Z7helper2f" in res.kernels[0].reason or "_Z6helperfi" in res.kernels[0].reason


@pytest.mark.llvm
def test_a_branch_into_another_function_is_not_analysed_as_ok(tmp_path):
    obj = _build(tmp_path, "    s_cmp_eq_u32 s0, 0\n    s_cbranch_scc1 other\n"
                 "    global_load_dword v1, v[2:3], off\n    s_mov_b32 s2, 0",
                 after=".text\n.p2align 2\n.type other,@function\nother:\n    s_endpgm\n"
                       ".Lother_end:\n.size other, .Lother_end - other\n")
    data = open(obj, "rb").read()
    [k] = analyse(CodeObject.from_bytes(data), "gfx1010").kernels
    assert k.verdict.status == "unpatchable" and any("leaves k" in r for r in k.verdict.reasons), k.verdict
    [o] = patch_code_object(data, mode="override").kernels
    assert o.status == "refused" and "across functions" in o.reason


def _without_text(data: bytes) -> bytes:
    """The object with its .text section renamed (the ELF section header
    string table is the format's own: only the name changes)."""
    out = bytearray(data)
    i = out.find(b".text\x00")
    assert i > 0
    out[i:i + 6] = b".txet\x00"
    return bytes(out)


def test_an_object_without_text_is_unpatchable_not_ok(tmp_path):
    data = _without_text(open(os.path.join(FIXTURES, "vecops.hip.gfx1030.v5.hsaco"), "rb").read())
    co = CodeObject.from_bytes(data)
    assert co.kernels and co.section(".text") is None
    report = analyse(co, "gfx1010")
    assert [k.verdict.status for k in report.kernels] == ["unpatchable"] * len(co.kernels)
    assert all("no .text" in k.verdict.reasons[0] for k in report.kernels)
    res = patch_code_object(data, mode="override")
    assert res.data is None and all(k.status == "refused" for k in res.kernels)
    p = tmp_path / "n.hsaco"
    p.write_bytes(data)
    r = kpatch_in_process("scan", "--target", "gfx1010", str(p))
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert f"kernels 0 ok, 0 patchable, {len(co.kernels)} unpatchable" in r.stdout


@pytest.mark.llvm
def test_a_function_without_a_size_is_analysed_to_the_end_of_text(tmp_path):
    # a function symbol without a size (issue 12): its extent runs to the end of .text
    # (CodeObject.function_extents), so it is analysed (and clean), and its caller is not refused
    obj = _build(tmp_path, "    s_call_b64 s[30:31], fn\n    global_load_dword v1, v[2:3], off\n    s_mov_b32 s2, 0",
                 after=".text\n.p2align 2\n.type fn,@function\nfn:\n    s_setpc_b64 s[30:31]\n")
    data = open(obj, "rb").read()
    report = analyse(CodeObject.from_bytes(data), "gfx1010")
    assert {f.name: f.verdict.status for f in report.functions} == {"fn": "ok"}
    [o] = patch_code_object(data, mode="override").kernels
    assert o.status == "untouched", o.reason


@pytest.mark.llvm
def test_a_kernel_calling_code_no_symbol_names_is_refused(tmp_path):
    # a call to a plain label after the kernel's end: no function symbol, so no analysis saw it
    obj = _build(tmp_path, "    s_call_b64 s[30:31], fn\n    global_load_dword v1, v[2:3], off\n    s_mov_b32 s2, 0",
                 after=".text\n.p2align 2\nfn:\n    s_setpc_b64 s[30:31]\n")
    data = open(obj, "rb").read()
    report = analyse(CodeObject.from_bytes(data), "gfx1010")
    assert report.functions == []
    [o] = patch_code_object(data, mode="override").kernels
    assert o.status == "refused" and "that no symbol names" in o.reason


@pytest.mark.llvm
def test_bounded_jumps_finds_the_calls_with_or_without_the_scan_ids(tmp_path):
    """bounded_jumps picks the s_call_b64 among the scan's branches with the
    scan's eids (numpy) when it kept them, by mnemonic otherwise: the same
    edges, among them the call to a label inside the caller's own unit."""
    from kpatch.analysis.codescan import scan_text
    from kpatch.analysis.engine import bounded_jumps
    from kpatch.isa.decodememo import decode_memo
    body = ("    s_call_b64 s[30:31], inner\n    s_branch done\ninner:\n    s_mov_b32 s2, 0\n"
            "    s_setpc_b64 s[30:31]\ndone:\n    s_nop 0")
    co = CodeObject.from_bytes(open(_build(tmp_path, body), "rb").read())
    with decode_memo():
        with_ids = scan_text(co, "gfx1030", keep_ids=True)
        without = scan_text(co, "gfx1030")
        assert with_ids.known is not None and without.known is None
        got = bounded_jumps(with_ids)
        assert got == bounded_jumps(without)
    call = next(i for i in with_ids.insts if i.mnemonic == "s_call_b64")
    assert (call.address, call.branch_target) in got
