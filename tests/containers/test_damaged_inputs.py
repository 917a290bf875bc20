"""Damaged inputs never take more than their share: one bad kernel DB row,
blob, zip member or file is one error line, the rest of the work goes on,
and nothing costs more memory, disk or time than the caps in
:mod:`kpatch.containers.limits` (README, "Limits").

Every damaged input is built here: DB rows with the sqlite3 module (from the
rows of the shipped sample DB), bombs by streaming compression of zeros,
zip members with a patched flag or method field, FIFOs with os.mkfifo.
"""

from __future__ import annotations

import bz2
import hashlib
import io
import os
import re
import sqlite3
import struct
import subprocess
import sys
import textwrap
import zipfile

import pytest
import zstandard

from conftest import kpatch_in_process, run_kpatch
from kpatch.codeobject import CodeObject
from kpatch.containers import limits
from kpatch.containers.bundle import CCOB_MAGIC, decompress_ccob
from kpatch.containers.discover import Found, Problem, discover, resolve
from kpatch.containers.kdb import KernelDB, encode_blob
from kpatch.containers.uri import parse_uri
from kpatch.data import sample_db_path
from kpatch.errors import FormatError, KpatchError, UsageError

COLUMNS = "id, kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size"
#: MIOpen's table without the NOT NULL constraints (so bad rows can be stored).
LOOSE_SCHEMA = ("CREATE TABLE kern_db (id INTEGER PRIMARY KEY ASC, kernel_name TEXT, kernel_args TEXT, "
                "kernel_blob BLOB, kernel_hash TEXT, uncompressed_size INT);"
                "CREATE UNIQUE INDEX idx_kern_db ON kern_db(kernel_name, kernel_args);")


def sample_rows() -> list[tuple]:
    conn = sqlite3.connect(sample_db_path())
    try:
        return conn.execute(f"SELECT {COLUMNS} FROM kern_db ORDER BY id").fetchall()
    finally:
        conn.close()


