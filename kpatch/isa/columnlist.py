"""Decoded instructions as a list whose objects are made when read.

The decoder's bulk path (:mod:`kpatch.isa.bulk`) yields columns: an address
and an encoding index per instruction, and one
:class:`~kpatch.isa.instruction.Decoded` per distinct encoding.  The
analysis and the rewriter work from those columns (facts per encoding,
numpy per instruction) and read few instruction objects: patching 40
objects of the corpus (find, rewrite, verify) decoded 4,162,373
instructions and read 14,363 of them (0.35%).  Making an
:class:`~kpatch.isa.instruction.Instruction` for every instruction, and
freeing it, was the largest single cost of decoding there.

:class:`ColumnInstructions` is a read-only sequence of the instructions of
one decode (its *root*: the decode's ``addrs``, ``ids`` and ``table``),
any of them, in any order (``keys``: the root positions).  Instruction
``k`` is made the first time it is read and kept, so reading it again
gives the same object (as a list would); every view and join of one root
shares those objects.  Slices are views; :func:`join` puts lists of one
root one after another without making anything.  Iterating makes every
instruction (what a list of them would have cost)."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from operator import index as _index

import numpy as np

from kpatch.isa.instruction import Instruction

_ADDRESS, _D, _SIZE = attrgetter("address"), attrgetter("d"), attrgetter("size")


class _Root:
    """One decode's columns and the instructions made from them so far."""

    __slots__ = ("addrs", "ids", "table", "made", "_objects", "_sizes")

    def __init__(self, addrs, ids: np.ndarray, table: list):
        self.addrs, self.ids, self.table = addrs, ids, table
        self.made: dict[int, Instruction] = {}
        self._objects = self._sizes = None

    def decoded(self, ids: np.ndarray) -> list:
        """``[table[i] for i in ids]`` (the table as a numpy array made once)."""
        if self._objects is None:
            self._objects = np.empty(len(self.table), object)
            self._objects[:] = self.table
        return self._objects[ids].tolist()

    def sizes(self, ids: np.ndarray) -> np.ndarray:
        """The size in bytes of the encodings ``ids`` name (int64 array)."""
        if self._sizes is None:
            self._sizes = np.fromiter(map(_SIZE, self.table), dtype=np.int64, count=len(self.table))
        return self._sizes[ids]

    def at(self, r: int) -> Instruction:
        got = self.made.get(r)
        if got is None:
            got = self.made[r] = Instruction(int(self.addrs[r]), self.table[int(self.ids[r])])
        return got


class ColumnInstructions(Sequence):
    """The instructions at root positions ``lo .. lo+n-1`` (``keys`` None)
    or ``keys`` (an int64 array of root positions) of one decode; see the
    module docstring."""

    __slots__ = ("_root", "_lo", "_n", "_keys")

    def __init__(self, addrs, ids: np.ndarray, table: list):
        """All the instructions of one decode: ``addrs`` (int64 array or a
        list of ints), ``ids`` (their indices in ``table``, the Decoded of
        each distinct encoding)."""
        self._root = _Root(addrs, ids, table)
        self._lo, self._n, self._keys = 0, len(ids), None

    @classmethod
    def _view(cls, root: _Root, lo: int, n: int, keys: np.ndarray | None) -> ColumnInstructions:
        self = cls.__new__(cls)
        self._root, self._lo, self._n, self._keys = root, lo, n, keys
        return self

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, k):
        if k.__class__ is not int:
            if isinstance(k, slice):
                a, b, step = k.indices(self._n)
                if step != 1:
                    return [self[j] for j in range(a, b, step)]
                b = max(a, b)
                if self._keys is None:
                    return self._view(self._root, self._lo + a, b - a, None)
                return self._view(self._root, 0, b - a, self._keys[a:b])
            k = _index(k)
        if k < 0:
            k += self._n
        if not 0 <= k < self._n:
            raise IndexError("instruction index out of range")
        return self._root.at(self._lo + k if self._keys is None else int(self._keys[k]))

    def __iter__(self):
        root = self._root
        keys = self.root_positions().tolist()
        made = root.made
        new = [r for r in keys if r not in made]
        if new:  # (made at once, as the decoder made lists)
            rs = np.array(new, dtype=np.int64)
            addrs = root.addrs
            got = (addrs[rs].tolist() if isinstance(addrs, np.ndarray) else [addrs[r] for r in new])
            table = root.table
            made.update(zip(new, map(Instruction, got, map(table.__getitem__, root.ids[rs].tolist()))))
        return map(made.__getitem__, keys)

    def __reversed__(self):
        return reversed(list(self))

    def __repr__(self) -> str:
        return f"<ColumnInstructions of {self._n}>"

    def root_positions(self) -> np.ndarray:
        """The positions of these instructions in their decode (int64 array)."""
        if self._keys is None:
            return np.arange(self._lo, self._lo + self._n, dtype=np.int64)
        return self._keys

    def _take(self, column: np.ndarray) -> np.ndarray:
        """The entries of a root column (``ids``, or ``addrs`` as an array) at these instructions."""
        return column[self._lo:self._lo + self._n] if self._keys is None else column[self._keys]


def join(parts: list) -> Sequence:
    """``parts`` (lists of instructions) one after another: a
    :class:`ColumnInstructions` when they all are views of one decode
    (nothing is made), else a list of every instruction."""
    if parts and all(isinstance(p, ColumnInstructions) for p in parts) and all(
            p._root is parts[0]._root for p in parts):
        if len(parts) == 1:
            return parts[0]
        root = parts[0]._root
        if all(p._keys is None for p in parts) and all(
                a._lo + a._n == b._lo for a, b in zip(parts, parts[1:])):
            return ColumnInstructions._view(root, parts[0]._lo, sum(p._n for p in parts), None)
        keys = np.concatenate([p.root_positions() for p in parts])
        return ColumnInstructions._view(root, 0, len(keys), keys)
    out: list = []
    for p in parts:
        out.extend(p)
    return out


def addresses_of(insts: Sequence) -> np.ndarray:
    """The address of each instruction of ``insts`` (a list of them or a
    :class:`ColumnInstructions`, whose column is read: nothing is made), an
    int64 array (OverflowError when one does not fit)."""
    if isinstance(insts, ColumnInstructions) and isinstance(insts._root.addrs, np.ndarray):
        return insts._take(insts._root.addrs)
    return np.fromiter(map(_ADDRESS, insts), dtype=np.int64, count=len(insts))


def decoded_of(insts: Sequence) -> list:
    """The :class:`~kpatch.isa.instruction.Decoded` of each instruction of
    ``insts`` (as :func:`addresses_of`: nothing is made for columns)."""
    if isinstance(insts, ColumnInstructions):
        return insts._root.decoded(insts._take(insts._root.ids))
    return list(map(_D, insts))


def sizes_of(insts: Sequence) -> np.ndarray:
    """The size in bytes of each instruction of ``insts`` (int64 array; as
    :func:`addresses_of`: nothing is made for columns)."""
    if isinstance(insts, ColumnInstructions):
        return insts._root.sizes(insts._take(insts._root.ids))
    return np.fromiter(map(_SIZE, map(_D, insts)), dtype=np.int64, count=len(insts))
