"""MessagePack that re-encodes byte for byte.

:func:`unpack` turns MessagePack into ordinary Python values (dict, list,
str, int, bytes, float, bool, None) whenever the bytes are the *canonical*
encoding of that value -- the smallest form, as LLVM's ``msgpack::Writer``
writes it (str8 for 32..255-byte strings, float64 for floats).  Anything
encoded another way (a uint16 holding 5, an array16 with 3 elements, a
float32, an ext value) comes back as a subclass that remembers its form:
:class:`Int`, :class:`Str`, :class:`Bin`, :class:`Float`, :class:`Array`,
:class:`Map` or :class:`Ext`.  :func:`pack` writes each value in the form it
remembers (if the value still fits) and plain values canonically, so
``pack(unpack(b)) == b`` for every MessagePack document ``unpack`` accepts.

Map keys keep their order.  Maps with repeated (or equal, like ``1`` and
``True``) keys, unhashable keys, the reserved byte 0xc1, nesting deeper than
:data:`MAX_DEPTH` and truncated data are :class:`~kpatch.errors.FormatError`.
Strings that are not UTF-8 decode with ``surrogateescape`` and encode back
to the same bytes.
"""

from __future__ import annotations

import math
import struct
from itertools import chain, compress, repeat
from operator import is_
from typing import Any

from kpatch.errors import FormatError

MAX_DEPTH = 64

# format bytes
NIL, FALSE, TRUE = 0xC0, 0xC2, 0xC3
BIN8, BIN16, BIN32 = 0xC4, 0xC5, 0xC6
EXT8, EXT16, EXT32 = 0xC7, 0xC8, 0xC9
FLOAT32, FLOAT64 = 0xCA, 0xCB
UINT8, UINT16, UINT32, UINT64 = 0xCC, 0xCD, 0xCE, 0xCF
INT8, INT16, INT32, INT64 = 0xD0, 0xD1, 0xD2, 0xD3
FIXEXT1, FIXEXT2, FIXEXT4, FIXEXT8, FIXEXT16 = 0xD4, 0xD5, 0xD6, 0xD7, 0xD8
STR8, STR16, STR32 = 0xD9, 0xDA, 0xDB
ARRAY16, ARRAY32, MAP16, MAP32 = 0xDC, 0xDD, 0xDE, 0xDF
FIXMAP, FIXARRAY, FIXSTR = 0x80, 0x90, 0xA0  # "fmt" of the fix forms
POSFIXINT, NEGFIXINT = 0x00, 0xE0

# Integer forms: format byte -> (struct code, min, max).
_INT_FORMS = {
    POSFIXINT: (None, 0, 0x7F), NEGFIXINT: (None, -32, -1),
    UINT8: (">B", 0, 0xFF), UINT16: (">H", 0, 0xFFFF),
    UINT32: (">I", 0, 0xFFFFFFFF), UINT64: (">Q", 0, 0xFFFFFFFFFFFFFFFF),
    INT8: (">b", -0x80, 0x7F), INT16: (">h", -0x8000, 0x7FFF),
    INT32: (">i", -0x80000000, 0x7FFFFFFF), INT64: (">q", -(1 << 63), (1 << 63) - 1),
}
# Length-prefixed forms: format byte -> (length struct code, max length).
_LEN_FORMS = {
    STR8: (">B", 0xFF), STR16: (">H", 0xFFFF), STR32: (">I", 0xFFFFFFFF),
    BIN8: (">B", 0xFF), BIN16: (">H", 0xFFFF), BIN32: (">I", 0xFFFFFFFF),
    ARRAY16: (">H", 0xFFFF), ARRAY32: (">I", 0xFFFFFFFF),
    MAP16: (">H", 0xFFFF), MAP32: (">I", 0xFFFFFFFF),
    EXT8: (">B", 0xFF), EXT16: (">H", 0xFFFF), EXT32: (">I", 0xFFFFFFFF),
    FIXSTR: (None, 31), FIXARRAY: (None, 15), FIXMAP: (None, 15),
}
_FIXEXT_LEN = {FIXEXT1: 1, FIXEXT2: 2, FIXEXT4: 4, FIXEXT8: 8, FIXEXT16: 16}
_FIXEXT_FOR_LEN = {v: k for k, v in _FIXEXT_LEN.items()}


class _Kept:
    """A value stored in a non-canonical form (``fmt`` is its format byte):
    the base of :class:`Int`, :class:`Str` and :class:`Bin`."""

    fmt: int

    def __new__(cls, value, fmt: int):
        obj = super().__new__(cls, value)
        obj.fmt = fmt
        return obj

    def __repr__(self) -> str:
        return f"{type(self).__name__}({super().__repr__()}, fmt={self.fmt:#04x})"


class Int(_Kept, int):
    """An int stored in a non-canonical form (``fmt`` is its format byte)."""


