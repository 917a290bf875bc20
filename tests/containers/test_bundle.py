"""Clang offload bundles and CCOB, checked against clang-offload-bundler
(LLVM 15 and 19) output and the formats' rules."""

from __future__ import annotations

import hashlib
import os
import struct
import zlib

import pytest
import zstandard

from kpatch.containers.bundle import (
    BUNDLE_MAGIC,
    CCOB_MAGIC,
    bundle_extent,
    ccob_extent,
    compress_ccob,
    decompress_ccob,
    infer_bundle_layout,
    open_bundle_bytes,
    parse_bundle,
    parse_ccob_header,
    rewrite_bundle,
    split_bundle_id,
    write_bundle,
)
from kpatch.errors import FormatError

from .conftest import (
    BUNDLER15,
    BUNDLER19,
    GFX1010,
    GFX1030,
    HOST,
    bundler_bundle,
    bundler_list,
    bundler_unbundle,
    fixture,
    read,
)

HIP_BUNDLES = ["vecops.hip.bundle", "mathops.hip.bundle"]


def md5_low64(data: bytes) -> int:
    return int.from_bytes(hashlib.md5(data).digest()[:8], "little")


# --- entry ids ------------------------------------------------------------


@pytest.mark.parametrize(
    "ident, expected",
    [
        ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+", ("hipv4", "amdgcn-amd-amdhsa", "gfx90a:xnack+")),
        ("hipv4-amdgcn-amd-amdhsa--gfx1030", ("hipv4", "amdgcn-amd-amdhsa", "gfx1030")),
        ("hipv4-amdgcn-amd-amdhsa--gfx908:sramecc+:xnack-", ("hipv4", "amdgcn-amd-amdhsa", "gfx908:sramecc+:xnack-")),
        ("hip-amdgcn-amd-amdhsa-gfx906", ("hip", "amdgcn-amd-amdhsa", "gfx906")),
        ("hipv4-amdgcn-amd-amdhsa--gfx10-3-generic", ("hipv4", "amdgcn-amd-amdhsa", "gfx10-3-generic")),
        ("host-x86_64-unknown-linux", ("host", "x86_64-unknown-linux", "")),
        ("host-x86_64-unknown-linux--", ("host", "x86_64-unknown-linux", "")),  # clang 19's spelling
        ("openmp-nvptx64-nvidia-cuda--sm_80", ("openmp", "nvptx64-nvidia-cuda", "sm_80")),
    ],
)
def test_split_bundle_id(ident, expected):
    assert split_bundle_id(ident) == expected


# --- plain bundles against the bundler ------------------------------------


@pytest.mark.parametrize("name", HIP_BUNDLES)
def test_parse_fixture_matches_bundler(name, tmp_path):
    path = fixture(name)
    data = read(path)
    entries = parse_bundle(data)
    assert sorted(e.id for e in entries) == bundler_list(path)
    for e in entries:
        want = bundler_unbundle(path, e.id, str(tmp_path / "out"))
        assert bytes(e.data(data)) == want
    assert bundle_extent(data) == len(data)
    assert {e.target_id for e in entries} == {"", "gfx1010", "gfx1030"}


def _inputs(tmp_path) -> list[tuple[str, str]]:
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    return [
        (HOST, str(empty)),
        (GFX1030, fixture("vecops.hip.gfx1030.v4.hsaco")),
        (GFX1010, fixture("mathops.hip.gfx1010.v5.hsaco")),
    ]


@pytest.mark.parametrize("bundler", [BUNDLER15, BUNDLER19])
@pytest.mark.parametrize("align", [4096, 1, 64])
@pytest.mark.parametrize("host_last", [False, True])
def test_write_bundle_is_byte_identical_to_bundler(tmp_path, bundler, align, host_last):
    inputs = _inputs(tmp_path)
    if host_last:
        inputs = inputs[1:] + inputs[:1]
    out = bundler_bundle(str(tmp_path), "b", inputs, bundler=bundler, align=align)
    real = read(out)
    entries = parse_bundle(real)
    ids = [e.id for e in entries]
    # clang 19 spells the host id with a trailing "--"
    assert [split_bundle_id(i)[:2] for i in ids] == [split_bundle_id(i)[:2] for i, _ in inputs]
    payloads = [(e.id, read(p)) for e, (_, p) in zip(entries, inputs)]
    # clang 19 zero-pads up to a trailing empty entry's offset, clang 15 does not
    pad_tail = bundler == BUNDLER19
    assert write_bundle(payloads, align, pad_tail=pad_tail) == real
    if align == 4096:
        assert infer_bundle_layout(real)[0] == 4096
    inferred_align, inferred_pad = infer_bundle_layout(real)
    assert write_bundle(payloads, inferred_align, pad_tail=inferred_pad) == real
    assert rewrite_bundle(real, {}) == real
    assert bundle_extent(real) == len(real)


