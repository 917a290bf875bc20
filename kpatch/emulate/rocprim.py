"""rocPRIM's device algorithms: the arguments its host code passes their
kernels, for the ``rocprim-*`` recipes of :mod:`kpatch.emulate.recipes`.

Each builder (:func:`lookback_scan`, :func:`partition`,
:func:`segment_partition`, :func:`segmented_sort`, :func:`sort_and_scatter`,
...) takes the recipe context, the matched argument signature and the
kernel's mangled name, and returns ``{explicit argument index: value}``:
a :class:`Buffer` (a global buffer whose first bytes are given), an
:class:`Aggregate` (a by-value struct holding buffers' addresses), an int
or bytes; :mod:`kpatch.emulate.recipes` turns them into its Fill and
Struct.  A name this module does not read raises :class:`NotRead` (the
recipe does not hold: no arguments, never a guess).  The sources are
rocPRIM 5.3 (librocprim-dev of Debian bookworm, the one rocSPARSE 5.3 is
built with), named at each builder.

Segmented radix sort (device/device_segmented_radix_sort.hpp):
``segmented_radix_sort_impl`` sorts segment ``i`` = keys[begin_offsets[i],
end_offsets[i]) with ``iterations = ceil((end_bit - begin_bit) /
long_radix_bits)`` passes, of which ``short_iterations = min(iterations,
(long_radix_bits * iterations - bits) / (long_radix_bits -
short_radix_bits))`` use the short radix; with ``segments >=
partitioning_threshold`` it first partitions the segment indices
(``partition_kernel`` over a ``counting_iterator`` with a by-value lambda
that captures ``begin_offsets`` and ``end_offsets``: length > max medium
length), then sorts the large ones with ``segmented_sort_large_kernel`` (one
segment index per workgroup) and the others with
``segmented_sort_small_or_medium_kernel`` (one per logical warp), else every
segment with ``segmented_sort_kernel`` (one segment per workgroup).

The names give the iterator types: ``..._implI<Config>ELb0E<KeysIn><KeysOut>
<ValuesIn><ValuesOut><Offsets>EE`` for the partition's lambda,
``segmented_sort_kernelI<Config>ELb0ELj256E<KeysIn><KeysOut><ValuesIn>
<ValuesOut>[<SegmentIndices>]<Offsets>EE`` for the sorts.  :func:`iterators`
reads exactly the forms these take and leaves the rest unread.  The
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

from kpatch.emulate.argvalues import Aggregate, Buffer  # noqa: F401 (the values this module returns)

#: Builtin type codes of the Itanium ABI that are iterators' value types here: (size, kind).
BUILTINS = {"a": (1, "i"), "c": (1, "i"), "h": (1, "u"), "s": (2, "i"), "t": (2, "u"), "i": (4, "i"),
            "j": (4, "u"), "l": (8, "i"), "m": (8, "u"), "x": (8, "i"), "y": (8, "u"), "f": (4, "f"),
            "d": (8, "f")}
EMPTY = "empty"
_TOKEN = re.compile(r"P(K?)([a-z])|P(?:NS_10empty_typeE|S[0-9A-Z]*_)|S[0-9A-Z]*_")


class NotRead(Exception):
    """A rocPRIM kernel whose name (iterators, configuration) or arguments
    are not what a builder here reads: its recipe does not hold."""


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


# -- the builders; decoupled look-back scan state ---------------------------------------

#: Entries before block 0's in a look-back state (rocPRIM pads by the warp
#: size: device_warp_size() in kernels, host_warp_size() in the allocation;
#: 64 covers both).
LOOKBACK_PADDING = 64
PREFIX_INVALID, PREFIX_EMPTY, PREFIX_COMPLETE = 0xFF, 0, 2
#: Block count and item count for runs of more than one workgroup: no
#: workgroup of the grid is the last block, so every one takes the full-block
#: path and looks back at its predecessors.
MANY_BLOCKS, MANY_ITEMS = 4096, 1 << 16


def _blocks_and_size(ctx) -> tuple[int, int]:
    """(number_of_blocks, size) consistent with the grid: one workgroup is
    the only (partial) block of a few items; more are full blocks of a
    longer input."""
    if ctx.groups == 1:
        return 1, (5, 16, 3)[ctx.run % 3]
    return MANY_BLOCKS, MANY_ITEMS


def _small_state(entry: int, flag: int) -> Buffer:
    """A packed look-back state (flag and value in one 4- or 8-byte word):
    the padding entries hold PREFIX_INVALID, block entries ``flag``."""
    n = LOOKBACK_PADDING + MANY_BLOCKS
    a = np.zeros((n, entry), np.uint8)
    a[:, 0] = flag
    a[:LOOKBACK_PADDING, 0] = PREFIX_INVALID
    return Buffer(a.tobytes())


def _big_state(flag: int) -> Aggregate:
    """rocPRIM's look-back state for values over 4 bytes: a by-value struct
    of three pointers (flags, partial values, complete values)."""
    flags = bytes([PREFIX_INVALID]) * LOOKBACK_PADDING + bytes([flag]) * MANY_BLOCKS
    return Aggregate(24, b"", ((0, Buffer(flags)), (8, Buffer()), (16, Buffer())))


def _state(sig_arg: tuple, small_entry: int, flag: int):
    return _small_state(small_entry, flag) if sig_arg == ("g", 8) else _big_state(flag)


def _scan_entry(sig: tuple) -> int:
    """Packed entry size of a small state from the scanned value's size (argument 3)."""
    return 8 if sig[3][1] > 2 else 4


