"""encode(decode(x)) == x, on real code and on arbitrary bytes."""

from __future__ import annotations

import glob
import os

import pytest
from hypothesis import given, settings, strategies as st

from isa_helpers import FIXTURES, ROCRAND, extract_bundle_entry, target_of, text_section
from kpatch.isa import decode, encode

FIXTURE_OBJECTS = sorted(glob.glob(os.path.join(FIXTURES, "*.hsaco")))


def assert_roundtrip(data: bytes, cpu: str) -> int:
    insts = decode(data, cpu)
    assert b"".join(i.raw for i in insts) == data
    for i in insts:
        assert encode(i) == i.raw, (hex(i.address), i.text())
    return len(insts)


@pytest.mark.skipif(not FIXTURE_OBJECTS, reason="no fixture code objects built yet")
@pytest.mark.parametrize("path", FIXTURE_OBJECTS, ids=os.path.basename)
def test_fixture_roundtrip(path):
    data, _, _ = text_section(path)
    assert assert_roundtrip(data, target_of(path)) > 0


@pytest.mark.corpus
@pytest.mark.skipif(not os.path.exists(ROCRAND), reason="corpus not downloaded")
def test_rocrand_roundtrip(tmp_path):
    co = str(tmp_path / "r.co")
    extract_bundle_entry(ROCRAND, "gfx1030", co)
    data, _, _ = text_section(co)
    assert assert_roundtrip(data, "gfx1030") > 40000


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=96), st.sampled_from(["gfx1010", "gfx1030"]))
def test_random_bytes_roundtrip(data, cpu):
    assert_roundtrip(data, cpu)
