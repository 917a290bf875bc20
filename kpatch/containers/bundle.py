"""Clang offload bundles: the plain ``__CLANG_OFFLOAD_BUNDLE__`` container and
its compressed wrapper ``CCOB``.

A plain bundle is a header (magic, u64 entry count, then per entry u64 offset,
u64 size, u64 id length and the id bytes) followed by the entries' bytes, each
placed at the next multiple of the bundler's ``-bundle-align`` after the
previous entry (HIP uses 4096; the default is 1).  Gaps are zero.  All
integers are little endian; offsets are relative to the bundle start.

A compressed bundle (CCOB) is a small header (magic, u16 version, u16 method,
then per version the fields in :data:`CCOB_LAYOUTS`) followed by one zlib or
zstd stream that decompresses to a plain bundle.  ``hash`` is the first 8
bytes of the MD5 digest of the uncompressed bundle read as a little-endian
u64; ``total_size`` (v2/v3) counts the header too.

Everything here takes ``bytes`` or a ``memoryview`` (e.g. over an mmap) and
never copies more than it returns.
"""

from __future__ import annotations

import hashlib
import re
import struct
import zlib
from dataclasses import dataclass
from typing import Union

import zstandard

from kpatch.containers import limits
from kpatch.errors import FormatError, UsageError

Buffer = Union[bytes, bytearray, memoryview]

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB_MAGIC = b"CCOB"

#: magic + u64 entry count
_BUNDLE_HEAD = struct.Struct("<24sQ")
#: per entry, followed by ``id_length`` id bytes: offset, size, id_length
_ENTRY_HEAD = struct.Struct("<QQQ")

# ---------------------------------------------------------------------------
# Entry ids
# ---------------------------------------------------------------------------

# A GPU processor name at the end of the id (before any ':feature' suffix):
# gfx1030, gfx90a, gfx10-3-generic, sm_80.
_GPU_AT_END = re.compile(r"-(gfx[0-9a-z]+(?:-[0-9a-z]+)*-generic|gfx[0-9a-z]+|sm_[0-9a-z]+)$")


def split_bundle_id(bundle_id: str) -> tuple[str, str, str]:
    """Split an entry id into ``(kind, triple, target_id)``.

    ``hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+`` -> ``('hipv4',
    'amdgcn-amd-amdhsa', 'gfx90a:xnack+')``; the old form
    ``hip-amdgcn-amd-amdhsa-gfx906`` -> ``('hip', 'amdgcn-amd-amdhsa',
    'gfx906')``; ``host-x86_64-unknown-linux`` (and clang 19's
    ``host-x86_64-unknown-linux--``) -> ``('host', 'x86_64-unknown-linux', '')``.
    Like clang, the target id is recognised by its processor name; an id
    without one has target id ``''``.
    """
    base, colon, features = bundle_id.partition(":")
    kind, _, rest = base.partition("-")
    m = _GPU_AT_END.search(rest)
    if m:
        triple, target = rest[: m.start()], m.group(1) + colon + features
    else:
        triple, target = rest + colon + features, ""
    return kind, triple.rstrip("-"), target


@dataclass(frozen=True)
class BundleEntry:
    """One entry of a plain bundle: its id and where its bytes are (offset
    relative to the bundle start)."""

    id: str
    offset: int
    size: int

    @property
    def kind(self) -> str:
        """Offload kind: ``hipv4``, ``hip``, ``host``, ``openmp``..."""
        return split_bundle_id(self.id)[0]

    @property
    def triple(self) -> str:
        """Target triple, e.g. ``amdgcn-amd-amdhsa`` (no empty environment)."""
        return split_bundle_id(self.id)[1]

    @property
    def target_id(self) -> str:
        """Target id, e.g. ``gfx90a:xnack+``; ``''`` for the host entry."""
        return split_bundle_id(self.id)[2]

    @property
    def is_host(self) -> bool:
        return self.kind == "host"

    def data(self, bundle: Buffer) -> memoryview:
        """This entry's bytes inside ``bundle`` (no copy)."""
        return memoryview(bundle)[self.offset : self.offset + self.size]


