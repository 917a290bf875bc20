"""The scan of ``.text`` between functions: code no symbol covers starts a
unit of its own at its first word that is not padding (s_code_end, s_nop 0,
zero), and a gap's leading s_code_end words are what must stay put."""

from __future__ import annotations

import struct

from kpatch.analysis.codescan import TextUnit, _add_anonymous_code, _gap

CODE_END, NOP0, REAL = 0xBF9F0000, 0xBF800000, 0x7E020280  # s_code_end, s_nop 0, v_mov_b32 v1, 0


def _bytes(*words: int) -> bytes:
    return struct.pack(f"<{len(words)}I", *words)


def test_code_no_symbol_covers_is_a_unit_from_its_first_real_word():
    base = 0x1000
    k = TextUnit("k", base, base + 8, "kernel", align=256, sized=True)
    data = _bytes(REAL, REAL, CODE_END, 0, NOP0, REAL, REAL, CODE_END)
    units = _add_anonymous_code([k], data, base, base + len(data))
    assert [(u.name, u.start, u.end) for u in units] == [("k", base, base + 8),
                                                        (f"<code@{base + 20:#x}>", base + 20, base + 32)]
    only_padding = _bytes(REAL, REAL, CODE_END, 0, NOP0, CODE_END)
    assert len(_add_anonymous_code([k], only_padding, base, base + len(only_padding))) == 1
    partial = _bytes(REAL, REAL, CODE_END) + b"\x01\x02"  # (a trailing partial word is no code)
    assert len(_add_anonymous_code([k], partial, base, base + len(partial))) == 1


def test_a_gap_keeps_its_leading_code_end_words_in_place():
    data = _bytes(CODE_END, CODE_END, NOP0, CODE_END, REAL)
    g = _gap(data, 0x2000, 0x2000, 0x2000 + len(data), leading=False)
    assert g.rigid == 8
    assert _gap(data, 0x2000, 0x2000, 0x2000 + len(data), leading=False, trailing=True).rigid == len(data)
    assert _gap(data, 0x2000, 0x2000, 0x2000 + len(data), leading=True).rigid == len(data)
    assert _gap(_bytes(CODE_END) * 3, 0, 0, 12, leading=False).rigid == 12
    assert _gap(_bytes(NOP0, CODE_END), 0, 0, 8, leading=False).rigid == 0


def test_code_after_a_unit_that_ends_off_a_word_boundary():
    """The words after a unit are read from its end, wherever that is (here 2 bytes into a word)."""
    base = 0x1000
    k = TextUnit("k", base, base + 6, "kernel", align=256, sized=True)
    data = _bytes(REAL) + b"\x00\x00" + _bytes(CODE_END, REAL)
    units = _add_anonymous_code([k], data, base, base + len(data))
    assert [(u.name, u.start, u.end) for u in units] == [("k", base, base + 6),
                                                        (f"<code@{base + 10:#x}>", base + 10, base + 14)]
