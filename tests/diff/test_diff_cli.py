"""`kpatch diff` as a user runs it."""

from __future__ import annotations

import json
import os

from conftest import kpatch_in_process
from kpatch.containers.kdb import write_kdb

from .conftest import ASM_V4, objdump, read, readelf_symbols, text_file_offset, write


def objdump_by_function(path: str) -> dict[str, list[tuple[int, str]]]:
    """llvm-objdump-16's instructions of each FUNC symbol of ``.symtab``
    (value, size from llvm-readelf-16)."""
    listing = objdump(path)
    out = {}
    for (table, name), (value, size) in readelf_symbols(path).items():
        if table == ".symtab" and size and not name.endswith(".kd"):
            out[name] = [(a, t) for a, t in listing if value <= a < value + size]
    return out


def test_text_output_side_by_side(branchy):
    r = kpatch_in_process("diff", branchy[0], branchy[1])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"--- {branchy[0]}" and lines[1] == f"+++ {branchy[1]}"
    depctr = [(a, t) for a, t in objdump(branchy[1]) if t.startswith("s_waitcnt_depctr")]
    (addr, text), = depctr
    plus = [ln for ln in lines if ln.lstrip().startswith("+ ")]
    assert len(plus) == 1 and plus[0].rstrip().endswith(f"{addr:x}  {text}")
    reloc = [ln for ln in lines if ln.lstrip().startswith("> ")]
    assert len(reloc) == 2 and all("(relocated, same target)" in ln for ln in reloc)
    assert any("-- kernel k_branchy" in ln for ln in lines)
    assert "unchanged functions (2): helper, k_other" in r.stdout
    assert lines[-1].startswith("summary: 1 pair compared, 1 changed")
    assert "\x1b[" not in r.stdout  # no colour codes when piped


def test_json_output(branchy):
    r = kpatch_in_process("diff", "--json", branchy[0], branchy[2])
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["summary"]["inserted"] == 1 and doc["summary"]["control_flow_problems"] == 0
    (obj,) = doc["objects"]
    k = next(f for f in obj["functions"] if f["name"] == "k_branchy")
    ins = [row for row in k["listing"] if row.get("kind") == "inserted"]
    nop = [(a, t) for a, t in objdump(branchy[2]) if t == "s_nop 0"][0]
    assert [(row["new"]["address"], row["new"]["text"]) for row in ins] == [nop]


def test_control_flow_problem_sets_exit_status(branchy, tmp_path):
    listing = objdump(branchy[1])
    loop = [a for a, t in listing if t.startswith("s_cbranch_scc1")][1]
    data = bytearray(read(branchy[1]))
    off = text_file_offset(branchy[1]) + loop
    data[off] ^= 0x01  # simm16 low bit: the loop branch now lands one dword off
    broken = write(str(tmp_path / "broken.co"), bytes(data))
    r = kpatch_in_process("diff", branchy[0], broken)
    assert r.returncode == 1
    assert "control-flow problems (1):" in r.stdout
    assert f"at {loop:#x}" in r.stdout
    bang = [ln for ln in r.stdout.splitlines() if ln.lstrip().startswith("! ") and "│" in ln]
    assert len(bang) == 1 and f"{loop:x}  s_cbranch_scc1" in bang[0]


def test_exit_code_and_identical(branchy):
    assert kpatch_in_process("diff", "--exit-code", branchy[0], branchy[0]).returncode == 0
    assert kpatch_in_process("diff", "--exit-code", branchy[0], branchy[1]).returncode == 1
    r = kpatch_in_process("diff", branchy[0], branchy[0])
    assert r.returncode == 0 and "0 changed, 1 identical (not shown)" in r.stdout


def test_html_option_writes_a_report(branchy, tmp_path):
    html = str(tmp_path / "r.html")
    r = kpatch_in_process("diff", "--html", html, branchy[0], branchy[1])
    assert r.returncode == 0, r.stderr
    text = read(html).decode()
    assert text.startswith("<!DOCTYPE html>") and 'data-name="k_branchy"' in text
    assert f"HTML report written to {html}" in r.stderr


