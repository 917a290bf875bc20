"""Fuzzing the container parsers: any bytes in -> a result or a clean
FormatError out, never another exception."""

from __future__ import annotations

import bz2
import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kpatch.containers.bundle import (
    bundle_extent,
    ccob_extent,
    decompress_ccob,
    infer_bundle_layout,
    open_bundle_bytes,
    parse_bundle,
    parse_ccob_header,
    rewrite_bundle,
)
from kpatch.containers.hostelf import find_fatbin_bundles, has_fatbin
from kpatch.containers.kdb import KdbEntry, KernelDB, encode_blob, write_kdb
from kpatch.errors import FormatError

from .conftest import FIXTURES, read

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _fixture_bytes(name: str, fallback: bytes) -> bytes:
    path = os.path.join(FIXTURES, name)
    return read(path) if os.path.exists(path) else fallback


BUNDLE = _fixture_bytes("vecops.hip.bundle", b"__CLANG_OFFLOAD_BUNDLE__" + bytes(8))
CCOB = _fixture_bytes("vecops.hip.ccob", b"CCOB\x02\x00\x01\x00" + bytes(16))
HOST_O = _fixture_bytes("vecops.hip.host.o", b"\x7fELF" + bytes(60))
SHOFF = min(int.from_bytes(HOST_O[0x28:0x30], "little"), len(HOST_O) - 1)  # e_shoff: the section table


def mutated(base: bytes, hot: int, start: int = 0):
    """``base`` with a few bytes overwritten (mostly in the ``hot`` bytes from
    ``start``, where headers are), truncated or extended."""
    edit = st.tuples(
        st.one_of(st.integers(start, max(start + hot - 1, start)), st.integers(0, max(len(base) - 1, 0))),
        st.binary(min_size=1, max_size=8),
    )

    def apply(args):
        edits, cut, tail = args
        b = bytearray(base)
        for pos, val in edits:
            b[pos : pos + len(val)] = val
        b = b[: cut] if cut is not None else b
        return bytes(b) + tail

    return st.tuples(
        st.lists(edit, max_size=4),
        st.one_of(st.none(), st.integers(0, len(base))),
        st.binary(max_size=16),
    ).map(apply)


def expect_clean(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except FormatError:
        return None


# --- bundles ----------------------------------------------------------------


@FUZZ
@given(st.one_of(mutated(BUNDLE, 256), st.binary(max_size=512)))
def test_fuzz_parse_bundle(data):
    entries = expect_clean(parse_bundle, data)
    if entries is None:
        return
    for e in entries:
        assert e.size == 0 or e.offset + e.size <= len(data)
    extent = bundle_extent(data)
    assert extent <= len(data)
    if expect_clean(infer_bundle_layout, data) is not None:
        again = rewrite_bundle(data, {})
        assert [(e.id, e.offset, e.size) for e in parse_bundle(again)] == [(e.id, e.offset, e.size) for e in entries]
        assert [bytes(e.data(again)) for e in entries] == [bytes(e.data(data)) for e in entries]
    kind, _, listed = open_bundle_bytes(data)
    assert kind == "bundle" and listed == entries


@FUZZ
@given(st.one_of(mutated(CCOB, 32), st.binary(max_size=256), st.binary(max_size=64).map(lambda b: b"CCOB" + b)))
def test_fuzz_ccob(data):
    expect_clean(parse_ccob_header, data)
    expect_clean(ccob_extent, data)
    out = expect_clean(decompress_ccob, data, max_output=1 << 24)
    assert out is None or len(out) <= 1 << 24
    expect_clean(open_bundle_bytes, data, max_output=1 << 24)


# --- kdb --------------------------------------------------------------------

CODE = _fixture_bytes("vecops.hip.gfx1030.v4.hsaco", bytes(range(256)) * 8)
BLOB, MD5, SIZE = encode_blob(CODE)


@FUZZ
@given(
    st.one_of(mutated(BLOB, 64), st.binary(max_size=256), st.just(bz2.compress(bytes(1 << 20)))),
    st.one_of(st.just(SIZE), st.integers(-(2**63), 2**63 - 1), st.integers(0, 1 << 21)),
    st.one_of(st.just(MD5), st.text(max_size=40)),
)
def test_fuzz_kdb_entry_code(blob, size, md5):
    code = expect_clean(KdbEntry(1, "k.s.o", "-mcpu=gfx1030", blob, md5, size).code, max_output=1 << 22)
    assert code is None or (len(code) == size or size == 0)


def _small_kdb() -> bytes:
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "k.kdb")
        write_kdb(p, [(f"k{i}.s.o", "-mcpu=gfx1030", CODE[i * 100 :]) for i in range(3)], user=False)
        return read(p)


KDB = _small_kdb()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(KDB, 4096))
def test_fuzz_kernel_db_file(data):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "f.kdb")
        with open(p, "wb") as f:
            f.write(data)
        try:
            with KernelDB.open(p) as db:
                db.count()
                for e in db.entries():
                    expect_clean(e.code)
                db.get("k1.s.o", "-mcpu=gfx1030")
        except FormatError:
            pass


# --- host ELF ---------------------------------------------------------------


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(mutated(HOST_O, 64), mutated(HOST_O, 2048, SHOFF), mutated(HOST_O, 8192, 4096), st.binary(max_size=128).map(lambda b: b"\x7fELF\x02\x01" + b)))
def test_fuzz_find_fatbin_bundles(data):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "h.o")
        with open(p, "wb") as f:
            f.write(data)
        expect_clean(has_fatbin, p)
        found = expect_clean(find_fatbin_bundles, p)
        for b in found or []:
            assert 0 <= b.offset and b.offset + b.size <= len(data)


# --- kdb rows of any type -----------------------------------------------------

_CELL = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), st.text(max_size=8),
                  st.binary(max_size=8))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_CELL, _CELL, _CELL, _CELL, _CELL), min_size=1, max_size=4), st.integers(0, 3))
def test_fuzz_kdb_rows_one_error_each(bad, where):
    """Rows holding any SQLite value in any column: every row comes out as
    one entry (bad ones with their error), the good rows around them intact."""
    import sqlite3

    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "k.kdb")
        conn = sqlite3.connect(p)
        conn.execute("CREATE TABLE kern_db (id INTEGER PRIMARY KEY, kernel_name TEXT, kernel_args TEXT, "
                     "kernel_blob BLOB, kernel_hash TEXT, uncompressed_size INT)")
        good = [("g.s.o", f"-mcpu=gfx1030 -DI={i}", *encode_blob(CODE)) for i in range(3)]
        rows = good[:where] + bad + good[where:]
        conn.executemany("INSERT INTO kern_db (kernel_name, kernel_args, kernel_blob, kernel_hash, "
                         "uncompressed_size) VALUES (?, ?, ?, ?, ?)", rows)
        conn.commit()
        conn.close()
        with KernelDB.open(p) as db:
            entries = list(db.entries())
    assert len(entries) == len(rows)
    for e in entries:
        code = expect_clean(e.code, max_output=1 << 22)
        if e.kernel_name == "g.s.o" and e.kernel_args.startswith("-mcpu=gfx1030 -DI="):
            assert code == CODE
