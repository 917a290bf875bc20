"""Rules as data: what a rule file says is what the engine does.

Rule sets are loaded from temporary files (``extra_rule_files``, the API of
``--rules FILE``); the effect on the patched object is read with
llvm-objdump-16 / llvm-readelf-16 / llvm-readobj-16, compared with their view of the original:
a header action changes exactly its field, an instruction action of a
pattern rule (``match.mnemonic``) puts its instructions where the rule says.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from kpatch.errors import UsageError
from kpatch.rewrite.patcher import patch_code_object
from rw_common import need
from test_fixes import LDS_B64, _build, _descriptor_text, kernels_text

SET = '[set]\nid = "{sid}"\ntitle = "t"\ndescription = "d"\n\n'
RULE = '[[rule]]\nid = "KZ001"\nname = "mine"\nsummary = "s"\nexplain = "e"\n'
HAZARD_FREE = "    v_mov_b32 v1, v0\n    s_nop 3\n    v_mov_b32 v2, v0"


def rule_file(tmp_path, body: str, sid: str = "mine") -> str:
    p = tmp_path / f"{sid}.toml"
    p.write_text(SET.format(sid=sid) + RULE + body)
    return str(p)


def patch(tmp_path, obj: str, rules: str, sets: list[str], mode: str = "override"):
    res = patch_code_object(open(obj, "rb").read(), mode=mode, rule_sets=sets, extra_rule_files=[rules])
    assert res.data is not None, (res.note, [(k.name, k.status, k.reason) for k in res.kernels])
    out = tmp_path / "out.hsaco"
    out.write_bytes(res.data)
    return str(out), res


def readelf(*args: str) -> str:
    return subprocess.run([need("llvm-readelf-16"), *args], capture_output=True, text=True, check=True).stdout


def amdgpu_metadata(path: str) -> list[str]:
    """The lines of the NT_AMDGPU_METADATA note as llvm-readelf-16 prints it."""
    out = readelf("--notes", path)
    start = out.index("NT_AMDGPU_METADATA")
    body = out[start:].split("---", 1)[1].split("\n...", 1)[0]
    return [" ".join(line.replace("'", "").split()) for line in body.splitlines() if line.strip()]


def amdhsa_lines(path: str) -> dict[str, str]:
    """``.amdhsa_*`` directive -> value, from llvm-objdump-16's disassembly of k.kd."""
    return dict(m.groups() for m in re.finditer(r"^\s*(\.amdhsa_\w+)\s+(\S+)", _descriptor_text(path), re.M))


def flags(path: str) -> str:
    """The e_flags names llvm-readobj-16 prints."""
    out = subprocess.run([need("llvm-readobj-16"), "-h", path], capture_output=True, text=True, check=True).stdout
    return out[out.index("Flags ["):].split("]", 1)[0]


# --- header actions ---------------------------------------------------------------


def test_kernel_header_action_of_a_rule_file_changes_exactly_wgp_mode(tmp_path):
    """A rule of the user's own that handles LdsMisalignedBug with wgp_mode = false
    (no built-in cu-mode set chosen) clears WGP_MODE and .workgroup_processor_mode
    and nothing else of the descriptor, metadata, label or code."""
    obj = _build(tmp_path, LDS_B64, wgp=1, lds=256, extra_md="    .workgroup_processor_mode: 1\n")
    rules = rule_file(tmp_path, 'match.finding = "LdsMisalignedBug"\nheader = { wgp_mode = false }\n')
    out, res = patch(tmp_path, obj, rules, ["mine"])
    [k] = res.kernels
    assert k.status == "patched" and k.rules == ("KZ001",)
    old, new = amdhsa_lines(obj), amdhsa_lines(out)
    assert old[".amdhsa_workgroup_processor_mode"] == "1" and new[".amdhsa_workgroup_processor_mode"] == "0"
    assert {d for d in old if old[d] != new.get(d)} == {".amdhsa_workgroup_processor_mode"}
    assert set(new) == set(old)
    md_old, md_new = amdgpu_metadata(obj), amdgpu_metadata(out)
    assert ".workgroup_processor_mode: 1" in md_old
    assert md_new == [line.replace(".workgroup_processor_mode: 1", ".workgroup_processor_mode: 0")
                      for line in md_old]
    assert flags(out) == flags(obj)
    assert kernels_text(out, "gfx1030")["k"] == kernels_text(obj, "gfx1030")["k"]


