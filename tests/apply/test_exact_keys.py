"""Every row carried exactly: keys and blobs go into the user DB as the bytes
SQLite holds, never normalised, and no row stops the others.

MIOpen stores ``kernel_name`` / ``kernel_args`` as SQLite TEXT and finds a
row by comparing those exact bytes (BINARY collation: memcmp).  The source
DB here is written with sqlite3 alone, every key as TEXT made from raw bytes
(``CAST(x'..' AS TEXT)``, which SQLite stores without any UTF-8 check); the
output is read back with sqlite3 alone (``text_factory=bytes``,
``typeof()``); the expected blobs are ``conftest.marked(code)``.
"""

from __future__ import annotations

import bz2
import hashlib
import json
import os
import sqlite3

import pytest

from kpatch.containers.kdb import SCHEMA_SQL

from .conftest import FakePatcher, fake_is_patched, fixture, invoke, marked, python_cli, read

MCPU = b" -mcpu=gfx1030"
CODE = ("miopen_like.cl.gfx1030.v4.hsaco", "asm_kernels.s.gfx1030.v4.hsaco", "mathops.hip.gfx1030.v4.hsaco")

#: (kernel_name, kernel_args) of the rows to carry, as raw bytes.
KEYS = [
    (b"quote's \"double\".cl.o", b" -DQ='x'" + MCPU),
    (b"x'); DROP TABLE kern_db; --.cl.o", b" -DSQL=\"'; DELETE FROM kern_db; --\"" + MCPU),
    (b"nul\x00inside.cl.o", b" -DNUL=a\x00b" + MCPU),
    (b"\xff\xfe-not-utf8.cl.o", b" -D\x80\x81" + MCPU),
    (b"\xed\xb2\x80-encoded-surrogate.cl.o", b" -D\xed\xa0\x80" + MCPU),
    (b"newline.cl.o", MCPU),
    (b"newline.cl.o\n", MCPU),  # differs from the one above only by a trailing newline
    (b"long-args.cl.o", b" -DLONG=" + b"A" * (1 << 20) + MCPU),  # a 1 MiB key
    (b"tab\tand\r\nlines.cl.o", b"\n -DX=1\n" + MCPU),
]


def _encode(code: bytes) -> tuple[bytes, str, int]:
    packed = bz2.compress(code, 9)
    md5 = hashlib.md5(code).hexdigest()
    return (packed, md5, len(code)) if len(packed) <= len(code) else (code, md5, 0)


def make_source(path: str, rows: list[tuple[bytes, bytes, bytes]]) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA_SQL)
    for name, args, code in rows:
        conn.execute("INSERT INTO kern_db (kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size) "
                     "VALUES (CAST(? AS TEXT), CAST(? AS TEXT), ?, ?, ?);", (name, args, *_encode(code)))
    conn.commit()
    conn.close()


