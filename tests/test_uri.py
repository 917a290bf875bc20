"""URIs: parse(format(u)) == u for every URI kpatch prints; bad URIs give UsageError."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kpatch.containers.uri import Uri, format_uri, parse_uri
from kpatch.errors import UsageError

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
paths = texts.map(lambda s: "/" + s)


@given(
    path=paths,
    name=texts,
    args=texts,
    entry=st.none() | texts,
)
def test_kdb_uri_round_trip(path, name, args, entry):
    u = Uri("kdb", path, name=name, args=args, entry=entry)
    assert parse_uri(format_uri(u)) == u


@given(path=paths, off=st.integers(0, 2**40), size=st.integers(0, 2**40), entry=st.none() | texts)
def test_file_uri_round_trip(path, off, size, entry):
    u = Uri("file", path, offset=off, size=size, entry=entry)
    assert parse_uri(format_uri(u)) == u


def test_roc_obj_convention_and_plus_sign():
    u = parse_uri("file:///usr/lib/x.so#offset=0x1000&size=64&entry=hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+")
    assert (u.path, u.offset, u.size) == ("/usr/lib/x.so", 4096, 64)
    assert u.entry == "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+"


def test_kdb_args_keep_spaces_and_equals():
    u = parse_uri("kdb:///db/gfx1030_18.kdb?name=conv.s.o&args=%20-DX%3D1%20-mcpu%3Dgfx1030")
    assert u.args == " -DX=1 -mcpu=gfx1030"


def test_plain_path_is_file_uri(tmp_path):
    assert parse_uri(str(tmp_path / "a.hsaco")) == Uri("file", str(tmp_path / "a.hsaco"))


@pytest.mark.parametrize(
    "bad",
    [
        "http:///x",
        "file://relative/path",
        "kdb:///x.kdb?name=a",
        "zip:///x.whl",
        "file:///x#offset=1",
        "file:///x#offset=-1&size=2",
        "file:///x#offset=abc&size=2",
        "file:///x#bogus=1",
        "file:///x?member=a",
        "file:///x#offset",
    ],
)
def test_bad_uris_are_usage_errors(bad):
    with pytest.raises(UsageError):
        parse_uri(bad)


def test_path_that_is_not_utf8_round_trips():
    """A file name that is not valid UTF-8 (os.fsdecode gives it surrogate
    escapes) is percent-encoded byte for byte and parsed back to the same
    name: os.fsencode of it is the original bytes."""
    import os
    name = os.fsdecode(b"/tmp/good\xff\xfe.co")
    u = Uri("file", name, offset=0, size=4)
    text = format_uri(u)
    assert text == "file:///tmp/good%FF%FE.co#offset=0&size=4"
    assert parse_uri(text) == u
    assert os.fsencode(parse_uri(text).path) == b"/tmp/good\xff\xfe.co"
