"""MIOpen kernel DBs: written and read back with Python's sqlite3 and libbz2
(through ctypes, called exactly as MIOpen calls it) as the oracles."""

from __future__ import annotations

import bz2
import ctypes
import ctypes.util
import hashlib
import os
import shutil
import sqlite3
import subprocess

import pytest

from kpatch.containers.kdb import (
    SCHEMA_SQL,
    SELECT_SQL,
    KdbEntry,
    KernelDB,
    encode_blob,
    is_bz2,
    is_sqlite,
    write_kdb,
)
from kpatch.errors import FormatError, UsageError

from .conftest import fixture, read

BZ_OK, BZ_OUTBUFF_FULL = 0, -8


@pytest.fixture(scope="module")
def libbz2():
    name = ctypes.util.find_library("bz2")
    if not name:
        pytest.skip("libbz2 not found")
    return ctypes.CDLL(name)


def miopen_compress(libbz2, s: bytes) -> tuple[bytes, bool]:
    """MIOpen's miopen::compress: BZ2_bzBuffToBuffCompress(dest, &len, src,
    size, 9, 0, 30) into a buffer as large as the input; raw on BZ_OUTBUFF_FULL."""
    dest_len = ctypes.c_uint(len(s))
    dest = ctypes.create_string_buffer(max(len(s), 1))
    rc = libbz2.BZ2_bzBuffToBuffCompress(dest, ctypes.byref(dest_len), s, len(s), 9, 0, 30)
    if rc == BZ_OUTBUFF_FULL:
        return s, False
    if rc != BZ_OK:
        return None, False  # MIOpen throws ("unknown error!"): it cannot store an empty blob
    return dest.raw[: dest_len.value], True


def code_objects() -> list[bytes]:
    return [
        read(fixture("miopen_like.cl.gfx1030.v4.hsaco")),
        read(fixture("asm_kernels.s.gfx1030.v5.hsaco")),
        read(fixture("vecops.hip.bundle")),
    ]


ITEMS = [
    ("MIOpenConvDirUni.cl.o", " -DMLO_HW_WAVE_SZ=64 -DMLO_DIR_FORWARD=1 -mcpu=gfx1030", 0),
    ("conv1x1u.s.o", "-Wa,-defsym,ROCM_METADATA_VERSION=5 -mcumode -mwavefrontsize64 -mcpu=gfx1030", 1),
    ("naive_conv.cpp.o", " -std=c++17 -O3 -mcpu=gfx1030", 2),
    ("quote's.cl.o", " -DX='1' -mcpu=gfx1030", 0),
]


def items() -> list[tuple[str, str, bytes]]:
    cos = code_objects()
    return [(n, a, cos[i]) for n, a, i in ITEMS]


# --- blob encoding ----------------------------------------------------------


def test_encode_blob_matches_miopen_compress(libbz2):
    samples = code_objects() + [os.urandom(n) for n in (0, 1, 13, 200, 5000)]
    samples += [b"a" * n for n in (0, 1, 10, 30, 40, 50, 100000)]
    samples += [bytes(range(256)) * 3, os.urandom(20) * 3]
    decisions = set()
    for s in samples:
        want_blob, compressed = miopen_compress(libbz2, s)
        if want_blob is None:
            assert s == b""
            assert encode_blob(s) == (b"", hashlib.md5(b"").hexdigest(), 0)
            continue
        blob, md5, size = encode_blob(s)
        assert blob == want_blob
        assert size == (len(s) if compressed else 0)
        assert md5 == hashlib.md5(s).hexdigest()
        decisions.add(compressed)
    assert decisions == {True, False}


