"""Symbol table entries read in bulk (kpatch.elf.reader._read_symbols) are
the Symbols the dataclass makes, and bad name offsets are refused as before."""

from __future__ import annotations

import dataclasses

import pytest

from kpatch.elf.reader import SYM, Symbol, _read_symbols
from kpatch.errors import FormatError

STRINGS = b"\0foo\0bar.kd\0"


def entry(name: int, info: int, other: int, shndx: int, value: int, size: int) -> bytes:
    return SYM.struct.pack(name, info, other, shndx, value, size)


def test_entries_are_the_dataclass_symbols():
    body = entry(0, 0, 0, 0, 0, 0) + entry(1, 0x12, 0x3, 7, 0x1000, 0x40) + entry(5, 0x21, 0x1, 2, 0x80, 64) \
        + entry(7, 0x10, 0, 0, 0, 0)  # (7: a name that is the tail of another, "r.kd")
    got = _read_symbols(body, STRINGS, ".symtab", "symbol table .symtab")
    want = [Symbol("", 0, 0, 0, 0, 0, 0, ".symtab"), Symbol("foo", 0x1000, 0x40, 2, 1, 3, 7, ".symtab"),
            Symbol("bar.kd", 0x80, 64, 1, 2, 1, 2, ".symtab"), Symbol("r.kd", 0, 0, 0, 1, 0, 0, ".symtab")]
    assert got == want
    assert [repr(s) for s in got] == [repr(s) for s in want] and list(map(hash, got)) == list(map(hash, want))
    assert dataclasses.replace(got[1], value=4) == dataclasses.replace(want[1], value=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        got[1].name = "x"


@pytest.mark.parametrize("offset, why", [(len(STRINGS), "is outside its string table"),
                                         (99, "is outside its string table")])
def test_a_name_outside_the_string_table_is_refused(offset, why):
    with pytest.raises(FormatError, match=f"symbol table .symtab entry 1 name offset {offset} {why}"):
        _read_symbols(entry(0, 0, 0, 0, 0, 0) + entry(offset, 0, 0, 0, 0, 0), STRINGS, ".symtab",
                      "symbol table .symtab")


def test_a_name_without_its_nul_is_refused():
    with pytest.raises(FormatError, match="symbol table .symtab entry 0 name at 1 is not NUL-terminated"):
        _read_symbols(entry(1, 0, 0, 0, 0, 0), b"\0abc", ".symtab", "symbol table .symtab")