def test_rewrite_bundle_replacement_equals_bundler_output(tmp_path):
    inputs = _inputs(tmp_path)
    original = read(bundler_bundle(str(tmp_path), "orig", inputs))
    new_input = fixture("miopen_like.cl.gfx1030.v5.hsaco")  # a different size
    expected = read(bundler_bundle(str(tmp_path), "new", [inputs[0], (GFX1030, new_input), inputs[2]]))
    assert rewrite_bundle(original, {GFX1030: read(new_input)}) == expected


@pytest.mark.corpus
def test_librocrand_bundle(rocrand_bundle, librocrand, tmp_path):
    data = rocrand_bundle
    entries = parse_bundle(data)
    path = tmp_path / "rocrand.bundle"
    path.write_bytes(data)
    assert sorted(e.id for e in entries) == bundler_list(str(path))
    assert len(entries) == 8
    gfx1030 = next(e for e in entries if e.target_id == "gfx1030")
    assert bytes(gfx1030.data(data)) == bundler_unbundle(str(path), GFX1030, str(tmp_path / "o"))
    # the section holds the bundle plus clang's NUL terminator
    ext = bundle_extent(data)
    assert ext == len(data) - 1 and data[ext:] == b"\0"
    assert infer_bundle_layout(data[:ext])[0] == 4096
    assert rewrite_bundle(data[:ext], {}) == data[:ext]


def test_open_bundle_bytes_plain_and_ccob():
    plain = read(fixture("vecops.hip.bundle"))
    kind, b, entries = open_bundle_bytes(plain)
    assert kind == "bundle" and b is plain and entries == parse_bundle(plain)
    kind, b, entries = open_bundle_bytes(compress_ccob(plain))
    assert kind == "ccob" and b == plain and entries == parse_bundle(plain)
    with pytest.raises(FormatError, match="not an offload bundle"):
        open_bundle_bytes(b"\x7fELF" + bytes(60))


# --- plain bundle: bad input ----------------------------------------------


def _hand_bundle(entries: list[tuple[int, int, bytes]], tail: bytes = b"", count: int | None = None) -> bytes:
    """A bundle header built from the format's rules."""
    out = BUNDLE_MAGIC + struct.pack("<Q", len(entries) if count is None else count)
    for off, size, ident in entries:
        out += struct.pack("<QQQ", off, size, len(ident)) + ident
    return out + tail


def test_hand_built_bundle_parses():
    head_len = 32 + 24 + 5
    data = _hand_bundle([(64, 4, b"hip-x")], tail=bytes(64 - head_len) + b"abcd")
    (e,) = parse_bundle(data)
    assert (e.id, e.offset, e.size, bytes(e.data(data))) == ("hip-x", 64, 4, b"abcd")


@pytest.mark.parametrize(
    "data, message",
    [
        (BUNDLE_MAGIC[:20], "header truncated"),
        (b"__CLANG_OFFLOAD_BUNDLX__" + bytes(8), "not an offload bundle"),
        (_hand_bundle([], count=1000), "claims 1000 entries"),
        (_hand_bundle([(0, 0, b"abcdefghij")], count=2) + bytes(20), "entry 1: header truncated"),
        (_hand_bundle([(100, 10, b"a")]), r"entry 0 \(a\): bytes 100\.\.110 lie outside"),
        (_hand_bundle([(58, 2**64 - 1, b"a")], tail=bytes(10)), "lie outside"),
        (_hand_bundle([(2**64 - 1, 5, b"a")], tail=bytes(10)), "lie outside"),
        (_hand_bundle([(0, 8, b"a")], tail=bytes(8)), "overlaps the header"),
        (BUNDLE_MAGIC + struct.pack("<QQQQ", 1, 0, 0, 1000) + b"abc", "id length 1000 runs past the end"),
        (_hand_bundle([(0, 0, b"")], tail=bytes(8)), "entry 0: empty id"),
        (_hand_bundle([(0, 0, b"\xff\xfe")]), "not UTF-8"),
        (_hand_bundle([(0, 0, b"a"), (0, 0, b"a")]), "entry 1: duplicate id 'a'"),
    ],
)
def test_bad_bundles(data, message):
    with pytest.raises(FormatError, match=message):
        parse_bundle(data)


