"""Any bytes in the code => a report (never an exception): the analysis runs
on a real code object whose kernel code is replaced by arbitrary bytes."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from kpatch.analysis import analyse
from kpatch.codeobject import CodeObject

with open(os.path.join(FIXTURES, "vecops.hip.gfx1030.v4.hsaco"), "rb") as _fh:
    BASE = _fh.read()
_CO = CodeObject.from_bytes(BASE)
TEXT_OFF = _CO.text_offset
TEXT_LEN = len(_CO.text)


@settings(max_examples=150, deadline=None)
@given(st.binary(min_size=0, max_size=TEXT_LEN), st.sampled_from(["gfx1030", "gfx1010"]))
def test_any_code_bytes(code, _target):
    data = bytearray(BASE)
    data[TEXT_OFF:TEXT_OFF + len(code)] = code
    rep = analyse(CodeObject.from_bytes(bytes(data)))
    assert len(rep.kernels) == len(_CO.kernels)
    for k in rep.kernels:
        assert k.verdict.status in ("ok", "patchable", "unpatchable")
        for f in k.findings:
            assert isinstance(f.detail, str)
            f.addresses


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([
    bytes.fromhex(h) for h in (
        "000082bf", "fdff82bf", "3f0085bf", "020088bf", "000081bf", "00009fbf", "0100a0bf",  # branches, ends
        "0000a3bf", "e3ffa3bf", "000021be", "ff0380be", "00000000", "ffffffff", "0200807e",
        "00403cdc02007d00", "00400c0208000000", "04001df0000002ff",  # flat, buffer (short), mimg NSA-ish
    )]), max_size=64))
def test_instruction_soup(parts):
    """Branches in every direction, calls, ends and garbage, glued together."""
    code = b"".join(parts)[:TEXT_LEN]
    data = bytearray(BASE)
    data[TEXT_OFF:TEXT_OFF + len(code)] = code
    rep = analyse(CodeObject.from_bytes(bytes(data)))
    for k in rep.kernels:
        for f in k.findings:
            f.detail
