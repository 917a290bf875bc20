"""`kpatch scan` / `kpatch extract` end to end, against LLVM's tools and the formats' rules."""

from __future__ import annotations

import bz2
import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess

import pytest

from conftest import FIXTURES, need_tool, kpatch_in_process, run_kpatch
from kpatch.data import sample_db_path

BUNDLER = "/usr/lib/llvm-15/bin/clang-offload-bundler"


def kd_symbols(path: str) -> list[str]:
    """Kernel descriptor symbols as llvm-readelf-16 lists them (the oracle for kernel counts)."""
    out = subprocess.run(["llvm-readelf-16", "-s", "-W", path], capture_output=True, text=True, check=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[7].endswith(".kd") and parts[3] == "OBJECT":
            names.add(parts[7])
    return sorted(names)


def scan_json(*args: str) -> tuple[int, dict, str]:
    p = kpatch_in_process("scan", "--json", *args)
    return p.returncode, json.loads(p.stdout), p.stderr


@pytest.mark.corpus
@pytest.mark.llvm
def test_scan_librocrand_matches_llvm(librocrand, tmp_path):
    """7 AMDGPU code objects with kernel counts equal to llvm-readelf-16's .kd symbols."""
    need_tool("llvm-objcopy-16")
    need_tool(BUNDLER)
    fatbin = tmp_path / "fatbin.bin"
    subprocess.run(["llvm-objcopy-16", "--dump-section", f".hip_fatbin={fatbin}", librocrand, str(tmp_path / "x")],
                   check=True)
    listed = subprocess.run([BUNDLER, "--list", "--type=o", f"--input={fatbin}"], capture_output=True, text=True,
                            check=True).stdout.split()
    gpu = [t for t in listed if "amdgcn" in t]
    expected = {}
    for t in gpu:
        out = tmp_path / (re.sub(r"[^A-Za-z0-9]", "_", t) + ".hsaco")
        subprocess.run([BUNDLER, "--unbundle", "--type=o", f"--input={fatbin}", f"--targets={t}", f"--output={out}"],
                       check=True)
        expected[t.split("--", 1)[1]] = (len(kd_symbols(str(out))), out.read_bytes())

    code, doc, _ = scan_json(librocrand)
    assert code == 0 and doc["errors"] == []
    got = {c["target"]: c for c in doc["code_objects"]}
    assert sorted(got) == sorted(expected) == sorted(
        ["gfx803", "gfx900:xnack-", "gfx906:xnack-", "gfx908:xnack-", "gfx90a:xnack+", "gfx90a:xnack-", "gfx1030"])
    for target, (n_kd, data) in expected.items():
        c = got[target]
        assert len(c["kernels"]) == n_kd, target
        assert c["size"] == len(data)
        assert c["container"] == "fatbin/bundle"
    # every URI scan prints resolves, through `kpatch extract`, to exactly the bundler's bytes
    c = got["gfx1030"]
    out = tmp_path / "extracted.hsaco"
    p = kpatch_in_process("extract", c["uri"], "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert out.read_bytes() == expected["gfx1030"][1]


def sample_rows(path: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = con.execute("SELECT kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size FROM kern_db "
                       "ORDER BY id").fetchall()
    con.close()
    return rows


def decompress(blob: bytes, size: int) -> bytes:
    return bz2.decompress(blob) if size else blob


def test_sample_db_is_miopen_shaped():
    """The embedded sample follows MIOpen's rules, checked with sqlite3 and bz2 directly."""
    path = sample_db_path()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    sql = {r[0]: r[1] for r in con.execute("SELECT name, sql FROM sqlite_master")}
    con.close()
    assert "kern_db" in sql and "idx_kern_db" in sql
    assert "UNIQUE INDEX" in sql["idx_kern_db"]
    rows = sample_rows(path)
    assert len(rows) >= 5
    for name, args, blob, md5, size in rows:
        assert re.fullmatch(r".+\.(cl|s|cpp)\.o", name)
        assert args.endswith(" -mcpu=gfx1030")
        code = decompress(blob, size)
        if size:
            assert blob.startswith(b"BZh9") and len(code) == size
        assert md5 == hashlib.md5(code).hexdigest()
    assert {n.rsplit(".", 2)[1] for n, *_ in rows} == {"cl", "s", "cpp"}


def test_scan_sample():
    code, doc, err = scan_json("--sample")
    assert code == 0, err
    assert doc["errors"] == []
    rows = sample_rows(sample_db_path())
    assert len(doc["code_objects"]) == len(rows)
    assert {c["target"] for c in doc["code_objects"]} == {"gfx1030"}
    assert {c["code_object_version"] for c in doc["code_objects"]} == {4, 5}
    assert any(c["container"] == "kdb/bundle" for c in doc["code_objects"])
    for c in doc["code_objects"]:
        assert c["uri"].startswith("kdb://") and c["kernels"]
    p = kpatch_in_process("scan", "--sample")
    assert p.returncode == 0 and "gfx1030" in p.stdout


def corrupt_copy(tmp_path) -> tuple[str, list[tuple[str, str]]]:
    """A copy of the sample with three entries broken in three ways; returns (path, broken keys)."""
    path = str(tmp_path / "broken.kdb")
    shutil.copy(sample_db_path(), path)
    con = sqlite3.connect(path)
    rows = con.execute("SELECT id, kernel_name, kernel_args, kernel_blob, uncompressed_size FROM kern_db "
                       "WHERE uncompressed_size != 0 ORDER BY id").fetchall()
    assert len(rows) >= 3
    (i0, n0, a0, b0, _), (i1, n1, a1, _, _), (i2, n2, a2, _, s2) = rows[:3]
    con.execute("UPDATE kern_db SET kernel_blob = ? WHERE id = ?", (b0[: len(b0) // 2], i0))  # truncated bz2
    con.execute("UPDATE kern_db SET kernel_hash = ? WHERE id = ?", ("0" * 32, i1))  # wrong MD5
    con.execute("UPDATE kern_db SET uncompressed_size = ? WHERE id = ?", (s2 + 7, i2))  # wrong size
    con.commit()
    con.close()
    return path, [(n0, a0), (n1, a1), (n2, a2)]


def test_scan_corrupted_sample_reports_each_and_goes_on(tmp_path):
    path, broken = corrupt_copy(tmp_path)
    total = len(sample_rows(path))
    code, doc, err = scan_json(path)
    assert code == 1
    assert len(doc["errors"]) == 3
    assert len(doc["code_objects"]) == total - 3
    for e in doc["errors"]:
        assert e["uri"].startswith("kdb://")
    assert "Traceback" not in err
    err_lines = [l for l in err.splitlines() if l.startswith("error: ")]
    assert len(err_lines) == 3
    assert any("MD5" in l for l in err_lines)
    from kpatch.containers.uri import parse_uri

    assert sorted((parse_uri(e["uri"]).name, parse_uri(e["uri"]).args) for e in doc["errors"]) == sorted(broken)


def test_scan_exit_codes(tmp_path):
    p = kpatch_in_process("scan")
    assert p.returncode == 2
    p = kpatch_in_process("scan", "--no-such-option", "x")
    assert p.returncode == 2
    missing = str(tmp_path / "missing.kdb")
    code, doc, err = scan_json(missing, sample_db_path())
    assert code == 1
    assert len(doc["errors"]) == 1 and "no such file" in doc["errors"][0]["error"]
    assert doc["code_objects"]
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"hello world, not a code object")
    code, doc, err = scan_json(str(junk))
    assert code == 1 and "not a code object" in doc["errors"][0]["error"]


def test_sqlite_that_is_not_a_kdb(tmp_path):
    path = str(tmp_path / "other.kdb")
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE config (layout TEXT)")
    con.commit()
    con.close()
    code, doc, err = scan_json(path)
    assert code == 1 and doc["code_objects"] == []
    assert "kernel DB" in doc["errors"][0]["error"]
    assert err.count("\n") == 1


def test_scan_kdb_bz2_equals_kdb(tmp_path):
    """A .kdb.bz2 (whole SQLite file bzip2'ed, as ROCm ships it) scans like the .kdb."""
    src = sample_db_path()
    dst = tmp_path / "gfx1030_18.kdb.bz2"
    dst.write_bytes(bz2.compress(open(src, "rb").read()))
    c1, d1, _ = scan_json(src)
    c2, d2, _ = scan_json(str(dst))
    assert c1 == c2 == 0
    strip = lambda d: [{k: v for k, v in c.items() if k != "uri"} for c in d["code_objects"]]
    assert strip(d1) == strip(d2)


def test_scan_directory_finds_fixtures():
    """Every raw fixture code object and every GPU entry of each bundle fixture is found."""
    code, doc, err = scan_json(FIXTURES)
    assert code == 0, err
    hsaco = sorted(f for f in os.listdir(FIXTURES) if f.endswith(".hsaco"))
    found_raw = sorted(os.path.basename(c["uri"][len("file://"):]) for c in doc["code_objects"]
                       if c["container"] == "hsaco" and os.path.dirname(c["uri"][len("file://"):]) == FIXTURES)
    assert found_raw == hsaco
    assert any(c["container"] == "fatbin/bundle" for c in doc["code_objects"])
    assert any(c["container"] == "ccob" for c in doc["code_objects"])
    assert any(c["container"] == "bundle" for c in doc["code_objects"])


def test_scan_wheel_reads_members_in_place(tmp_path):
    import zipfile

    whl = tmp_path / "torch_fake-0.0-cp311-none-linux_x86_64.whl"
    hsaco = sorted(f for f in os.listdir(FIXTURES) if f.endswith(".hsaco"))[0]
    host = sorted(f for f in os.listdir(FIXTURES) if f.endswith(".host.o"))[0]
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(os.path.join(FIXTURES, hsaco), "torch/lib/kernels/" + hsaco)
        z.write(os.path.join(FIXTURES, host), "torch/lib/libfake_hip.so")
        z.writestr("torch/__init__.py", "")
    code, doc, err = scan_json(str(whl))
    assert code == 0, err
    assert any(c["container"] == "wheel/hsaco" for c in doc["code_objects"])
    assert any(c["container"] == "wheel/fatbin/bundle" for c in doc["code_objects"])
    c = next(c for c in doc["code_objects"] if c["container"] == "wheel/hsaco")
    out = tmp_path / "x.hsaco"
    assert kpatch_in_process("extract", c["uri"], "-o", str(out)).returncode == 0
    assert out.read_bytes() == open(os.path.join(FIXTURES, hsaco), "rb").read()


def test_extract_errors_are_one_line(tmp_path):
    p = kpatch_in_process("extract", "kdb:///nonexistent.kdb?name=a&args=b", "-o", str(tmp_path / "o"))
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    p = kpatch_in_process("extract", f"kdb://{sample_db_path()}?name=nope&args=x", "-o", str(tmp_path / "o"))
    assert p.returncode == 1 and "no entry" in p.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.llvm
def test_scan_target_text_names_each_unpatchable_kernel_and_why():
    # mathops (built with -DUSE_DOT2=1): half2_dot uses v_dot2c_f32_f16, which gfx1010 lacks;
    # fma_loop needs only hazard fixes.  Where the instruction is comes from llvm-objdump-16.
    path = os.path.join(FIXTURES, "mathops.hip.gfx1030.v5.hsaco")
    listing = subprocess.run(["llvm-objdump-16", "-d", "--mcpu=gfx1030", path], capture_output=True, text=True,
                             check=True).stdout
    (addr,) = [int(m.group(1), 16) for m in re.finditer(r"v_dot2c_f32_f16\S*.*// ([0-9A-F]+):", listing)]
    p = kpatch_in_process("scan", "--target", "gfx1010", path)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("unpatchable ")]
    assert len(lines) == 1
    assert lines[0].startswith(f"unpatchable file://{path} half2_dot: UnsupportedInstruction at {addr:#x}: "
                               "v_dot2c_f32_f16")
    assert "gfx1010" in lines[0] and "fma_loop" not in p.stdout.split("not patchable for gfx1010")[1]
    assert "not patchable for gfx1010 (1):" in p.stdout


def test_scan_directory_with_a_name_that_is_not_utf8(tmp_path):
    """A code object whose file name is not valid UTF-8 is scanned like any
    other (its URI percent-encodes the bytes; `extract` of that URI gives
    the file back), and the other files of the directory are scanned too:
    no internal error."""
    src = os.path.join(FIXTURES, "vecops.hip.gfx1030.v5.hsaco")
    odd = os.path.join(os.fsencode(str(tmp_path)), b"odd\xff.hsaco")
    shutil.copy(src, odd)
    shutil.copy(src, tmp_path / "plain.hsaco")
    p = run_kpatch("scan", "--json", str(tmp_path))
    assert p.returncode == 0, p.stderr
    uris = sorted(c["uri"] for c in json.loads(p.stdout)["code_objects"])
    assert uris == [f"file://{tmp_path}/odd%FF.hsaco", f"file://{tmp_path}/plain.hsaco"]
    out = tmp_path / "back.hsaco"
    p = run_kpatch("extract", uris[0], "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert out.read_bytes() == open(src, "rb").read()


def test_extract_output_that_cannot_be_written_is_one_line(tmp_path):
    """-o in a directory that does not exist, under a file, or with a name
    too long for the file system: one `error: OUTPUT: cannot write: ...`
    line, exit 2, no temporary file left (it was an internal error)."""
    src = os.path.join(FIXTURES, "vecops.hip.bundle")
    (tmp_path / "afile").write_bytes(b"x")
    cases = {str(tmp_path / "nodir" / "x.co"): "No such file or directory",
             str(tmp_path / "afile" / "x.co"): "Not a directory",
             str(tmp_path / ("b" * 300 + ".co")): "File name too long"}
    for out, why in cases.items():
        p = kpatch_in_process("extract", src, "-o", out)
        assert p.returncode == 2 and p.stderr == f"error: {out}: cannot write: {why}\n", p.stderr
    assert sorted(os.listdir(tmp_path)) == ["afile"]
    out = str(tmp_path / ("b" * 300 + ".co"))
    p = kpatch_in_process("apply", os.path.join(FIXTURES, "vecops.hip.gfx1030.v5.hsaco"), "-o", out,
                          "--mode", "override")
    assert p.returncode == 2 and p.stderr == f"error: {out}: cannot write: File name too long\n", p.stderr
    assert sorted(os.listdir(tmp_path)) == ["afile"]
