"""The state of one emulated wave: registers, EXEC/VCC/SCC, program counter.

Scalar registers are a Python list indexed by the 7/8-bit operand value
(0-105 SGPRs, 106/107 VCC, 108-123 trap temporaries, 124 M0, 126/127 EXEC),
so a decoded field indexes it directly.  VGPRs are a numpy uint32 array
(256 registers x lanes).  Lane masks (EXEC, VCC, compare results) are
32- or 64-bit integers in the scalar file and boolean arrays over the lanes
when an instruction uses them.
"""

from __future__ import annotations

import numpy as np

EXEC_LO, EXEC_HI, VCC_LO, VCC_HI, M0, NULL = 126, 127, 106, 107, 124, 125


def mask_bits(b: np.ndarray) -> int:
    """Boolean lane array -> integer mask (lane 0 is bit 0)."""
    return int.from_bytes(np.packbits(b, bitorder="little").tobytes(), "little")


_LANES_CACHE: dict[tuple[int, int], np.ndarray] = {}


def lanes(value: int, n: int) -> np.ndarray:
    """Integer mask -> boolean lane array (read-only, cached)."""
    key = (value, n)
    a = _LANES_CACHE.get(key)
    if a is None:
        a = np.unpackbits(np.frombuffer(value.to_bytes(8, "little"), np.uint8), bitorder="little")[:n].astype(bool)
        a.setflags(write=False)
        if len(_LANES_CACHE) > 4096:
            _LANES_CACHE.clear()
        _LANES_CACHE[key] = a
    return a


class Wave:
    """One wave of a workgroup."""

    def __init__(self, n: int, *, rng: np.random.Generator | None = None):
        self.n = n
        self.wave64 = n == 64
        if rng is not None:  # uninitialised registers hold reproducible garbage
            self.s = [int(x) for x in rng.integers(0, 1 << 32, 128, dtype=np.uint64)]
            self.v = rng.integers(0, 1 << 32, (256, n), dtype=np.uint64).astype(np.uint32)
        else:
            self.s = [0] * 128
            self.v = np.zeros((256, n), np.uint32)
        self.s[NULL] = 0
        self.scc = 0
        self.pc = 0
        self.done = False
        self.at_barrier = False
        self.id = 0  # wave index in its workgroup
        self.mode_denorm32 = 3
        self.mode_denorm16 = 3
        self.private = None
        self.lds = None
        self.memory = None
        self.trap_ret = None
        self.count = 0  # instructions executed

    # -- masks ------------------------------------------------------------------
    @property
    def exec_value(self) -> int:
        return self.s[EXEC_LO] | (self.s[EXEC_HI] << 32 if self.wave64 else 0)

    @exec_value.setter
    def exec_value(self, v: int) -> None:
        self.s[EXEC_LO] = v & 0xFFFFFFFF
        if self.wave64:
            self.s[EXEC_HI] = (v >> 32) & 0xFFFFFFFF

    @property
    def exec(self) -> np.ndarray:
        return lanes(self.exec_value, self.n)

    def mask_value(self, reg: int) -> int:
        """A lane mask held in scalar register ``reg`` (a pair in wave64)."""
        v = self.s[reg]
        if self.wave64:
            v |= self.s[reg + 1] << 32
        return v

    def set_mask(self, reg: int, b: np.ndarray, keep_inactive: bool = False) -> None:
        """Write a lane mask (boolean lanes) to ``reg`` (and ``reg+1`` in wave64).
        Lanes beyond the wave are 0."""
        v = mask_bits(b)
        if reg == NULL:
            return
        self.s[reg] = v & 0xFFFFFFFF
        if self.wave64:
            self.s[reg + 1] = v >> 32

    def sreg(self, reg: int, count: int) -> int:
        """Value of ``count`` consecutive scalar registers as one integer."""
        v = 0
        for k in range(count):
            v |= self.s[reg + k] << (32 * k)
        return v

    def set_sreg(self, reg: int, count: int, value: int) -> None:
        if reg == NULL:
            return
        for k in range(count):
            self.s[reg + k] = (value >> (32 * k)) & 0xFFFFFFFF