class Str(_Kept, str):
    """A string stored in a non-canonical form."""


class Bin(_Kept, bytes):
    """A binary value stored in a non-canonical form (shown as plain bytes)."""

    __repr__ = bytes.__repr__


class Float(float):
    """A float stored as float32 (or with its exact bytes kept); ``raw`` is them."""

    fmt: int
    raw: bytes

    def __new__(cls, value: float, fmt: int, raw: bytes) -> "Float":
        obj = super().__new__(cls, value)
        obj.fmt = fmt
        obj.raw = raw
        return obj


class Array(list):
    """A list stored in a non-canonical form."""

    def __init__(self, items: Any = (), fmt: int = FIXARRAY):
        super().__init__(items)
        self.fmt = fmt


class Map(dict):
    """A dict stored in a non-canonical form."""

    def __init__(self, items: Any = (), fmt: int = FIXMAP):
        super().__init__(items)
        self.fmt = fmt


class Ext:
    """A MessagePack extension value: type code, data and form."""

    __slots__ = ("code", "data", "fmt")

    def __init__(self, code: int, data: bytes, fmt: int | None = None):
        self.code = code
        self.data = bytes(data)
        self.fmt = fmt if fmt is not None else _canonical_ext_fmt(len(self.data))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ext) and (self.code, self.data) == (other.code, other.data)

    def __hash__(self) -> int:
        return hash((Ext, self.code, self.data))

    def __repr__(self) -> str:
        return f"Ext({self.code}, {self.data!r})"


# ---------------------------------------------------------------------------
# canonical forms


def _canonical_int_fmt(v: int) -> int:
    if v >= 0:
        if v <= 0x7F:
            return POSFIXINT
        for fmt in (UINT8, UINT16, UINT32, UINT64):
            if v <= _INT_FORMS[fmt][2]:
                return fmt
    else:
        if v >= -32:
            return NEGFIXINT
        for fmt in (INT8, INT16, INT32, INT64):
            if v >= _INT_FORMS[fmt][1]:
                return fmt
    raise OverflowError(f"integer {v} does not fit MessagePack")


def _canonical_len_fmt(n: int, forms: tuple[int, ...]) -> int:
    for fmt in forms:
        if n <= _LEN_FORMS[fmt][1]:
            return fmt
    raise OverflowError(f"length {n} does not fit MessagePack")


_STR_FORMS = (FIXSTR, STR8, STR16, STR32)
_BIN_FORMS = (BIN8, BIN16, BIN32)
_ARRAY_FORMS = (FIXARRAY, ARRAY16, ARRAY32)
_MAP_FORMS = (FIXMAP, MAP16, MAP32)


def _canonical_ext_fmt(n: int) -> int:
    return _FIXEXT_FOR_LEN.get(n) or _canonical_len_fmt(n, (EXT8, EXT16, EXT32))


# ---------------------------------------------------------------------------
# decoding