def test_object_header_action_of_a_rule_file_changes_exactly_the_processor(tmp_path):
    """A labelling rule with mach only (no xnack) in native mode: e_flags and
    amdhsa.target name gfx1010, and xnack stays what the object said (gfx1030
    has no xnack feature; LLVM writes "any" for a gfx1010 that leaves it open)."""
    obj = _build(tmp_path, HAZARD_FREE)
    rules = rule_file(tmp_path, 'match.header = true\nheader = { mach = "gfx1010" }\n', sid="label")
    out, _ = patch(tmp_path, obj, rules, ["gfx1010-hazards", "label"], mode="native")
    assert "EF_AMDGPU_MACH_AMDGCN_GFX1030" in flags(obj) and "XNACK" not in flags(obj)
    assert "EF_AMDGPU_MACH_AMDGCN_GFX1010" in flags(out) and "EF_AMDGPU_FEATURE_XNACK_ANY_V4" in flags(out)
    md_old, md_new = amdgpu_metadata(obj), amdgpu_metadata(out)
    assert "amdhsa.target: amdgcn-amd-amdhsa--gfx1030" in md_old
    assert md_new == [line.replace("--gfx1030", "--gfx1010") for line in md_old]
    assert amdhsa_lines(out) == amdhsa_lines(obj)


def test_builtin_label_rule_is_what_native_mode_does(tmp_path):
    """retarget-gfx1010's header = { mach = "gfx1010", xnack = "-" }: gfx1010, xnack off."""
    obj = _build(tmp_path, HAZARD_FREE)
    res = patch_code_object(open(obj, "rb").read(), mode="native")
    out = tmp_path / "out.hsaco"
    out.write_bytes(res.data)
    f = flags(str(out))
    assert "EF_AMDGPU_MACH_AMDGCN_GFX1010" in f and "EF_AMDGPU_FEATURE_XNACK_OFF_V4" in f
    assert "amdhsa.target: amdgcn-amd-amdhsa--gfx1010:xnack-" in amdgpu_metadata(str(out))


def test_native_mode_needs_a_rule_that_labels_the_object(tmp_path):
    """The label is a rule's action, not the mode's: native mode without one is a usage error."""
    obj = _build(tmp_path, HAZARD_FREE)
    with pytest.raises(UsageError, match="labels it"):
        patch_code_object(open(obj, "rb").read(), mode="native", rule_sets=["gfx1010-hazards", "cu-mode"])


def test_override_mode_refuses_any_set_that_relabels(tmp_path):
    obj = _build(tmp_path, HAZARD_FREE)
    rules = rule_file(tmp_path, 'match.header = true\nheader = { mach = "gfx1010", xnack = "-" }\n', sid="label")
    with pytest.raises(UsageError, match="label labels code gfx1010"):
        patch_code_object(open(obj, "rb").read(), mode="override", rule_sets=["label"], extra_rule_files=[rules])


# --- instruction actions of pattern rules -----------------------------------------


def test_pattern_rule_insert_before(tmp_path):
    obj = _build(tmp_path, HAZARD_FREE)
    rules = rule_file(tmp_path, 'match.mnemonic = "v_mov_b32_e32"\ninsert_before = [{ op = "s_nop", simm16 = 5 }]\n')
    out, res = patch(tmp_path, obj, rules, ["mine"])
    assert res.kernels[0].rules == ("KZ001",)
    old = kernels_text(obj, "gfx1030")["k"]
    expected = []
    for line in old:
        if line.startswith("v_mov_b32"):
            expected.append("s_nop 5")
        expected.append(line)
    assert kernels_text(out, "gfx1030")["k"] == expected


