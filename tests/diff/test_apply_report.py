"""`kpatch apply --report`: what the user sees is what apply decided.

The report is read back from chromium's DOM (test_diff_html.chromium_dom).
Expected refusals come from the instructions README says kpatch refuses
(`v_dot2c_f32_f16`, `v_fmac_legacy_f32`) found in llvm-objdump-16's listing
of each sample object; the report's counts must equal `kpatch diff SRC OUT`
on the same pair, and inserted - removed must equal the change in the number
of instructions llvm-objdump-16 lists.
"""

from __future__ import annotations

import bz2
import hashlib
import json
import os
import re
import sqlite3
import subprocess

import pytest

from conftest import kpatch_in_process
from kpatch.data import sample_db_path
from tests.apply.conftest import BUNDLER15, FakeKernel, FakePatcher, FakeResult, fake_is_patched, invoke, kernel_names

from .conftest import tool
from .test_diff_html import chromium_dom

GFX1030_ENTRY = "hipv4-amdgcn-amd-amdhsa--gfx1030"
REFUSED_MNEMONICS = ("v_dot2c_f32_f16", "v_fmac_legacy_f32")
_FUNC = re.compile(r"^[0-9a-f]+ <([^>]+)>:$")
_INST = re.compile(r"^\t(\S+).*// [0-9A-F]+:")


def rows(path: str) -> list[tuple[str, str, bytes]]:
    """(kernel_name, kernel_args, code) of a kernel DB, read with sqlite3 and bz2 alone."""
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        got = conn.execute("SELECT kernel_name, kernel_args, kernel_blob, uncompressed_size FROM kern_db "
                           "ORDER BY id").fetchall()
    finally:
        conn.close()
    return [(n, a, bz2.decompress(b) if size else bytes(b)) for n, a, b, size in got]


def gfx1030_object(blob: bytes, tmp_path) -> str:
    """The gfx1030 code object of a blob (itself, or its bundle entry via clang-offload-bundler), as a file."""
    digest = hashlib.sha256(blob).hexdigest()[:16]
    path = str(tmp_path / f"{digest}.co")
    if blob.startswith(b"\x7fELF"):
        with open(path, "wb") as f:
            f.write(blob)
        return path
    bundle = str(tmp_path / f"{digest}.bundle")
    with open(bundle, "wb") as f:
        f.write(blob)
    subprocess.run([tool(BUNDLER15), "--unbundle", "--type=o", f"--input={bundle}", f"--targets={GFX1030_ENTRY}",
                    f"--output={path}"], check=True, capture_output=True)
    return path