# ---------------------------------------------------------------------------
# Plain bundles
# ---------------------------------------------------------------------------


def _bytes_view(data: Buffer) -> memoryview:
    mv = memoryview(data)
    return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")


def _header_size(ids: list[bytes]) -> int:
    return _BUNDLE_HEAD.size + sum(_ENTRY_HEAD.size + len(i) for i in ids)


def parse_bundle(data: Buffer) -> list[BundleEntry]:
    """Parse a plain bundle's header; return its entries in header order.

    Raises FormatError (naming the entry index) for a bad magic, an entry
    count the bytes cannot hold, a truncated header, an id that is empty,
    not UTF-8 or repeated, or entry bytes outside ``data`` or over the header.
    A size-0 entry may sit at an aligned offset past the end (clang 15 writes
    the host entry like that when it comes last).
    """
    mv = _bytes_view(data)
    n = len(mv)
    if n < _BUNDLE_HEAD.size:
        raise FormatError(f"offload bundle header truncated: {n} bytes, need {_BUNDLE_HEAD.size}")
    magic, count = _BUNDLE_HEAD.unpack_from(mv, 0)
    if magic != BUNDLE_MAGIC:
        raise FormatError(f"not an offload bundle: magic {bytes(magic[:24])!r}")
    most = (n - _BUNDLE_HEAD.size) // (_ENTRY_HEAD.size + 1)
    if count > most:
        raise FormatError(f"offload bundle claims {count} entries but its {n} bytes hold at most {most}")
    pos = _BUNDLE_HEAD.size
    raw: list[tuple[int, int, bytes]] = []
    for i in range(count):
        if pos + _ENTRY_HEAD.size > n:
            raise FormatError(f"offload bundle entry {i}: header truncated at byte {pos} of {n}")
        offset, size, id_len = _ENTRY_HEAD.unpack_from(mv, pos)
        pos += _ENTRY_HEAD.size
        if id_len == 0:
            raise FormatError(f"offload bundle entry {i}: empty id")
        if id_len > n - pos:
            raise FormatError(f"offload bundle entry {i}: id length {id_len} runs past the end ({n - pos} bytes left)")
        raw.append((offset, size, bytes(mv[pos : pos + id_len])))
        pos += id_len
    header_end = pos
    entries: list[BundleEntry] = []
    seen: set[str] = set()
    for i, (offset, size, id_bytes) in enumerate(raw):
        try:
            ident = id_bytes.decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError(f"offload bundle entry {i}: id {id_bytes!r} is not UTF-8") from None
        if ident in seen:
            raise FormatError(f"offload bundle entry {i}: duplicate id {ident!r}")
        seen.add(ident)
        if size:
            if offset > n or size > n - offset:
                raise FormatError(
                    f"offload bundle entry {i} ({ident}): bytes {offset}..{offset + size} lie outside the {n}-byte bundle"
                )
            if offset < header_end:
                raise FormatError(
                    f"offload bundle entry {i} ({ident}): data at offset {offset} overlaps the header (ends at {header_end})"
                )
        entries.append(BundleEntry(ident, offset, size))
    return entries


def bundle_header_size(data: Buffer) -> int:
    """Byte length of a valid plain bundle's header (magic through last id)."""
    return _header_size([e.id.encode() for e in parse_bundle(data)])


def bundle_extent(data: Buffer) -> int:
    """Offset just past the bundle's last byte: the end of the header or of
    the furthest entry, whichever is later.  A size-0 entry counts only when
    its offset lies inside ``data`` (clang 19 pads up to it, clang 15 does
    not)."""
    entries = parse_bundle(data)
    end = _header_size([e.id.encode() for e in entries])
    n = len(_bytes_view(data))
    for e in entries:
        if e.size or e.offset <= n:
            end = max(end, e.offset + e.size)
    return end


