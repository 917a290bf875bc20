"""LDS as the ISA defines an access past a workgroup's allocation: a read
gives 0, a write is dropped -- also when the workgroup has no LDS at all."""

import numpy as np

from kpatch.emulate.memory import LocalMemory


def test_lds_out_of_range():
    lds = LocalMemory(8)
    lds.write(np.array([4, 6]), np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.uint8))
    assert lds.data.tolist() == [0, 0, 0, 0, 1, 2, 5, 6]
    assert lds.read(np.array([6, 100, -4]), 4).tolist() == [[5, 6, 0, 0], [0] * 4, [0] * 4]


def test_no_lds_at_all():
    lds = LocalMemory(0)
    assert lds.read(np.array([0, 4]), 4).tolist() == [[0] * 4, [0] * 4]
    lds.write(np.array([0]), np.array([[1, 2, 3, 4]], np.uint8))
    assert len(lds.data) == 0