def test_pattern_rule_insert_after_and_replace(tmp_path):
    obj = _build(tmp_path, HAZARD_FREE)
    rules = rule_file(tmp_path, 'match.mnemonic = "s_nop"\nmatch.fields = { simm16 = 3 }\n'
                                'replace = [{ op = "s_nop", simm16 = 1 }, { op = "s_nop", simm16 = 2 }]\n'
                                'insert_after = [{ op = "s_nop", simm16 = 6 }]\n')
    out, _ = patch(tmp_path, obj, rules, ["mine"])
    old = kernels_text(obj, "gfx1030")["k"]
    expected = []
    for line in old:
        expected.extend(["s_nop 1", "s_nop 2", "s_nop 6"] if line == "s_nop 3" else [line])
    assert "s_nop 3" in old and kernels_text(out, "gfx1030")["k"] == expected


def test_pattern_rule_fix(tmp_path):
    """fix = "scratch-offset-fold" on every scratch access with a VGPR address:
    v_add_nc_u32 vT, OFFSET, vA then the access on vT with offset 0 (vT: a VGPR
    LLVM's text of the kernel does not name)."""
    obj = _build(tmp_path, "    scratch_load_dword v1, v2, off offset:8\n    s_waitcnt vmcnt(0)")
    rules = rule_file(tmp_path, 'match.mnemonic = "scratch_load_dword"\nfix = "scratch-offset-fold"\n')
    out, res = patch(tmp_path, obj, rules, ["mine"])
    old, new = kernels_text(obj, "gfx1030")["k"], kernels_text(out, "gfx1030")["k"]
    i = old.index("scratch_load_dword v1, v2, off offset:8")
    m = re.fullmatch(r"v_add_nc_u32_e32 v(\d+), 8, v2", new[i])
    assert m, new[i]
    t = int(m[1])
    assert not any(re.search(rf"\bv{t}\b", line) for line in old)
    assert new[i + 1] == f"scratch_load_dword v1, v{t}, off"
    assert new[:i] == old[:i] and new[i + 2:] == old[i + 1:]


def test_finding_rule_set_action(tmp_path):
    """set = {...} of a match.finding rule re-encodes the finding's instruction with
    those fields (as llvm-mc-16 assembles it), next to the rule's other actions."""
    from kpatch.analysis import analyse
    from kpatch.codeobject import CodeObject
    from kpatch.rewrite.fixes import FixContext
    from kpatch.rewrite.patcher import MADE_SAFE_FOR, _edits_for_finding
    from kpatch.rewrite.rules import load_file
    from test_rules import llvm_mc

    obj = _build(tmp_path, "    s_inst_prefetch 0x1\n    v_mov_b32 v1, v0")
    [rule] = load_file(rule_file(tmp_path, 'match.finding = "InstFwdPrefetchBug"\nset = { simm16 = 3 }\n'
                                           'insert_before = [{ op = "s_nop", simm16 = 0 }]\n')).rules
    co = CodeObject.from_bytes(open(obj, "rb").read())
    [kr] = analyse(co, MADE_SAFE_FOR).kernels
    [f] = [f for f in kr.findings if f.cls == "InstFwdPrefetchBug"]
    edits = _edits_for_finding(FixContext(co, co.kernels[0]), rule, f)
    assert [(e.address, e.action, e.code) for e in edits] == [
        (f.address, "replace", llvm_mc("s_inst_prefetch 0x3", "gfx1030")),
        (f.address, "insert_before", llvm_mc("s_nop 0", "gfx1010"))]


# --- the loader rejects what the engine does not perform -----------------------------

