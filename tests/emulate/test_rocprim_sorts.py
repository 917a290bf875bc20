"""rocPRIM's segmented radix sort kernels (and radix sort's sort_and_scatter
over 64-bit keys with a size_t size) under their recipes
(kpatch/emulate/recipes.py, kpatch/emulate/rocprim.py).

The kernels are rocPRIM 5.3's (Debian's librocprim-dev) instantiated as
rocSPARSE 5.3 instantiates them (data/rocprim_sorts.hip, built by
data/build.sh with Debian's hipcc; all 39 kernel names are byte for byte names of
librocsparse.so.0.1).  Each test runs the ORIGINAL gfx1030 kernel with the
recipe's inputs and checks what it wrote against numpy's definition of the
algorithm on the same inputs: the segment partition selects the segments
longer than the configuration's medium length (in order, the rest reversed
at the end), a segmented sort sorts each segment (stable on the bits
[begin_bit, end_bit) of rocPRIM's key encoding, the values moved with
their keys).  The gfx1010 build of the same source is proven equal with
the recipes' inputs, and a mutant is DIFFERENT.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from kpatch.codeobject import CodeObject
from kpatch.emulate import recipes, rocprim
from kpatch.emulate.dispatch import Machine
from kpatch.emulate.verify import DIFFERENT, EQUAL, GUARD_BYTES, CannotSynthesise, _execute, synthesise, verify_kernel

HERE = os.path.dirname(__file__)
OBJ = {t: os.path.join(HERE, "data", f"rocprim_sorts.{t}.hsaco") for t in ("gfx1030", "gfx1010")}

#: rocPRIM 5.3's default_select_config<0, unsigned, empty_type> (select_config_803, the fallback
#: of arch 0): 256 threads, 13 items each (device/device_select_config.hpp).
SELECT_ITEMS_PER_BLOCK = 256 * 13
#: The large segment selector's bound for default_segmented_radix_sort_config<0, int, *>:
#: WarpSortConfig<32, 4, ..., 32, 4>: a medium warp of 32 sorts at most 4 items each.
MAX_MEDIUM = 32 * 4


def _data(target="gfx1030") -> bytes:
    with open(OBJ[target], "rb") as f:
        return f.read()


def _names(pattern: str) -> list[str]:
    return [k.name for k in CodeObject(_data()).kernels if re.search(pattern, k.name)]


def _run(name: str, run: int):
    data = _data()
    md = Machine(data).kernel(name).metadata
    plan = synthesise(md, run, 5, name)
    image = _execute(data, name, plan, 5, None)[0]
    assert not isinstance(image, Exception), image
    return plan, image


def _buffer(plan, index: int) -> object:
    return plan.buffers[index][1]


def _read(d, dtype, n: int, start: int = 0) -> np.ndarray:
    """Elements [start, start + n) of a buffer's data (after its guard zone):
    a plan's or an image's (numpy array, bytes or lazily made random bytes)."""
    it = np.dtype(dtype).itemsize
    at = np.arange(GUARD_BYTES + start * it, GUARD_BYTES + (start + n) * it)
    if isinstance(d, (bytes, bytearray)):
        d = np.frombuffer(d, np.uint8)
    return np.asarray(d[at], np.uint8).view(dtype).copy()


def _image(image, name: str):
    return next(d for nm, d in image if nm == name)


def _arg(plan, image, i: int, dtype, n: int, start: int = 0):
    """Explicit argument i's buffer: (before, after) elements [start, start + n)."""
    v = plan.values[i]
    assert v[0] == "buf", v
    name = plan.buffers[v[1]][0]
    return _read(_image_of_plan(plan, name), dtype, n, start), _read(_image(image, name), dtype, n, start)


def _image_of_plan(plan, name):
    return next(d for nm, d in plan.buffers if nm == name)


# -- names ------------------------------------------------------------------------------------