def test_encode_blob_boundary_equal_length_is_compressed(libbz2):
    # find inputs whose bz2 stream is exactly as long as the input: MIOpen's
    # buffer is len(input) bytes, so those still count as compressed
    for n in range(30, 60):
        s = b"ab" * (n // 2) + b"c" * (n % 2)
        c = bz2.compress(s, 9)
        if len(c) == len(s):
            assert miopen_compress(libbz2, s)[1] is True
            assert encode_blob(s)[2] == len(s)
            return
    pytest.skip("no input of exactly the compressed length in the range")


def test_magic_checks():
    assert is_sqlite(b"SQLite format 3\x00rest")
    assert not is_sqlite(b"SQLite format 2\x00")
    assert is_bz2(bz2.compress(b"x"))
    assert is_bz2(bz2.compress(b""))  # end-of-stream magic right after BZh9
    assert not is_bz2(b"BZh0") and not is_bz2(b"BZh9garbage") and not is_bz2(b"BZ")


# --- writing and reading --------------------------------------------------


@pytest.mark.parametrize("user", [True, False])
def test_write_kdb_as_miopen_stores(tmp_path, user):
    path = str(tmp_path / ("gfx1030_18.ukdb" if user else "gfx1030.kdb"))
    write_kdb(path, items(), user=user)
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(path)]  # no temp or WAL leftovers
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode;").fetchone()[0] == ("wal" if user else "delete")
        # sqlite stores each CREATE statement without "IF NOT EXISTS"
        stored = [r[0] for r in conn.execute("SELECT sql FROM sqlite_master ORDER BY rowid;")]
        assert stored == [
            "CREATE TABLE `kern_db` (`id` INTEGER PRIMARY KEY ASC,`kernel_name` TEXT NOT NULL,"
            "`kernel_args` TEXT NOT NULL,`kernel_blob` BLOB NOT NULL,`kernel_hash` TEXT NOT NULL,"
            "`uncompressed_size` INT NOT NULL)",
            "CREATE UNIQUE INDEX `idx_kern_db` ON kern_db(kernel_name, kernel_args)",
        ]
        for name, args, code in items():
            # MIOpen pastes the key into the SQL text; do the same (quotes doubled)
            q = "SELECT kernel_blob, kernel_hash, uncompressed_size FROM kern_db WHERE (kernel_name = '{}') AND (kernel_args = '{}');"
            blob, md5, size = conn.execute(q.format(name.replace("'", "''"), args.replace("'", "''"))).fetchone()
            assert md5 == hashlib.md5(code).hexdigest()
            assert (bz2.decompress(blob) if size else blob) == code
            assert size in (0, len(code)) and (size == 0) == (blob == code)
    finally:
        conn.close()


def test_kerneldb_reads_what_it_wrote(tmp_path):
    path = str(tmp_path / "gfx1030_18.ukdb")
    write_kdb(path, items(), user=True)
    with KernelDB.open(path) as db:
        assert db.path == path
        assert db.count() == len(ITEMS)
        entries = list(db.entries())
        assert [e.id for e in entries] == sorted(e.id for e in entries)
        assert [(e.kernel_name, e.kernel_args, e.code()) for e in entries] == items()
        for name, args, code in items():
            e = db.get(name, args)
            assert e is not None and e.code() == code and e.kernel_name == name
        assert db.get("MIOpenConvDirUni.cl.o", "-mcpu=gfx1030") is None
        with pytest.raises(UsageError, match="read-only"):
            db.put("x", "y", b"z")


def test_put_replaces_and_commit_persists(tmp_path):
    path = str(tmp_path / "gfx1030_20.ukdb")
    with KernelDB.create(path, user=True) as db:
        db.put("a.s.o", "-mcpu=gfx1030", b"first")
        db.put("a.s.o", "-mcpu=gfx1030", b"second")  # INSERT OR REPLACE
        db.put("b.s.o", "-mcpu=gfx1030", b"other")
        db.commit()
        db.put("c.s.o", "-mcpu=gfx1030", b"never committed")
    with KernelDB.open(path, writable=True) as db:
        assert db.count() == 2 and db.get("a.s.o", "-mcpu=gfx1030").code() == b"second"
        db.put("d.s.o", "-mcpu=gfx1030", b"added later")
        db.commit()
    with KernelDB.open(path) as db:
        assert db.count() == 3
    with pytest.raises(UsageError, match="already exists"):
        KernelDB.create(path)


def test_select_sql_is_miopens_lookup(tmp_path):
    assert SELECT_SQL.count("?") == 2
    path = str(tmp_path / "k.kdb")
    write_kdb(path, items(), user=False)
    conn = sqlite3.connect(path)
    name, args, code = items()[1]
    blob, md5, size = conn.execute(SELECT_SQL, (name, args)).fetchone()
    conn.close()
    assert KdbEntry(0, name, args, blob, md5, size).code() == code


