"""What rocPRIM's segmented radix sort passes its kernels, read from their
mangled names (the recipes of :mod:`kpatch.emulate.recipes` build the
arguments from it).

rocPRIM 5.3 (librocprim-dev of Debian bookworm, the one rocSPARSE 5.3 is
built with), device/device_segmented_radix_sort.hpp: ``segmented_radix_sort_impl``
sorts segment ``i`` = keys[begin_offsets[i], end_offsets[i]) with
``iterations = ceil((end_bit - begin_bit) / long_radix_bits)`` passes, of which
``short_iterations = min(iterations, (long_radix_bits * iterations - bits) /
(long_radix_bits - short_radix_bits))`` use the short radix; with
``segments >= partitioning_threshold`` it first partitions the segment indices
(``partition_kernel`` over a ``counting_iterator`` with a by-value lambda that
captures ``begin_offsets`` and ``end_offsets``: length > max medium length),
then sorts the large ones with ``segmented_sort_large_kernel`` (one segment
index per workgroup), else every segment with ``segmented_sort_kernel`` (one
segment per workgroup).

The names give the iterator types: ``..._implI<Config>ELb0E<KeysIn><KeysOut>
<ValuesIn><ValuesOut><Offsets>EE`` for the partition's lambda,
``segmented_sort_kernelI<Config>ELb0ELj256E<KeysIn><KeysOut><ValuesIn>
<ValuesOut>[<SegmentIndices>]<Offsets>EE`` for the sorts.  :func:`iterators`
reads exactly the forms these take (pointers to builtin types or to
``rocprim::empty_type``, and substitutions that repeat an earlier iterator of
the same list) and refuses anything else (:class:`NotRead`).  The
configuration is either spelled out (``segmented_radix_sort_config<Long,
Short, kernel_config<Block, ItemsPerThread>, ...>``) or rocPRIM's default for
target arch 0 (``default_segmented_radix_sort_config<0, Key, Value>``: the
names are the host's, ROCPRIM_TARGET_ARCH 0, so ``select_arch`` takes its
fallback ``segmented_radix_sort_config_900``; device/device_segmented_radix_sort_config.hpp).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

#: Builtin type codes of the Itanium ABI that are iterators' value types here: (size, kind).
BUILTINS = {"a": (1, "i"), "c": (1, "i"), "h": (1, "u"), "s": (2, "i"), "t": (2, "u"), "i": (4, "i"),
            "j": (4, "u"), "l": (8, "i"), "m": (8, "u"), "x": (8, "i"), "y": (8, "u"), "f": (4, "f"),
            "d": (8, "f")}
EMPTY = "empty"
_TOKEN = re.compile(r"P(K?)([a-z])|P(?:NS_10empty_typeE|S[0-9A-Z]*_)|S[0-9A-Z]*_")


class NotRead(Exception):
    """A rocPRIM kernel name whose iterators or configuration are not read here."""


@dataclass(frozen=True)
class Iter:
    """An iterator argument: a pointer to ``size``-byte elements of ``kind``
    (i signed, u unsigned, f floating) or to ``rocprim::empty_type`` (size 0)."""

    size: int
    kind: str
    const: bool = False

    @property
    def empty(self) -> bool:
        return self.kind == EMPTY


def iterators(text: str, count: int) -> tuple[Iter | None, ...]:
    """The first ``count`` iterator types spelled at the start of ``text``;
    None for one not read.

    Read are pointers to builtin types (``P<code>``, ``PK<code>``), to
    ``rocprim::empty_type`` (``PNS_10empty_typeE``), a token that repeats an
    earlier one of the list (the same spelling names the same type), and a
    substitution (``S<id>_``) as the second iterator after a pointer to a
    builtin: the keys' output, whose value type rocPRIM static_asserts to be
    the keys' input's, names the type the keys' input pointer introduced.
    Other substitutions (``S8_``, ``PS3_``: types spelled earlier in the
    name) are None: a caller that needs one refuses the kernel.
    """
    out: list = []
    texts: list[str] = []
    i = 0
    for _ in range(count):
        m = _TOKEN.match(text, i)
        if not m:
            raise NotRead(f"iterator {len(out)} not read at {text[i:i + 30]!r}")
        tok = m.group()
        i = m.end()
        if m.group(2):
            t = BUILTINS.get(m.group(2))
            out.append(Iter(t[0], t[1], bool(m.group(1))) if t else None)
        elif tok == "PNS_10empty_typeE":
            out.append(Iter(0, EMPTY))
        elif tok in texts:
            out.append(out[texts.index(tok)])
        elif tok.startswith("S") and len(out) == 1 and out[0] is not None and not out[0].empty:
            out.append(Iter(out[0].size, out[0].kind))  # the keys' output: the keys' input type
        else:
            out.append(None)
        texts.append(tok)
    return tuple(out)


@dataclass(frozen=True)
class SortConfig:
    """A segmented radix sort configuration: radix bits of the long and short
    passes, the sort's block size and items per thread."""

    long_bits: int
    short_bits: int
    block: int
    items_per_thread: int

    @property
    def items_per_block(self) -> int:
        return self.block * self.items_per_thread