#: rocSPARSE 5.3's names (librocsparse.so.0.1 of Debian bookworm) and their offsets' type as
#: llvm-cxxfilt-16 prints it (test_cxxfilt_agrees checks these).
ROCSPARSE_PARTITION = (
    "_ZN7rocprim6detail16partition_kernelILNS0_13select_methodE1ELb0ENS0_21default_select_configILj0EjNS_10empty_"
    "typeEEENS_17counting_iteratorIjlEEPS4_S8_PjS8_S4_NS0_19lookback_scan_stateIjLb1ELb1EEEJZNS0_25segmented_radix"
    "_sort_implINS_14default_configELb0EPiSE_S8_S8_PlEE10hipError_tPvRmT1_PNSt15iterator_traitsISJ_E10value_typeET"
    "2_T3_PNSK_ISP_E10value_typeET4_jRbjT5_SV_jjP12ihipStream_tbEUljE_EEEvSO_SP_ST_SV_T6_PmS10_mT7_T8_jNS0_16ordere"
    "d_block_idIjEEDpT9_")
ROCSPARSE_LARGE = (
    "_ZN7rocprim6detail27segmented_sort_large_kernelINS_27segmented_radix_sort_configILj6ELj5ENS_13kernel_configIL"
    "j64ELj1ELj4294967295EEENS_22DisabledWarpSortConfigEEELb0ELj64EPlS7_PNS_10empty_typeES9_PjS7_EEvT2_PNSt15iterat"
    "or_traitsISB_E10value_typeET3_T4_PNSC_ISH_E10value_typeET5_bT6_T7_SN_jjjj")
ROCSPARSE_SORT = (
    "_ZN7rocprim6detail21segmented_sort_kernelINS_27segmented_radix_sort_configILj6ELj5ENS_13kernel_configILj64ELj"
    "4ELj4294967295EEENS_22DisabledWarpSortConfigEEELb0ELj64EPiS7_PNS_10empty_typeES9_PlEEvT2_PNSt15iterator_traits"
    "ISB_E10value_typeET3_T4_PNSC_ISH_E10value_typeET5_bT6_SM_jjjj")


def test_iterators_and_configurations_from_names():
    """The offsets' and keys' types and the configuration read from rocSPARSE's
    names: a partition over long offsets; a large-segment sort of long keys,
    offsets repeating the keys' pointer (S7_), radix bits 6 and 5, 64 x 1
    items; a sort of int keys over long offsets, 64 x 4 items.  The default
    configuration of int keys is rocPRIM 5.3's segmented_radix_sort_config_900:
    radix bits 7 and 6, 256 x 17 items (keys only), 256 x 15 (pairs)."""
    impl = re.search(r"segmented_radix_sort_implI.*?ELb0E(.*)", ROCSPARSE_PARTITION).group(1)
    assert rocprim.iterators(impl, 5)[4] == rocprim.Iter(8, "i")
    its = rocprim.iterators(re.search(r"ELj64E(.*)", ROCSPARSE_LARGE).group(1), 6)
    assert (its[0], its[2], its[4], its[5]) == (rocprim.Iter(8, "i"), rocprim.Iter(0, "empty"),
                                                rocprim.Iter(4, "u"), rocprim.Iter(8, "i"))
    assert rocprim.config(ROCSPARSE_LARGE, its[0]) == rocprim.SortConfig(6, 5, 64, 1)
    its = rocprim.iterators(re.search(r"ELj64E(.*)", ROCSPARSE_SORT).group(1), 5)
    assert (its[0], its[4]) == (rocprim.Iter(4, "i"), rocprim.Iter(8, "i"))
    assert rocprim.config(ROCSPARSE_SORT, its[0]) == rocprim.SortConfig(6, 5, 64, 4)
    keys_only, pairs = _names(r"^_ZN7rocprim6detail21segmented_sort_kernel")
    assert rocprim.config(keys_only, rocprim.Iter(4, "i")) == rocprim.SortConfig(7, 6, 256, 17)
    assert rocprim.config(pairs, rocprim.Iter(4, "i")) == rocprim.SortConfig(7, 6, 256, 15)
    # 32 bits in passes of 7 and 6: 5 passes, 2 long + 3 short (14 + 18 = 32); 13 bits: 1 + 1;
    # 64 bits in passes of 6 and 5: 11 passes, 9 long + 2 short (54 + 10 = 64)
    assert rocprim.iterations(rocprim.SortConfig(7, 6, 256, 17), 0, 32) == (2, 3)
    assert rocprim.iterations(rocprim.SortConfig(7, 6, 256, 17), 0, 13) == (1, 1)
    assert rocprim.iterations(rocprim.SortConfig(6, 5, 64, 1), 0, 64) == (9, 2)


