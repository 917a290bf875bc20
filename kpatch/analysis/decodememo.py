"""Decoding that remembers, while a code object is being worked on.

Patching one code object decodes the same functions several times: the
analysis, the rewriter's scan of ``.text``, the verification of the result
and the scan when a section is laid out again.  Inside :func:`decode_memo`
(a ``with`` block), :func:`decode` keeps every list it returns, keyed by
(target, address, bytes), and hands back the same list for the same key;
outside one it is :func:`kpatch.isa.decode`.  The lists returned must not
be changed by the caller.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from kpatch.isa import decode as _decode

_MEMO: list[dict] = []  # the innermost active memo last


@contextmanager
def decode_memo() -> Iterator[None]:
    """Remember decodes until the block ends (nested blocks share the outer memo)."""
    if _MEMO:
        yield
        return
    _MEMO.append({})
    try:
        yield
    finally:
        _MEMO.clear()


def decode(data: bytes, target: str, base_address: int = 0) -> list:
    """:func:`kpatch.isa.decode`, remembered inside :func:`decode_memo`."""
    if not _MEMO:
        return _decode(data, target, base_address)
    key = (target, base_address, bytes(data))
    memo = _MEMO[-1]
    got = memo.get(key)
    if got is None:
        got = memo[key] = _decode(key[2], target, base_address)
    return got