def test_schema_sql_creates_what_miopen_checks(tmp_path):
    conn = sqlite3.connect(str(tmp_path / "s.kdb"))
    conn.executescript(SCHEMA_SQL)
    cols = [(r[1], r[2], r[3], r[5]) for r in conn.execute("PRAGMA table_info(kern_db);")]
    conn.close()
    assert cols == [
        ("id", "INTEGER", 0, 1),
        ("kernel_name", "TEXT", 1, 0),
        ("kernel_args", "TEXT", 1, 0),
        ("kernel_blob", "BLOB", 1, 0),
        ("kernel_hash", "TEXT", 1, 0),
        ("uncompressed_size", "INT", 1, 0),
    ]


def test_kdb_bz2_is_streamed_to_a_temp_file(tmp_path):
    path = str(tmp_path / "gfx1030.kdb")
    write_kdb(path, items(), user=False)
    subprocess.run(["bzip2", "-k", path], check=True)  # the real bzip2 tool
    with KernelDB.open(path + ".bz2") as db:
        tmp = db.db_path
        assert tmp != path + ".bz2" and os.path.exists(tmp)
        assert [(e.kernel_name, e.kernel_args, e.code()) for e in db.entries()] == items()
    assert not os.path.exists(tmp)
    with pytest.raises(UsageError, match="read-only"):
        KernelDB.open(path + ".bz2", writable=True)


def test_kdb_bz2_cache_dir_is_reused(tmp_path):
    path = str(tmp_path / "gfx1030.kdb")
    write_kdb(path, items()[:2], user=False)
    with open(path, "rb") as f, bz2.open(path + ".bz2", "wb") as g:
        shutil.copyfileobj(f, g)
    cache = str(tmp_path / "cache")
    with KernelDB.open(path + ".bz2", cache_dir=cache) as db:
        first = db.db_path
        assert db.count() == 2
    assert os.path.exists(first) and read(first) == read(path)
    with KernelDB.open(path + ".bz2", cache_dir=cache) as db:
        assert db.db_path == first


def test_write_kdb_is_atomic(tmp_path):
    path = str(tmp_path / "gfx1030_18.ukdb")
    write_kdb(path, items()[:1], user=True)
    before = read(path)

    def failing():
        yield items()[1]
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        write_kdb(path, failing(), user=True)
    assert read(path) == before
    assert sorted(os.listdir(tmp_path)) == ["gfx1030_18.ukdb"]
    # a live WAL next to the target is never clobbered
    with open(path + "-wal", "wb") as f:
        f.write(b"x")
    with pytest.raises(UsageError, match="-wal"):
        write_kdb(path, items(), user=True)
    assert read(path) == before


# --- bad input --------------------------------------------------------------


def _entry(code: bytes, **over) -> KdbEntry:
    blob, md5, size = encode_blob(code)
    fields = dict(id=1, kernel_name="k.s.o", kernel_args="-mcpu=gfx1030", kernel_blob=blob, kernel_hash=md5,
                  uncompressed_size=size)
    fields.update(over)
    return KdbEntry(**fields)