@pytest.mark.skipif(shutil.which("llvm-cxxfilt-16") is None, reason="needs llvm-cxxfilt-16")
def test_cxxfilt_agrees():
    """llvm-cxxfilt-16 prints the same offsets' types (long*, long*, long*)."""
    out = subprocess.run(["llvm-cxxfilt-16", ROCSPARSE_PARTITION, ROCSPARSE_LARGE, ROCSPARSE_SORT],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert "segmented_radix_sort_impl<rocprim::default_config, false, int*, int*, rocprim::empty_type*, " \
           "rocprim::empty_type*, long*>" in out[0]
    assert "segmented_sort_large_kernel<rocprim::segmented_radix_sort_config<6u, 5u, rocprim::kernel_config<64u, " \
           "1u, 4294967295u>, rocprim::DisabledWarpSortConfig>, false, 64u, long*, long*, rocprim::empty_type*, " \
           "rocprim::empty_type*, unsigned int*, long*>" in out[1]
    assert "false, 64u, int*, int*, rocprim::empty_type*, rocprim::empty_type*, long*>" in out[2]


def test_a_name_not_read_gives_no_arguments():
    """An offsets' type spelled by a substitution this reader does not resolve
    (S8_: a type spelled earlier in the name) is refused, never guessed."""
    bad = ROCSPARSE_PARTITION.replace("S8_S8_PlEE10hip", "S8_S8_S8_EE10hip")
    md = Machine(_data()).kernel(_names("partition_kernel")[0]).metadata
    with pytest.raises(CannotSynthesise, match="rocprim-segment-partition does not hold"):
        synthesise(md, 0, 0, bad)


# -- the segment partition ----------------------------------------------------------------------

@pytest.mark.parametrize("run", [0, 1, 2, 3])
def test_segment_partition_matches_numpy(run):
    """The segment indices 0..size-1 whose length end_offsets[i] - begin_offsets[i]
    exceeds MAX_MEDIUM come first in order, the others from the end in
    reverse order; one workgroup (all of a short list, the selected count
    written) or the first workgroups of a long list (look-back across them)."""
    names = _names(r"^_ZN7rocprim6detail16partition_kernel")
    assert len(names) == 4  # int and size_t offsets, with and without sleep in the look-back
    for name in names:
        offs = "<u8" if "PmEE10hipError_t" in name else "<i4"
        plan, image = _run(name, run)
        assert plan.recipe == "rocprim-segment-partition"
        size, groups = plan.values[7], plan.grid[0] // plan.block[0]
        struct = plan.values[12]
        (o_end, b_end), (o_begin, b_begin) = struct[2]
        assert (o_end, o_begin) == (0, 8)
        begin = _read(_buffer(plan, b_begin), offs, size).astype(np.int64)
        end = _read(_buffer(plan, b_end), offs, size).astype(np.int64)
        assert (end - begin >= 0).all() and (begin[1:] == end[:-1]).all()
        n = min(size, groups * SELECT_ITEMS_PER_BLOCK)
        long_ = (end - begin)[:n] > MAX_MEDIUM
        assert 0 < long_.sum() < n
        sel, rej = np.nonzero(long_)[0], np.nonzero(~long_)[0]
        _, out = _arg(plan, image, 3, "<u4", size)
        assert np.array_equal(out[:len(sel)], sel)
        assert np.array_equal(out[size - len(rej):][::-1], rej)
        if groups == 1:
            _, count = _arg(plan, image, 5, "<u8", 1)
            assert count[0] == len(sel)


# -- the sorts ------------------------------------------------------------------------------------

def _encoded(keys: np.ndarray) -> np.ndarray:
    """rocPRIM's radix key encoding of signed integers: the sign bit flipped
    (detail/radix_sort.hpp radix_key_codec_integral)."""
    bits = 8 * keys.dtype.itemsize
    return keys.view(f"<u{keys.dtype.itemsize}") ^ np.array(1 << (bits - 1), f"<u{keys.dtype.itemsize}")


@pytest.mark.parametrize("run", [0, 1, 2])
@pytest.mark.parametrize("kernel", ["21segmented_sort_kernel", "27segmented_sort_large_kernel"])
def test_segmented_sort_matches_numpy(kernel, run):
    """Each segment the grid sorts ends up in keys_output or keys_tmp (where
    segmented_radix_sort_impl says the result is: is_result_in_output =
    (iterations % 2 == 0) != to_output) as numpy's stable sort of its keys
    by the digits of bits [begin_bit, end_bit); values (pairs) follow their
    keys.  Segments: empty, a warp's, a block's, and more than a block
    (the radix passes)."""
    for name in _names(rf"^_ZN7rocprim6detail{kernel}I"):
        plan, image = _run(name, run)
        assert plan.recipe == "rocprim-segmented-sort"
        pairs = "ILj0EiiEE" in name
        large = "large" in kernel
        at = 8 if large else 7
        offs = "<u8" if pairs else "<u4"
        groups = plan.grid[0] // plan.block[0]
        to_output, long_it, short_it, begin_bit, end_bit = (plan.values[i] for i in (6, at + 2, at + 3, at + 4,
                                                                                        at + 5))
        in_output = ((long_it + short_it) % 2 == 0) != bool(to_output)
        mask = (1 << (end_bit - begin_bit)) - 1
        sorted_any = False
        for g in range(groups):
            seg = g
            if large:
                seg = int(_read(_buffer(plan, plan.values[7][1]), "<u4", 1, g)[0])
            b = int(_read(_buffer(plan, plan.values[at][1]), offs, 1, seg)[0])
            e = int(_read(_buffer(plan, plan.values[at + 1][1]), offs, 1, seg)[0])
            if e <= b:
                continue
            keys, _ = _arg(plan, image, 0, "<i4", e - b, b)
            order = np.argsort((_encoded(keys) >> np.uint32(begin_bit)) & np.uint32(mask), kind="stable")
            _, got = _arg(plan, image, 2 if in_output else 1, "<i4", e - b, b)
            assert np.array_equal(got, keys[order]), (name[:60], g, b, e)
            if pairs:
                values, _ = _arg(plan, image, 3, "<i4", e - b, b)
                _, got = _arg(plan, image, 5 if in_output else 4, "<i4", e - b, b)
                assert np.array_equal(got, values[order])
            sorted_any = True
        assert sorted_any


@pytest.mark.parametrize("pattern", [r"^_ZN7rocprim6detail16partition_kernel.*PmEE10hipError_t",
                                     r"^_ZN7rocprim6detail21segmented_sort_kernel.*ILj0EiiEE",
                                     r"^_ZN7rocprim6detail27segmented_sort_large_kernel.*ILj0EiNS_10empty",
                                     r"^_ZN7rocprim6detail37segmented_sort_small_or_medium_kernel.*PjS4_EE"])
def test_gfx1010_build_is_proven_equal_and_a_mutant_is_different(pattern):
    """The gfx1010 build of the same source is proven equal to the gfx1030
    one with the recipes' inputs (two runs: one workgroup and two); the
    gfx1010 build with its 32-bit stores' data register changed is
    DIFFERENT."""
    from kpatch.isa import decode
    from kpatch.isa import formats as F
    from tests.emulate.common import mutate, with_field
    a, b = _data("gfx1030"), _data("gfx1010")
    for name in _names(pattern):
        v = verify_kernel(a, b, name, runs=2, patched_target="gfx1010")
        assert v.status == EQUAL and v.recipe, v.detail
    name = _names(pattern)[0]
    co = CodeObject(b)
    k = co.kernel(name)
    stores = [i.address for i in decode(co.data[k.code_offset:k.code_offset + k.code_size], "gfx1010",
                                        base_address=k.entry) if i.mnemonic == "global_store_dword"]
    bad = b
    for at in stores:  # every 32-bit store (some are on paths these runs do not take)
        bad = mutate(bad, name, lambda i: i.address == at,
                     lambda i: with_field(i, F.FLAT, "data", i.field("data") + 1))
    v = verify_kernel(a, bad, name, runs=2, patched_target="gfx1010")
    assert v.status == DIFFERENT, v.detail


# -- radix sort's sort_and_scatter ------------------------------------------------------------------

ROCPRIM_ALGOS = os.path.join(HERE, "..", "fixtures", "bin", "rocprim", "rocprim_algos.gfx1030.hsaco")


@pytest.mark.parametrize("run", [0, 1, 2])
@pytest.mark.parametrize("obj,pattern", [
    ("sorts", r"sort_and_scatter_kernelILj256ELj15ELj[67]ELb0EPlS2_S2_S2_mEE"),  # long keys and values, size_t
    ("algos", r"sort_and_scatter_kernelILj256ELj15ELj[67]ELb0EPjS2_PiS3_jEE"),   # unsigned keys, int values
    ("algos", r"sort_and_scatter_kernelILj256ELj15ELj[67]ELb0EPyS2_PdS3_jEE"),   # u64 keys, double values
    ("algos", r"sort_and_scatter_kernelILj256ELj17ELj[67]ELb0EPjS2_PNS_10empty")])  # keys only
def test_sort_and_scatter_matches_numpy(obj, pattern, run):
    """One pass of radix sort with the recipe's keys and the digit starts
    computed from them: keys_output[:size] is numpy's stable sort of the keys
    by their digit (bits [bit, bit + RadixBits) of rocPRIM's encoding), the
    values follow their keys; over one, two and three batches (the last
    partial)."""
    path = OBJ["gfx1030"] if obj == "sorts" else ROCPRIM_ALGOS
    with open(path, "rb") as f:
        data = f.read()
    names = [k.name for k in CodeObject(data).kernels if re.search(pattern, k.name)]
    assert len(names) == 2
    for name in names:
        m = re.search(r"ILj(\d+)ELj(\d+)ELj(\d+)ELb0EP([a-z])S2_(P[a-z]|PNS_10empty|S2_)", name)
        bits, kc = int(m.group(3)), m.group(4)
        ktype = {"l": "<i8", "j": "<u4", "y": "<u8"}[kc]
        vtype = {"Pl": "<i8", "Pi": "<i4", "Pd": "<u8", "S2_": ktype}.get(m.group(5))  # S2_: the keys' type
        md = Machine(data).kernel(name).metadata
        plan = synthesise(md, run, 5, name)
        assert plan.recipe == "rocprim-sort-and-scatter"
        image = _execute(data, name, plan, 5, None)[0]
        assert not isinstance(image, Exception), image
        size, bit = plan.values[4], plan.values[7]
        assert plan.values[8] == bits
        keys, _ = _arg(plan, image, 0, ktype, size)
        enc = keys.view(f"<u{np.dtype(ktype).itemsize}")
        if ktype[1] == "i":
            enc = enc ^ np.array(1 << (8 * enc.itemsize - 1), enc.dtype)
        order = np.argsort((enc >> np.array(bit, enc.dtype)) & np.array((1 << bits) - 1, enc.dtype), kind="stable")
        _, out = _arg(plan, image, 1, ktype, size)
        assert np.array_equal(out, keys[order]), name
        if vtype:
            values, _ = _arg(plan, image, 2, vtype, size)
            _, vout = _arg(plan, image, 3, vtype, size)
            assert np.array_equal(vout, values[order]), name


def test_sort_and_scatter_of_size_t_is_proven_equal():
    """rocSPARSE's sort_and_scatter_kernel<256, 15, 7, false, long*, ..., unsigned long> (its size
    and digit starts size_t: the recipe's second signature): the gfx1010 build is proven
    equal over three runs."""
    name = "_ZN7rocprim6detail23sort_and_scatter_kernelILj256ELj15ELj7ELb0EPlS2_S2_S2_mEEvT3_T4_T5_T6_T7_PKS7_S9_jjjj"
    v = verify_kernel(_data("gfx1030"), _data("gfx1010"), name, runs=3, patched_target="gfx1010")
    assert v.status == EQUAL and v.recipe == "rocprim-sort-and-scatter", v.detail


def test_float_encoding_orders_as_numbers():
    """The encoding of floating keys orders them as numbers (negative ones
    below positive ones, larger magnitudes further out), and the digit
    extraction takes +0.0 for -0.0 (rocPRIM: stable sort of zeros)."""
    x = np.array([3.5, -1.0, 0.25, -7.0, 1e30, -1e-30, 2.0, -2.0], np.float32)
    e = rocprim.encoded(x, rocprim.Iter(4, "f"))
    assert np.array_equal(np.argsort(e), np.argsort(x))
    z = np.array([0.0, -0.0], np.float32)
    d = rocprim.digits(z, rocprim.Iter(4, "f"), 24, 8)
    assert d[0] == d[1] == 0x7F
    i = np.array([-5, 3, -1, 0, 7], np.int32)
    assert np.array_equal(np.argsort(rocprim.encoded(i, rocprim.Iter(4, "i"))), np.argsort(i))


@pytest.mark.parametrize("run", [0, 1, 2])
def test_small_segment_sort_matches_numpy(run):
    """segmented_sort_small_or_medium_kernel: logical warp w of workgroup g sorts
    segment segment_indices[g * 8 + w] (256 / 32 warps) when that is below
    num_segments, into keys_output (to_output) or keys_tmp: numpy's stable sort
    by the bits [begin_bit, end_bit); the segments not indexed are not written."""
    names = _names(r"^_ZN7rocprim6detail37segmented_sort_small_or_medium_kernel.*PjS4_EE|"
                   r"^_ZN7rocprim6detail37segmented_sort_small_or_medium_kernel.*PjPmEE")
    assert len(names) == 2
    for name in names:
        plan, image = _run(name, run)
        assert plan.recipe == "rocprim-segmented-sort-small"
        pairs = "PmEE" in name
        offs = "<u8" if pairs else "<i4"
        to_output, count, begin_bit, end_bit = plan.values[6], plan.values[7], plan.values[11], plan.values[12]
        groups = plan.grid[0] // plan.block[0]
        assert (groups - 1) * 8 < count <= groups * 8
        idx = _read(_buffer(plan, plan.values[8][1]), "<u4", count)
        begin = _read(_buffer(plan, plan.values[9][1]), offs, 2 * count).astype(np.int64)
        end = _read(_buffer(plan, plan.values[10][1]), offs, 2 * count).astype(np.int64)
        assert (end - begin <= 128).all()
        mask = (1 << (end_bit - begin_bit)) - 1
        for s in range(2 * count):
            b, e = begin[s], end[s]
            if e <= b:
                continue
            keys, _ = _arg(plan, image, 0, "<i4", e - b, b)
            before, got = _arg(plan, image, 2 if to_output else 1, "<i4", e - b, b)
            if s not in idx:
                assert np.array_equal(got, before)
                continue
            order = np.argsort((_encoded(keys) >> np.uint32(begin_bit)) & np.uint32(mask), kind="stable")
            assert np.array_equal(got, keys[order]), (name[:60], s, b, e)
            if pairs:
                values, _ = _arg(plan, image, 3, "<i4", e - b, b)
                _, vout = _arg(plan, image, 5 if to_output else 4, "<i4", e - b, b)
                assert np.array_equal(vout, values[order])


def test_small_segment_sort_through_a_reverse_iterator_is_refused():
    """The small segments' indices are a reverse_iterator (rocPRIM fills the
    index buffer from both ends): its pointer lies past the indices, which a
    recipe buffer cannot give; the kernel is refused with that reason."""
    name = _names(r"^_ZN7rocprim6detail37segmented_sort_small_or_medium_kernel.*reverse_iterator")[0]
    md = Machine(_data()).kernel(name).metadata
    with pytest.raises(CannotSynthesise, match="rocprim-segmented-sort-small does not hold: the segment indices "
                                               "are a reverse_iterator"):
        synthesise(md, 0, 0, name)


def test_a_disabled_warp_sort_is_not_claimed():
    """segmented_sort_small_or_medium_kernel<DisabledWarpSortHelperConfig, ...> (rocSPARSE
    instantiates it; rocPRIM never launches it, its warp sort is empty) is no recipe's."""
    name = ("_ZN7rocprim6detail37segmented_sort_small_or_medium_kernelINS0_28DisabledWarpSortHelperConfigELb0ELj1E"
            "PiS3_PNS_10empty_typeES5_PjPKiEEvT2_PNSt15iterator_traitsIS7_E10value_typeET3_T4_PNS8_ISD_E10value_"
            "typeET5_bjT6_T7_SJ_jj")
    md = {".args": [{".value_kind": "global_buffer", ".size": 8}] * 6 + [{".value_kind": "by_value", ".size": 1},
          {".value_kind": "by_value", ".size": 4}] + [{".value_kind": "global_buffer", ".size": 8}] * 3
          + [{".value_kind": "by_value", ".size": 4}] * 2}
    assert recipes.find(name, md) is None
