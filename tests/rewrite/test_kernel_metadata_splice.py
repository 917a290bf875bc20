"""Kernel metadata edits without decoding the whole note (issue 14):
:func:`headers.set_kernel_metadata` re-encodes only the kernel maps it
changes and splices them into the note.  It must give exactly what
:func:`headers.set_metadata` (the whole map decoded losslessly and encoded
again) gives, on real objects and on encodings kpatch keeps as they are;
where it does not apply, or the note is bad, it is set_metadata."""

from __future__ import annotations

import os
import sys

import msgpack
import pytest

from rw_common import CALLS, RELOC, fixture_objects, read
from kpatch.codeobject import CodeObject, mpack
from kpatch.rewrite import headers
from kpatch.rewrite.headers import set_kernel_metadata, set_metadata

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tools")


def _corpus(n: int) -> list[bytes]:
    """The first ``n`` gfx1030 code objects of Debian's librocrand and
    librocsparse (tools/fetch_corpus.sh --all; CI fetches them)."""
    sys.path.insert(0, TOOLS)
    try:
        from isa_corpus import gfx1030_objects
        out = []
        for _, blob in gfx1030_objects(("librocrand.so.1.1", "librocsparse.so.0.1")):
            out.append(bytes(blob))
            if len(out) == n:
                break
    finally:
        sys.path.remove(TOOLS)
    if len(out) < n:
        pytest.skip("the corpus is not fetched (tools/fetch_corpus.sh --all)")
    return out


def _note(data: bytes) -> dict:
    """The metadata note as the C msgpack library reads it (independent of kpatch's readers)."""
    co = CodeObject.from_bytes(data)
    (note,) = co.metadata_notes
    return msgpack.unpackb(note.desc, raw=False, strict_map_key=False)


def _slow(data: bytes, symbols, update) -> bytes:
    def updater(md):
        for kmd in md.kernels:
            if kmd.get(".symbol") in symbols:
                update(kmd)

    return set_metadata(data, updater)


def _wgp_off(kmd):
    if ".workgroup_processor_mode" in kmd:
        kmd[".workgroup_processor_mode"] = 0


def _cases(data: bytes):
    syms = [k[".symbol"] for k in _note(data)["amdhsa.kernels"]]
    counts = {s: 200 + 37 * i for i, s in enumerate(syms)}  # one byte fixints become uint8/uint16: the note grows

    def vgprs(kmd):
        kmd[".vgpr_count"] = counts[kmd[".symbol"]]

    yield "wgp all", set(syms), _wgp_off
    yield "wgp every other", set(syms[::2]), _wgp_off
    yield "vgpr_count grows", set(syms[1::2]) or set(syms), vgprs
    yield "none", set(), _wgp_off


@pytest.mark.parametrize("path", fixture_objects(), ids=os.path.basename)
def test_same_bytes_as_set_metadata_on_fixtures(path):
    data = read(path)
    for what, symbols, update in _cases(data):
        assert set_kernel_metadata(data, symbols, update) == _slow(data, symbols, update), what


def test_same_bytes_as_set_metadata_on_the_corpus():
    for data in _corpus(6):
        before = _note(data)
        for what, symbols, update in _cases(data):
            new = set_kernel_metadata(data, symbols, update)
            assert new == _slow(data, symbols, update), what
            # independently: the C reader sees the original map with exactly those changes
            want = _note(data)
            for kmd in want["amdhsa.kernels"]:
                if kmd[".symbol"] in symbols:
                    update(kmd)
            assert _note(new) == want, what
            if what == "vgpr_count grows":  # (the corpus' maps have no .workgroup_processor_mode)
                assert new != data
        assert _note(data) == before


def _with_note(data: bytes, desc: bytes) -> bytes:
    co = CodeObject.from_bytes(data)
    index, body = headers.replace_note(data, co.metadata_note, desc)
    return headers.replace_section(data, index, body)


