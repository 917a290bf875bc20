"""kpatch.emulate: a functional emulator of GFX10 (gfx1010 / gfx1030) machine code.

Built on kpatch's decoder (:mod:`kpatch.isa`) and code object reader
(:mod:`kpatch.codeobject`), vectorised over the lanes of a wave with numpy.
It exists to check patches: run the original and the patched kernel on the
same inputs and compare every byte they write (``kpatch verify --emulate``).

* :mod:`.semantics` -- what instructions compute, as tables;
* :mod:`.program` -- the generic walker: an Instruction becomes a closure;
* :mod:`.wave` / :mod:`.memory` -- registers, global/LDS/private memory;
* :mod:`.dispatch` -- kernel descriptor -> initial state, workgroups, barriers;
* :mod:`.launch` -- the kernarg segment from metadata, :func:`run`;
* :mod:`.verify` -- differential runs of two code objects.

Anything not modelled stops the run with ``cannot emulate MNEMONIC at ADDR``
(:class:`CannotEmulate`): the emulator never guesses.  Waits, cache controls
and hazard mitigations are functional no-ops.
"""

from kpatch.emulate.dispatch import Machine, Result
from kpatch.emulate.errors import CannotEmulate, EmulationError, MemoryFault
from kpatch.emulate.launch import kernarg_segment, run

__all__ = ["Machine", "Result", "CannotEmulate", "EmulationError", "MemoryFault", "kernarg_segment", "run"]