class _Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise FormatError(f"MessagePack data truncated at byte {self.pos} "
                              f"(need {n} more bytes, have {len(self.data) - self.pos})")
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def number(self, code: str) -> Any:
        return struct.unpack(code, self.take(struct.calcsize(code)))[0]

    def value(self, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise FormatError(f"MessagePack nesting deeper than {MAX_DEPTH}")
        t = self.take(1)[0]
        if t <= 0x7F:
            return t
        if t >= 0xE0:
            return t - 0x100
        if t < 0x90:
            return self._map(t & 0x0F, FIXMAP, depth)
        if t < 0xA0:
            return self._array(t & 0x0F, FIXARRAY, depth)
        if t < 0xC0:
            return self._str(t & 0x1F, FIXSTR)
        if t == NIL:
            return None
        if t == FALSE:
            return False
        if t == TRUE:
            return True
        if t in _INT_FORMS:
            v = self.number(_INT_FORMS[t][0])
            return v if _canonical_int_fmt(v) == t else Int(v, t)
        if t in (STR8, STR16, STR32):
            return self._str(self.number(_LEN_FORMS[t][0]), t)
        if t in _BIN_FORMS:
            raw = self.take(self.number(_LEN_FORMS[t][0]))
            return raw if _canonical_len_fmt(len(raw), _BIN_FORMS) == t else Bin(raw, t)
        if t in (ARRAY16, ARRAY32):
            return self._array(self.number(_LEN_FORMS[t][0]), t, depth)
        if t in (MAP16, MAP32):
            return self._map(self.number(_LEN_FORMS[t][0]), t, depth)
        if t == FLOAT64:
            raw = self.take(8)
            v = struct.unpack(">d", raw)[0]
            if math.isnan(v) and struct.pack(">d", v) != raw:
                return Float(v, t, raw)
            return v
        if t == FLOAT32:
            raw = self.take(4)
            return Float(struct.unpack(">f", raw)[0], t, raw)
        if t in _FIXEXT_LEN:
            code = struct.unpack(">b", self.take(1))[0]
            return Ext(code, self.take(_FIXEXT_LEN[t]), t)
        if t in (EXT8, EXT16, EXT32):
            n = self.number(_LEN_FORMS[t][0])
            code = struct.unpack(">b", self.take(1))[0]
            return Ext(code, self.take(n), t)
        raise FormatError(f"MessagePack: reserved format byte {t:#04x} at {self.pos - 1}")

    def _str(self, n: int, fmt: int) -> str:
        text = self.take(n).decode("utf-8", "surrogateescape")
        return text if _canonical_len_fmt(n, _STR_FORMS) == fmt else Str(text, fmt)

    def _array(self, n: int, fmt: int, depth: int) -> list:
        items = [self.value(depth + 1) for _ in range(n)]
        return items if _canonical_len_fmt(n, _ARRAY_FORMS) == fmt else Array(items, fmt)

    def _map(self, n: int, fmt: int, depth: int) -> dict:
        out: dict = {} if _canonical_len_fmt(n, _MAP_FORMS) == fmt else Map((), fmt)
        for _ in range(n):
            at = self.pos
            key = self.value(depth + 1)
            try:
                hash(key)
            except TypeError:
                raise FormatError(f"MessagePack map key at byte {at} is a "
                                  f"{type(key).__name__}, not a scalar") from None
            if key in out:
                raise FormatError(f"MessagePack map repeats the key {key!r} (byte {at})")
            out[key] = self.value(depth + 1)
        return out


def unpack(data: bytes, *, allow_trailing: bool = False) -> Any | tuple[Any, bytes]:
    """Decode one MessagePack value.

    With ``allow_trailing`` returns ``(value, rest)`` where ``rest`` is the
    bytes after the value; otherwise trailing bytes are a FormatError.
    """
    r = _Reader(bytes(data))
    value = r.value()
    rest = r.data[r.pos:]
    if allow_trailing:
        return value, rest
    if rest:
        raise FormatError(f"{len(rest)} bytes after the MessagePack value")
    return value


# ---------------------------------------------------------------------------
# encoding


def _fits(fmt: int, n: int) -> bool:
    return n <= _LEN_FORMS[fmt][1]


def _write_len(out: bytearray, fmt: int, n: int, fix_base: int) -> None:
    code = _LEN_FORMS[fmt][0]
    if code is None:
        out.append(fix_base | n)
    else:
        out.append(fmt)
        out += struct.pack(code, n)


def _write(out: bytearray, v: Any, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"MessagePack nesting deeper than {MAX_DEPTH}")
    if v is None:
        out.append(NIL)
    elif v is True:
        out.append(TRUE)
    elif v is False:
        out.append(FALSE)
    elif isinstance(v, int):
        fmt = getattr(v, "fmt", None)
        if fmt is None or not _INT_FORMS[fmt][1] <= v <= _INT_FORMS[fmt][2]:
            fmt = _canonical_int_fmt(v)
        code = _INT_FORMS[fmt][0]
        if code is None:
            out.append(v & 0xFF)
        else:
            out.append(fmt)
            out += struct.pack(code, int(v))
    elif isinstance(v, float):
        if isinstance(v, Float):
            out.append(v.fmt)
            out += v.raw
        else:
            out.append(FLOAT64)
            out += struct.pack(">d", v)
    elif isinstance(v, str):
        raw = v.encode("utf-8", "surrogateescape")
        fmt = getattr(v, "fmt", None)
        if fmt is None or not _fits(fmt, len(raw)):
            fmt = _canonical_len_fmt(len(raw), _STR_FORMS)
        _write_len(out, fmt, len(raw), FIXSTR)
        out += raw
    elif isinstance(v, (bytes, bytearray, memoryview)):
        raw = bytes(v)
        fmt = getattr(v, "fmt", None)
        if fmt is None or not _fits(fmt, len(raw)):
            fmt = _canonical_len_fmt(len(raw), _BIN_FORMS)
        _write_len(out, fmt, len(raw), 0)
        out += raw
    elif isinstance(v, (list, tuple)):
        fmt = getattr(v, "fmt", None)
        if fmt is None or not _fits(fmt, len(v)):
            fmt = _canonical_len_fmt(len(v), _ARRAY_FORMS)
        _write_len(out, fmt, len(v), FIXARRAY)
        for item in v:
            _write(out, item, depth + 1)
    elif isinstance(v, dict):
        fmt = getattr(v, "fmt", None)
        if fmt is None or not _fits(fmt, len(v)):
            fmt = _canonical_len_fmt(len(v), _MAP_FORMS)
        _write_len(out, fmt, len(v), FIXMAP)
        for key, item in v.items():
            _write(out, key, depth + 1)
            _write(out, item, depth + 1)
    elif isinstance(v, Ext):
        fmt = v.fmt
        if fmt in _FIXEXT_LEN:
            if _FIXEXT_LEN[fmt] != len(v.data):
                fmt = _canonical_ext_fmt(len(v.data))
        elif not _fits(fmt, len(v.data)):
            fmt = _canonical_ext_fmt(len(v.data))
        out.append(fmt)
        if fmt not in _FIXEXT_LEN:
            out += struct.pack(_LEN_FORMS[fmt][0], len(v.data))
        out += struct.pack(">b", v.code)
        out += v.data
    else:
        raise TypeError(f"cannot encode {type(v).__name__} as MessagePack")


def pack(value: Any) -> bytes:
    """Encode ``value``: remembered forms where they still fit, else canonical."""
    out = bytearray()
    _write(out, value, 0)
    return bytes(out)


# ---------------------------------------------------------------------------
# reading without writing back


class _NotPlain(Exception):
    """An extension value: the C reader hands it back another way, so the
    lossless reader reads the document."""


def _pairs(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set = set()
        for k, _ in pairs:
            if k in seen:
                raise FormatError(f"MessagePack map repeats the key {k!r}")
            seen.add(k)
    return out


def _ext(code: int, data: bytes):
    raise _NotPlain


def unpack_plain(data: bytes, *, allow_trailing: bool = False) -> Any | tuple[Any, bytes]:
    """:func:`unpack` for a reader that will not write the value back: the
    same document read by the C ``msgpack`` library (several times faster),
    as plain values (int, str, bytes, float, bool, None, list, dict) -- what
    :func:`unpack` gives with its remembered forms dropped.  The same
    documents are refused (FormatError): repeated, equal or unhashable map
    keys, the reserved byte, truncated data, nesting deeper than
    :data:`MAX_DEPTH`.  A document with extension values is read by
    :func:`unpack` (its :class:`Ext` values are kept).  Never pass the
    result to :func:`pack` where the bytes must come back unchanged."""
    import msgpack  # (imported on first use: start-up stays light)

    data = bytes(data)
    # max_ext_len=0: an extension value with data (a timestamp always has some: the C reader
    # decodes it itself, without ext_hook) is refused, and so read by the lossless reader below
    u = msgpack.Unpacker(raw=False, strict_map_key=False, use_list=True, unicode_errors="surrogateescape",
                         object_pairs_hook=_pairs, ext_hook=_ext, max_ext_len=0,
                         max_buffer_size=max(len(data), 1))
    u.feed(data)
    try:
        value = u.unpack()
    except FormatError:
        raise
    except msgpack.OutOfData:
        raise FormatError(f"MessagePack data truncated ({len(data)} bytes)") from None
    except TypeError as e:  # an unhashable (list or map) key
        raise FormatError(f"MessagePack map key is not a scalar ({e})") from None
    except Exception:  # an extension value (_NotPlain), or the C reader's other refusals (reserved byte,
        # too deep for its stack, ...): the lossless reader reads it, or says why in kpatch's words
        return _plain_of(unpack(data, allow_trailing=allow_trailing))
    if _too_deep(value):
        return _plain_of(unpack(data, allow_trailing=allow_trailing))
    rest = data[u.tell():]
    if allow_trailing:
        return value, rest
    if rest:
        raise FormatError(f"{len(rest)} bytes after the MessagePack value")
    return value


def _too_deep(value: Any) -> bool:
    """True if ``value`` (lists and dicts of the C reader) nests deeper than
    :data:`MAX_DEPTH` (then :func:`unpack` refuses it): a non-empty list or
    map at that depth.  Walked a level at a time, each level's values
    listed and sorted by type in C (``map``, ``compress``), not one Python
    step per value."""
    dicts = [value] if type(value) is dict else []
    lists = [value] if type(value) is list else []
    for _ in range(MAX_DEPTH):
        if not dicts and not lists:
            return False
        level = list(chain(chain.from_iterable(map(dict.values, dicts)), chain.from_iterable(lists)))
        types = set(map(type, level))
        dicts = list(compress(level, map(is_, map(type, level), repeat(dict)))) if dict in types else []
        lists = list(compress(level, map(is_, map(type, level), repeat(list)))) if list in types else []
    return any(dicts) or any(lists)


def _plain_of(value: Any) -> Any:
    """``value`` (from :func:`unpack`) with the remembered forms dropped
    (:class:`Ext` values stay)."""
    if isinstance(value, tuple):  # (value, rest)
        return _plain_of(value[0]), value[1]
    if isinstance(value, dict):
        return {_plain_of(k): _plain_of(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_of(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, Ext):
        return value
    for t in (int, float, str, bytes):
        if isinstance(value, t):
            return t(value)
    return value