def test_truncated_real_bundle_names_the_entry():
    data = read(fixture("vecops.hip.bundle"))
    with pytest.raises(FormatError, match=r"entry 2 \(hipv4-amdgcn-amd-amdhsa--gfx1030\).*outside"):
        parse_bundle(data[:-1])


# --- CCOB -----------------------------------------------------------------


@pytest.fixture
def real_ccob(tmp_path) -> tuple[bytes, bytes]:
    """(CCOB written by clang 19's bundler, the same bundle uncompressed)."""
    inputs = _inputs(tmp_path)
    c = read(bundler_bundle(str(tmp_path), "c", inputs, bundler=BUNDLER19, compress=True))
    p = read(bundler_bundle(str(tmp_path), "p", inputs, bundler=BUNDLER19))
    return c, p


def test_real_ccob_header_and_contents(real_ccob):
    ccob, plain = real_ccob
    h = parse_ccob_header(ccob)
    assert (h.version, h.method, h.method_name, h.header_size) == (2, 1, "zstd", 24)
    assert h.total_size == len(ccob)
    assert h.uncompressed_size == len(plain)
    assert h.hash == md5_low64(plain)
    assert decompress_ccob(ccob) == plain
    assert ccob_extent(ccob + bytes(100)) == len(ccob)


@pytest.mark.parametrize("stem", ["vecops", "mathops"])
def test_fixture_ccob_decompresses_to_fixture_bundle(stem):
    ccob = read(fixture(f"{stem}.hip.ccob"))
    plain = decompress_ccob(ccob)
    # the fixture CCOB re-bundles the .bundle's entries with clang 19: same entries
    ref = read(fixture(f"{stem}.hip.bundle"))
    got = {split_bundle_id(e.id): bytes(e.data(plain)) for e in parse_bundle(plain)}
    want = {split_bundle_id(e.id): bytes(e.data(ref)) for e in parse_bundle(ref)}
    assert got == want


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("method", ["zlib", "zstd"])
def test_ccob_round_trip(version, method, real_ccob, tmp_path):
    _, plain = real_ccob
    c = compress_ccob(plain, version=version, method=method)
    h = parse_ccob_header(c)
    assert c[:4] == CCOB_MAGIC and (h.version, h.method_name) == (version, method)
    assert h.header_size == {1: 20, 2: 24, 3: 32}[version]
    assert h.total_size == (None if version == 1 else len(c))
    assert h.hash == md5_low64(plain) and h.uncompressed_size == len(plain)
    assert decompress_ccob(c) == plain
    assert ccob_extent(c + b"\x01junk" * 10) == len(c)
    if version < 3:  # clang 19 reads v1 and v2 (v3 came with LLVM 20)
        path = tmp_path / "mine.ccob"
        path.write_bytes(c)
        assert bundler_list(str(path), BUNDLER19) == sorted(e.id for e in parse_bundle(plain))
        assert bundler_unbundle(str(path), GFX1030, str(tmp_path / "o"), BUNDLER19) == read(
            fixture("vecops.hip.gfx1030.v4.hsaco")
        )


def _ccob(version: int, method: int, payload: bytes, usize: int, h: int, total: int | None = None) -> bytes:
    """A CCOB header built from the format's rules."""
    hs = {1: 20, 2: 24, 3: 32}[version]
    total = hs + len(payload) if total is None else total
    if version == 1:
        fields = struct.pack("<IQ", usize, h)
    elif version == 2:
        fields = struct.pack("<IIQ", total, usize, h)
    else:
        fields = struct.pack("<QQQ", total, usize, h)
    return CCOB_MAGIC + struct.pack("<HH", version, method) + fields + payload


PLAIN = b"__CLANG_OFFLOAD_BUNDLE__" + bytes(8) + b"some bytes" * 50


