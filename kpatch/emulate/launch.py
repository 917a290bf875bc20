"""Kernel arguments: the kernarg segment built from the metadata's ``.args``.

:func:`kernarg_segment` lays out explicit argument values at the offsets the
metadata gives and fills the hidden arguments the runtime would (global
offsets 0, block counts, group sizes, remainders, grid dimensions; runtime
pointers such as the printf or hostcall buffer are null, so a kernel that
uses them faults).  :func:`run` is the convenience entry point used by the
tests: numpy arrays become buffers, numbers become by-value arguments.
"""

from __future__ import annotations

import struct

import numpy as np

from kpatch.emulate.dispatch import Machine, Result
from kpatch.emulate.errors import CannotEmulate
from kpatch.emulate.memory import PRIVATE_APERTURE_HI, SHARED_APERTURE_HI

#: Hidden argument kinds filled with null / zero (nothing a kernel may rely on).
NULL_HIDDEN = frozenset({
    "hidden_none", "hidden_printf_buffer", "hidden_hostcall_buffer", "hidden_default_queue",
    "hidden_completion_action", "hidden_multigrid_sync_arg", "hidden_heap_v1", "hidden_queue_ptr",
    "hidden_global_offset_x", "hidden_global_offset_y", "hidden_global_offset_z",
})


def hidden_value(kind: str, grid, block, dynamic_lds: int = 0) -> int | None:
    """The value the runtime passes for a hidden argument, or None if unknown."""
    if kind in NULL_HIDDEN:
        return 0
    axis = {"x": 0, "y": 1, "z": 2}
    if kind.startswith("hidden_block_count_"):
        i = axis[kind[-1]]
        return grid[i] // block[i]
    if kind.startswith("hidden_group_size_"):
        return block[axis[kind[-1]]]
    if kind.startswith("hidden_remainder_"):
        i = axis[kind[-1]]
        return grid[i] % block[i]
    if kind == "hidden_grid_dims":
        return 1 + (grid[1] > 1 or grid[2] > 1) + (grid[2] > 1)
    if kind == "hidden_dynamic_lds_size":
        return dynamic_lds
    if kind == "hidden_private_base":
        return PRIVATE_APERTURE_HI
    if kind == "hidden_shared_base":
        return SHARED_APERTURE_HI
    return None


def kernarg_segment(md: dict, values: list, grid, block, dynamic_lds: int = 0) -> bytes:
    """The kernarg segment: ``values`` for the explicit arguments in order
    (ints: raw little-endian of the argument's size; bytes as given)."""
    size = md.get(".kernarg_segment_size", 0)
    seg = bytearray(size)
    explicit = [a for a in md.get(".args", []) if not a.get(".value_kind", "").startswith("hidden_")]
    if len(values) != len(explicit):
        raise CannotEmulate(f"kernel {md.get('.name')}", None,
                            f"{len(explicit)} explicit arguments, {len(values)} given")
    it = iter(values)
    for a in md.get(".args", []):
        kind = a.get(".value_kind", "")
        off, n = a[".offset"], a[".size"]
        if kind.startswith("hidden_"):
            v = hidden_value(kind, grid, block, dynamic_lds)
            if v is None:
                raise CannotEmulate(f"kernel {md.get('.name')}", None, f"hidden argument {kind}")
        else:
            v = next(it)
        if isinstance(v, (bytes, bytearray)):
            b = bytes(v)[:n].ljust(n, b"\0")
        else:
            b = (int(v) & ((1 << (8 * n)) - 1)).to_bytes(n, "little")
        seg[off:off + n] = b
    return bytes(seg)


class Run:
    """The outcome of :func:`run`: the argument buffers after the kernel, and counts."""

    def __init__(self, machine: Machine, buffers: dict, result: Result):
        self.machine = machine
        self._buffers = buffers
        self.result = result

    def array(self, index: int, dtype=None) -> np.ndarray:
        buf, arr = self._buffers[index]
        data = buf.data.view(arr.dtype if dtype is None else dtype)
        return data.reshape(arr.shape) if dtype is None else data


def run(code: bytes, kernel: str, args: list, grid, block, *, seed: int = 0, dynamic_lds: int = 0,
        machine: Machine | None = None) -> Run:
    """Run ``kernel`` of code object ``code`` once.  ``args``: numpy arrays
    (copied into buffers; the kernel gets their address), ints, floats
    (packed as float32 / float64 by the argument's size) or bytes."""
    m = machine or Machine(code, seed=seed)
    k = m.kernel(kernel)
    md = k.metadata or {}
    grid = tuple(grid) + (1,) * (3 - len(grid))
    block = tuple(block) + (1,) * (3 - len(block))
    explicit = [a for a in md.get(".args", []) if not a.get(".value_kind", "").startswith("hidden_")]
    values = []
    buffers = {}
    for i, v in enumerate(args):
        if isinstance(v, np.ndarray):
            b = m.memory.allocate(f"arg{i}", np.ascontiguousarray(v).view(np.uint8).reshape(-1))
            buffers[i] = (b, v)
            values.append(b.base)
        elif isinstance(v, float):
            size = explicit[i][".size"] if i < len(explicit) else 4
            values.append(struct.pack("<f" if size == 4 else "<d", v))
        else:
            values.append(v)
    seg = kernarg_segment(md, values, grid, block, dynamic_lds)
    res = m.dispatch(kernel, seg, grid, block, dynamic_lds=dynamic_lds)
    return Run(m, buffers, res)