def _align_to(value: int, align: int) -> int:
    return (value + align - 1) // align * align


def bundle_layout(ids: list[str], sizes: list[int], align: int) -> list[int]:
    """Entry offsets clang's bundler picks for these ids/sizes and
    ``-bundle-align`` value: each entry at the next multiple of ``align``
    after the header or the previous entry."""
    cursor = _header_size([i.encode() for i in ids])
    offsets = []
    for size in sizes:
        cursor = _align_to(cursor, align)
        offsets.append(cursor)
        cursor += size
    return offsets


def write_bundle(entries: list[tuple[str, bytes]], align: int = 4096, *, pad_tail: bool = False) -> bytes:
    """Write a plain bundle as clang's bundler does (``-bundle-align=align``).

    Entries are laid out in the given order, gaps zero-filled.  The output
    ends at the end of the last non-empty entry (clang 15's behaviour); with
    ``pad_tail=True`` it also pads up to the offset of trailing empty entries
    (clang 19's behaviour).
    """
    if align < 1:
        raise UsageError(f"bundle alignment must be positive, not {align}")
    ids = [i for i, _ in entries]
    if len(set(ids)) != len(ids):
        raise UsageError("duplicate entry ids in bundle")
    if any(not i for i in ids):
        raise UsageError("empty entry id in bundle")
    sizes = [len(d) for _, d in entries]
    offsets = bundle_layout(ids, sizes, align)
    head = bytearray(_BUNDLE_HEAD.pack(BUNDLE_MAGIC, len(entries)))
    for ident, off, size in zip(ids, offsets, sizes):
        raw_id = ident.encode("utf-8")
        head += _ENTRY_HEAD.pack(off, size, len(raw_id)) + raw_id
    end = len(head)
    for off, size in zip(offsets, sizes):
        if size or pad_tail:
            end = max(end, off + size)
    out = bytearray(end)
    out[: len(head)] = head
    for (_, payload), off in zip(entries, offsets):
        out[off : off + len(payload)] = payload
    return bytes(out)


def infer_bundle_layout(data: Buffer) -> tuple[int, bool]:
    """Return ``(align, pad_tail)`` with which :func:`write_bundle` reproduces
    this bundle's layout; FormatError when no power-of-two alignment up to
    64 KiB does (not a layout clang writes)."""
    entries = parse_bundle(data)
    ids = [e.id for e in entries]
    sizes = [e.size for e in entries]
    want = [e.offset for e in entries]
    for shift in range(16, -1, -1):
        align = 1 << shift
        if bundle_layout(ids, sizes, align) == want:
            head = _header_size([i.encode() for i in ids])
            nonempty_end = max([head] + [e.offset + e.size for e in entries if e.size])
            padded_end = max([head] + [e.offset + e.size for e in entries])
            return align, nonempty_end < padded_end <= len(_bytes_view(data))
    raise FormatError("offload bundle layout does not match clang's bundler for any alignment; cannot rewrite it")


def rewrite_bundle(original: Buffer, replacements: dict[str, bytes]) -> bytes:
    """The bundle ``original`` with the entries named in ``replacements``
    given new bytes, laid out as the original was (same order, alignment and
    tail padding).  With no replacements the result is byte-identical to a
    clang-written original."""
    entries = parse_bundle(original)
    unknown = set(replacements) - {e.id for e in entries}
    if unknown:
        raise UsageError(f"no bundle entry with id {sorted(unknown)[0]!r}")
    align, pad_tail = infer_bundle_layout(original)
    items = [(e.id, replacements[e.id] if e.id in replacements else bytes(e.data(original))) for e in entries]
    return write_bundle(items, align, pad_tail=pad_tail)


def subset_bundle(original: Buffer, keep) -> tuple[bytes, list[str]]:
    """The bundle ``original`` with only the entries ``keep(entry)`` accepts,
    laid out with its alignment, and the ids of the entries left out."""
    entries = parse_bundle(original)
    align, pad_tail = infer_bundle_layout(original)
    kept = [(e.id, bytes(e.data(original))) for e in entries if keep(e)]
    return write_bundle(kept, align, pad_tail=pad_tail), [e.id for e in entries if not keep(e)]