def stored(path: str) -> dict[tuple[bytes, bytes], tuple]:
    """{(name, args): (code, storage classes)}, decoded with bz2 and checked with hashlib."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.text_factory = bytes
    out = {}
    try:
        for n, a, blob, md5, size, tn, ta in conn.execute(
                "SELECT kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size, typeof(kernel_name), "
                "typeof(kernel_args) FROM kern_db"):
            code = bz2.decompress(blob) if size else blob
            assert hashlib.md5(code).hexdigest().encode() == md5 and (not size or len(code) == size)
            out[(n, a)] = (code, tn, ta)
    finally:
        conn.close()
    return out


def rows_to_carry() -> list[tuple[bytes, bytes, bytes]]:
    codes = [read(fixture(f)) for f in CODE]
    return [(n, a, codes[i % len(codes)]) for i, (n, a) in enumerate(KEYS)]


def test_every_key_is_carried_byte_for_byte(tmp_path, monkeypatch):
    rows = rows_to_carry()
    # a 1 MiB blob that is not a code object sits among them: its own error, the rows after it go on
    junk = (b"junk.cl.o", MCPU, os.urandom(1 << 20))
    src = str(tmp_path / "src.kdb")
    make_source(src, rows[:4] + [junk] + rows[4:])
    cache = tmp_path / "cache"
    cache.mkdir()
    code, stdout, stderr, exc = invoke(monkeypatch, ["apply", "--db", src, "--mode", "override", "--cu", "18",
                                                     "--out-dir", str(cache)],
                                       patcher=FakePatcher(), is_patched=fake_is_patched)
    assert exc is None and code == 1, stderr  # exit 1: the junk row could not be read as a code object
    got = stored(str(cache / "gfx1030_18.ukdb"))
    want = {(n, a): (marked(c), b"text", b"text") for n, a, c in rows}
    assert got == want
    assert f"{len(rows)} entries written" in stdout


def test_a_user_db_patched_in_place_keeps_its_keys(tmp_path, monkeypatch):
    """The user's own .ukdb as source and output: each row is replaced under
    its exact key, no row is added, none is lost."""
    cache = tmp_path / "cache"
    cache.mkdir()
    out = str(cache / "gfx1030_18.ukdb")
    rows = rows_to_carry()
    make_source(out, rows)
    code, stdout, stderr, exc = invoke(monkeypatch, ["apply", "--db", out, "--mode", "override", "--cu", "18",
                                                     "--out-dir", str(cache)],
                                       patcher=FakePatcher(), is_patched=fake_is_patched)
    assert exc is None and code == 0, stderr
    assert stored(out) == {(n, a): (marked(c), b"text", b"text") for n, a, c in rows}
    code, stdout, stderr, exc = invoke(monkeypatch, ["revert", out])
    assert code == 0, stderr
    assert stored(out) == {(n, a): (c, b"text", b"text") for n, a, c in rows}


def test_json_and_report_name_such_keys(tmp_path):
    """The real CLI (real patcher) prints, writes JSON and an HTML report for
    such keys without failing; the URIs it prints give back the exact bytes."""
    from urllib.parse import unquote_to_bytes

    rows = rows_to_carry()
    src = str(tmp_path / "src.kdb")
    make_source(src, rows)
    report = tmp_path / "report.html"
    p = python_cli("apply", "--db", src, "--mode", "override", "--cu", "18", "--out-dir", str(tmp_path / "c"),
                   "--json", "--report", str(report), "--dry-run")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    doc = json.loads(p.stdout)
    names = set()
    for e in doc["entries"]:
        query = e["uri"].split("?", 1)[1]
        fields = dict(part.split("=", 1) for part in query.split("&"))
        names.add((unquote_to_bytes(fields["name"]), unquote_to_bytes(fields["args"])))
    assert names == set(KEYS)
    assert report.exists() and report.stat().st_size > 0
    p = python_cli("apply", "--db", src, "--mode", "override", "--cu", "18", "--out-dir", str(tmp_path / "c"),
                   "--dry-run")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("column", ["kernel_name", "kernel_args"])
def test_a_blob_key_is_one_error_and_the_rest_go_on(tmp_path, monkeypatch, column):
    """A key stored as a BLOB is not one MIOpen's TEXT lookup can find: that
    row is an error naming it, the others are written."""
    rows = rows_to_carry()[:3]
    src = str(tmp_path / "src.kdb")
    make_source(src, rows)
    conn = sqlite3.connect(src)
    conn.execute("INSERT INTO kern_db (kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size) "
                 "VALUES (?, ?, ?, ?, ?);", (b"blobkey.cl.o" if column == "kernel_name" else "blobkey.cl.o",
                                              MCPU if column == "kernel_args" else MCPU.decode(),
                                              *_encode(rows[0][2])))
    conn.commit()
    conn.close()
    make_rows_after = rows_to_carry()[3:5]
    conn = sqlite3.connect(src)
    for n, a, c in make_rows_after:
        conn.execute("INSERT INTO kern_db (kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size) "
                     "VALUES (CAST(? AS TEXT), CAST(? AS TEXT), ?, ?, ?);", (n, a, *_encode(c)))
    conn.commit()
    conn.close()
    cache = tmp_path / "cache"
    cache.mkdir()
    code, stdout, stderr, exc = invoke(monkeypatch, ["apply", "--db", src, "--mode", "override", "--cu", "18",
                                                     "--out-dir", str(cache)],
                                       patcher=FakePatcher(), is_patched=fake_is_patched)
    assert code == 1 and f"{column} is stored as a BLOB, not TEXT" in stdout + stderr
    got = stored(str(cache / "gfx1030_18.ukdb"))
    assert got == {(n, a): (marked(c), b"text", b"text") for n, a, c in rows + make_rows_after}