def listing(path: str) -> dict[str, list[str]]:
    """Mnemonics per function, from llvm-objdump-16 -d --mcpu=gfx1030."""
    out = subprocess.run([tool("llvm-objdump-16"), "-d", "--mcpu=gfx1030", path], capture_output=True, text=True,
                         check=True).stdout
    funcs: dict[str, list[str]] = {}
    cur = None
    for line in out.splitlines():
        m = _FUNC.match(line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
            continue
        m = _INST.match(line)
        if m and cur is not None:
            cur.append(m.group(1))
    return funcs


def counted_instructions(path: str) -> int:
    """Instructions inside the function symbols' extents ([st_value, st_value + st_size) from
    llvm-readelf-16 -s), as llvm-objdump-16 lists them: the padding between functions, which
    inserted code may use up, is not counted."""
    spans = set()
    for line in subprocess.run([tool("llvm-readelf-16"), "-s", "-W", path], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[3] == "FUNC" and parts[0].endswith(":"):
            spans.add((int(parts[1], 16), int(parts[2], 0)))
    out = subprocess.run([tool("llvm-objdump-16"), "-d", "--mcpu=gfx1030", path], capture_output=True, text=True,
                         check=True).stdout
    addrs = [int(m.group(1), 16) for m in re.finditer(r"// ([0-9A-F]+):", out)]
    return sum(1 for a in addrs if any(lo <= a < lo + size for lo, size in spans))


def apply_sample(tmp_path, *extra: str) -> tuple[str, str, subprocess.CompletedProcess]:
    out_dir = tmp_path / "out"
    report = str(tmp_path / "report.html")
    p = kpatch_in_process("apply", "--db", "@sample", "--mode", "override", "--cu", "18", "--out-dir", str(out_dir),
                   "--report", report, *extra)
    assert p.returncode == 0, p.stderr
    return str(out_dir / "gfx1030_18.ukdb"), report, p


def kv(table) -> dict[str, str]:
    return {tr.find_all("th")[0].text(): tr.find_all("td")[0].text() for tr in table.find_all("tr")}


@pytest.mark.llvm
def test_report_refusals_first_and_counts_agree_with_diff(tmp_path, chromium):
    out, report, p = apply_sample(tmp_path)
    dom = chromium_dom(chromium, report, tmp_path)
    body = dom.find_all("body")[0]

    # source and output, each named once, for what they are
    files = kv(dom.find_all("table", cls="files")[0])
    assert files == {"source": sample_db_path(), "output": out}
    assert "original" not in dom.find_all("h1")[0].text()
    for sec in dom.find_all("section", cls="object"):
        ident = kv(sec.find_all("table", cls="identity")[0])
        assert ident["source"] == sec.attrs["data-label"] and ident["source"].startswith(f"kdb://{sample_db_path()}?")
        assert ident["output"].startswith(f"kdb://{out}?") and "old" not in ident and "new" not in ident

    # the refusals come first, right after the header: every kernel holding an instruction kpatch refuses
    sections = [n for n in body.children if not isinstance(n, str) and n.tag == "section"]
    assert sections[0].attrs["id"] == "refusals"
    expected = set()
    for name, args, blob in rows(sample_db_path()):
        for func, mnemonics in listing(gfx1030_object(blob, tmp_path)).items():
            if any(m.startswith(REFUSED_MNEMONICS) for m in mnemonics):
                expected.add((name, args, func))
    assert expected, "the sample should hold kernels kpatch refuses"
    got = set()
    stdout_reasons = {}
    for line in p.stdout.splitlines():
        if line.startswith("refused "):
            uri, rest = line[len("refused"):].strip().split(" ", 1)
            kernel, reason = rest.split(": ", 1)
            stdout_reasons[(uri, kernel)] = reason
    for tr in sections[0].find_all("tr", cls="refusal"):
        uri = tr.find_all("td", cls="uri")[0].text()
        kernel = tr.find_all("td", cls="kernel")[0].text()
        reason = tr.find_all("td", cls="reason")[0].text()
        assert reason and reason == stdout_reasons[(uri, kernel)]
        m = re.match(r"kdb://(.*)\?name=([^&]*)&args=(.*)$", uri)
        from urllib.parse import unquote
        got.add((unquote(m.group(2)), unquote(m.group(3)), kernel))
    assert got == expected

    # a refused kernel inside a written object is shown as refused, not as changed
    for name, args, func in expected:
        secs = [s for s in dom.find_all("section", cls="function", data_name=func)]
        assert secs and all(s.attrs.get("data-outcome") == "refused" for s in secs)
        assert all("refused" in s.find_all("span", cls="status")[0].classes for s in secs)
        assert all(s.find_all("p", cls="refused") for s in secs)

    # the counts are `kpatch diff SRC OUT`'s
    d = kpatch_in_process("diff", "--json", "@sample", out)
    assert d.returncode == 0, d.stderr
    want = json.loads(d.stdout)["summary"]
    summary = kv(dom.find_all("table", cls="summary")[0])
    for key, label in (("changed", "changed"), ("inserted", "instructions inserted"),
                       ("changed_instructions", "instructions changed"), ("removed", "instructions removed"),
                       ("functions_changed", "functions changed"), ("branches_relocated", "branches relocated"),
                       ("control_flow_problems", "control-flow problems")):
        assert int(summary[label]) == want[key], label
    # ... and inserted - removed is what LLVM's tools count inside the functions
    before = {(n, a): blob for n, a, blob in rows(sample_db_path())}
    growth = 0
    for name, args, blob in rows(out):
        growth += (counted_instructions(gfx1030_object(blob, tmp_path))
                   - counted_instructions(gfx1030_object(before[(name, args)], tmp_path)))
    assert int(summary["instructions inserted"]) - int(summary["instructions removed"]) == growth
    assert int(summary["changed"]) == len(rows(out))


@pytest.mark.llvm
def test_second_apply_leaves_the_report_alone(tmp_path):
    out, report, _ = apply_sample(tmp_path)
    with open(report, "rb") as f:
        first = f.read()
    mtime = os.stat(report).st_mtime_ns
    n = len(rows(out))
    _, _, p = apply_sample(tmp_path)  # idempotent: nothing changes
    assert f"report {report} left as it was: nothing changed in this run ({n} entries already patched" in p.stdout
    with open(report, "rb") as f:
        assert f.read() == first
    assert os.stat(report).st_mtime_ns == mtime
    # a new report for a run that changed nothing says so (and still lists the refusals)
    fresh = str(tmp_path / "fresh.html")
    p = kpatch_in_process("apply", "--db", "@sample", "--mode", "override", "--cu", "18", "--out-dir",
                   str(tmp_path / "out"), "--report", fresh)
    assert p.returncode == 0 and os.path.exists(fresh)
    text = open(fresh, encoding="utf-8").read()
    assert f"Nothing changed in this run; {n} entries already patched in {out}." in text
    assert text.count('<tr class="refusal">') == sum(1 for ln in p.stdout.splitlines() if ln.startswith("refused "))


class RefuseAll(FakePatcher):
    """Test double: every kernel of objects named in ``refuse_objects`` is
    refused and the object is not written; others as FakePatcher."""

    def __init__(self, refuse_objects: tuple[str, ...]):
        super().__init__(refuse=("asm_scale_loop",))
        self.refuse_objects = set(refuse_objects)

    def __call__(self, data, *, mode, rule_sets):
        names = kernel_names(data)
        if set(names) & self.refuse_objects:
            return FakeResult(None, [FakeKernel(n, "refused", f"cannot fix {n}") for n in names], False)
        return super().__call__(data, mode=mode, rule_sets=rule_sets)


def test_refusals_in_objects_not_written_are_listed(tmp_path, monkeypatch):
    report = tmp_path / "r.html"
    code, stdout, stderr, exc = invoke(monkeypatch, ["apply", "--db", sample_db_path(), "--mode", "override",
                                                     "--cu", "18", "--out-dir", str(tmp_path / "c"),
                                                     "--report", str(report)],
                                       patcher=RefuseAll(("half2_dot",)), is_patched=fake_is_patched)
    assert exc is None and code == 0, stderr
    html = report.read_text()
    head, rest = html.split('<section id="summary">', 1)
    # refused in a written object (asm_scale_loop x2), and every kernel of the mathops object, not written
    assert head.count('<tr class="refusal">') == 4
    assert head.count('data-state="not written"') == 2 and head.count('data-state="written"') == 2
    assert "cannot fix half2_dot" in head and "cannot fix fma_loop" in head and "fake refusal" in head
    assert "mathops.cpp.o" not in rest.split('<table class="index">', 1)[1]  # not among the changed objects
    assert "report" in stdout and "4 kernels refused" in stdout


def test_report_in_a_directory_not_made_yet(tmp_path):
    """--report in a directory that does not exist yet: made before any work,
    as FILE -o OUT's directory is (the report failed only after the user DB
    was written, exit 1); one under a file is refused before any work."""
    report = tmp_path / "reports" / "new" / "r.html"
    p = kpatch_in_process("apply", "--db", "@sample", "--mode", "override", "--cu", "18", "--out-dir",
                          str(tmp_path / "out"), "--report", str(report), "--dry-run")
    assert p.returncode == 0, p.stderr
    assert report.exists() and report.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    (tmp_path / "afile").write_bytes(b"x")
    p = kpatch_in_process("apply", "--db", "@sample", "--mode", "override", "--cu", "18", "--out-dir",
                          str(tmp_path / "out2"), "--report", str(tmp_path / "afile" / "r.html"))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "out2").exists()
