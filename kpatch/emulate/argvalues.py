"""Plain values the recipe families build kernel arguments from.

:mod:`kpatch.emulate.sparse` and :mod:`kpatch.emulate.rocprim` work out
what a kernel's arguments are from its name and metadata without knowing
the emulator's memory; they return these values, and
:mod:`kpatch.emulate.recipes` turns them into its own (a :class:`Buffer`
into a ``Fill``, an :class:`Aggregate` into a ``Struct``) in one place.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Buffer:
    """A global buffer whose first bytes are ``head`` (the rest zero), with
    the address of each ``(offset, Buffer)`` of ``pointers`` written at its
    offset."""

    head: bytes = b""
    pointers: tuple = ()


@dataclass(frozen=True)
class Aggregate:
    """A by-value struct of ``size`` bytes: ``data``, with the address of each
    ``(offset, Buffer)`` of ``pointers`` written at its offset."""

    size: int
    data: bytes = b""
    pointers: tuple = ()