# ---------------------------------------------------------------------------
# Compressed bundles (CCOB)
# ---------------------------------------------------------------------------

METHODS = {0: "zlib", 1: "zstd"}
_METHOD_IDS = {v: k for k, v in METHODS.items()}

#: magic, version, method -- common to every version
_CCOB_PREFIX = struct.Struct("<4sHH")
#: the fields after the prefix, per version
CCOB_LAYOUTS: dict[int, tuple[tuple[str, str], ...]] = {
    1: (("uncompressed_size", "I"), ("hash", "Q")),
    2: (("total_size", "I"), ("uncompressed_size", "I"), ("hash", "Q")),
    3: (("total_size", "Q"), ("uncompressed_size", "Q"), ("hash", "Q")),
}
_CCOB_STRUCTS = {v: struct.Struct("<" + "".join(t for _, t in f)) for v, f in CCOB_LAYOUTS.items()}


@dataclass(frozen=True)
class CcobHeader:
    """A decoded CCOB header; ``total_size`` is None for version 1."""

    version: int
    method: int
    total_size: int | None
    uncompressed_size: int
    hash: int
    header_size: int

    @property
    def method_name(self) -> str:
        return METHODS[self.method]


def bundle_hash(bundle: Buffer) -> int:
    """CCOB's hash of an uncompressed bundle: MD5's first 8 bytes, LE u64."""
    return int.from_bytes(hashlib.md5(bundle).digest()[:8], "little")


def parse_ccob_header(data: Buffer) -> CcobHeader:
    """Decode the CCOB header at the start of ``data``; FormatError if the
    magic, version, method or sizes are bad or the header is truncated."""
    mv = _bytes_view(data)
    if len(mv) < _CCOB_PREFIX.size:
        raise FormatError(f"CCOB header truncated: {len(mv)} bytes")
    magic, version, method = _CCOB_PREFIX.unpack_from(mv, 0)
    if magic != CCOB_MAGIC:
        raise FormatError(f"not a compressed offload bundle: magic {magic!r}")
    if version not in CCOB_LAYOUTS:
        raise FormatError(f"unsupported CCOB version {version} (know 1, 2, 3)")
    if method not in METHODS:
        raise FormatError(f"unknown CCOB compression method {method} (0 zlib, 1 zstd)")
    body = _CCOB_STRUCTS[version]
    header_size = _CCOB_PREFIX.size + body.size
    if len(mv) < header_size:
        raise FormatError(f"CCOB v{version} header truncated: {len(mv)} bytes, need {header_size}")
    fields = dict(zip((name for name, _ in CCOB_LAYOUTS[version]), body.unpack_from(mv, _CCOB_PREFIX.size)))
    total = fields.get("total_size")
    if total is not None and total < header_size:
        raise FormatError(f"CCOB total size {total} is smaller than its {header_size}-byte header")
    return CcobHeader(version, method, total, fields["uncompressed_size"], fields["hash"], header_size)


def _ccob_payload(data: Buffer, h: CcobHeader) -> memoryview:
    mv = _bytes_view(data)
    if h.total_size is None:
        return mv[h.header_size :]
    if h.total_size > len(mv):
        raise FormatError(f"CCOB total size {h.total_size} exceeds the {len(mv)} bytes available")
    return mv[h.header_size : h.total_size]


_CHUNK = 1 << 20


def _inflate_capped(payload: memoryview, cap: int) -> bytes:
    """zlib-decompress at most ``cap + 1`` bytes (one more than allowed, to
    detect overflow); FormatError if the stream is corrupt or truncated."""
    d = zlib.decompressobj()
    try:
        out = d.decompress(payload, cap + 1)
    except zlib.error as e:
        raise FormatError(f"CCOB zlib stream corrupt: {e}") from None
    if len(out) <= cap and not d.eof:
        raise FormatError("CCOB zlib stream truncated")
    return out


