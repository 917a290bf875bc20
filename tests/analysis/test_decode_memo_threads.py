"""The decode memo belongs to the thread that opened it: another thread
neither reads it nor has it cleared under its feet."""

from __future__ import annotations

import threading

from kpatch.isa.decodememo import decode_memo, decode_ranges

# s_nop 0; s_endpgm (GFX10 encodings, llvm-mc-16 -mcpu=gfx1030 -show-encoding)
CODE = bytes.fromhex("000080bf" "000081bf")


def test_a_memo_is_per_thread():
    opened, done = threading.Event(), threading.Event()
    seen = {}

    def other():
        with decode_memo():
            seen["a"] = decode_ranges(CODE, "gfx1030", 0x1000, [(0, 8)])[0]
            seen["b"] = decode_ranges(CODE, "gfx1030", 0x1000, [(0, 8)])[0]
            opened.set()
            done.wait(10)

    t = threading.Thread(target=other)
    t.start()
    try:
        assert opened.wait(10)
        assert seen["a"] is seen["b"]  # inside its memo: the same list back
        mine = decode_ranges(CODE, "gfx1030", 0x1000, [(0, 8)])[0]
        assert mine is not seen["a"]  # this thread has no memo open: nothing shared
        assert [i.mnemonic for i in mine] == ["s_nop", "s_endpgm"]
    finally:
        done.set()
        t.join()
