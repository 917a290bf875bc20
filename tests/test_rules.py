"""Rule files: the built-in sets load, every instruction they insert is what llvm-mc-16 assembles, bad files fail clearly."""

from __future__ import annotations

import subprocess

import pytest

from conftest import need_tool
from kpatch.errors import FormatError
from kpatch.rewrite.rules import load_all, load_file

# What each hazard rule must insert, as text from ../shared/reference/gfx1010-hazards.md
EXPECTED_TEXT = {
    "KH001": "s_waitcnt_depctr 0xffe3",
    "KH002": "s_mov_b32 null, 0",
    "KH003": "v_mov_b32 v0, v0",
    "KH004": "s_waitcnt_depctr 0xfffe",
    "KH005": "s_waitcnt_vscnt null, 0x0",
    "KH006": "s_nop 0",
    "KI001": "s_nop 0",
}


def llvm_mc(text: str, mcpu: str = "gfx1010") -> bytes:
    out = subprocess.run(["llvm-mc-16", "-triple=amdgcn-amd-amdhsa", f"-mcpu={mcpu}", "-show-encoding"],
                         input=text + "\n", capture_output=True, text=True, check=True).stdout
    enc = out.split("encoding: [", 1)[1].split("]", 1)[0]
    return bytes(int(b, 16) for b in enc.split(","))


def test_builtin_sets_load_with_stable_unique_ids():
    sets = load_all()
    assert {"gfx1010-hazards", "gfx1010-isa", "cu-mode", "vsharp-llc-noalloc", "cache-policy",
            "retarget-gfx1010"} <= set(sets)
    ids = [r.id for s in sets.values() for r in s.rules]
    assert len(ids) == len(set(ids))
    for s in sets.values():
        for r in s.rules:
            assert r.explain and r.summary and r.set_id == s.id


@pytest.mark.llvm
@pytest.mark.parametrize("rule_id", sorted(EXPECTED_TEXT))
def test_inserted_instructions_match_llvm_mc(rule_id):
    need_tool("llvm-mc-16")
    rule = next(r for s in load_all().values() for r in s.rules if r.id == rule_id)
    seq = rule.insert_before or rule.replace
    assert len(seq) == 1
    assert seq[0].build("gfx1010") == llvm_mc(EXPECTED_TEXT[rule_id])


def test_cache_rules_never_touch_atomics():
    from kpatch.isa import decode

    coherent = next(r for r in load_all()["cache-policy"].rules if r.name == "coherent")
    cases = {
        "global_load_dword v1, v[2:3], off": True,
        "buffer_load_dword v1, off, s[0:3], 0": True,
        "global_atomic_add v1, v[2:3], v4, off glc": False,
        "global_store_dword v[2:3], v1, off": False,
    }
    for text, expected in cases.items():
        inst = decode(llvm_mc(text, "gfx1030"), "gfx1030")[0]
        assert coherent.matches_instruction(inst) is expected, text


BAD = {
    "no set": ('[[rule]]\nid="KX001"\n', "[set]"),
    "bad toml": ("[set\n", "not valid TOML"),
    "unknown key": ('[set]\nid="x"\ntitle="t"\ndescription="d"\n[[rule]]\nid="KX001"\nname="a"\nsummary="s"\n'
                    'explain="e"\nmatch.finding="VMEMtoScalarWriteHazard"\nbogus=1\ninsert_before=[{op="s_nop"}]\n', "rule[0].bogus"),
    "bad id": ('[set]\nid="x"\ntitle="t"\ndescription="d"\n[[rule]]\nid="X1"\nname="a"\nsummary="s"\n'
               'explain="e"\nmatch.finding="VMEMtoScalarWriteHazard"\ninsert_before=[{op="s_nop"}]\n', "rule X1.id"),
    "no action": ('[set]\nid="x"\ntitle="t"\ndescription="d"\n[[rule]]\nid="KX001"\nname="a"\nsummary="s"\n'
                  'explain="e"\nmatch.finding="VMEMtoScalarWriteHazard"\n', "has no action"),
    "unknown finding": ('[set]\nid="x"\ntitle="t"\ndescription="d"\n[[rule]]\nid="KX001"\nname="a"\n'
                        'summary="s"\nexplain="e"\nmatch.finding="VMEMtoScalarWriteHazards"\n'
                        'insert_before=[{op="s_nop"}]\n', "rule KX001.match.finding"),
    "unknown instruction": ('[set]\nid="x"\ntitle="t"\ndescription="d"\n[[rule]]\nid="KX001"\nname="a"\n'
                            'summary="s"\nexplain="e"\nmatch.finding="VMEMtoScalarWriteHazard"\n'
                            'insert_before=[{op="v_dot2_f32_f16"}]\n',
                            "rule KX001.insert_before[0]"),
    "two matches": ('[set]\nid="x"\ntitle="t"\ndescription="d"\n[[rule]]\nid="KX001"\nname="a"\nsummary="s"\n'
                    'explain="e"\nmatch.mnemonic="s_nop"\nmatch.header=true\ninsert_before=[{op="s_nop"}]\n',
                    "exactly one of"),
    "bad regex": ('[set]\nid="x"\ntitle="t"\ndescription="d"\n[[rule]]\nid="KX001"\nname="a"\nsummary="s"\n'
                  'explain="e"\nmatch.mnemonic="(("\nset={glc=1}\n', "bad regular expression"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_rule_files_name_file_rule_and_key(tmp_path, case):
    text, fragment = BAD[case]
    p = tmp_path / "mine.toml"
    p.write_text(text)
    with pytest.raises(FormatError) as e:
        load_file(str(p))
    msg = str(e.value)
    assert msg.startswith("mine.toml: ") and fragment in msg and "\n" not in msg


def test_every_fixable_finding_class_has_a_rule_in_the_set_the_analysis_names():
    """`kpatch scan --target gfx1010` names the rule set that fixes each class; that set must have the
    rule that names the class in match.finding (header rules too: the engine knows no class names)."""
    from kpatch.analysis.findings import CLASSES

    sets = load_all()
    for c in CLASSES:
        for rs in (c.rule_set, c.partly_fixed_by):
            if rs is None:
                continue
            assert rs in sets, (c.name, rs)
            assert any(r.finding == c.name for r in sets[rs].rules), (c.name, rs)


def test_rule_files_and_the_solver_table_share_one_toml_reader(tmp_path):
    # one loader (kpatch.data.read_toml), one error type each: an unreadable file is the
    # user's error naming the path, invalid TOML a FormatError
    from kpatch.delivery.steering import load_table
    from kpatch.errors import UsageError
    missing = str(tmp_path / "nope.toml")
    for load in (load_file, load_table):
        with pytest.raises(UsageError) as e:
            load(missing)
        assert e.value.item == missing
    bad = tmp_path / "bad.toml"
    bad.write_text("[set\n")
    with pytest.raises(FormatError, match="not valid TOML"):
        load_table(str(bad))
