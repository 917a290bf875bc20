"""Device globals and the loader's dynamic relocations (kpatch/emulate/dispatch.py).

global_store.hip (tests/emulate/data, built by build.sh with Debian's hipcc)
stores ``v * 3 + 1`` through ``counter_ptr``, a device global whose initial
value is ``&counter_device``: an R_AMDGPU_ABS64 relocation in ``.rela.dyn``
(llvm-readelf -r: offset 0x37e0, symbol _ZL14counter_device at 0x37e8), which
ROCr applies at load.  Without it the pointer is 0 and the store faults."""

from __future__ import annotations

import os

from kpatch.emulate.dispatch import LOAD_BASE, Machine
from kpatch.emulate.launch import kernarg_segment
from kpatch.emulate.verify import EQUAL, verify_kernel

HERE = os.path.dirname(__file__)
OBJ = os.path.join(HERE, "data", "global_store.gfx1030.hsaco")
COUNTER = 0x37E8  # _ZL14counter_device (llvm-readelf -r / -s)


def _data() -> bytes:
    with open(OBJ, "rb") as f:
        return f.read()


def test_a_store_through_a_relocated_global_reaches_the_global():
    m = Machine(_data())
    md = m.kernel("store_global").metadata
    seg = kernarg_segment(md, [5], (64, 1, 1), (64, 1, 1))
    m.dispatch("store_global", seg, (64, 1, 1), (64, 1, 1))
    assert m.memory.read_scalar(LOAD_BASE + 0x37E0, 8) == (LOAD_BASE + COUNTER).to_bytes(8, "little")
    assert m.memory.read_scalar(LOAD_BASE + COUNTER, 4) == (5 * 3 + 1).to_bytes(4, "little")


def test_a_kernel_that_writes_only_a_global_is_verified():
    """What a kernel writes into the code object's writable segments is
    compared: the same object on both sides is equal (it wrote a byte)."""
    data = _data()
    v = verify_kernel(data, data, "store_global", runs=2)
    assert v.status == EQUAL, v.detail
    assert v.written[0] > 0


def test_a_different_global_write_is_different():
    """The patched side storing another value (v * 3 + 2: the literal 1 of
    s_add_i32 changed to 2, encoded inline constant 0x81 -> 0x82) is caught."""
    data = bytearray(_data())
    at = data.index(bytes.fromhex("02810281"))  # s_add_i32 s2, s2, 1 (0x81028102, little-endian)
    data[at:at + 4] = bytes.fromhex("02820281")  # s_add_i32 s2, s2, 2
    v = verify_kernel(_data(), bytes(data), "store_global", runs=1)
    assert v.status == "different", v.detail
