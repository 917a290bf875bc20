"""elfpatch.assemble_file joins the new file in one pass (issue 14: write()
zeroed a bytearray of the whole file, wrote every piece into it and copied
it into bytes); it must give what doing each write in turn on a zeroed
bytearray gives -- written out here -- for the writes of real patched
objects (librocrand, a Tensile library) and for writes that overlap every
way (done in turn), and that comparison must catch an assembly that drops
the zeros between pieces or joins overlapping writes."""

from __future__ import annotations

import random

import pytest

from rw_common import librocrand_and_tensile
from kpatch.rewrite import elfpatch, patcher


def _plain(size: int, writes) -> bytes:
    out = bytearray(size)
    for start, end, data in writes:
        out[start:end] = data
    return bytes(out)


def _real_writes(monkeypatch, librocrand) -> list:
    """(size, writes) of every file write() assembled while patching the objects."""
    seen = []
    real = elfpatch.assemble_file

    def keep(size, writes):
        seen.append((size, [(a, b, bytes(d)) for a, b, d in writes]))
        return real(size, writes)

    with monkeypatch.context() as m:
        m.setattr(elfpatch, "assemble_file", keep)
        for data in librocrand_and_tensile(librocrand, 2):
            assert patcher.patch_code_object(data, mode="override").data is not None
    return seen


def _synthetic() -> list:
    """Writes over a small file that overlap each other in every way
    (inside, across either end, exactly, adjacent), some empty."""
    rng = random.Random(14)
    cases = []
    for _ in range(300):
        size = rng.randrange(1, 80)
        writes = []
        for _ in range(rng.randrange(1, 12)):
            a = rng.randrange(0, size)
            b = rng.randrange(a, size + 1)
            writes.append((a, b, bytes(rng.randrange(1, 256) for _ in range(b - a))))
        cases.append((size, writes))
    return cases


def _check(assemble, cases) -> int:
    """Compare ``assemble`` with the plain writes on every case; how many
    cases have writes that overlap."""
    overlapping = 0
    for size, writes in cases:
        got = assemble(size, writes)
        assert type(got) is bytes
        same = got == _plain(size, writes)
        assert same, "assembled differently"
        overlapping += any(a2 < b1 and a1 < b2 for i, (a1, b1, _) in enumerate(writes)
                           for a2, b2, _ in writes[i + 1:])
    return overlapping


def _holes(cases) -> int:
    """How many cases leave bytes no write covers (zeros in the file)."""
    n = 0
    for size, writes in cases:
        pos, hole = 0, False
        for a, b, _ in sorted(writes, key=lambda w: w[0]):
            hole |= a > pos
            pos = max(pos, b)
        n += hole or pos < size
    return n


def test_joined_as_written_one_by_one(monkeypatch, librocrand):
    real = _real_writes(monkeypatch, librocrand)
    assert len(real) >= 2 and _check(elfpatch.assemble_file, real) == 0 and _holes(real) == len(real)
    assert _check(elfpatch.assemble_file, _synthetic()) > 100


def test_a_write_that_is_not_its_range_is_done_the_plain_way():
    # (a slice assignment of other length resizes the bytearray: what follows moves)
    writes = [(0, 4, b"abcd"), (2, 6, b"xy"), (4, 8, b"1234")]
    assert elfpatch.assemble_file(8, writes) == _plain(8, writes)


def test_a_wrong_assembly_is_caught(monkeypatch, librocrand):
    """Two broken variants: the pieces joined without the zeros between them
    (caught on the real files), and overlapping writes joined in file order
    rather than done in turn (caught on the overlapping ones)."""
    real = _real_writes(monkeypatch, librocrand)

    def no_zeros(size, writes):
        return b"".join(d for _, _, d in sorted(writes, key=lambda w: w[0])).ljust(size, b"\0")

    def joined_anyway(size, writes):
        out = bytearray(size)
        for a, b, d in sorted(writes, key=lambda w: w[0]):
            out[a:b] = d
        return bytes(out)

    with pytest.raises(AssertionError):
        _check(no_zeros, real)
    with pytest.raises(AssertionError):
        _check(joined_anyway, _synthetic())