REJECT = {
    "unknown header key": ('match.finding = "LdsMisalignedBug"\nheader = { bogus = 1 }\n',
                           "rule KZ001.header.bogus: unknown header action"),
    "unknown wgp_mode value": ('match.finding = "LdsMisalignedBug"\nheader = { wgp_mode = true }\n',
                               "rule KZ001.header.wgp_mode: kpatch performs only wgp_mode = false"),
    "unknown mach value": ('match.header = true\nheader = { mach = "gfx1030" }\n',
                           "rule KZ001.header.mach: kpatch performs only mach = 'gfx1010'"),
    "unknown xnack value": ('match.header = true\nheader = { mach = "gfx1010", xnack = "+" }\n',
                            "rule KZ001.header.xnack: kpatch performs only xnack = '-'"),
    "unknown fix": ('match.finding = "OpcodeReuse"\nfix = "nope"\n', "rule KZ001.fix: unknown fix 'nope'"),
    "wgp_mode on the object": ('match.header = true\nheader = { wgp_mode = false }\n',
                               "rule KZ001.header.wgp_mode: wgp_mode is done for the kernels"),
    "mach without match.header": ('match.finding = "Xnack"\nheader = { mach = "gfx1010" }\n',
                                  "rule KZ001.header.mach: mach changes the whole code object"),
    "header on a pattern rule": ('match.mnemonic = "s_nop"\nheader = { wgp_mode = false }\n',
                                 "rule KZ001.header: header actions go with match.finding"),
    "finding fix on a pattern rule": ('match.mnemonic = "s_clause"\nfix = "drop-clause"\n',
                                      "rule KZ001.fix: drop-clause works from what the analysis found"),
    "fix with insert_before": ('match.finding = "OpcodeReuse"\nfix = "opcode-reuse"\n'
                               'insert_before = [{ op = "s_nop", simm16 = 0 }]\n',
                               "rule KZ001.insert_before: a fix is the whole transformation"),
    "set with replace": ('match.mnemonic = "s_nop"\nset = { simm16 = 1 }\nreplace = [{ op = "s_nop", simm16 = 0 }]\n',
                         "rule KZ001.set: set and replace both rewrite"),
    "code action on the object": ('match.header = true\nmatch.finding = "Xnack"\n'
                                  'insert_before = [{ op = "s_nop", simm16 = 0 }]\n',
                                  "rule KZ001.insert_before: a rule for the code object"),
    "format on a finding rule": ('match.finding = "OpcodeReuse"\nmatch.format = ["VOP2"]\nfix = "opcode-reuse"\n',
                                 "rule KZ001.match.format: only refines match.mnemonic rules"),
}


@pytest.mark.parametrize("case", sorted(REJECT))
def test_loader_rejects_what_the_engine_does_not_perform(tmp_path, case):
    from kpatch.errors import FormatError
    from kpatch.rewrite.rules import load_file

    body, fragment = REJECT[case]
    with pytest.raises(FormatError) as e:
        load_file(rule_file(tmp_path, body))
    msg = str(e.value)
    assert msg.startswith("mine.toml: ") and fragment in msg and "\n" not in msg, msg


def test_every_fix_name_is_in_the_one_registry(tmp_path):
    """The loader accepts a fix name exactly when kpatch.rewrite.fixes.FIXES has it."""
    from kpatch.rewrite.fixes import FIXES
    from kpatch.rewrite.rules import load_all, load_file

    used = {r.fix for s in load_all().values() for r in s.rules if r.fix}
    assert used <= set(FIXES) and "vsharp-llc-noalloc" in FIXES
    for name in FIXES:
        rs = load_file(rule_file(tmp_path, f'match.finding = "OpcodeReuse"\nfix = "{name}"\n'))
        assert rs.rules[0].fix == name


def test_fix_name_registry_is_fixes_names():
    """The light registry the loader checks against (kpatch.rewrite.fixnames)
    names exactly the functions of kpatch.rewrite.fixes.FIXES, in order."""
    from kpatch.rewrite.fixes import FIXES
    from kpatch.rewrite.fixnames import FIX_NAMES, NEEDS_FINDING

    assert tuple(FIXES) == FIX_NAMES
    assert NEEDS_FINDING <= set(FIX_NAMES)


