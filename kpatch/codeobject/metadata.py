"""The ``NT_AMDGPU_METADATA`` note of code objects V3+ (a MessagePack map).

:func:`decode_metadata` reads the note descriptor into a :class:`Metadata`,
:func:`encode_metadata` writes it back.  Key order, value types and encoding
forms are kept (see :mod:`kpatch.codeobject.mpack`), so
``encode_metadata(decode_metadata(b)) == b`` for every note LLVM writes.

A linked code object may carry one note per object it was linked from
(rocBLAS' Tensile libraries: hundreds).  The runtime reads them as one map
(comgr's ``getMetadataRoot``: the first note's map, with the
``amdhsa.kernels`` of every later note appended); :func:`merge_metadata`
gives that map, and refuses notes that disagree (see there).

Only the three top-level keys kpatch relies on are checked:
``amdhsa.version`` (list of ints), ``amdhsa.target`` (string, V4+) and
``amdhsa.kernels`` (list of maps whose ``.name`` / ``.symbol`` are strings).
Everything else is carried as is.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from kpatch.codeobject import mpack
from kpatch.containers import limits
from kpatch.errors import FormatError

NOTE_OWNER = "AMDGPU"
NT_AMDGPU_METADATA = 32

#: Code object V2 notes (owner "AMD"): type -> name.
LEGACY_NOTE_TYPES = {
    1: "NT_AMD_HSA_CODE_OBJECT_VERSION", 2: "NT_AMD_HSA_HSAIL", 3: "NT_AMD_HSA_ISA_VERSION",
    10: "NT_AMD_HSA_METADATA", 11: "NT_AMD_HSA_ISA_NAME", 12: "NT_AMD_PAL_METADATA",
}
LEGACY_NOTE_OWNER = "AMD"

KEY_VERSION = "amdhsa.version"
KEY_TARGET = "amdhsa.target"
KEY_KERNELS = "amdhsa.kernels"


class Metadata:
    """A decoded metadata map, usable like a dict (``md['amdhsa.target'] = ...``).

    ``trailing`` holds any bytes after the map in the note descriptor (LLVM
    writes none); they are written back unchanged.
    """

    def __init__(self, root: dict, trailing: bytes = b"", lossless: bool = True):
        if not isinstance(root, dict):
            raise FormatError(f"metadata is a {type(root).__name__}, not a map")
        self.root = root
        self.trailing = bytes(trailing)
        #: False when read as plain values (:func:`decode_metadata` with
        #: ``lossless=False``): such a map is never written back
        self.lossless = lossless
        self._check()

    def _check(self) -> None:
        version = self.root.get(KEY_VERSION)
        if version is not None and (
                not isinstance(version, list) or len(version) < 1
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in version)):
            raise FormatError(f"metadata {KEY_VERSION} is not a list of integers: {version!r}")
        target = self.root.get(KEY_TARGET)
        if target is not None and not isinstance(target, str):
            raise FormatError(f"metadata {KEY_TARGET} is not a string: {target!r}")
        kernels = self.root.get(KEY_KERNELS)
        if kernels is None:
            return
        if not isinstance(kernels, list):
            raise FormatError(f"metadata {KEY_KERNELS} is not a list")
        for i, k in enumerate(kernels):
            if not isinstance(k, dict):
                raise FormatError(f"metadata kernel {i} is not a map")
            for key in (".name", ".symbol"):
                if key in k and not isinstance(k[key], str):
                    raise FormatError(f"metadata kernel {i} {key} is not a string")

    # dict-like access to the top-level map
    def __getitem__(self, key: Any) -> Any:
        return self.root[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.root[key] = _like(self.root.get(key), value)

    def __delitem__(self, key: Any) -> None:
        del self.root[key]

    def __contains__(self, key: Any) -> bool:
        return key in self.root

    def __iter__(self) -> Iterator[Any]:
        return iter(self.root)

    def __len__(self) -> int:
        return len(self.root)

    def get(self, key: Any, default: Any = None) -> Any:
        return self.root.get(key, default)

    def keys(self):
        return self.root.keys()

    def items(self):
        return self.root.items()

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Metadata) and self.root == other.root
                and self.trailing == other.trailing)

    def __repr__(self) -> str:
        return f"Metadata(version={self.version}, target={self.target!r}, kernels={len(self.kernels)})"

    # convenient views
    @property
    def version(self) -> tuple[int, ...] | None:
        """``amdhsa.version`` as a tuple: (1, 0) V3, (1, 1) V4, (1, 2) V5/V6."""
        v = self.root.get(KEY_VERSION)
        return tuple(int(x) for x in v) if v is not None else None

    @property
    def target(self) -> str | None:
        """``amdhsa.target`` (V4+), e.g. ``amdgcn-amd-amdhsa--gfx1030``; None in V3."""
        t = self.root.get(KEY_TARGET)
        return str(t) if t is not None else None

    @property
    def kernels(self) -> list[dict]:
        """The ``amdhsa.kernels`` maps (the live objects: edits are encoded)."""
        return self.root.get(KEY_KERNELS) or []

    def kernel(self, symbol_or_name: str) -> dict | None:
        """The kernel map whose ``.symbol`` or ``.name`` is the argument, or None
        (the first by ``.symbol``, else the first by ``.name``).  A plain map
        (``lossless`` False: read, never edited) answers from an index made on
        the first call: a scan asks once per kernel, thousands per object."""
        if not self.lossless:
            index = self.__dict__.get("_index")
            if index is None:
                index = self._index = ({}, {})
                for k in self.kernels:
                    index[0].setdefault(k.get(".symbol"), k)
                    index[1].setdefault(k.get(".name"), k)
            k = index[0].get(symbol_or_name)
            return k if k is not None else index[1].get(symbol_or_name)
        for k in self.kernels:
            if k.get(".symbol") == symbol_or_name:
                return k
        for k in self.kernels:
            if k.get(".name") == symbol_or_name:
                return k
        return None

    def to_python(self) -> Any:
        """A plain-Python copy (dict/list/str/int/...) without encoding details."""
        return _plain(self.root)

    def to_bytes(self) -> bytes:
        return encode_metadata(self)


def _like(old: Any, new: Any) -> Any:
    """``new`` in ``old``'s float width when both are floats (the one kind change
    canonical encoding would otherwise make)."""
    if isinstance(old, mpack.Float) and old.fmt == mpack.FLOAT32 and type(new) is float:
        raw = struct.pack(">f", new)
        return mpack.Float(struct.unpack(">f", raw)[0], mpack.FLOAT32, raw)
    return new


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {_plain(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, bool) or v is None:
        return v
    for t in (int, float, str, bytes):
        if isinstance(v, t):
            return t(v)
    return v


def decode_metadata(desc: bytes, lossless: bool = True) -> Metadata:
    """Decode an NT_AMDGPU_METADATA note descriptor; FormatError if malformed,
    nested deeper than :data:`kpatch.codeobject.mpack.MAX_DEPTH` or larger
    than :data:`kpatch.containers.limits.MAX_METADATA_BYTES`.

    ``lossless=False``: for a reader that never writes the note back (scan,
    disasm, diff): the same map as plain values, read by the C ``msgpack``
    library (:func:`~kpatch.codeobject.mpack.unpack_plain`); it cannot be
    encoded again (:func:`encode_metadata` refuses it), and it is shared by
    every reader of the same note bytes (:data:`_PLAIN_MEMO`): never change it."""
    if len(desc) > limits.MAX_METADATA_BYTES:
        raise FormatError(f"metadata note of {len(desc)} bytes is larger than the limit of "
                          f"{limits.MAX_METADATA_BYTES} bytes")
    if not lossless:
        desc = bytes(desc)
        md = _PLAIN_MEMO.get(desc)
        if md is None:
            root, rest = mpack.unpack_plain(desc, allow_trailing=True)
            md = Metadata(root, rest, lossless=False)
            if len(_PLAIN_MEMO) >= _PLAIN_MEMO_SIZE:
                _PLAIN_MEMO.pop(next(iter(_PLAIN_MEMO)))
            _PLAIN_MEMO[desc] = md
        return md
    root, rest = mpack.unpack(desc, allow_trailing=True)
    return Metadata(root, rest)


#: Maps read as plain values lately, by note descriptor: one object's note is
#: read several times while it is patched (apply's check of the blob, the
#: patcher's, the header edits', the verification's), each time by a new
#: parse of the object.  A plain map is read, never changed (it cannot be
#: written back), so every reader of the same bytes gets the same one.
_PLAIN_MEMO: dict[bytes, Metadata] = {}
_PLAIN_MEMO_SIZE = 4


KEY_PRINTF = "amdhsa.printf"


def merge_metadata(parts: list[Metadata]) -> Metadata:
    """The map the runtime reads from several NT_AMDGPU_METADATA notes
    (in note order): the first note's map, its ``amdhsa.kernels`` followed
    by every later note's kernel maps (the same dict objects: an edit made
    through the merged map is an edit of the note that describes the
    kernel).  A single note is returned as it is.

    Where comgr would silently drop a later note (its ``amdhsa.version``
    differs from the first's, or both carry ``amdhsa.printf``), the runtime
    would not know that note's kernels; kpatch cannot tell what was meant,
    so such notes are a FormatError, as are notes naming different targets
    (comgr keeps only the first's) and two notes describing the same kernel
    symbol."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    root = dict(first.root)
    kernels: list[dict] = []
    owner: dict[str, int] = {}
    printf = None
    for n, part in enumerate(parts, 1):
        if part.version != first.version:
            raise FormatError(f"metadata notes disagree: note 1 says amdhsa.version {list(first.version or [])}, "
                              f"note {n} says {list(part.version or [])} (the runtime would drop note {n}'s kernels)")
        if part.target is not None and first.target is not None and part.target != first.target:
            raise FormatError(f"metadata notes disagree: note 1 says amdhsa.target {first.target!r}, note {n} "
                              f"says {part.target!r}")
        if KEY_PRINTF in part.root:
            if printf is not None:
                raise FormatError(f"metadata notes {printf} and {n} both carry amdhsa.printf (the runtime would "
                                  f"drop note {n}'s kernels)")
            printf = n
        for k in part.kernels:
            sym = k.get(".symbol")
            if sym is not None and sym in owner:
                raise FormatError(f"kernel {sym} is described by metadata notes {owner[sym]} and {n}")
            if sym is not None:
                owner[sym] = n
            kernels.append(k)
    root[KEY_KERNELS] = kernels
    return Metadata(root, lossless=all(p.lossless for p in parts))


def spread_metadata(merged: Metadata, parts: list[Metadata]) -> None:
    """Carry top-level changes made to ``merged`` (see :func:`merge_metadata`)
    into every note's map that has that key (kernel maps are shared and need
    no carrying)."""
    if len(parts) == 1 and merged is parts[0]:
        return
    for key, value in merged.root.items():
        if key == KEY_KERNELS:
            continue
        for part in parts:
            if key in part.root and part.root[key] != value:
                part.root[key] = _like(part.root[key], value)


def encode_metadata(md: Metadata | dict) -> bytes:
    """The note descriptor bytes for ``md`` (no note header, no padding).
    A map read without its encoding forms (``lossless=False``) is refused:
    its bytes would not come back the same."""
    if isinstance(md, Metadata):
        if not md.lossless:
            raise ValueError("metadata read with lossless=False cannot be written back")
        return mpack.pack(md.root) + md.trailing
    return mpack.pack(md)
