"""Reading metadata without writing it back: the C msgpack library.

``mpack.unpack_plain`` (used by scan, disasm and diff) must give exactly what
the lossless reader gives with its remembered forms dropped -- the same
values of the same Python types -- and refuse exactly the documents the
lossless reader refuses.  Checked on every metadata note of the corpus
(librocrand, librocsparse when fetched), of the sample kernel DB and of the
fixtures, and on generated documents in every encoding form.
"""

from __future__ import annotations

import math
import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import CORPUS_LIB, FIXTURES
from kpatch.codeobject import CodeObject, decode_metadata, encode_metadata
from kpatch.codeobject import mpack
from kpatch.codeobject.metadata import Metadata
from kpatch.errors import FormatError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = os.path.join(ROOT, "kpatch", "data", "sample.kdb")


def same(a, b) -> bool:
    """Equal values of identical types, all the way down (NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(k, l) for k, l in zip(a, b)) and all(
            same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def lossless_plain(data: bytes):
    return mpack._plain_of(mpack.unpack(data, allow_trailing=True))


def check(data: bytes) -> None:
    try:
        want = lossless_plain(data)
    except FormatError:
        with pytest.raises(FormatError):
            mpack.unpack_plain(data, allow_trailing=True)
        return
    got = mpack.unpack_plain(data, allow_trailing=True)
    assert same(got, want)


def _notes_of_code_objects(blobs):
    n = 0
    for blob in blobs:
        try:
            co = CodeObject.from_bytes(blob)
        except FormatError:
            continue
        for note in co.metadata_notes:
            check(note.desc)
            n += 1
    return n


def _corpus_blobs(lib: str):
    from kpatch.containers.bundle import open_bundle_bytes
    from kpatch.containers.hostelf import find_fatbin_bundles
    path = os.path.join(CORPUS_LIB, lib)
    if not os.path.exists(path):
        pytest.skip(f"{lib} not fetched (tools/fetch_corpus.sh --all)")
    with open(path, "rb") as f:
        for b in find_fatbin_bundles(path):
            _, bundle, entries = open_bundle_bytes(os.pread(f.fileno(), b.size, b.offset))
            for e in entries:
                yield bytes(e.data(bundle))


@pytest.mark.corpus
@pytest.mark.parametrize("lib", ["librocrand.so.1.1", "librocsparse.so.0.1"])
def test_readers_agree_on_every_note_of_the_corpus(lib):
    assert _notes_of_code_objects(_corpus_blobs(lib)) > 0


def test_readers_agree_on_the_sample_db_and_the_fixtures():
    from kpatch.containers.kdb import KernelDB
    with KernelDB.open(SAMPLE) as db:
        blobs = [e.code() for e in db.entries()]
    for name in sorted(f for f in os.listdir(FIXTURES) if f.endswith(".hsaco")):
        with open(os.path.join(FIXTURES, name), "rb") as fh:
            blobs.append(fh.read())
    assert _notes_of_code_objects(blobs) >= 2


# --- generated documents: every form the lossless reader remembers -------------------

def _w(fmt: int, code: str, v) -> bytes:
    return bytes([fmt]) + struct.pack(code, v)


FORMS = [
    _w(mpack.UINT16, ">H", 5), _w(mpack.UINT64, ">Q", 7), _w(mpack.INT8, ">b", 3), _w(mpack.INT32, ">i", -2),
    bytes([mpack.STR8, 2]) + b"ab", bytes([mpack.STR16, 0, 1]) + b"x", bytes([mpack.BIN16, 0, 1]) + b"\0",
    _w(mpack.FLOAT32, ">f", 1.5), _w(mpack.FLOAT64, ">d", -0.0), bytes([mpack.FLOAT64]) + b"\x7f\xf8\0\0\0\0\0\1",
    bytes([mpack.ARRAY16, 0, 1, 1]), bytes([mpack.MAP16, 0, 1, 0xA1]) + b"k" + b"\x01",
    bytes([0xA2]) + b"\xff\xfe",  # not UTF-8: surrogateescape
    b"\xc0", b"\xc2", b"\xc3", b"\xe0", b"\xcf" + b"\xff" * 8,
]

values = st.recursive(
    st.sampled_from(FORMS),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: bytes([0x90 | len(xs)]) + b"".join(xs)),
        st.lists(st.tuples(st.sampled_from(FORMS[:7]), inner), max_size=3).map(
            lambda kv: bytes([0x80 | len(kv)]) + b"".join(k + v for k, v in kv)),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(values, st.binary(max_size=3))
def test_readers_agree_on_generated_documents(doc, trailing):
    check(doc + trailing)


@settings(max_examples=300, deadline=None)
@given(values, st.integers(0, 40))
def test_readers_refuse_the_same_truncated_documents(doc, cut):
    check(doc[:max(0, len(doc) - cut)])


@pytest.mark.parametrize("data", [
    b"\x82\xa1a\x01\xa1a\x02",  # a repeated key
    b"\x82\x01\x01\xc3\x02",  # equal keys: 1 and True
    b"\x81\x91\x01\x02",  # a list as a key
    b"\x81\x81\x01\x01\x02",  # a map as a key
    b"\xc1",  # the reserved byte
    b"\x92\x01",  # truncated
    b"",
    b"\x91" * 64 + b"\x01",  # 65 levels: too deep
    b"\x91" * 64 + b"\x90",  # 64 levels then an empty list: allowed
    b"\x91" * 63 + b"\x81\x01\x01",
    b"\x91" * 5000 + b"\x01",  # beyond the C reader's own stack
    b"\xd4\x05\x01", b"\xc7\x02\x07ab", b"\x91\xd6\xff\x00\x00\x00\x01",  # ext values (and a timestamp)
    b"\x81\xd6\xff\x00\x00\x00\x01\x01",  # a timestamp as a key
    b"\x81\xa1k\x92\x82\xa1a\x01\xa1b\x02\x82\xa1a\x01\xa1a\x01",  # a repeated key, deep, equal values
    b"\x82\xa1a\x01\xa1a\x02\xc1",  # a repeated key, then the reserved byte
])
def test_readers_agree_on_edge_cases(data):
    check(data)


def test_plain_metadata_is_never_written_back():
    with open(os.path.join(FIXTURES, sorted(f for f in os.listdir(FIXTURES) if f.endswith(".hsaco"))[0]),
              "rb") as fh:
        co = CodeObject.from_bytes(fh.read(), lossless=False)
    md = co.metadata
    assert md is not None and not md.lossless
    assert md.to_python() == decode_metadata(co.metadata_note.desc).to_python()
    with pytest.raises(ValueError):
        encode_metadata(md)


@pytest.mark.parametrize("data", [b"\x91" * 5000 + b"\x01", b"\xc1"])
def test_what_only_the_c_reader_refuses_is_said_in_the_lossless_readers_words(data):
    """The C reader's own refusals (its stack depth, the reserved byte) carry
    no usable message (the stack error's is empty: scan printed
    'error: URI: MessagePack:'); the plain reader says what the lossless one says."""
    with pytest.raises(FormatError) as lossless:
        mpack.unpack(data)
    with pytest.raises(FormatError) as plain:
        mpack.unpack_plain(data)
    assert plain.value.reason == lossless.value.reason and plain.value.reason.strip(": ") != "MessagePack"


def test_plain_metadata_finds_kernels_by_the_same_rule():
    """A plain map answers kernel() from an index: still the first kernel
    whose .symbol is the argument, else the first whose .name is."""
    ks = [{".name": "a", ".symbol": "a.kd"}, {".name": "b", ".symbol": "a.kd"},
          {".name": "a.kd", ".symbol": "c.kd"}, {".name": "d"}, {".name": "b"}]
    for lossless in (True, False):
        md = Metadata({"amdhsa.kernels": ks}, lossless=lossless)
        got = [md.kernel(q) for q in ("a.kd", "c.kd", "a", "b", "d", "zz", "a.kd")]
        assert got == [ks[0], ks[2], ks[0], ks[1], ks[3], None, ks[0]]
        assert all(g is w for g, w in zip(got, [ks[0], ks[2], ks[0], ks[1], ks[3], None, ks[0]]))