def _unzstd_capped(payload: memoryview, cap: int) -> bytes:
    """zstd-decompress one frame, at most ``cap + 1`` bytes."""
    parts: list[bytes] = []
    got = 0
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(payload, read_across_frames=False)
        with reader:
            while got <= cap:
                chunk = reader.read(min(_CHUNK, cap + 1 - got))
                if not chunk:
                    break
                parts.append(chunk)
                got += len(chunk)
    except zstandard.ZstdError as e:
        raise FormatError(f"CCOB zstd stream corrupt: {e}") from None
    return b"".join(parts)


def decompress_ccob(data: Buffer, *, max_output: int | None = None) -> bytes:
    """Decompress a CCOB (v1/v2/v3, zlib/zstd) into its plain bundle.

    Checks the total size against the bytes available, that the stream
    yields exactly ``uncompressed_size`` bytes and that the hash matches.
    Never produces more than ``min(uncompressed_size, max_output)`` bytes
    (plus one, to detect a lie; ``max_output`` defaults to
    :data:`kpatch.containers.limits.MAX_OBJECT_BYTES`), so a decompression
    bomb is refused before its output is made.
    """
    cap_limit = limits.MAX_OBJECT_BYTES if max_output is None else max_output
    h = parse_ccob_header(data)
    payload = _ccob_payload(data, h)
    if h.uncompressed_size > cap_limit:
        raise FormatError(f"CCOB declares {h.uncompressed_size} uncompressed bytes, more than the limit of "
                          f"{cap_limit} bytes")
    cap = h.uncompressed_size
    out = _inflate_capped(payload, cap) if h.method == 0 else _unzstd_capped(payload, cap)
    if len(out) > cap:
        raise FormatError(f"CCOB {h.method_name} stream decompresses to more than the declared {cap} bytes")
    if len(out) != cap:
        raise FormatError(f"CCOB declares {cap} uncompressed bytes but the {h.method_name} stream gives {len(out)}")
    got = bundle_hash(out)
    if got != h.hash:
        raise FormatError(f"CCOB hash mismatch: stored {h.hash:#018x}, computed {got:#018x}")
    return out


def compress_ccob(bundle: Buffer, *, version: int = 2, method: str | int = "zstd", level: int | None = None) -> bytes:
    """Wrap a plain bundle in a CCOB of the given version and method.

    ``level`` defaults to zlib's default and zstd level 3 (what clang 19's
    bundler reports using).  The compressed bytes need not equal clang's
    (different zstd builds), but the header follows the format exactly.
    """
    mid = _METHOD_IDS.get(method, method) if isinstance(method, str) else method
    if mid not in METHODS:
        raise UsageError(f"unknown CCOB compression method {method!r}")
    if version not in CCOB_LAYOUTS:
        raise UsageError(f"unsupported CCOB version {version}")
    raw = bytes(bundle)
    if mid == 0:
        payload = zlib.compress(raw, -1 if level is None else level)
    else:
        payload = zstandard.ZstdCompressor(level=3 if level is None else level).compress(raw)
    body = _CCOB_STRUCTS[version]
    header_size = _CCOB_PREFIX.size + body.size
    values = {"uncompressed_size": len(raw), "hash": bundle_hash(raw), "total_size": header_size + len(payload)}
    for name, fmt in CCOB_LAYOUTS[version]:
        if values[name] >= 1 << (8 * struct.calcsize(fmt)):
            raise UsageError(f"bundle too large for CCOB v{version}: {name} {values[name]} does not fit")
    fields = body.pack(*(values[name] for name, _ in CCOB_LAYOUTS[version]))
    return _CCOB_PREFIX.pack(CCOB_MAGIC, version, mid) + fields + payload


# --- where a CCOB ends ----------------------------------------------------

_ZSTD_MAGIC = 0xFD2FB528


