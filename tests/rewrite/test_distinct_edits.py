"""A unit's edits lose their repeats without hashing every edit (issue 14:
list(dict.fromkeys(edits)) hashed each Edit dataclass in Python, hundreds of
thousands per object): patcher._distinct must give what dict.fromkeys gives
on the edits the patcher makes for real objects (librocrand, a Tensile
library) and on edits with repeats and with several edits at one address,
and that comparison must catch a variant that keeps repeats or one that
keeps one edit per address."""

from __future__ import annotations

import pytest

from rw_common import NOP0, NOP6, NOP7, librocrand_and_tensile
from kpatch.rewrite import patcher
from kpatch.rewrite.edits import Edit


def _real_edit_lists(monkeypatch, librocrand) -> list[list[Edit]]:
    got = []
    real = patcher._distinct

    def keep(edits):
        got.append(list(edits))
        return real(edits)

    with monkeypatch.context() as m:
        m.setattr(patcher, "_distinct", keep)
        for data in librocrand_and_tensile(librocrand, 2):
            patcher.patch_code_object(data, mode="override")
    return got


def _made_up() -> list[list[Edit]]:
    """Repeats (an equal edit made again for another finding), and edits
    that differ at one address (before, after, a replacement; other code,
    other rule)."""
    a, b = 0x1000, 0x1008
    one = Edit(a, "insert_before", NOP7, "R1")
    return [
        [one, Edit(b, "insert_before", NOP7, "R1"), Edit(a, "insert_before", NOP7, "R1")],
        [one, Edit(a, "insert_after", NOP6, "R1"), Edit(a, "insert_before", NOP0, "R1"),
         Edit(a, "insert_before", NOP7, "R2"), Edit(a, "replace", NOP0, "R3"), Edit(a, "replace", NOP0, "R3"), one],
        [Edit(b, "insert_before", NOP7, "R1"), one, one, one],
        [],
    ]


def _check(distinct, cases) -> int:
    """Compare ``distinct`` with dict.fromkeys on every case; how many had repeats."""
    repeats = 0
    for edits in cases:
        want = list(dict.fromkeys(edits))
        same = distinct(list(edits)) == want
        assert same, "other edits"
        repeats += len(want) != len(edits)
    return repeats


def test_as_dict_fromkeys(monkeypatch, librocrand):
    real = _real_edit_lists(monkeypatch, librocrand)
    assert sum(map(len, real)) > 500
    _check(patcher._distinct, real)
    assert _check(patcher._distinct, _made_up()) == 3


def test_a_wrong_dedup_is_caught():
    def keeps_repeats(edits):
        return edits

    def one_per_address(edits):
        return list({e.address: e for e in reversed(edits)}.values())[::-1]

    for broken in (keeps_repeats, one_per_address):
        with pytest.raises(AssertionError):
            _check(broken, _made_up())