def lookback_scan(ctx, sig: tuple, name: str) -> dict:
    # lookback_scan_kernel(input, output, size, initial_value, scan_op, state,
    #                      number_of_blocks, ordered_bid, previous_last_element,
    #                      new_last_element, override_first_value, save_last_value)
    blocks, size = _blocks_and_size(ctx)
    return {2: size, 5: _state(sig[5], _scan_entry(sig), PREFIX_EMPTY), 6: blocks, 7: Buffer(),
            10: 0, 11: ctx.run % 2}


def init_lookback(ctx, sig: tuple, name: str) -> dict:
    # init_lookback_scan_state_kernel(state, number_of_blocks, ordered_bid, save_index, save_dest):
    # the state is what a finished scan leaves (every prefix complete).
    blocks = ctx.groups * ctx.block[0] - ctx.run % 3
    return {0: _state(sig[0], 8, PREFIX_COMPLETE), 1: blocks, 2: Buffer(), 3: (0, 3, blocks + 1)[ctx.run % 3]}


def partition(ctx, sig: tuple, name: str) -> dict:
    # partition_kernel(keys_in, values_in, flags, keys_out, values_out, selected_count,
    #                  prev_selected_count, size, inequality_op, offset_scan_state,
    #                  number_of_blocks, ordered_bid, predicates...): offsets are unsigned int
    blocks, size = _blocks_and_size(ctx)
    return {5: Buffer(), 6: Buffer(), 7: size, 9: _small_state(8, PREFIX_EMPTY), 10: blocks, 11: Buffer()}


#: The segment lengths the segment partition's offsets give, besides random ones: each side of
#: every max medium segment length a configuration of rocPRIM 5.3 has (1 with warp sort
#: disabled, 128 or 256 with it).
PARTITION_EDGES = (0, 1, 2, 127, 128, 129, 255, 256, 257)