def test_kernel_db_against_user_db(tmp_path):
    # the user DB holds the asm_kernels entry with cache bits changed, keyed for gfx1010
    data = bytearray(read(ASM_V4))
    off = text_file_offset(ASM_V4)
    glc_load = [a for a, t in objdump(ASM_V4) if t.startswith("buffer_load_dword") and t.endswith(" glc")][0]
    data[off + glc_load + 1] &= ~0x40  # MUBUF GLC is bit 14
    src, out = str(tmp_path / "s.kdb"), str(tmp_path / "gfx1010_18.ukdb")
    write_kdb(src, [("asm_kernels.s.o", " -mcpu=gfx1030", read(ASM_V4))], user=False)
    write_kdb(out, [("asm_kernels.s.o", " -mcpu=gfx1010", bytes(data))], user=True)
    r = kpatch_in_process("diff", src, out)
    assert r.returncode == 0, r.stderr
    assert "== asm_kernels.s.o [-mcpu=gfx1010]" in r.stdout
    changed = [ln for ln in r.stdout.splitlines() if ln.lstrip().startswith("~ ")]
    assert len(changed) == 1 and f"{glc_load:x}" in changed[0] and changed[0].rstrip().endswith("glc 1->0")


def test_missing_input_fails_plainly(branchy, tmp_path):
    # one line naming the input as given, exit 1, and no diff of everything against nothing
    missing = os.path.join(str(tmp_path), "nope.co")
    for args in ((branchy[0], missing), (missing, branchy[0]), ("--json", missing, branchy[0])):
        r = kpatch_in_process("diff", *args)
        assert r.returncode == 1
        assert r.stderr == f"error: {missing}: no such file\n"
        assert r.stdout == ""


def test_input_without_code_objects_fails_plainly(branchy, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = kpatch_in_process("diff", str(empty), branchy[0])
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == f"error: {empty}: no gfx code object in it\n"
    uri = f"kdb://{tmp_path}/none.kdb?name=a&args=b"
    r = kpatch_in_process("diff", branchy[0], uri)
    assert r.returncode == 1 and r.stdout == "" and r.stderr == f"error: {uri}: no such kernel DB\n"



def test_json_is_a_summary_with_counts_llvm_agrees_with(branchy):
    """--json holds per function its counts and only the rows the text lists
    (-U 0: the differences, each run of equal rows as its length), not
    every row; the counts add up to llvm-objdump-16's instructions."""
    r = kpatch_in_process("diff", "--json", "-U", "0", branchy[0], branchy[1])
    assert r.returncode == 0, r.stderr
    (obj,) = json.loads(r.stdout)["objects"]
    old, new = objdump_by_function(branchy[0]), objdump_by_function(branchy[1])
    assert {f["name"] for f in obj["functions"]} == set(old) == set(new)
    for f in obj["functions"]:
        c = f["counts"]
        assert "rows" not in f
        assert c["equal"] + c["changed"] + c["relocated"] + c["removed"] == len(old[f["name"]]), f["name"]
        assert c["equal"] + c["changed"] + c["relocated"] + c["inserted"] == len(new[f["name"]]), f["name"]
        if f["status"] == "identical":
            continue
        shown = [x for x in f["listing"] if "kind" in x]
        assert all(x["kind"] != "equal" for x in shown)
        assert len(shown) == c["changed"] + c["relocated"] + c["inserted"] + c["removed"]
        assert sum(x["identical"] for x in f["listing"] if "identical" in x) == c["equal"]
    k = next(f for f in obj["functions"] if f["name"] == "k_branchy")
    assert k["counts"]["inserted"] == len(new["k_branchy"]) - len(old["k_branchy"]) == 1


def test_json_rows_streams_every_row(branchy):
    """--json-rows: one line per row, every instruction of both objects in
    llvm-objdump-16's order, then the pair's document and the summary."""
    r = kpatch_in_process("diff", "--json-rows", branchy[0], branchy[1])
    assert r.returncode == 0, r.stderr
    lines = [json.loads(ln) for ln in r.stdout.splitlines()]
    rows = [x for x in lines if "kind" in x]
    old, new = objdump_by_function(branchy[0]), objdump_by_function(branchy[1])
    for name in old:
        mine = [x for x in rows if x["function"] == name]
        assert [(x["old"]["address"], x["old"]["text"]) for x in mine if x["old"]] == old[name]
        assert [(x["new"]["address"], x["new"]["text"]) for x in mine if x["new"]] == new[name]
    assert "diff" in lines[-2] and "rows" not in lines[-2]["diff"]["functions"][0]
    assert lines[-1]["summary"]["inserted"] == 1


def test_unreadable_object_of_a_pair_is_an_error_line_too(branchy, tmp_path):
    """A pair compared whose object cannot be read (a truncated code object)
    is counted unreadable, exit 1, and named on stderr in one `error:` line
    (it was only inside the report on stdout), text and --json alike."""
    trunc = tmp_path / "trunc.co"
    trunc.write_bytes(read(branchy[0])[:3000])
    for extra in ((), ("--json",)):
        r = kpatch_in_process("diff", *extra, str(trunc), branchy[0])
        assert r.returncode == 1
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: file://{trunc}: "), r.stderr
    assert json.loads(r.stdout)["summary"]["errors"] == 1
