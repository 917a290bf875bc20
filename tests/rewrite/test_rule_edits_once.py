"""A rule's instruction sequences are built and checked once, and its edit
placed at every finding with :meth:`Edit.at` (issue 14: an object takes
hundreds of thousands of edits, each made, checked and hashed one field at
a time).  The edits the patcher hands the rewriter must be exactly those of
the plain constructor, ``Edit(address, action, code, rule, note)``, on real
objects (librocrand's, a Tensile library), and that comparison must catch
an ``at`` that is wrong."""

from __future__ import annotations

import pytest

from rw_common import librocrand_and_tensile
from kpatch.errors import UsageError
from kpatch.rewrite import patcher
from kpatch.rewrite.edits import Edit


def _plain_at(self: Edit, address: int) -> Edit:
    return Edit(address, self.action, self.code, self.rule, self.note)


def _edits_and_result(data: bytes, monkeypatch, at=None) -> tuple[list, bytes | None]:
    """The edits the patcher hands the rewriter for ``data`` (override
    mode), and the patched bytes; ``at``: what places a rule's edit."""
    got = []
    real = patcher.apply_edits

    def capture(d, target, edits, **kw):
        got.append(list(edits))
        return real(d, target, edits, **kw)

    with monkeypatch.context() as m:
        m.setattr(patcher, "apply_edits", capture)
        if at is not None:
            m.setattr(Edit, "at", at)
        r = patcher.patch_code_object(data, mode="override")
    return got[0], r.data


def _same(a: list, b: list) -> bool:
    """The same edits, field by field, in the same order."""
    fields = ("address", "action", "code", "rule", "note")
    return len(a) == len(b) and all(type(x) is type(y) and x == y and hash(x) == hash(y)
                                    and all(getattr(x, f) == getattr(y, f) for f in fields)
                                    for x, y in zip(a, b))


def test_placed_edits_are_the_constructors(monkeypatch, librocrand):
    seen = 0
    for data in librocrand_and_tensile(librocrand):
        fast, fast_out = _edits_and_result(data, monkeypatch)
        plain, plain_out = _edits_and_result(data, monkeypatch, at=_plain_at)
        assert _same(fast, plain)
        assert fast_out == plain_out
        seen += len(fast)
    assert seen > 500  # (real findings were fixed)


def test_a_wrong_placement_is_caught(monkeypatch, librocrand):
    data = librocrand_and_tensile(librocrand)[0]
    plain, _ = _edits_and_result(data, monkeypatch, at=_plain_at)
    assert plain
    # the rule's edit left at address 0 (the rewriter may refuse those outright), or with another note
    wrong = []
    for broken in (lambda self, a: self, lambda self, a: Edit(a, self.action, self.code, self.rule, "x")):
        try:
            wrong.append(_edits_and_result(data, monkeypatch, at=broken)[0])
        except Exception:
            assert not wrong  # (only the first may be refused)
    assert wrong and not any(_same(w, plain) for w in wrong)


def test_at_checks_the_address_as_the_constructor():
    e = Edit(0, "insert_before", b"\0\0\x80\xbf", "r")
    assert e.at(0x104) == Edit(0x104, "insert_before", b"\0\0\x80\xbf", "r")
    for bad in (-4, 0x102):
        with pytest.raises(UsageError):
            Edit(bad, "insert_before", b"\0\0\x80\xbf", "r")
        with pytest.raises(UsageError):
            e.at(bad)