def test_bad_blobs():
    code = read(fixture("miopen_like.cl.gfx1030.v4.hsaco"))
    good = _entry(code)
    assert good.uncompressed_size == len(code) and good.code() == code
    blob = good.kernel_blob
    bad_md5 = "0" * 32
    cases = [
        (_entry(code, kernel_hash=bad_md5), f"MD5 mismatch: stored {bad_md5}, computed {hashlib.md5(code).hexdigest()}"),
        (_entry(code, kernel_hash=good.kernel_hash.upper()), "MD5 mismatch"),
        (_entry(code, uncompressed_size=len(code) + 7), f"uncompressed_size says {len(code) + 7} but the blob decompresses to {len(code)} bytes"),
        (_entry(code, uncompressed_size=len(code) - 1), "decompresses to more"),
        (_entry(code, kernel_blob=blob[: len(blob) // 2]), "bz2 stream corrupt"),
        (_entry(code, kernel_blob=blob[:10] + bytes(len(blob) - 10)), "bz2 stream corrupt"),
        (_entry(code, kernel_blob=b"BZh9" + os.urandom(100)), "bz2 stream corrupt"),
        (_entry(code, uncompressed_size=-5), "out of range"),
        (_entry(code, uncompressed_size=2**40), "out of range"),
        (_entry(code, uncompressed_size=0), "MD5 mismatch"),  # the compressed blob read as raw
    ]
    for entry, message in cases:
        with pytest.raises(FormatError, match=message):
            entry.code()


def test_bz2_bomb_is_capped():
    bomb = bz2.compress(bytes(64 << 20), 9)  # 64 MiB of zeros in a few dozen bytes
    assert len(bomb) < 1000
    entry = KdbEntry(1, "k", "a", bomb, "0" * 32, 1000)
    with pytest.raises(FormatError, match="uncompressed_size says 1000 but the blob decompresses to more"):
        entry.code()
    with pytest.raises(FormatError, match="more than the limit"):
        KdbEntry(1, "k", "a", bomb, "0" * 32, 64 << 20).code(max_output=1 << 20)


def test_not_sqlite_and_not_a_kdb(tmp_path):
    junk = tmp_path / "junk.kdb"
    junk.write_bytes(b"\x7fELF" + os.urandom(600))
    with pytest.raises(FormatError, match="not an SQLite database"):
        KernelDB.open(str(junk))
    empty = tmp_path / "empty.kdb"
    empty.write_bytes(b"")
    with pytest.raises(FormatError, match="empty file"):
        KernelDB.open(str(empty))
    other = str(tmp_path / "other.db")
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE perf_db (id INTEGER PRIMARY KEY, solver TEXT);")
    conn.commit()
    conn.close()
    with pytest.raises(FormatError, match="not a MIOpen kernel DB: no table kern_db"):
        KernelDB.open(other)
    partial = str(tmp_path / "partial.kdb")
    conn = sqlite3.connect(partial)
    conn.execute("CREATE TABLE kern_db (id INTEGER PRIMARY KEY, kernel_name TEXT, kernel_args TEXT, kernel_blob BLOB);")
    conn.commit()
    conn.close()
    with pytest.raises(FormatError, match="lacks kernel_hash, uncompressed_size"):
        KernelDB.open(partial)
    with pytest.raises(UsageError, match="no such file"):
        KernelDB.open(str(tmp_path / "missing.kdb"))
    bad_bz2 = tmp_path / "x.kdb.bz2"
    bad_bz2.write_bytes(bz2.compress(b"not sqlite at all" * 100)[:-20])
    with pytest.raises(FormatError, match="bz2 stream corrupt"):
        KernelDB.open(str(bad_bz2))
    not_sqlite_bz2 = tmp_path / "y.kdb.bz2"
    not_sqlite_bz2.write_bytes(bz2.compress(b"not sqlite at all" * 100))
    with pytest.raises(FormatError, match="not an SQLite database"):
        KernelDB.open(str(not_sqlite_bz2))


def test_truncated_database_file(tmp_path):
    path = str(tmp_path / "big.kdb")
    write_kdb(path, [(f"k{i}.s.o", "-mcpu=gfx1030", os.urandom(3000)) for i in range(40)], user=False)
    data = read(path)
    cut = tmp_path / "cut.kdb"
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(FormatError):
        with KernelDB.open(str(cut)) as db:
            for e in db.entries():
                e.code()


def test_bad_column_types(tmp_path):
    """Each bad row is one entry carrying its own error (its code() raises
    it); the rows after it are still read."""
    path = str(tmp_path / "types.kdb")
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA_SQL)
    conn.execute("INSERT INTO kern_db VALUES (1, 'a', 'b', x'00', 'h', 'twelve');")
    conn.execute("INSERT INTO kern_db VALUES (2, CAST(x'ff' AS TEXT), 'b', x'00', 'h', 0);")
    conn.execute("INSERT INTO kern_db VALUES (3, 'c', 'b', 42, 'h', 0);")
    conn.execute("INSERT INTO kern_db VALUES (4, 'd', 'b', x'00', '93b885adfe0da089cdf634904fd59f71', 0);")
    conn.commit()
    conn.close()
    with KernelDB.open(path) as db:
        assert db.count() == 4
        entries = list(db.entries())
    assert [e.id for e in entries] == [1, 2, 3, 4]
    assert [e.error for e in entries] == [
        "uncompressed_size 'twelve' is not an integer", "", "kernel_blob is 42, not a blob", ""]
    assert [e.key_readable for e in entries] == [True, True, True, True]
    assert str(entries[0].uri(path)) == f"kdb://{path}?name=a&args=b"
    # TEXT holding a byte that is not UTF-8 is still the key: carried byte for byte
    assert str(entries[1].uri(path)) == f"kdb://{path}?name=%FF&args=b"
    for e, reason in zip(entries[:3], ("is not an integer", "MD5 mismatch", "not a blob")):
        with pytest.raises(FormatError, match=reason):
            e.code()
    assert entries[3].code() == b"\x00"  # MD5 of one zero byte: 93b885ad...