@pytest.mark.parametrize(
    "data, message",
    [
        (b"CCOB\x02\x00", "header truncated"),
        (b"CCOX" + bytes(40), "not a compressed offload bundle"),
        (_ccob(2, 1, b"", 0, 0)[:20], "v2 header truncated"),
        (b"CCOB\x04\x00\x01\x00" + bytes(40), "unsupported CCOB version 4"),
        (b"CCOB\x02\x00\x02\x00" + bytes(40), "unknown CCOB compression method 2"),
        (_ccob(2, 1, b"", 0, 0, total=10), "total size 10 is smaller than its 24-byte header"),
    ],
)
def test_bad_ccob_headers(data, message):
    with pytest.raises(FormatError, match=message):
        parse_ccob_header(data)


@pytest.mark.parametrize("method, pack", [(0, zlib.compress), (1, lambda b: zstandard.ZstdCompressor().compress(b))])
def test_inconsistent_ccobs(method, pack):
    payload = pack(PLAIN)
    h = md5_low64(PLAIN)
    good = _ccob(2, method, payload, len(PLAIN), h)
    assert decompress_ccob(good) == PLAIN
    cases = [
        (_ccob(2, method, payload, len(PLAIN), h, total=len(good) + 1), "exceeds the"),
        (_ccob(3, method, payload, len(PLAIN), h, total=2**63), "exceeds the"),
        (_ccob(2, method, payload, len(PLAIN) + 1, h), f"declares {len(PLAIN) + 1} uncompressed bytes but"),
        (_ccob(2, method, payload, len(PLAIN) - 1, h), "more than the declared"),
        (_ccob(2, method, payload, len(PLAIN), h ^ 1), "hash mismatch"),
        (_ccob(1, method, payload[: len(payload) // 2], len(PLAIN), h), "truncated|corrupt|gives"),
        (_ccob(2, method, payload[:4] + bytes(len(payload) - 4), len(PLAIN), h), "corrupt|gives"),
        (_ccob(2, method, payload, 2**31 + 1, h), "more than the limit"),
    ]
    for data, message in cases:
        with pytest.raises(FormatError, match=message):
            decompress_ccob(data)
    with pytest.raises(FormatError, match="more than the limit of 100 bytes"):
        decompress_ccob(good, max_output=100)


def _zeros_compressed(method: int, total: int) -> bytes:
    chunk = bytes(1 << 20)
    if method == 0:
        c = zlib.compressobj(9)
        return b"".join(c.compress(chunk) for _ in range(total // len(chunk))) + c.flush()
    c = zstandard.ZstdCompressor(level=1).compressobj(size=total)
    return b"".join(c.compress(chunk) for _ in range(total // len(chunk))) + c.flush()


@pytest.mark.parametrize("method", [0, 1])
def test_decompression_bomb_is_refused(method):
    total = 1 << 30 if method == 1 else 1 << 27  # 1 GiB of zeros (zlib: 128 MiB, its ratio caps at ~1000)
    payload = _zeros_compressed(method, total)
    assert len(payload) < total // 500
    # declared small: decompression stops just past the declared size
    with pytest.raises(FormatError, match="more than the declared 4096 bytes"):
        decompress_ccob(_ccob(3, method, payload, 4096, 0))
    # declared honestly but above the caller's limit: refused before decompressing
    with pytest.raises(FormatError, match="more than the limit"):
        decompress_ccob(_ccob(3, method, payload, total, 0), max_output=1 << 20)


def test_ccob_v1_extent_needs_a_complete_stream():
    payload = zstandard.ZstdCompressor().compress(PLAIN)
    c = _ccob(1, 1, payload, len(PLAIN), md5_low64(PLAIN))
    assert ccob_extent(c + bytes(4096)) == len(c)
    assert ccob_extent(c[:-3]) is None
    z = _ccob(1, 0, zlib.compress(PLAIN), len(PLAIN), md5_low64(PLAIN))
    assert ccob_extent(z + b"CCOB") == len(z)
    assert ccob_extent(z[:-3]) is None
    with pytest.raises(FormatError, match="exceeds"):
        ccob_extent(_ccob(2, 1, payload, len(PLAIN), 0)[:-1])


def test_compress_ccob_refuses_bad_arguments():
    from kpatch.errors import UsageError

    with pytest.raises(UsageError):
        compress_ccob(PLAIN, method="lz4")
    with pytest.raises(UsageError):
        compress_ccob(PLAIN, version=7)


def test_write_bundle_layout_rules():
    # header 32 + 2 * 24 + ids; both entries at the first 4096 boundary
    a = write_bundle([(HOST, b""), (GFX1030, os.urandom(100))], 4096)
    assert parse_bundle(a)[1].offset == 4096 and len(a) == 4196