def default_config(key: Iter, value: Iter) -> SortConfig:
    """rocPRIM 5.3's ``segmented_radix_sort_config_900<Key, Value>`` (the
    fallback arch 0 selects): keys only (empty value) or pairs."""
    k = key.size
    if value.empty:
        table = {1: (4, 3, 256, 10), 2: (6, 5, 256, 10), 4: (7, 6, 256, 17), 8: (7, 6, 256, 15)}
        return SortConfig(*table[k])
    if value.size <= 8:
        table = {1: (4, 4, 256, 10), 2: (6, 5, 256, 10), 4: (7, 6, 256, 15), 8: (7, 6, 256, 15)}
        return SortConfig(*table[k])
    raise NotRead(f"default configuration for {value.size}-byte values")


_EXPLICIT = re.compile(r"segmented_radix_sort_configILj(\d+)ELj(\d+)ENS_13kernel_configILj(\d+)ELj(\d+)E")
_DEFAULT = re.compile(r"NS0_35default_segmented_radix_sort_configILj0E([a-z])(NS_10empty_typeE|[a-z])EE")


def config(name: str, key: Iter) -> SortConfig:
    """The configuration a segmented sort kernel's name spells (``key``: the
    keys' type, which a default configuration's must be)."""
    m = _EXPLICIT.search(name)
    if m:
        return SortConfig(*(int(x) for x in m.groups()))
    m = _DEFAULT.search(name)
    if m:
        k, v = BUILTINS.get(m.group(1)), m.group(2)
        if k is None or k != (key.size, key.kind):
            raise NotRead("the default configuration's key type is not the keys' iterator's")
        if v != "NS_10empty_typeE" and v not in BUILTINS:
            raise NotRead(f"the default configuration's value type {v!r}")
        return default_config(key, Iter(0, EMPTY) if v == "NS_10empty_typeE" else Iter(*BUILTINS[v]))
    raise NotRead("no segmented radix sort configuration in the name")


def iterations(cfg: SortConfig, begin_bit: int, end_bit: int) -> tuple[int, int]:
    """(long_iterations, short_iterations) as segmented_radix_sort_impl computes them."""
    bits = end_bit - begin_bit
    n = -(-bits // cfg.long_bits)
    diff = cfg.long_bits - cfg.short_bits
    short = min(n, (cfg.long_bits * n - bits) // diff) if diff else 0
    return n - short, short


def offsets(lengths, itemsize: int) -> tuple[bytes, bytes]:
    """(begin_offsets, end_offsets) of segments of ``lengths`` laid one after
    another from 0, as little-endian ``itemsize``-byte integers."""
    end = np.cumsum(np.asarray(lengths, np.int64))
    begin = end - np.asarray(lengths, np.int64)
    dt = f"<u{itemsize}"
    return begin.astype(dt).tobytes(), end.astype(dt).tobytes()


def encoded(keys: np.ndarray, key: Iter) -> np.ndarray:
    """rocPRIM's radix key encoding (detail/radix_sort.hpp radix_key_codec,
    ascending) of ``keys`` (any dtype of ``key.size`` bytes) as unsigned
    integers: unsigned keys as they are, signed ones with the sign bit
    flipped, floating ones with the sign bit flipped when clear and every
    bit flipped when set."""
    u = np.ascontiguousarray(keys).view(f"<u{key.size}")
    sign = np.array(1 << (8 * key.size - 1), u.dtype)
    if key.kind == "u":
        return u.copy()
    if key.kind == "i":
        return u ^ sign
    if key.kind == "f":
        return np.where(u & sign, ~u, u ^ sign)
    raise NotRead(f"no radix encoding of {key.kind!r} keys")


def digits(keys: np.ndarray, key: Iter, bit: int, bits: int) -> np.ndarray:
    """The radix digit of bits [bit, bit + bits) of each key, as
    extract_digit takes it (a floating +0.0 counts as -0.0)."""
    e = encoded(keys, key)
    if key.kind == "f":
        sign = np.array(1 << (8 * key.size - 1), e.dtype)
        e = np.where(e == sign, ~sign, e)
    return ((e >> np.array(bit, e.dtype)) & np.array((1 << bits) - 1, e.dtype)).astype(np.int64)


def digit_starts(keys: np.ndarray, key: Iter, bit: int, bits: int, batches: int, per_batch: int):
    """(batch_digit_starts, digit_starts) as radix sort's scan_batches and
    scan_digits kernels leave them for ``keys`` cut into ``batches`` of
    ``per_batch`` items (the last one the rest): digit d of batch b starts
    after every earlier batch's digits d; digit d starts after every key of
    a smaller digit.  Shapes (batches, 2**bits) and (2**bits,)."""
    d = digits(keys, key, bit, bits)
    radix = 1 << bits
    counts = np.zeros((batches, radix), np.int64)
    for b in range(batches):
        part = d[b * per_batch:(b + 1) * per_batch if b < batches - 1 else len(d)]
        counts[b] = np.bincount(part, minlength=radix)
    batch = np.cumsum(counts, axis=0) - counts
    total = counts.sum(axis=0)
    return batch, np.cumsum(total) - total