def test_cli_rules_file_loads_and_rejects(tmp_path):
    """`kpatch rules --rules FILE` shows a rule the engine performs and names a bad one."""
    from conftest import kpatch_in_process

    good = rule_file(tmp_path, 'match.mnemonic = "v_mov_b32_e32"\ninsert_before = [{ op = "s_nop", simm16 = 5 }]\n')
    r = kpatch_in_process("rules", "--rules", good, "KZ001")
    assert r.returncode == 0 and "KZ001 mine" in r.stdout
    assert "matches: v_mov_b32_e32" in r.stdout and "does: insert_before s_nop simm16=0x5" in r.stdout
    bad = rule_file(tmp_path, 'match.finding = "LdsMisalignedBug"\nheader = { wgp_mode = true }\n', sid="bad")
    r = kpatch_in_process("rules", "--rules", bad)
    assert r.returncode != 0 and "bad.toml: rule KZ001.header.wgp_mode" in r.stderr and "Traceback" not in r.stderr
    # `kpatch rules` leaves the built-in sequences unbuilt (the ISA tables stay unloaded), never a user file's
    unbuildable = rule_file(tmp_path, 'match.mnemonic = "v_mov_b32_e32"\ninsert_before = [{ op = "s_nosuch" }]\n',
                            sid="unbuildable")
    r = kpatch_in_process("rules", "--rules", unbuildable)
    assert r.returncode != 0 and "unbuildable.toml: rule KZ001.insert_before[0]" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_native_without_a_labelling_rule_set_is_one_usage_error_before_any_work(tmp_path):
    from conftest import kpatch_in_process

    r = kpatch_in_process("apply", "--db", "@sample", "--mode", "native", "--rules", "gfx1010-hazards", "--cu", "18",
                   "--out-dir", str(tmp_path / "out"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        'error: native mode writes code labelled gfx1010: the rule sets need one that labels it '
        '(mach = "gfx1010", e.g. retarget-gfx1010)']
    assert not (tmp_path / "out").exists()


# --- several pattern rules on one instruction: performed together, or refused -----------

def test_two_set_rules_on_one_instruction_are_both_performed(tmp_path):
    # the shipped cache-policy set: KC001 sets glc+dlc on loads, KC002 clears slc on loads and stores
    obj = _build(tmp_path, "    global_load_dword v1, v[2:3], off slc\n    s_waitcnt vmcnt(0)")
    res = patch_code_object(open(obj, "rb").read(), mode="override",
                            rule_sets=["gfx1010-hazards", "gfx1010-isa", "cache-policy"])
    assert res.data is not None, [(k.name, k.reason) for k in res.kernels]
    [k] = res.kernels
    assert {"KC001", "KC002"} <= set(k.rules)
    out = tmp_path / "cp.hsaco"
    out.write_bytes(res.data)
    [load] = [t for t in kernels_text(str(out), "gfx1030")["k"] if t.startswith("global_load_dword")]
    assert load == "global_load_dword v1, v[2:3], off glc dlc"  # slc gone, glc and dlc set


def test_two_rules_setting_one_field_differently_refuse(tmp_path):
    obj = _build(tmp_path, "    global_load_dword v1, v[2:3], off\n    s_waitcnt vmcnt(0)")
    body = ('match.mnemonic = "global_load_dword"\nset = { glc = 1 }\n\n'
            '[[rule]]\nid = "KZ002"\nname = "other"\nsummary = "s"\nexplain = "e"\n'
            'match.mnemonic = "global_load_dword"\nset = { glc = 0, slc = 1 }\n')
    rules = rule_file(tmp_path, body)
    res = patch_code_object(open(obj, "rb").read(), mode="override", rule_sets=["gfx1010-hazards", "mine"],
                            extra_rule_files=[rules])
    [k] = res.kernels
    assert k.status == "refused" and "KZ001 and KZ002 set glc" in k.reason


def test_a_pattern_rule_on_an_instruction_a_fix_rewrites_refuses(tmp_path):
    # the FLAT offset fold (KI003) rewrites this load; KC002 (clear slc) on it would be silently lost
    obj = _build(tmp_path, "    flat_load_dword v1, v[2:3] offset:8 slc\n    s_waitcnt vmcnt(0) lgkmcnt(0)")
    sets = ["gfx1010-hazards", "gfx1010-isa"]
    alone = patch_code_object(open(obj, "rb").read(), mode="override", rule_sets=sets)
    assert "KI003" in alone.kernels[0].rules  # the fold happens without cache-policy
    res = patch_code_object(open(obj, "rb").read(), mode="override", rule_sets=sets + ["cache-policy"])
    [k] = res.kernels
    assert k.status == "refused" and "KC002 and the fix of rule KI003 both rewrite" in k.reason, k.reason