def segment_partition(ctx, sig: tuple, name: str) -> dict:
    # partition_kernel<select_method::predicate, false, ...>(counting_iterator<unsigned, long> keys
    #     (by value: its unsigned start), empty_type* values, empty_type* flags, unsigned* output,
    #     empty_type* values_output, selected_count, prev_selected_count, size, empty_type
    #     inequality_op, offset_scan_state, number_of_blocks, ordered_bid, selector): the launch
    #     segmented_radix_sort_impl makes (device_segmented_radix_sort.hpp): the segment indices
    #     0..segments-1 partitioned by the large segment selector, a lambda capturing
    #     [=] end_offsets and begin_offsets (clang lays captures out in the order the body first
    #     uses them: `end_offsets[i] - begin_offsets[i]`), here segments one after another.
    m = re.search(r"segmented_radix_sort_implI.*?ELb[01]E(.*)", name)
    if not m:
        raise NotRead("no segmented_radix_sort_impl")
    off = iterators(m.group(1), 5)[4]
    if off is None or off.kind not in "iu":
        raise NotRead("the offsets' type is not read")
    blocks, size = _blocks_and_size(ctx)
    lengths = ctx.rng.integers(0, 600, size)
    lengths[:len(PARTITION_EDGES)] = ctx.rng.permutation(PARTITION_EDGES)[:size]
    begin, end = offsets(lengths, off.size)
    return {0: 0, 5: Buffer(), 6: Buffer(), 7: size, 9: _small_state(8, PREFIX_EMPTY), 10: blocks, 11: Buffer(),
            12: Aggregate(16, b"", ((0, Buffer(end)), (8, Buffer(begin))))}


def segmented_sort(ctx, sig: tuple, name: str) -> dict:
    # segmented_sort_kernel<Config, Descending, BlockSize>(keys_input, keys_tmp, keys_output,
    #     values_input, values_tmp, values_output, to_output, [segment_indices,] begin_offsets,
    #     end_offsets, long_iterations, short_iterations, begin_bit, end_bit)
    #     (device_segmented_radix_sort.hpp): one segment per workgroup (the large kernel: the
    #     segment segment_indices[workgroup]), its keys at [begin, end) of the keys; iterations
    #     as segmented_radix_sort_impl computes them from the bits and the configuration's radix
    #     bits; segments of every path of the kernel (empty, a warp's, one block's, several
    #     blocks': the radix passes), the large kernel's longer than any medium segment.
    large = "segmented_sort_large_kernel" in name
    m = re.search(r"segmented_sort_(?:large_)?kernelI.*?ELb[01]ELj\d+E(.*)", name)
    if not m:
        raise NotRead("no iterators after the block size")
    its = iterators(m.group(1), 6 if large else 5)
    key, off = its[0], its[-1]
    if key is None or off is None or key.empty or off.kind not in "iu":
        raise NotRead("the keys' or offsets' type is not read")
    cfg = config(name, key)
    ipb, bits = cfg.items_per_block, 8 * key.size
    begin_bit, end_bit = (0, bits) if ctx.run % 3 != 2 else (0, min(bits, 13))
    long_it, short_it = iterations(cfg, begin_bit, end_bit)
    if large:  # every other segment large (selected), the ones between short (not launched)
        wanted = [(300, ipb + 37, 257)[(ctx.run + g) % 3] for g in range(ctx.groups)]
        lengths = [x for w in wanted for x in (w, 3)]
        chosen = [2 * g for g in range(ctx.groups)]
    else:
        lengths = [(200, ipb + 37, 0, 100, 1)[(ctx.run + 2 * g) % 5] for g in range(ctx.groups)]
    begin, end = offsets(lengths, off.size)
    at = 7 if not large else 8
    out = {6: int(ctx.run % 2 == 0), at: Buffer(begin), at + 1: Buffer(end),
           at + 2: long_it, at + 3: short_it, at + 4: begin_bit, at + 5: end_bit}
    if large:
        out[7] = Buffer(np.array(chosen, "<u4").tobytes())
    return out


