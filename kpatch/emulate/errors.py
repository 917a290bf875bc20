"""Why an emulated run stopped.

:class:`CannotEmulate` means the emulator met something it does not model
(an instruction, a modifier, a mode): it stops rather than guess, and the
run proves nothing.  :class:`MemoryFault` is an access outside every buffer
the dispatch set up (what would be a page fault on the GPU).
"""

from __future__ import annotations

from kpatch.errors import KpatchError


class EmulationError(KpatchError):
    """An emulated run stopped before ``s_endpgm`` of every wave."""


class CannotEmulate(EmulationError):
    """Something the emulator does not model: ``cannot emulate MNEMONIC at ADDR``."""

    def __init__(self, what: str, address: int | None = None, why: str = ""):
        where = f" at {address:#x}" if address is not None else ""
        super().__init__(f"cannot emulate {what}{where}" + (f" ({why})" if why else ""))
        self.what = what
        self.address = address


class MemoryFault(EmulationError):
    """An access to an address no buffer covers."""
