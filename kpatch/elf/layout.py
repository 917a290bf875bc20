"""Declarative little-endian record layouts.

A :class:`Layout` is a named table of ``(field, struct code)`` pairs, e.g. the
64-byte ELF header.  It reads one record (or a run of records) from bytes and
turns every short read into a :class:`~kpatch.errors.FormatError` naming the
record, so callers never see ``struct.error``.
"""

from __future__ import annotations

import struct
from collections import namedtuple
from collections.abc import Iterator, Sequence
from typing import Any

from kpatch.errors import FormatError


class Layout:
    """A fixed-size little-endian record described by a table of fields."""

    def __init__(self, what: str, fields: Sequence[tuple[str, str]]):
        self.what = what
        self.fields = tuple(fields)
        self.struct = struct.Struct("<" + "".join(code for _, code in self.fields))
        self.size = self.struct.size
        self.record = namedtuple(what.title().replace(" ", "").replace("-", ""),
                                 [name for name, _ in self.fields])

    def offset_of(self, name: str) -> int:
        """Byte offset of field ``name`` inside the record."""
        codes = ""
        for field, code in self.fields:
            if field == name:
                return struct.calcsize("<" + codes)
            codes += code
        raise KeyError(name)

    def read(self, data: bytes | memoryview, offset: int = 0) -> Any:
        """The record at ``offset``; FormatError if it runs past the end."""
        if offset < 0 or offset + self.size > len(data):
            raise FormatError(
                f"{self.what} at {offset:#x} ({self.size} bytes) runs past the end "
                f"of the data ({len(data)} bytes)")
        return self.record._make(self.struct.unpack_from(data, offset))

    def read_many(self, data: bytes | memoryview, offset: int, count: int,
                  stride: int | None = None) -> Iterator[Any]:
        """``count`` records starting at ``offset``, ``stride`` bytes apart."""
        stride = self.size if stride is None else stride
        if stride < self.size:
            raise FormatError(f"{self.what} entry size {stride} is smaller than {self.size}")
        end = offset + stride * count if count else offset
        if offset < 0 or (count and end - stride + self.size > len(data)):
            raise FormatError(
                f"{count} x {self.what} at {offset:#x} run past the end of the data "
                f"({len(data)} bytes)")
        make = self.record._make
        unpack = self.struct.unpack_from
        for i in range(count):
            yield make(unpack(data, offset + i * stride))

    def pack(self, record: Any) -> bytes:
        """The bytes of ``record`` (a tuple in field order)."""
        return self.struct.pack(*record)