def segmented_sort_small(ctx, sig: tuple, name: str) -> dict:
    # segmented_sort_small_or_medium_kernel<WarpSortHelperConfig<LogicalWarp, ItemsPerThread,
    #     BlockSize>, Descending, BlockSize>(keys_input, keys_tmp, keys_output, values_input,
    #     values_tmp, values_output, to_output, num_segments, segment_indices, begin_offsets,
    #     end_offsets, begin_bit, end_bit) (device_segmented_radix_sort.hpp,
    #     detail/device_segmented_radix_sort.hpp segmented_sort_small): a logical warp per
    #     segment index, BlockSize / LogicalWarp of them per workgroup, the last workgroup's
    #     partly past num_segments; the indices select segments of at most LogicalWarp *
    #     ItemsPerThread items (what the partition leaves to this kernel) among others.
    m = re.search(r"segmented_sort_small_or_medium_kernelINS0_20WarpSortHelperConfigILj(\d+)ELj(\d+)ELj(\d+)EEE"
                  r"Lb[01]ELj\d+E(.*)", name)
    if not m:
        raise NotRead("no WarpSortHelperConfig<LogicalWarp, ItemsPerThread, BlockSize> read")
    if "NS_16reverse_iteratorI" in m.group(4):
        raise NotRead("the segment indices are a reverse_iterator (its pointer is past the indices: "
                      "a recipe's buffer address is where its data starts)")
    its = iterators(m.group(4), 6)
    key, off = its[0], its[-1]
    if key is None or off is None or key.empty or off.kind not in "iu":
        raise NotRead("the keys' or offsets' type is not read")
    warp, ipt, block = (int(x) for x in m.groups()[:3])
    per_block = block // warp
    count = ctx.groups * per_block - (0, 3, per_block - 1)[ctx.run % 3]
    total = 2 * count
    lengths = ctx.rng.integers(0, warp * ipt + 1, total)
    lengths[:4] = (0, 1, warp * ipt, warp * ipt - 1)
    chosen = np.sort(ctx.rng.choice(total, count, replace=False)).astype("<u4")
    bits = 8 * key.size
    begin, end = offsets(lengths, off.size)
    return {6: int(ctx.run % 2 == 0), 7: count, 8: Buffer(chosen.tobytes()), 9: Buffer(begin), 10: Buffer(end),
            11: 0, 12: (bits, bits, min(bits, 13))[ctx.run % 3]}


def sort_and_scatter(ctx, sig: tuple, name: str) -> dict:
    # sort_and_scatter_kernel<BlockSize, ItemsPerThread, RadixBits, Descending, KeysIn, KeysOut,
    #     ValuesIn, ValuesOut, Offset>(keys_in, keys_out, values_in, values_out, Offset size,
    #     const Offset* batch_digit_starts, const Offset* digit_starts, bit, current_radix_bits,
    #     blocks_per_full_batch, full_batches) (device/device_radix_sort.hpp, one pass of radix
    #     sort; Offset: unsigned int or size_t): each workgroup is one batch of one block (as
    #     device_radix_sort.hpp computes them for that size), the last one partial; the keys are
    #     the recipe's and the digit starts the ones scan_batches and scan_digits compute from
    #     them (batch b's digit d after earlier batches' digits d, digit d after smaller
    #     digits), so the pass is the stable scatter of every key by its digit.
    m = re.search(r"sort_and_scatter_kernelILj(\d+)ELj(\d+)ELj(\d+)ELb([01])E(.*)", name)
    block, ipt, bits = (int(x) for x in m.groups()[:3])
    key = iterators(m.group(5), 1)[0]
    if key is None or key.empty or key.kind not in "iuf":
        raise NotRead("the keys' type is not read")
    if m.group(4) == "1":
        raise NotRead("descending (inverted key encoding) is not modelled")
    size = ctx.groups * block * ipt - (1, 7, 100)[ctx.run % 3]
    bit = (0, 3, 8)[ctx.run % 3]
    keys = ctx.rng.integers(0, 256, size * key.size, dtype=np.uint8)
    batch, starts = digit_starts(keys.view(f"<u{key.size}"), key, bit, bits, ctx.groups, block * ipt)
    off = f"<u{sig[4][1]}"
    return {0: Buffer(keys.tobytes()), 4: size, 5: Buffer(batch.astype(off).tobytes()),
            6: Buffer(starts.astype(off).tobytes()), 7: bit, 8: bits, 9: 1, 10: ctx.groups}