def make_db(path: str, rows: list[tuple]) -> str:
    conn = sqlite3.connect(path)
    conn.executescript(LOOSE_SCHEMA)
    conn.executemany(f"INSERT INTO kern_db ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()
    return path


def deep_metadata(code: bytes) -> bytes:
    """``code`` with its metadata note replaced, byte for byte, by arrays
    nested as deep as the note is long (far beyond mpack.MAX_DEPTH)."""
    note = CodeObject.from_bytes(code).metadata_note
    n = len(note.desc)
    out = bytearray(code)
    out[note.desc_offset:note.desc_offset + n] = b"\x91" * (n - 1) + b"\xc0"
    return bytes(out)


def bad_rows(good: list[tuple]) -> list[tuple[tuple, str, str]]:
    """(row, how the error names it, reason pattern) for each kind of bad row;
    ids from 101 on, keys distinct from the good rows'."""
    _, name, args, blob, md5, size = good[0]
    code = bz2.decompress(blob)
    deep = deep_metadata(code)
    deep_blob, deep_md5, deep_size = encode_blob(deep)
    rows = [
        ((101, None, args, blob, md5, size), "row=101", "kernel_name is NULL"),
        ((102, b"\xffname.o", args, blob, md5, size), "row=102", "kernel_name is stored as a BLOB"),
        ((103, "nullargs.o", None, blob, md5, size), "row=103", "kernel_args is NULL"),
        ((104, "badargs.o", b"-mcpu=gfx1030\xfe", blob, md5, size), "row=104", "kernel_args is stored as a BLOB"),
        ((105, "nullhash.o", args, blob, None, size), "name=nullhash.o", "kernel_hash is NULL"),
        ((106, "badhash.o", args, blob, b"\xff" * 32, size), "name=badhash.o", "kernel_hash is not UTF-8"),
        ((107, "nullblob.o", args, None, md5, size), "name=nullblob.o", "kernel_blob is NULL"),
        ((108, "textsize.o", args, blob, md5, "8672 bytes"), "name=textsize.o", "uncompressed_size .* is not an integer"),
        ((109, "realsize.o", args, blob, md5, 8672.5), "name=realsize.o", "uncompressed_size 8672.5 is not an integer"),
        ((110, "hugesize.o", args, blob, md5, 2**40), "name=hugesize.o", "uncompressed_size .* out of range"),
        ((111, "deepmeta.o", args, deep_blob, deep_md5, deep_size), "name=deepmeta.o", "nesting deeper than"),
    ]
    return rows


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> dict:
    """A good-only DB (the sample's rows) and the same rows with every kind
    of bad row interleaved."""
    d = tmp_path_factory.mktemp("damaged")
    good = sample_rows()
    bad = bad_rows(good)
    mixed = [good[0]] + [r for r, _, _ in bad[:5]] + good[1:4] + [r for r, _, _ in bad[5:]] + good[4:]
    return {"good": make_db(str(d / "good.kdb"), good), "bad": make_db(str(d / "bad.kdb"), mixed),
            "rows": good, "bad_rows": bad}


def test_entries_yield_every_row_with_its_own_error(damaged):
    with KernelDB.open(damaged["bad"]) as db:
        entries = list(db.entries())
    by_id = {e.id: e for e in entries}
    assert len(entries) == len(damaged["rows"]) + len(damaged["bad_rows"])
    for row in damaged["rows"]:
        e = by_id[row[0]]
        assert e.error == "" and e.code()  # MD5 and size checked
    for (row, _, reason), e in zip(damaged["bad_rows"], (by_id[r[0]] for r, _, _ in damaged["bad_rows"])):
        if row[0] == 111:  # the row is fine; its code object is not
            assert e.error == "" and CodeObject.from_bytes(e.code())
            continue
        with pytest.raises(FormatError) as raised:
            e.code()
        assert re.search(reason, raised.value.reason), (raised.value.reason, reason)
        assert e.error in ("", raised.value.reason)  # a row's own error, or its blob's


def _scan_json(path: str) -> tuple[dict, subprocess.CompletedProcess]:
    import json

    p = kpatch_in_process("scan", "--json", "--target", "gfx1010", path)
    return json.loads(p.stdout), p


def test_scan_reports_each_bad_row_once_and_the_rest(damaged):
    good, _ = _scan_json(damaged["good"])
    bad, p = _scan_json(damaged["bad"])
    assert p.returncode == 1
    # the good rows give exactly the code objects they give alone (same verdicts)
    strip = lambda recs, path: sorted(  # noqa: E731
        (r["uri"].replace(path, "DB"), json_verdicts(r)) for r in recs)
    assert strip(bad["code_objects"], damaged["bad"]) == strip(good["code_objects"], damaged["good"])
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == len(damaged["bad_rows"]) == len(bad["errors"])
    for (_, where, reason), line in zip(damaged["bad_rows"], lines):
        assert line.startswith(f"error: kdb://{damaged['bad']}?{where}"), line
        assert re.search(reason, line), line
    assert "Traceback" not in p.stderr


def json_verdicts(record: dict) -> tuple:
    return tuple((k["name"], k.get("verdict")) for k in record["kernels"])


def _ukdb_rows(path: str) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT kernel_name, kernel_args, kernel_hash FROM kern_db ORDER BY 1, 2").fetchall()
    finally:
        conn.close()


def test_apply_db_writes_the_good_rows_and_one_error_per_bad_row(damaged, tmp_path):
    out_good, out_bad = str(tmp_path / "good"), str(tmp_path / "bad")
    p_good = kpatch_in_process("apply", "--db", damaged["good"], "--mode", "override", "--cu", "18", "--out-dir", out_good)
    p_bad = kpatch_in_process("apply", "--db", damaged["bad"], "--mode", "override", "--cu", "18", "--out-dir", out_bad)
    assert p_good.returncode == 0, p_good.stderr
    assert p_bad.returncode == 1, p_bad.stderr
    written = _ukdb_rows(os.path.join(out_good, "gfx1030_18.ukdb"))
    assert written and _ukdb_rows(os.path.join(out_bad, "gfx1030_18.ukdb")) == written
    lines = [ln for ln in p_bad.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == len(damaged["bad_rows"]), p_bad.stderr
    for (_, where, reason), line in zip(damaged["bad_rows"], lines):
        assert line.startswith(f"error: kdb://{damaged['bad']}?{where}"), line
        assert re.search(reason, line), line
    assert "Traceback" not in p_bad.stderr and "internal error" not in p_bad.stderr


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_bug_on_one_entry_is_that_entrys_error(damaged, tmp_path, monkeypatch, jobs):
    """A non-KpatchError raised while patching one entry (in this process or
    a worker) is that entry's error; every other entry is still patched."""
    from kpatch.apply import db as apply_db
    from kpatch.apply.modes import DEFAULT_RULE_SETS, default_patch_fn, default_provenance_fn

    real = apply_db.patch_blob
    victim = damaged["rows"][1]
    victim_code = bz2.decompress(victim[3])

    def flaky(data, **kw):
        if bytes(data) == victim_code:
            raise RuntimeError("boom")
        return real(data, **kw)

    monkeypatch.setattr(apply_db, "patch_blob", flaky)
    result = apply_db.apply_to_db([damaged["good"]], str(tmp_path / "gfx1030_18.ukdb"), mode="override",
                                  rule_sets=list(DEFAULT_RULE_SETS["override"]),
                                  patch_fn=default_patch_fn("override"), is_patched=default_provenance_fn(),
                                  jobs=jobs)
    errors = [e for e in result.entries if e.status == "error"]
    assert [(e.kernel_name, e.kernel_args) for e in errors] == [(victim[1], victim[2])]
    assert errors[0].reason.startswith("internal error: RuntimeError: boom")
    assert len(result.entries) == len(damaged["rows"])
    assert result.written == sum(e.status == "changed" for e in result.entries) > 0


# --- the kern_db table itself ------------------------------------------------


def test_a_view_over_an_endless_query_is_refused_without_running_it(tmp_path):
    path = str(tmp_path / "view.kdb")
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE VIEW kern_db AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
        "SELECT n AS id, 'k' AS kernel_name, '-mcpu=gfx1030' AS kernel_args, x'00' AS kernel_blob, "
        "'h' AS kernel_hash, 0 AS uncompressed_size FROM r;")
    conn.close()
    with pytest.raises(FormatError, match="kern_db is a view, not a table"):
        KernelDB.open(path)
    for cmd in (["scan", path], ["apply", "--db", path, "--mode", "override", "--cu", "18",
                                 "--out-dir", str(tmp_path / "out")]):
        p = run_kpatch(*cmd)  # (run_kpatch's own timeout would fail the test on a hang)
        assert p.returncode == 1
        assert "kern_db is a view, not a table" in p.stderr


def test_every_statement_is_bounded(tmp_path, monkeypatch):
    path = make_db(str(tmp_path / "k.kdb"), sample_rows())
    with KernelDB.open(path) as db:
        with pytest.raises(FormatError, match=f"stopped after {limits.MAX_SQL_STEPS} steps"):
            db._rows("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r;")
        assert db.count() == len(sample_rows())  # the budget is per statement
    monkeypatch.setattr(limits, "MAX_SQL_STEPS", 1)
    monkeypatch.setattr(limits, "SQL_STEP_CHECK", 1)
    with pytest.raises(FormatError, match="stopped after 1 steps"):
        KernelDB.open(path)


def test_input_dbs_are_opened_read_only(tmp_path):
    path = make_db(str(tmp_path / "k.kdb"), sample_rows())
    before = open(path, "rb").read()
    with KernelDB.open(path) as db:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            db._conn.execute("DELETE FROM kern_db;")
        list(db.entries())
    assert open(path, "rb").read() == before


def test_a_blob_longer_than_the_cap_is_that_rows_error(tmp_path, monkeypatch):
    rows = sample_rows()
    path = make_db(str(tmp_path / "k.kdb"), rows + [(50, "big.o", "-mcpu=gfx1030", bytes(3 << 20), "h", 0)])
    monkeypatch.setattr(limits, "MAX_OBJECT_BYTES", 2 << 20)
    with KernelDB.open(path) as db:
        entries = list(db.entries())
    assert [e.id for e in entries] == [r[0] for r in rows] + [50]
    assert "too big" in entries[-1].error and entries[-1].uri(path).row == 50
    assert all(not e.error for e in entries[:-1])


# --- bombs -------------------------------------------------------------------

ZERO_CHUNK = bytes(16 << 20)


def zeros_md5(n: int) -> hashlib._Hash:
    h = hashlib.md5()
    for _ in range(n // len(ZERO_CHUNK)):
        h.update(ZERO_CHUNK)
    h.update(bytes(n % len(ZERO_CHUNK)))
    return h


def bz2_zeros(n: int) -> bytes:
    """One bzip2 stream of ``n`` zero bytes, made by streaming."""
    c = bz2.BZ2Compressor(9)
    parts = [c.compress(ZERO_CHUNK) for _ in range(n // len(ZERO_CHUNK))]
    parts.append(c.compress(bytes(n % len(ZERO_CHUNK))))
    return b"".join(parts) + c.flush()


def ccob_zeros(n: int) -> bytes:
    """A CCOB v3 (zstd) of ``n`` zero bytes with a valid header and hash."""
    c = zstandard.ZstdCompressor(level=1).compressobj(size=n)
    parts = [c.compress(ZERO_CHUNK) for _ in range(n // len(ZERO_CHUNK))]
    parts.append(c.compress(bytes(n % len(ZERO_CHUNK))))
    payload = b"".join(parts) + c.flush()
    digest = int.from_bytes(zeros_md5(n).digest()[:8], "little")
    return struct.pack("<4sHHQQQ", CCOB_MAGIC, 3, 1, 32 + len(payload), n, digest) + payload


def peak_rss_mib(code: str) -> tuple[float, str]:
    """Run ``code`` in a fresh interpreter; its peak RSS (MiB) and stdout.
    (VmHWM of the new image: ``ru_maxrss`` would carry over the peak of the
    forking test process, which grows over a whole test run.)"""
    prog = code + ("\nimport re as _re; print('RSS', _re.search(r'VmHWM:\\s*(\\d+)', "
                   "open('/proc/self/status').read()).group(1))\n")
    p = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    rss = int(re.search(r"RSS (\d+)", p.stdout).group(1)) / 1024
    return rss, p.stdout


@pytest.fixture(scope="module")
def bombs(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("bombs")
    gib12 = 1200 << 20
    ccob = str(d / "zeros.ccob")
    with open(ccob, "wb") as f:
        f.write(ccob_zeros(gib12))
    size = limits.MAX_OBJECT_BYTES + (44 << 20)  # 300 MiB
    blob = bz2_zeros(size)
    rows = sample_rows()
    kdb = make_db(str(d / "bomb.kdb"), rows[:2] + [(60, "zeros.o", "-mcpu=gfx1030", blob,
                                                   zeros_md5(size).hexdigest(), size)] + rows[2:])
    return {"ccob": ccob, "ccob_size": gib12, "kdb": kdb, "kdb_size": size}


def test_ccob_bomb_is_refused_before_its_output_is_made(bombs):
    data = open(bombs["ccob"], "rb").read()
    with pytest.raises(FormatError, match=f"declares {bombs['ccob_size']} .*more than the limit"):
        decompress_ccob(data)
    rss, out = peak_rss_mib(textwrap.dedent(f"""
        from kpatch.containers.discover import discover
        for item in discover([{bombs['ccob']!r}]):
            print(type(item).__name__, getattr(item, 'error', ''))
    """))
    assert "Problem CCOB declares" in out
    assert rss < 200, rss  # the output would be 1200 MiB


def test_kdb_blob_bomb_is_that_rows_error_and_memory_stays_small(bombs):
    rss, out = peak_rss_mib(textwrap.dedent(f"""
        from kpatch.cli.scan import run_scan
        records, errors = run_scan([{bombs['kdb']!r}])
        print('records', len(records))
        for e in errors:
            print('ERR', e['uri'], e['error'])
    """))
    errors = [ln for ln in out.splitlines() if ln.startswith("ERR")]
    assert len(errors) == 1 and "name=zeros.o" in errors[0] and "more than the limit" in errors[0], out
    assert f"records {len(sample_rows())}" in out  # every other row (all plain code objects)
    assert rss < 200, rss  # the blob decompresses to 300 MiB


def _bz2_stream_of_zeros(total: int, stream: int) -> bytes:
    """``total`` zero bytes as back-to-back bzip2 streams of ``stream`` bytes
    each (a .kdb.bz2 reader reads every stream)."""
    one = bz2_zeros(stream)
    return one * (total // stream)


def test_kdb_bz2_bomb_never_fills_the_temporary_directory(tmp_path, monkeypatch):
    bomb = str(tmp_path / "gfx1030.kdb.bz2")
    with open(bomb, "wb") as f:
        f.write(_bz2_stream_of_zeros(3 << 30, 64 << 20))  # 3 GiB
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    monkeypatch.setattr(limits, "MAX_KDB_BYTES", 96 << 20)
    with pytest.raises(FormatError, match="larger than the limit of 100663296 bytes"):
        KernelDB.open(bomb)
    assert list(tmp.iterdir()) == []
    monkeypatch.setattr(limits, "MAX_KDB_BYTES", 4 << 30)
    monkeypatch.setattr(limits, "MIN_FREE_BYTES", 1 << 62)  # no file system has that much free
    with pytest.raises(FormatError, match="the temporary directory has only"):
        KernelDB.open(bomb)
    assert list(tmp.iterdir()) == []
    problems = [i for i in discover([bomb]) if isinstance(i, Problem)]
    assert len(problems) == 1 and "temporary directory" in problems[0].error


def test_default_caps_fit_real_objects():
    """The caps leave room for the largest real objects (README, "Limits")
    and stay below the damaged inputs this issue was about."""
    assert 4 * 12 * 10**6 < limits.MAX_OBJECT_BYTES < 1 << 30  # librocsparse bundles ~12 MB; bombs 1.2 GiB
    assert 745 * 10**6 < limits.MAX_KDB_BYTES < 3 * 10**9  # gfx1030 system DB 745 MB; bomb 3 GB
    assert 1.3e9 < limits.MAX_ZIP_MEMBER_BYTES  # librocsparse.so.0.1 as a wheel member
    assert 173530 * 16 < limits.MAX_METADATA_BYTES <= limits.MAX_OBJECT_BYTES // 16


# --- files that are not files, zip members that cannot be read ----------------


def test_fifo_is_one_error_and_never_opened(tmp_path):
    fifo = str(tmp_path / "input.kdb")
    os.mkfifo(fifo)
    problems = list(discover([fifo]))
    assert [(type(p), p.error) for p in problems] == [(Problem, "not a regular file")]
    with pytest.raises(UsageError, match="not a regular file"):
        KernelDB.open(fifo)
    with pytest.raises(KpatchError, match="not a regular file"):
        resolve(parse_uri(f"file://{fifo}"))
    with pytest.raises(KpatchError, match="not a regular file"):
        resolve(parse_uri(f"kdb://{fifo}?name=a&args=b"))
    p = run_kpatch("scan", fifo)
    assert p.returncode == 1 and f"error: file://{fifo}: not a regular file" in p.stderr
    p = run_kpatch("apply", "--db", fifo, "--mode", "override", "--cu", "18", "--out-dir", str(tmp_path / "o"))
    assert p.returncode == 1 and "not a regular file" in p.stderr


CODE_NAME = "pkg/lib/kernel.hsaco"


def _zip_with(tmp_path, flag: int | None = None, method: int | None = None) -> tuple[str, bytes]:
    """A zip holding a good code object and ``bad.hsaco`` whose flag bits or
    compression method (local and central headers both) are patched."""
    code = sample_code()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("bad.hsaco", code)
        zf.writestr(CODE_NAME, code)
    data = bytearray(buf.getvalue())
    local = data.find(b"PK\x03\x04")
    central = data.find(b"PK\x01\x02")
    for head, flag_at, method_at in ((local, 6, 8), (central, 8, 10)):
        if flag is not None:
            struct.pack_into("<H", data, head + flag_at, flag)
        if method is not None:
            struct.pack_into("<H", data, head + method_at, method)
    path = str(tmp_path / "w.whl")
    with open(path, "wb") as f:
        f.write(data)
    return path, code


def sample_code() -> bytes:
    return bz2.decompress(sample_rows()[0][3])


@pytest.mark.parametrize("flag, method, reason", [(1, None, "the member is encrypted"),
                                                  (None, 99, "unsupported compression method 99")])
def test_unreadable_zip_member_is_one_error(tmp_path, flag, method, reason):
    path, code = _zip_with(tmp_path, flag, method)
    items = list(discover([path]))
    assert [(type(i), str(i.uri)) for i in items] == [
        (Problem, f"zip://{path}?member=bad.hsaco"),
        (Found, f"zip://{path}?member={CODE_NAME.replace('/', '%2F')}")]
    assert items[0].error == reason and items[1].data == code
    with pytest.raises(FormatError, match=reason):
        resolve(parse_uri(f"zip://{path}?member=bad.hsaco"))
    p = kpatch_in_process("scan", path)
    assert p.returncode == 1 and f"error: zip://{path}?member=bad.hsaco: {reason}" in p.stderr
    assert "internal error" not in p.stderr


def test_zip_members_are_capped(tmp_path, monkeypatch):
    code = sample_code()
    big = code + bytes(3 << 20)
    path = str(tmp_path / "w.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("big.hsaco", big)
        zf.writestr("ok.hsaco", code)
    monkeypatch.setattr(limits, "MAX_OBJECT_BYTES", 2 << 20)
    items = list(discover([path]))
    assert [type(i) for i in items] == [Problem, Found]
    assert "larger than the limit of 2097152 bytes" in items[0].error
    with pytest.raises(FormatError, match="larger than the limit"):
        resolve(parse_uri(f"zip://{path}?member=big.hsaco"))
    monkeypatch.setattr(limits, "MAX_ZIP_MEMBER_BYTES", 1 << 20)
    items = list(discover([path]))
    assert [type(i) for i in items] == [Problem, Found]
    assert f"the member is {len(big)} bytes, larger than the limit" in items[0].error


def test_whole_files_read_into_memory_are_capped(tmp_path, monkeypatch):
    path = str(tmp_path / "big.hsaco")
    with open(path, "wb") as f:
        f.write(sample_code() + bytes(3 << 20))
    monkeypatch.setattr(limits, "MAX_OBJECT_BYTES", 2 << 20)
    items = list(discover([path]))
    assert len(items) == 1 and "larger than the limit" in items[0].error
    with pytest.raises(KpatchError, match="larger than the limit"):
        resolve(parse_uri(f"file://{path}"))