def test_kept_encodings_stay_kept():
    """Values in non-canonical forms (a uint16 holding 5, a str8 key, a map16)
    keep their bytes in the maps that change and in the others."""
    data = read(CALLS)

    def odd(md):
        for kmd in md.kernels:
            kmd[".sgpr_count"] = mpack.Int(int(kmd[".sgpr_count"]), mpack.UINT16)
            kmd[mpack.Str(".odd_key", mpack.STR8)] = mpack.Int(5, mpack.UINT32)
            kmd[".workgroup_processor_mode"] = 1

    data = set_metadata(data, odd)
    desc = CodeObject.from_bytes(data).metadata_note.desc
    assert bytes([mpack.UINT16]) in desc and bytes([mpack.STR8, 8]) + b".odd_key" in desc
    syms = [k[".symbol"] for k in _note(data)["amdhsa.kernels"]]
    for symbols in ({syms[0]}, set(syms)):
        for update in (_wgp_off, lambda kmd: kmd.__setitem__(".vgpr_count", 300)):
            new = set_kernel_metadata(data, symbols, update)
            assert new != data and new == _slow(data, symbols, update)
            assert CodeObject.from_bytes(new).metadata_note.desc.count(bytes([mpack.STR8, 8]) + b".odd_key") \
                == len(syms)


def test_bad_or_odd_notes_are_set_metadatas_business():
    """A note that repeats a key is refused with set_metadata's error; a
    kernel list holding something other than maps goes through set_metadata."""
    data = read(RELOC)
    md = _note(data)
    sym = md["amdhsa.kernels"][0][".symbol"]
    # a kernel map that repeats a key (packed by hand: dicts cannot repeat keys)
    kmap = b"\x82" + msgpack.packb(".symbol") + msgpack.packb(sym) + msgpack.packb(".symbol") + msgpack.packb(sym)
    root = dict(md)
    del root["amdhsa.kernels"]
    desc = (bytes([0x80 | (len(root) + 1)]) + b"".join(msgpack.packb(k) + msgpack.packb(v) for k, v in root.items())
            + msgpack.packb("amdhsa.kernels") + b"\x91" + kmap)
    bad = _with_note(data, desc)
    errors = []
    for f in (set_kernel_metadata, _slow):
        with pytest.raises(Exception) as e:
            f(bad, {sym}, _wgp_off)
        errors.append((type(e.value), str(e.value)))
    assert errors[0] == errors[1] and "repeats the key" in errors[0][1]
    # amdhsa.kernels holding a map that is not a kernel's and an int: set_metadata decides
    odd = dict(md)
    odd["amdhsa.kernels"] = [md["amdhsa.kernels"][0], 7]
    odd_data = _with_note(data, msgpack.packb(odd))
    outcome = []
    for f in (set_kernel_metadata, _slow):
        try:
            outcome.append(f(odd_data, {sym}, _wgp_off))
        except Exception as e:  # noqa: BLE001 - both must fail alike
            outcome.append((type(e), str(e)))
    assert outcome[0] == outcome[1]


def _lossless_reads(monkeypatch, f):
    """What ``f()`` gives, and the sizes of the documents kpatch's lossless reader read meanwhile."""
    sizes = []
    real = mpack.unpack

    def spy(b, **kw):
        sizes.append(len(b))
        return real(b, **kw)

    monkeypatch.setattr(mpack, "unpack", spy)
    try:
        return f(), sizes
    finally:
        monkeypatch.setattr(mpack, "unpack", real)


def test_the_whole_note_is_not_decoded_losslessly(monkeypatch):
    """Switching kernels to CU mode (headers.perform, the cu-mode rule) reads
    with kpatch's pure-Python lossless reader only the kernel maps it
    changes, never the whole note (it did before: megabytes for a Tensile
    object); maps without ``.workgroup_processor_mode`` (the corpus' code
    object version has none) are not read at all."""
    data = _corpus(1)[0]
    kernels = CodeObject.from_bytes(data, lossless=False).kernels[:2]
    action = [((("wgp_mode", False),), kernels)]
    new, sizes = _lossless_reads(monkeypatch, lambda: headers.perform(data, action))
    assert sizes == [] and _note(new) == _note(data)
    # the same object with the key in every map: the two maps are read, and changed
    with_key = set_metadata(data, lambda md: [k.__setitem__(".workgroup_processor_mode", 1) for k in md.kernels])
    desc = CodeObject.from_bytes(with_key).metadata_note.desc
    new, sizes = _lossless_reads(monkeypatch, lambda: headers.perform(with_key, action))
    assert len(sizes) == 2 and max(sizes) < len(desc) // 20
    got = {k[".symbol"]: k[".workgroup_processor_mode"] for k in _note(new)["amdhsa.kernels"]}
    assert got == {k[".symbol"]: 0 if k[".symbol"] in {x.symbol for x in kernels} else 1
                   for k in _note(with_key)["amdhsa.kernels"]}