def block_merge(ctx, sig: tuple, name: str) -> dict:
    # block_merge_kernel<BlockSize, ItemsPerThread>(keys_in, keys_out, values_in, values_out,
    #     input_size, sorted_block_size, compare, merge_partitions) (mergepath version,
    #     device/detail/device_merge_sort_mergepath.hpp): sorted blocks of one tile
    #     (sorted_block_size = BlockSize * ItemsPerThread), so tile b merges tiles
    #     b & ~1 and (b & ~1) + 1; its partition (absolute index into the first list)
    #     is where the first list ends or the diagonal, whichever comes first: a valid
    #     split whatever the keys (the merge is then not the sorted one, but every
    #     index stays inside the input).
    block, ipt = (int(x) for x in re.search(r"block_merge_kernelILj(\d+)ELj(\d+)E", name).groups())
    tile = block * ipt
    size = ctx.groups * tile
    parts = []
    for b in range(ctx.groups + 1):
        start, diag = tile * (b & ~1), tile * (b & 1)
        parts.append(start + min(diag, max(0, min(tile, size - start))))
    return {4: size, 5: tile, 7: Buffer(np.array(parts, "<u4").tobytes())}


def reduce_by_key(ctx, sig: tuple, name: str) -> dict:
    # reduce_by_key_kernel<BlockSize, ItemsPerThread>(keys_in, values_in, size, unique_starts,
    #     carry_outs, leading_aggregates, unique_output, aggregates_output, key_compare_op,
    #     reduce_op, blocks_per_full_batch, full_batches): one batch per workgroup as
    #     device_reduce_by_key.hpp computes them, the last one partial; unique starts 0, so
    #     every unique key and aggregate lands inside the first `size` positions.
    block, ipt = (int(x) for x in re.search(r"reduce_by_key_kernelILj(\d+)ELj(\d+)E", name).groups())
    size = ctx.groups * block * ipt - (1, 7, 100)[ctx.run % 3]
    return {2: size, 3: Buffer(), 10: 1, 11: ctx.groups}


def scatter_carry_outs(ctx, sig: tuple, name: str) -> dict:
    # scan_and_scatter_carry_outs_kernel<BlockSize, ItemsPerThread, Result>(carry_outs,
    #     leading_aggregates, aggregates_output, reduce_op, batches): batches - 1 carry-outs
    #     {Result value (4 bytes here); unsigned destination; bool next_has_carry_in}
    #     (12 bytes), destinations increasing and inside the output, as reduce_by_key
    #     writes them.
    block, ipt = (int(x) for x in re.search(r"carry_outs_kernelILj(\d+)ELj(\d+)E", name).groups())
    batches = min(block * ipt, (5, 64, 300)[ctx.run % 3])
    n = batches - 1
    rec = np.zeros((n, 12), np.uint8)
    rec[:, 0:4] = ctx.rng.integers(0, 256, (n, 4), dtype=np.uint8)
    dest = np.sort(ctx.rng.integers(0, 4096, n)).astype("<u4")
    rec[:, 4:8] = dest.view(np.uint8).reshape(n, 4)
    rec[:, 8] = ctx.rng.integers(0, 2, n)
    return {0: Buffer(rec.tobytes()), 4: batches}


def segmented_reduce(ctx, sig: tuple, name: str) -> dict:
    # segmented_reduce_kernel<Config>(input, output, begin_offsets, end_offsets, reduce_op,
    #     initial_value) (device/device_segmented_reduce.hpp): one segment per workgroup;
    #     segments of 0 to 5000 items, one after another, as offsets into the input.
    lengths = ctx.rng.integers(0, 5000, ctx.groups)
    lengths[ctx.run % ctx.groups] = (4999, 1, 0)[ctx.run % 3]
    begin = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype("<u4")
    end = (begin + lengths).astype("<u4")
    return {2: Buffer(begin.tobytes()), 3: Buffer(end.tobytes())}