def _zstd_frame_size(mv: memoryview) -> int:
    """Compressed size of the zstd frame at the start of ``mv``, from its
    frame and block headers (RFC 8878 section 3.1.1) without decompressing."""
    n = len(mv)
    if n < 5 or int.from_bytes(mv[:4], "little") != _ZSTD_MAGIC:
        raise FormatError("CCOB zstd stream: no zstd frame magic")
    fhd = mv[4]
    fcs_flag, single, checksum, dict_flag = fhd >> 6, (fhd >> 5) & 1, (fhd >> 2) & 1, fhd & 3
    if fhd & 0x08:
        raise FormatError("CCOB zstd stream: reserved frame header bit set")
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag] + ((1 if single else 0), 2, 4, 8)[fcs_flag]
    while True:
        if pos + 3 > n:
            raise FormatError("CCOB zstd stream truncated (block header)")
        bh = int.from_bytes(mv[pos : pos + 3], "little")
        last, btype, bsize = bh & 1, (bh >> 1) & 3, bh >> 3
        if btype == 3:
            raise FormatError("CCOB zstd stream: reserved block type")
        pos += 3 + (1 if btype == 1 else bsize)
        if pos > n:
            raise FormatError("CCOB zstd stream truncated (block data)")
        if last:
            break
    pos += 4 * checksum
    if pos > n:
        raise FormatError("CCOB zstd stream truncated (checksum)")
    return pos


def _zlib_stream_size(mv: memoryview) -> int:
    """Compressed size of the zlib stream at the start of ``mv``: inflate it
    (output discarded, bounded per step) and see where it stops."""
    d = zlib.decompressobj()
    pos = 0
    step = 1 << 16
    try:
        while not d.eof:
            if pos >= len(mv):
                raise FormatError("CCOB zlib stream truncated")
            chunk = mv[pos : pos + step]
            pos += len(chunk)
            d.decompress(chunk, _CHUNK)
            while d.unconsumed_tail and not d.eof:
                d.decompress(d.unconsumed_tail, _CHUNK)
    except zlib.error as e:
        raise FormatError(f"CCOB zlib stream corrupt: {e}") from None
    return pos - len(d.unused_data)


def ccob_extent(data: Buffer) -> int | None:
    """Byte length of the CCOB at the start of ``data``: ``total_size`` for
    v2/v3 (FormatError if it exceeds ``data``); for v1, which records no
    size, the end of its compressed stream (found by walking zstd block
    headers, or by inflating a zlib stream with the output discarded).
    Returns None only for a v1 stream whose end cannot be found."""
    h = parse_ccob_header(data)
    if h.total_size is not None:
        _ccob_payload(data, h)
        return h.total_size
    payload = _bytes_view(data)[h.header_size :]
    try:
        size = _zlib_stream_size(payload) if h.method == 0 else _zstd_frame_size(payload)
    except FormatError:
        return None
    return h.header_size + size


# ---------------------------------------------------------------------------


def open_bundle_bytes(data: Buffer, *, max_output: int | None = None) -> tuple[str, Buffer, list[BundleEntry]]:
    """Recognise a plain or compressed bundle; return ``(kind, bundle,
    entries)`` with kind ``'bundle'`` (``bundle`` is ``data`` itself, not
    copied) or ``'ccob'`` (``bundle`` is the decompressed bytes)."""
    head = bytes(_bytes_view(data)[: len(BUNDLE_MAGIC)])
    if head.startswith(CCOB_MAGIC):
        plain = decompress_ccob(data, max_output=max_output)
        return "ccob", plain, parse_bundle(plain)
    if head == BUNDLE_MAGIC:
        return "bundle", data, parse_bundle(data)
    raise FormatError(f"not an offload bundle: starts with {head[:8]!r}")


def is_bundle(first_bytes: Buffer) -> bool:
    """Do these leading bytes start a plain or compressed bundle?"""
    b = bytes(_bytes_view(first_bytes)[: len(BUNDLE_MAGIC)])
    return b == BUNDLE_MAGIC or b.startswith(CCOB_MAGIC)
